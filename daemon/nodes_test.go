package daemon

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// TestTwoNodesSeeEachOther: two llmd servers joined with a gossip key list
// each other, with their models and load, in GET /v1/admin/nodes.
func TestTwoNodesSeeEachOther(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	first := newStoreServer(t, func(c *Config) {
		c.NodeID = "node-a"
		c.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", Key: key, Profile: "local"}
	})
	baseA := startServer(t, first)
	second := newStoreServer(t, func(c *Config) {
		c.NodeID = "node-b"
		c.Models = []string{"mid"}
		c.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", Key: key, Profile: "local", Join: []string{first.cluster.Load().Addr()}}
	})
	baseB := startServer(t, second)
	c := testClient(t)
	for _, base := range []string{baseA, baseB} {
		require.Eventually(t, func() bool {
			resp, b := call(t, c, http.MethodGet, base+"/v1/admin/nodes", "", "")
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			var nl api.NodeList
			require.NoError(t, json.Unmarshal(b, &nl))
			if !nl.Clustered || len(nl.Nodes) != 2 {
				return false
			}
			for _, n := range nl.Nodes {
				if n.Status != "alive" || len(n.Load) != 1 {
					return false
				}
			}
			return nl.Nodes[0].ID == "node-a" && nl.Nodes[0].Models[0] == "sim/small" &&
				nl.Nodes[1].ID == "node-b" && nl.Nodes[1].Models[0] == "sim/mid"
		}, 10*time.Second, 20*time.Millisecond)
	}
}

func TestNodesWhenAlone(t *testing.T) {
	s := newStoreServer(t, nil)
	base := startServer(t, s)
	resp, b := call(t, testClient(t), http.MethodGet, base+"/v1/admin/nodes", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var nl api.NodeList
	require.NoError(t, json.Unmarshal(b, &nl))
	require.False(t, nl.Clustered)
	require.Len(t, nl.Nodes, 1)
	require.True(t, nl.Nodes[0].Local)
}

// TestOutputRate: the gossiped tokens/s is the output count's growth over
// at least 200 ms; a sooner sample keeps the last rate.
func TestOutputRate(t *testing.T) {
	t.Parallel()
	s := &Daemon{}
	t0 := time.Unix(1000, 0)
	require.Zero(t, s.rates.rate("m", 100, t0))
	require.InDelta(t, 500, s.rates.rate("m", 350, t0.Add(500*time.Millisecond)), 1e-9)
	require.InDelta(t, 500, s.rates.rate("m", 360, t0.Add(600*time.Millisecond)), 1e-9, "too soon: the last rate")
	require.InDelta(t, 0, s.rates.rate("m", 350, t0.Add(2*time.Second)), 1e-9, "a restarted count starts over")
}
