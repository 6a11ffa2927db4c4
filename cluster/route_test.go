package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/llmd/llmd/engine/kvcache"
)

// fake is a pool member serving "m" with load running and a summary
// holding the given depths (1-based) of prefix.
func fake(id string, running int, prefix []kvcache.Hash, depths ...int) routeMember {
	m := routeMember{
		Member: Member{ID: id, Models: []string{"m"}, Status: StatusAlive,
			State: State{Load: map[string]ModelLoad{"m": {Running: running}}}},
		keys: map[uint64]struct{}{},
	}
	for _, d := range depths {
		m.keys[prefixKey(prefix[d-1])] = struct{}{}
	}
	return m
}

func ringOf(pool []routeMember) *ring {
	ids := make([]string, len(pool))
	for i, m := range pool {
		ids[i] = m.Member.ID
	}
	return newRing(ids)
}

type pick struct{ ID, Reason string }

func picks(cs []Candidate) []pick {
	out := make([]pick, len(cs))
	for i, c := range cs {
		out[i] = pick{c.Member.ID, c.Reason}
	}
	return out
}

// firstOnRing returns which of ids the ring walk from key meets first.
func firstOnRing(r *ring, key uint64, ids ...string) string {
	var found string
	r.walk(key, func(id string) bool {
		for _, x := range ids {
			if x == id {
				found = id
				return false
			}
		}
		return true
	})
	return found
}

func TestRouteLongestPrefixWins(t *testing.T) {
	t.Parallel()
	p := chain(1, 8)
	// Loads 2,3,2,2: capacity ceil(1.25 x 10/4) = 4, nobody is over it.
	pool := []routeMember{
		fake("a", 2, p, 1, 2),
		fake("b", 3, p, 1, 4),
		fake("c", 2, p),
		fake("d", 2, p, 1),
	}
	r := ringOf(pool)
	got := route(pool, r, RouteRequest{Model: "m", Prefix: p}, nil)
	require.Len(t, got, 4)
	assert.Equal(t, pick{"b", "prefix:4"}, picks(got)[0])
	assert.Equal(t, 4, got[0].PrefixBlocks)
	// Then the owner of the first block's hash among the rest.
	assert.Equal(t, firstOnRing(r, prefixKey(p[0]), "a", "c", "d"), got[1].Member.ID)
	assert.Equal(t, ReasonAffinity, got[1].Reason)
	for _, c := range got[2:] {
		assert.Equal(t, ReasonLeastLoaded, c.Reason)
	}
	// PrefixBlocks is reported for every candidate.
	blocks := map[string]int{}
	for _, c := range got {
		blocks[c.Member.ID] = c.PrefixBlocks
	}
	assert.Equal(t, map[string]int{"a": 2, "b": 4, "c": 0, "d": 1}, blocks)
}

func TestRoutePrefixTieGoesToAffinityOwner(t *testing.T) {
	t.Parallel()
	p := chain(2, 6)
	pool := []routeMember{fake("a", 0, p, 4), fake("b", 0, p, 4), fake("c", 0, p)}
	r := ringOf(pool)
	winners := map[string]bool{}
	for i := range 64 {
		key := fmt.Sprintf("conversation-%d", i)
		got := route(pool, r, RouteRequest{Model: "m", Prefix: p, AffinityKey: key}, nil)
		want := firstOnRing(r, xxh3.HashString(key), "a", "b")
		require.Equal(t, pick{want, "prefix:4"}, picks(got)[0], key)
		winners[want] = true
		// Then the key's owner among the rest.
		rest := []string{"a", "b", "c"}
		rest = slices.DeleteFunc(rest, func(id string) bool { return id == want })
		assert.Equal(t, pick{firstOnRing(r, xxh3.HashString(key), rest...), ReasonAffinity}, picks(got)[1], key)
	}
	assert.Len(t, winners, 2, "different keys spread ties over both holders")
}

