package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// TestConvergence16 is CL-1: 16 nodes on loopback with 20 ms probe and
// gossip and 200 ms push/pull all see 16 members, and every node's load and
// prefix summary reach every other node. Under the race detector the
// timings are stretched by raceScale (see there).
func TestConvergence16(t *testing.T) {
	const n = 16
	scale := 1
	if raceEnabled {
		scale = raceScale
	}
	nodes := make([]*Cluster, 0, n)
	first := time.Now()
	for i := range n {
		cfg := testConfig(fmt.Sprintf("n%02d", i))
		scaleTimings(&cfg, scale)
		if i > 0 {
			cfg.Join = []string{nodes[i-1].Addr()}
		}
		load := ModelLoad{Running: i, Waiting: 1, KVUsage: float64(i) / n}
		prefixes := chain(int32(i), 4)
		cfg.LocalState = func() State {
			return State{Load: map[string]ModelLoad{"m": load}, Prefixes: map[string][]kvcache.Hash{"m": prefixes}}
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	start := time.Now()
	eventually(t, func() bool {
		for _, c := range nodes {
			if c.NumAlive() != n {
				return false
			}
		}
		return true
	}, 5*time.Second, "all nodes see %d members", n)
	t.Logf("CL-1: %d members converged %v after the last join, %v after the first start (timings x%d)",
		n, time.Since(start), time.Since(first), scale)

	eventually(t, func() bool {
		for _, c := range nodes {
			for _, m := range c.Members() {
				if m.Status != StatusAlive || m.State.Load["m"].Waiting != 1 || len(m.State.Prefixes["m"]) != 4 {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, "every state reaches every node")
	t.Logf("CL-1: every node's state reached every node %v after the last join", time.Since(start))

	for _, c := range nodes {
		ms := c.Members()
		require.Len(t, ms, n)
		for i, m := range ms {
			require.Equal(t, fmt.Sprintf("n%02d", i), m.ID, "sorted by id")
			assert.Equal(t, i, m.State.Load["m"].Running)
			assert.Equal(t, m.ID == c.ID(), m.Local)
			assert.Equal(t, []string{"m"}, m.Models)
			assert.Equal(t, "127.0.0.1:1"+m.ID, m.APIAddr)
		}
	}
	assert.Zero(t, nodes[0].BadMessages())
}
