package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// pooled is a Member serving "m" with load running whose summary holds the
// given depths (1-based) of prefix.
func pooled(id string, running int, prefix []kvcache.Hash, depths ...int) Member {
	m := Member{ID: id, Models: []string{"m"}, Status: StatusAlive,
		State: State{Load: map[string]ModelLoad{"m": {Running: running}}, Prefixes: map[string][]kvcache.Hash{}}}
	for _, d := range depths {
		// A gossiped summary carries only Hi.
		m.State.Prefixes["m"] = append(m.State.Prefixes["m"], kvcache.Hash{Hi: prefix[d-1].Hi})
	}
	return m
}

// TestRouteMembersMatchesRoute: RouteMembers orders a member list exactly
// as the cluster's router orders the same members.
func TestRouteMembersMatchesRoute(t *testing.T) {
	t.Parallel()
	p := chain(7, 8)
	members := []Member{
		pooled("d", 2, p, 1),
		pooled("a", 2, p, 1, 2),
		pooled("c", 2, p),
		pooled("b", 3, p, 1, 4),
	}
	pool := []routeMember{fake("a", 2, p, 1, 2), fake("b", 3, p, 1, 4), fake("c", 2, p), fake("d", 2, p, 1)}
	for _, req := range []RouteRequest{
		{Model: "m", Prefix: p},
		{Model: "m", Prefix: p, AffinityKey: "conversation-1"},
		{Model: "m", AffinityKey: "conversation-2"},
		{Model: "m"},
	} {
		want := picks(route(pool, ringOf(pool), req, nil))
		assert.Equal(t, want, picks(RouteMembers(members, req, nil)), "%+v", req)
	}
	got := RouteMembers(members, RouteRequest{Model: "m", Prefix: p}, nil)
	assert.Equal(t, pick{"b", "prefix:4"}, picks(got)[0])
	assert.Equal(t, 4, got[0].PrefixBlocks)
}

// TestRouteMembersFilters: members not serving the model, draining or not
// alive are no candidates; an unset status counts as alive; duplicates
// count once.
func TestRouteMembersFilters(t *testing.T) {
	t.Parallel()
	p := chain(8, 4)
	other := pooled("other", 0, p)
	other.Models = []string{"x"}
	draining := pooled("draining", 0, p, 4)
	draining.State.Draining = true
	suspect := pooled("suspect", 0, p, 4)
	suspect.Status = StatusSuspect
	unset := pooled("unset", 5, p)
	unset.Status = ""
	members := []Member{other, draining, suspect, unset, pooled("ok", 1, p, 2), pooled("ok", 0, p, 4)}
	got := picks(RouteMembers(members, RouteRequest{Model: "m", Prefix: p}, nil))
	require.Len(t, got, 2)
	assert.Equal(t, pick{"ok", "prefix:2"}, got[0], "the first of two members sharing an id")
	assert.Equal(t, "unset", got[1].ID)
	assert.Empty(t, RouteMembers(nil, RouteRequest{Model: "m"}, nil))
}

// TestRoutePoolUpdates: SetLoad and SetPrefixes change later decisions
// without touching the caller's maps or earlier Candidates.
func TestRoutePoolUpdates(t *testing.T) {
	t.Parallel()
	p := chain(9, 8)
	members := []Member{pooled("a", 1, p), pooled("b", 1, p), pooled("c", 1, p)}
	pool := NewRoutePool(members)
	req := RouteRequest{Model: "m", Prefix: p}
	first := pool.Route(req, nil)
	assert.Zero(t, first[0].PrefixBlocks)

	require.True(t, pool.SetPrefixes("c", "m", []kvcache.Hash{p[0], p[5]}))
	got := pool.Route(req, nil)
	assert.Equal(t, pick{"c", "prefix:6"}, picks(got)[0])

	// Over the bound (ceil(1.25 x 23/3) = 10, and 8 over the least
	// loaded), the holder is skipped and kept last.
	require.True(t, pool.SetLoad("c", "m", ModelLoad{Running: 15, Waiting: 5}))
	got = pool.Route(req, nil)
	assert.Equal(t, pick{"c", ReasonOverloaded}, picks(got)[2])

	assert.False(t, pool.SetLoad("zz", "m", ModelLoad{}))
	assert.False(t, pool.SetPrefixes("zz", "m", nil))
	assert.Equal(t, 1, members[2].State.Load["m"].Running, "the caller's maps are left alone")
	assert.Empty(t, members[2].State.Prefixes["m"])
	for _, c := range first {
		assert.Equal(t, 1, c.Member.State.Load["m"].Running, "earlier candidates keep their load")
	}
}

// TestRoutePoolLocalPrefix: localPrefix counts the Local member's blocks.
func TestRoutePoolLocalPrefix(t *testing.T) {
	t.Parallel()
	p := chain(10, 8)
	me := pooled("me", 0, p)
	me.Local = true
	got := RouteMembers([]Member{me, pooled("peer", 0, p, 2)}, RouteRequest{Model: "m", Prefix: p},
		func([]kvcache.Hash) int { return 5 })
	assert.Equal(t, pick{"me", "prefix:5"}, picks(got)[0])
}