func TestRouteLoadBound(t *testing.T) {
	t.Parallel()
	p := chain(3, 8)
	pool := []routeMember{
		fake("hot", 20, p, 6), // longest prefix, overloaded
		fake("warm", 2, p, 4),
		fake("x", 1, p),
		fake("y", 1, p),
	}
	// Mean with this request: 25/4; ceil(1.25 x 6.25) = 8.
	got := route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: p}, nil)
	assert.Equal(t, pick{"warm", "prefix:4"}, picks(got)[0], "falls to the next holder")
	assert.Equal(t, ReasonAffinity, got[1].Reason)
	assert.Equal(t, pick{"hot", ReasonOverloaded}, picks(got)[3], "kept last, for retries")

	// A generous bound lets the holder keep it.
	got = route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: p, LoadBound: 4}, nil)
	assert.Equal(t, pick{"hot", "prefix:6"}, picks(got)[0])

	// The affinity owner is skipped the same way.
	pool = []routeMember{fake("a", 30, p), fake("b", 0, p), fake("c", 0, p)}
	r := ringOf(pool)
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("user-%d", i)
		if firstOnRing(r, xxh3.HashString(key), "a", "b", "c") == "a" {
			break
		}
	}
	got = route(pool, r, RouteRequest{Model: "m", AffinityKey: key}, nil)
	assert.Equal(t, pick{firstOnRing(r, xxh3.HashString(key), "b", "c"), ReasonAffinity}, picks(got)[0])
	assert.Equal(t, pick{"a", ReasonOverloaded}, picks(got)[2])

	// A pool of one is never overloaded.
	got = route(pool[:1], ringOf(pool[:1]), RouteRequest{Model: "m", AffinityKey: key}, nil)
	assert.Equal(t, []pick{{"a", ReasonAffinity}}, picks(got))
}

func TestRouteLeastLoadedOrder(t *testing.T) {
	t.Parallel()
	pool := []routeMember{fake("c", 1, nil), fake("a", 1, nil), fake("b", 0, nil), fake("d", 1, nil)}
	pool[3].Member.State.Load["m"] = ModelLoad{Running: 0, Waiting: 1, KVUsage: 0.1}
	got := route(pool, ringOf(pool), RouteRequest{Model: "m"}, nil)
	// No key, no prefix: least loaded (running+waiting, then KV usage, then id).
	assert.Equal(t, []pick{
		{"b", ReasonLeastLoaded}, {"a", ReasonLeastLoaded}, {"c", ReasonLeastLoaded}, {"d", ReasonLeastLoaded},
	}, picks(got))

	assert.Nil(t, route(nil, nil, RouteRequest{Model: "m"}, nil), "empty pool")
}

func TestRouteDeterministic(t *testing.T) {
	t.Parallel()
	p := chain(4, 5)
	var pool []routeMember
	for i := range 12 {
		pool = append(pool, fake(fmt.Sprintf("n%02d", i), i%3, p, 1+i%5))
	}
	r := ringOf(pool)
	req := RouteRequest{Model: "m", Prefix: p, AffinityKey: "k"}
	want := picks(route(pool, r, req, nil))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		require.Equal(t, want, picks(route(pool, r, req, nil)))
	}
}

func TestRouteLocalPrefixExact(t *testing.T) {
	t.Parallel()
	p := chain(5, 10)
	local := fake("me", 0, p) // no summary at all
	local.Member.Local = true
	pool := []routeMember{local, fake("peer", 0, p, 1, 4)}
	got := route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: p}, func(h []kvcache.Hash) int {
		require.Equal(t, p, h)
		return 7
	})
	assert.Equal(t, pick{"me", "prefix:7"}, picks(got)[0])
	got = route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: p}, func([]kvcache.Hash) int { return 99 })
	assert.Equal(t, 10, got[0].PrefixBlocks, "clamped to the prefix length")
	got = route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: p}, func([]kvcache.Hash) int { return -1 })
	assert.Equal(t, pick{"peer", "prefix:4"}, picks(got)[0])
}

// TestClusterRouteFilters: Route's pool is alive members serving the
// model, not draining, not suspect, not gone.
func TestClusterRouteFilters(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	d := &delegate{c}
	p := chain(6, 4)
	for _, id := range []string{"ok", "drain", "evicted", "dead", "other"} {
		models := []string{"m"}
		if id == "other" {
			models = []string{"m2"}
		}
		join(c, id, models...)
		var flags byte
		if id == "drain" {
			flags = flagDraining
		}
		d.NotifyMsg(gossip(id, version{1, 1}, 0, flags))
	}
	c.MarkFailed("evicted")
	c.handleLeave(&memberlist.Node{Name: "dead"})
	c.cfg.LocalState = func() State {
		return State{Prefixes: map[string][]kvcache.Hash{"m": p[:2]}}
	}
	c.tick(time.Now())

	got := c.Route(RouteRequest{Model: "m", Prefix: p}, nil)
	ids := []string{}
	for _, cand := range got {
		ids = append(ids, cand.Member.ID)
	}
	assert.ElementsMatch(t, []string{"self", "ok"}, ids)
	assert.Equal(t, pick{"self", "prefix:2"}, picks(got)[0], "the local summary serves when localPrefix is nil")
	assert.True(t, got[0].Member.Local)
	assert.Equal(t, "api-ok", got[1].Member.APIAddr)

	assert.Nil(t, c.Route(RouteRequest{Model: "nope"}, nil), "no member serves it")
	assert.Equal(t, []string{"other"}, func() []string {
		var out []string
		for _, cand := range c.Route(RouteRequest{Model: "m2"}, nil) {
			out = append(out, cand.Member.ID)
		}
		return out
	}())
	assert.Equal(t, picks(got), picks(c.Route(RouteRequest{Model: "m", Prefix: p}, nil)), "deterministic")
}

