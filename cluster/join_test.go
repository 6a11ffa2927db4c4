package cluster

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freeAddrs reserves n loopback ports (TCP and UDP free when reserved)
// and releases them, for nodes that must know each other's address before
// any of them starts.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = u.Close()
		out = append(out, addr)
	}
	return out
}

// TestJoinInAnyOrder: three nodes whose Join addresses are not up yet
// start anyway, serving alone, and converge into one cluster whichever
// starts first.
func TestJoinInAnyOrder(t *testing.T) {
	t.Parallel()
	addrs := freeAddrs(t, 3)
	ids := []string{"a", "b", "c"}
	var nodes []*Cluster
	// c and b start first, pointing at a, which starts last.
	for _, i := range []int{2, 1, 0} {
		cfg := testConfig(ids[i], addrs[0])
		cfg.BindAddr = addrs[i]
		if i == 0 {
			cfg.Join = []string{addrs[1]} // a points at b, which is up
		}
		nodes = append(nodes, startNode(t, cfg))
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range nodes {
		require.Eventually(t, func() bool {
			alive := 0
			for _, m := range c.Members() {
				if m.Status == StatusAlive {
					alive++
				}
			}
			return alive == 3
		}, 15*time.Second, 20*time.Millisecond)
	}
}

// TestJoinGivesUp: with RetryJoinMax, Run returns ErrJoin after that many
// attempts; with a negative one, New fails at once.
func TestJoinGivesUp(t *testing.T) {
	t.Parallel()
	nobody := freeAddrs(t, 1)[0]
	cfg := testConfig("lonely", nobody)
	cfg.RetryJoinMax = 3
	c, err := New(cfg)
	require.NoError(t, err, "New serves alone while it retries")
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrJoin)
		require.Contains(t, err.Error(), "after 3 attempts")
	case <-time.After(30 * time.Second):
		c.Kill()
		t.Fatal("Run did not give up")
	}

	cfg = testConfig("impatient", nobody)
	cfg.RetryJoinMax = -1
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrJoin)
}
