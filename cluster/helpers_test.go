package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

var testKey = []byte("0123456789abcdef")

// stateBox is a LocalState source a test can change.
type stateBox struct {
	mu sync.Mutex
	st State
}

func (b *stateBox) set(st State) {
	b.mu.Lock()
	b.st = st
	b.mu.Unlock()
}

func (b *stateBox) get() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// testConfig is a keyed ProfileLocal node on a free loopback port.
func testConfig(id string, join ...string) Config {
	return Config{
		NodeID:   id,
		BindAddr: "127.0.0.1:0",
		Join:     join,
		Key:      testKey,
		APIAddr:  "127.0.0.1:1" + id,
		Models:   []string{"m"},
		Version:  "test",
		Profile:  ProfileLocal,
	}
}

// startNode creates a node of cfg and runs it in a goroutine the test
// owns; when the test ends, it cancels Run's ctx (the node leaves), waits
// for Run to return and checks that it stopped cleanly.
func startNode(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, _ := runNode(t, cfg)
	return c
}

// runNode is startNode that also returns stop, which cancels Run's ctx,
// waits for Run to return and returns its error. stop may be called more
// than once (each call returns Run's error); the cleanup calls it too.
func runNode(t *testing.T, cfg Config) (c *Cluster, stop func() error) {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { assert.NoError(t, stop(), "%s stops cleanly", cfg.NodeID) })
	return c, stop
}

// member returns id as c sees it.
func member(c *Cluster, id string) (Member, bool) {
	for _, m := range c.Members() {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// chain returns n chained block hashes, distinct per seed.
func chain(seed int32, n int) []kvcache.Hash {
	toks := make([]int32, n*4)
	for i := range toks {
		toks[i] = seed*1000 + int32(i)
	}
	return kvcache.HashChain(toks, 4)
}

// eventually is require.Eventually with a message naming what is awaited.
func eventually(t *testing.T, cond func() bool, wait time.Duration, format string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, wait, 5*time.Millisecond, fmt.Sprintf(format, args...))
}

// raceScale is how much slower the 16-node test's timings are under the
// race detector, where 20 ms probes and gossip for 16 nodes saturate two
// cores and memberlist flaps (it does so without this package too).
const raceScale = 4

// scaleTimings stretches cfg's ProfileLocal timings by f.
func scaleTimings(cfg *Config, f int) {
	if f <= 1 {
		return
	}
	d := time.Duration(f)
	cfg.StateInterval = localStateInterval * d
	cfg.tune = func(mc *memberlist.Config) {
		mc.ProbeInterval *= d
		mc.ProbeTimeout *= d
		mc.GossipInterval *= d
		mc.PushPullInterval *= d
	}
}
