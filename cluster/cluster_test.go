package cluster

import (
	"context"
	"fmt"
	"log/slog"
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

// TestStatePropagation: load and prefix summaries reach the other nodes,
// the gossiped keys at once and the full summary through push/pull, and
// Route on another node uses them.
func TestStatePropagation(t *testing.T) {
	a := testConfig("a")
	var box stateBox
	box.set(State{Load: map[string]ModelLoad{"m": {Running: 1}}})
	a.LocalState = box.get
	na := startNode(t, a)
	nb := startNode(t, testConfig("b", na.Addr()))
	nc := startNode(t, testConfig("c", na.Addr()))

	sees := func(c *Cluster, cond func(Member) bool) func() bool {
		return func() bool {
			m, ok := member(c, "a")
			return ok && m.Status == StatusAlive && cond(m)
		}
	}
	for _, c := range []*Cluster{nb, nc} {
		eventually(t, sees(c, func(m Member) bool { return m.State.Load["m"].Running == 1 }), 5*time.Second, "%s sees a's load", c.ID())
	}

	// 100 prefix keys: more than one gossip message carries.
	p := chain(7, 100)
	start := time.Now()
	box.set(State{Load: map[string]ModelLoad{"m": {Running: 5, Waiting: 2, KVUsage: 0.5}}, Prefixes: map[string][]kvcache.Hash{"m": p}})
	for _, c := range []*Cluster{nb, nc} {
		eventually(t, sees(c, func(m Member) bool {
			return m.State.Load["m"] == ModelLoad{Running: 5, Waiting: 2, KVUsage: 0.5} && len(m.State.Prefixes["m"]) == len(p)
		}), 5*time.Second, "%s sees a's new load and full summary", c.ID())
	}
	t.Logf("new state and full summary everywhere after %v", time.Since(start))

	// b and c are idle, so a, at 7 of ceil(1.25 x 8/3) = 4, is over the
	// bound (with no load slack: 7 is within the default 8): b still lists
	// it, last.
	got := nb.Route(RouteRequest{Model: "m", Prefix: p[:60], LoadSlack: -1}, nil)
	require.Len(t, got, 3)
	assert.Equal(t, pick{"a", ReasonOverloaded}, picks(got)[2])
	assert.Equal(t, 60, got[2].PrefixBlocks)
	got = nb.Route(RouteRequest{Model: "m", Prefix: p[:60], LoadBound: 10}, func([]kvcache.Hash) int { return 0 })
	assert.Equal(t, pick{"a", "prefix:60"}, picks(got)[0])
}

// TestRestartWithLowerVersion: a node restarted with a version below its
// old one (its clock went back) is accepted again once it rejoins.
func TestRestartWithLowerVersion(t *testing.T) {
	na := startNode(t, testConfig("a"))
	bcfg := testConfig("b", na.Addr())
	bcfg.epoch = 1 << 62
	running := 1
	bcfg.LocalState = func() State { return State{Load: map[string]ModelLoad{"m": {Running: running}}} }
	nb := startNode(t, bcfg)
	bcfg.BindAddr = nb.Addr() // restart on the same address
	loadOnA := func(want int, status Status) func() bool {
		return func() bool {
			m, ok := member(na, "b")
			return ok && m.Status == status && m.State.Load["m"].Running == want
		}
	}
	eventually(t, loadOnA(1, StatusAlive), 5*time.Second, "a sees b")

	require.NoError(t, nb.Kill())
	eventually(t, loadOnA(1, StatusDead), 5*time.Second, "a sees b dead")
	bcfg.epoch = 1000
	running = 2
	nb = startNode(t, bcfg)
	eventually(t, loadOnA(2, StatusAlive), 5*time.Second, "a accepts the restarted b after it was dead")

	// Restarted again at once, before a notices: b hears of its old
	// version and jumps past it.
	require.NoError(t, nb.Kill())
	bcfg.epoch = 500
	running = 3
	nb = startNode(t, bcfg)
	eventually(t, loadOnA(3, StatusAlive), 5*time.Second, "a accepts the quickly restarted b")
}

// TestFailureAndLeave: a node killed (stopped without leaving) ends up
// dead, one whose Run's ctx ends leaves and ends up left, and Route stops
// returning either.
func TestFailureAndLeave(t *testing.T) {
	na := startNode(t, testConfig("a"))
	nb := startNode(t, testConfig("b", na.Addr()))
	nc := startNode(t, testConfig("c", na.Addr()))
	dcfg := testConfig("d", na.Addr())
	dcfg.LeaveTimeout = time.Second
	nd, stopD := runNode(t, dcfg)
	routed := func(c *Cluster) []string {
		var ids []string
		for _, cand := range c.Route(RouteRequest{Model: "m"}, nil) {
			ids = append(ids, cand.Member.ID)
		}
		return ids
	}
	eventually(t, func() bool { return len(routed(na)) == 4 && len(routed(nb)) == 4 }, 5*time.Second, "all four routable")

	start := time.Now()
	require.NoError(t, nc.Kill())
	require.NoError(t, stopD(), "d leaves when its Run's ctx ends")
	status := func(c *Cluster, id string) Status { m, _ := member(c, id); return m.Status }
	assert.Equal(t, StatusLeft, status(nd, "d"), "the leaver sees itself left")
	for _, c := range []*Cluster{na, nb} {
		eventually(t, func() bool {
			return status(c, "c") == StatusDead && status(c, "d") == StatusLeft
		}, 5*time.Second, "%s sees c dead and d left", c.ID())
		assert.Equal(t, []string{"a", "b"}, routed(c))
		assert.Equal(t, 2, c.NumAlive())
	}
	t.Logf("failure and leave seen by all after %v", time.Since(start))

	require.NoError(t, nd.Kill(), "Kill after Run returned does nothing more")
	require.NoError(t, nd.Kill(), "Kill is idempotent")
	require.ErrorIs(t, nd.Run(context.Background()), ErrClosed, "a Cluster runs once")
}

// TestRequiresKey is SE-6: no key, no start, unless explicitly insecure;
// the default bind address is loopback.
func TestRequiresKey(t *testing.T) {
	cfg := testConfig("a")
	cfg.Key = nil
	_, err := New(cfg)
	require.ErrorIs(t, err, ErrNoKey)
	cfg.Key = []byte("short")
	_, err = New(cfg)
	require.Error(t, err)

	def := DefaultConfig()
	assert.Equal(t, "127.0.0.1:7946", def.BindAddr)
	assert.NotEmpty(t, def.NodeID)
	require.ErrorIs(t, def.Validate(), ErrNoKey)
	def.Key = testKey
	require.NoError(t, def.Validate())
	mc, err := def.memberlistConfig(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", mc.BindAddr)
	assert.Equal(t, 7946, mc.BindPort)
	assert.NotNil(t, mc.Keyring)
	assert.True(t, mc.GossipVerifyIncoming)

	cfg.Key = nil
	cfg.InsecureGossip = true
	a := startNode(t, cfg)
	b := testConfig("b", a.Addr())
	b.Key, b.InsecureGossip = nil, true
	nb := startNode(t, b)
	eventually(t, func() bool { return a.NumAlive() == 2 && nb.NumAlive() == 2 }, 5*time.Second, "insecure nodes join each other")

	for name, bad := range map[string]func(*Config){
		"profile":   func(c *Config) { c.Profile = "wan" },
		"bind":      func(c *Config) { c.BindAddr = "nope" },
		"advertise": func(c *Config) { c.AdvertiseAddr = "1.2.3.4:99999" },
		"node id":   func(c *Config) { c.NodeID = "a\nb" },
		"model":     func(c *Config) { c.Models = []string{""} },
		"interval":  func(c *Config) { c.StateInterval = -time.Second },
		"leave":     func(c *Config) { c.LeaveTimeout = -time.Second },
	} {
		c := testConfig("x")
		bad(&c)
		require.Error(t, c.Validate(), name)
	}
}

// TestIntruderNeverJoins is SE-7: nodes with a wrong key or no key keep
// trying to join a keyed 3-node cluster and never become members.
func TestIntruderNeverJoins(t *testing.T) {
	na := startNode(t, testConfig("a"))
	nb := startNode(t, testConfig("b", na.Addr()))
	nc := startNode(t, testConfig("c", na.Addr()))
	keyed := []*Cluster{na, nb, nc}
	eventually(t, func() bool { return na.NumAlive() == 3 && nb.NumAlive() == 3 && nc.NumAlive() == 3 }, 5*time.Second, "keyed cluster formed")

	wrong := testConfig("wrong-key", na.Addr())
	wrong.Key = []byte("fedcba9876543210")
	none := testConfig("no-key", na.Addr())
	none.Key, none.InsecureGossip = nil, true
	var intruders []*Cluster
	for _, cfg := range []Config{wrong, none} {
		cfg.RetryJoinMax = -1 // fail at once rather than retry
		_, err := New(cfg)
		require.ErrorIs(t, err, ErrJoin, "%s cannot join", cfg.NodeID)
		cfg.Join = nil
		intruders = append(intruders, startNode(t, cfg))
	}
	deadline := time.Now().Add(2 * time.Second)
	attempts := 0
	for time.Now().Before(deadline) {
		for _, in := range intruders {
			for _, k := range keyed {
				n, err := in.ml.Join([]string{k.Addr()})
				require.Error(t, err)
				require.Zero(t, n)
				attempts++
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("SE-7: %d join attempts refused", attempts)
	for _, k := range keyed {
		ids := []string{}
		for _, m := range k.Members() {
			ids = append(ids, m.ID)
		}
		assert.Equal(t, []string{"a", "b", "c"}, ids, "%s members", k.ID())
		assert.Equal(t, 3, k.NumAlive())
	}
	for _, in := range intruders {
		assert.Equal(t, 1, in.NumAlive(), "%s sees no one", in.ID())
		assert.Len(t, in.Members(), 1)
	}
}

// TestLifecycle: a node is usable right after New, before Run; Run runs
// once; Kill releases a node whose Run never started (a later Run returns
// at once), and peers see it dead; a node whose Run's ctx ends sees itself
// left.
func TestLifecycle(t *testing.T) {
	na, stopA := runNode(t, testConfig("a"))
	nb, err := New(testConfig("b", na.Addr()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nb.Kill() })
	assert.NotEmpty(t, nb.Addr())
	eventually(t, func() bool {
		return na.NumAlive() == 2 && nb.NumAlive() == 2 && len(nb.Route(RouteRequest{Model: "m"}, nil)) == 2
	}, 5*time.Second, "b, never run, joined a and routes to both")
	nb.MarkFailed("a")
	assert.Len(t, nb.Route(RouteRequest{Model: "m"}, nil), 1, "MarkFailed works before Run")

	require.ErrorIs(t, na.Run(context.Background()), ErrClosed, "Run while running")
	require.NoError(t, nb.Kill(), "Kill releases a node whose Run never started")
	require.NoError(t, nb.Kill(), "Kill is idempotent")
	require.NoError(t, nb.Run(context.Background()), "Run after Kill returns at once")
	require.ErrorIs(t, nb.Run(context.Background()), ErrClosed, "Run twice")
	eventually(t, func() bool { m, _ := member(na, "b"); return m.Status == StatusDead }, 5*time.Second, "a sees the killed b dead")

	require.NoError(t, stopA())
	m, _ := member(na, "a")
	assert.Equal(t, StatusLeft, m.Status, "a left when its Run's ctx ended")
	require.ErrorIs(t, na.Run(context.Background()), ErrClosed, "Run after Run returned")
}