func TestRingSpreadAndStability(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "c", "d"}
	r := newRing(ids)
	owners := map[string]int{}
	before := map[uint64]string{}
	for i := range 4000 {
		k := xxh3.HashString(fmt.Sprint(i))
		o := r.owner(k)
		owners[o]++
		before[k] = o
	}
	for _, id := range ids {
		assert.InDelta(t, 1000, owners[id], 350, "64 virtual nodes spread keys evenly enough: %v", owners)
	}
	// Removing d moves only d's keys.
	r2 := newRing([]string{"a", "b", "c"})
	for k, o := range before {
		if o != "d" {
			require.Equal(t, o, r2.owner(k))
		}
	}
	assert.Equal(t, "", newRing(nil).owner(1))
}

// TestPrefixMatcherBothWays: scanning the prompt and scanning the summary
// agree.
func TestPrefixMatcherBothWays(t *testing.T) {
	t.Parallel()
	p := chain(8, 100)
	other := chain(9, 300)
	for _, tc := range []struct {
		name   string
		depths []int
		noise  int // keys of an unrelated prefix
		want   int
	}{
		{"small summary", []int{1, 3}, 0, 3},
		{"large summary", []int{1, 4, 50}, 200, 50},
		{"none", nil, 150, 0},
		{"last block", []int{100}, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := map[uint64]struct{}{}
			for _, d := range tc.depths {
				keys[prefixKey(p[d-1])] = struct{}{}
			}
			for _, h := range other[:tc.noise] {
				keys[prefixKey(h)] = struct{}{}
			}
			m := prefixMatcher{prefix: p}
			assert.Equal(t, tc.want, m.blocks(keys))
			assert.Equal(t, tc.want, m.blocks(keys), "with the index built")
		})
	}
}

func BenchmarkRoute(b *testing.B) {
	for _, members := range []int{4, 16, 64} {
		for _, blocks := range []int{32, 512} {
			b.Run(fmt.Sprintf("members=%d/blocks=%d", members, blocks), func(b *testing.B) {
				p := chain(10, blocks)
				var pool []routeMember
				for i := range members {
					m := fake(fmt.Sprintf("n%02d", i), i%4, p, 1+i%blocks)
					for _, h := range chain(int32(100+i), MaxPrefixKeys) {
						m.keys[prefixKey(h)] = struct{}{}
					}
					pool = append(pool, m)
				}
				r := ringOf(pool)
				req := RouteRequest{Model: "m", Prefix: p, AffinityKey: "conversation"}
				b.ReportAllocs()
				for b.Loop() {
					route(pool, r, req, nil)
				}
			})
		}
	}
}

// TestRouteLoadSlack: a small imbalance does not count against the
// prefix's holder; the bound applies once the holder leads the least
// loaded member by LoadSlack sequences.
func TestRouteLoadSlack(t *testing.T) {
	t.Parallel()
	prefix := kvcache.HashChain(make([]int32, 64), 16)
	pool := []routeMember{fake("a", 6, prefix, 4), fake("b", 3, prefix), fake("c", 4, prefix)}
	// capacity = ceil(1.25 x 14 / 3) = 6: a is at it, 3 ahead of b.
	got := route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: prefix}, nil)
	require.Equal(t, pick{"a", "prefix:4"}, picks(got)[0], "within the default slack of 8")
	got = route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: prefix, LoadSlack: -1}, nil)
	require.Equal(t, pick{"a", ReasonOverloaded}, picks(got)[2], "no slack: a is over the bound")
	pool[0] = fake("a", 11, prefix, 4)
	got = route(pool, ringOf(pool), RouteRequest{Model: "m", Prefix: prefix}, nil)
	require.Equal(t, pick{"a", ReasonOverloaded}, picks(got)[2], "8 ahead of the least loaded: over")
}
