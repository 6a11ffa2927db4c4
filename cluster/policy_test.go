package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for _, p := range Policies {
		got, err := ParsePolicy(string(p))
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	got, err := ParsePolicy("")
	require.NoError(t, err)
	require.Equal(t, PolicyPrefix, got)
	_, err = ParsePolicy("random")
	require.ErrorContains(t, err, "prefix, cost, affinity, round_robin, least_loaded, local")
}

// TestPolicies: each policy looks at what it says: the prefix (prefix),
// the ring owner whatever the load (affinity), the load alone
// (least_loaded), each member in turn (round_robin), the local member
// only (local).
func TestPolicies(t *testing.T) {
	t.Parallel()
	p := chain(7, 8)
	members := []Member{
		pooled("a", 0, p),
		pooled("b", 40, p, 1, 2, 4, 8), // holds the prefix, overloaded
		pooled("c", 1, p, 1),
	}
	members[2].Local = true
	first := func(req RouteRequest) string { return RouteMembers(members, req, nil)[0].Member.ID }

	assert.Equal(t, "c", first(RouteRequest{Model: "m", Prefix: p}), "prefix: b is over the bound, c holds one block")
	assert.Equal(t, "a", first(RouteRequest{Model: "m", Prefix: p, Policy: PolicyLeastLoaded}))
	owner := first(RouteRequest{Model: "m", AffinityKey: "conversation-9", LoadBound: 1e9})
	assert.Equal(t, owner, first(RouteRequest{Model: "m", Prefix: p, AffinityKey: "conversation-9", Policy: PolicyAffinity}),
		"affinity: the key's owner whatever the prefix or the load")
	local := RouteMembers(members, RouteRequest{Model: "m", Prefix: p, Policy: PolicyLocal}, nil)
	require.Len(t, local, 1)
	assert.Equal(t, "c", local[0].Member.ID)

	pool := NewRoutePool(members)
	var seen []string
	for range 6 {
		cands := pool.Route(RouteRequest{Model: "m", Prefix: p, Policy: PolicyRoundRobin}, nil)
		require.Len(t, cands, 3)
		assert.Equal(t, ReasonRoundRobin, cands[0].Reason)
		seen = append(seen, cands[0].Member.ID)
	}
	assert.Equal(t, []string{"b", "c", "a", "b", "c", "a"}, seen)
}

func TestSummaryDepth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, total, want int }{
		{0, 10, 0}, {1, 10, 1}, {2, 10, 2}, {3, 10, 2}, {62, 125, 32}, {64, 125, 64}, {124, 125, 64}, {125, 125, 125},
	} {
		require.Equal(t, c.want, SummaryDepth(c.n, c.total), "%+v", c)
	}
}
