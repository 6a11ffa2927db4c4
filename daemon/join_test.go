package daemon

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
)

// TestClusterStartedAllAtOnce: three nodes started together, each told
// to join the others, none of which is up yet, all serve at once and
// converge into one cluster (as systemd on three machines or a compose
// file starts them).
func TestClusterStartedAllAtOnce(t *testing.T) {
	t.Parallel()
	var gossip []string
	for len(gossip) < 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			gossip = append(gossip, addr)
		}
	}
	nodes := make([]*Daemon, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			nodes[i] = newStoreServer(t, func(c *Config) {
				c.NodeID = fmt.Sprintf("node-%c", 'a'+i)
				c.Cluster = &ClusterConfig{GossipAddr: gossip[i], Key: clusterTestKey, Profile: "local",
					Join: []string{gossip[(i+1)%3], gossip[(i+2)%3]}}
			})
		})
	}
	wg.Wait()
	for _, n := range nodes {
		startServer(t, n)
	}
	for _, n := range nodes {
		require.Eventually(t, func() bool {
			alive := 0
			for _, m := range n.cluster.Load().Members() {
				if m.Status == cluster.StatusAlive {
					alive++
				}
			}
			return alive == 3
		}, 15*time.Second, 20*time.Millisecond, "%s sees the others", n.cfg.NodeID)
	}
}
