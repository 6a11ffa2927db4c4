package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// costed is a member of model "m" with a full load and the first blocks
// of prefix in its summary (depths as in pooled).
func costed(id string, l ModelLoad, prefix []kvcache.Hash, depths ...int) Member {
	m := pooled(id, 0, prefix, depths...)
	m.State.Load["m"] = l
	return m
}

// TestPredictTTFT: the formula of predictTTFT, on one member, in exact
// numbers.
func TestPredictTTFT(t *testing.T) {
	t.Parallel()
	p := chain(1, 25) // 25 blocks of 4 tokens in the helper; priced at 16 below
	m := costed("a", ModelLoad{Running: 4, Waiting: 2, QueuedPromptTokens: 1000, PrefillTokensPerSecond: 5000, BlockTokens: 16}, p, 8)
	got := RouteMembers([]Member{m}, RouteRequest{Model: "m", Prefix: p, PromptTokens: 400, Policy: PolicyCost}, nil)
	require.Len(t, got, 1)
	// (1000 queued + (400 - 8 blocks x 16) + 4 running) / 5000 tokens/s.
	assert.Equal(t, secs(1000+400-128+4, 5000), got[0].PredictedTTFT)
	assert.Equal(t, ReasonCost, got[0].Reason)
	assert.Equal(t, 8, got[0].PrefixBlocks)

	// Without PromptTokens the prompt is its full blocks: 25 x 16.
	got = RouteMembers([]Member{m}, RouteRequest{Model: "m", Prefix: p, Policy: PolicyCost}, nil)
	assert.Equal(t, secs(1000+400-128+4, 5000), got[0].PredictedTTFT)

	// A node that reports neither queue nor rate (an older version): each
	// waiting request counts as long as this prompt, and the rate is the
	// pool's median.
	old := costed("b", ModelLoad{Running: 1, Waiting: 3}, p)
	other := costed("c", ModelLoad{PrefillTokensPerSecond: 8000, BlockTokens: 16}, p)
	third := costed("d", ModelLoad{PrefillTokensPerSecond: 2000, BlockTokens: 16}, p)
	got = RouteMembers([]Member{old, other, third}, RouteRequest{Model: "m", Prefix: p, PromptTokens: 400, Policy: PolicyCost}, nil)
	byID := map[string]Candidate{}
	for _, c := range got {
		byID[c.Member.ID] = c
	}
	assert.Equal(t, secs(3*400+400+1, 8000), byID["b"].PredictedTTFT)
	assert.Equal(t, secs(400, 2000), byID["d"].PredictedTTFT)
}

// TestCostWeighsPrefixAgainstQueue: a cached prefix is worth the prefill
// it saves, a queue costs the prefill it adds; the bound still guards.
func TestCostWeighsPrefixAgainstQueue(t *testing.T) {
	t.Parallel()
	p := chain(2, 64) // 64 blocks: 1024 tokens at 16
	rate := 10_000.0
	holder := func(queued int) Member {
		return costed("a", ModelLoad{Running: 2, QueuedPromptTokens: queued, PrefillTokensPerSecond: rate, BlockTokens: 16}, p, 1, 2, 4, 8, 16, 32, 64)
	}
	idle := costed("b", ModelLoad{PrefillTokensPerSecond: rate, BlockTokens: 16}, p, 1)
	req := RouteRequest{Model: "m", Prefix: p, PromptTokens: 1030, Policy: PolicyCost}

	// The holder prefills 6 tokens plus its 500 queued, the other 1014.
	got := RouteMembers([]Member{holder(500), idle}, req, nil)
	assert.Equal(t, "a", got[0].Member.ID)
	// With 2,000 queued the holder is slower than prefilling afresh.
	got = RouteMembers([]Member{holder(2000), idle}, req, nil)
	assert.Equal(t, "b", got[0].Member.ID)
	assert.Equal(t, "a", got[1].Member.ID)
	assert.Less(t, got[0].PredictedTTFT, got[1].PredictedTTFT)

	// Prefix routing would keep it on the holder whatever its queue.
	got = RouteMembers([]Member{holder(2000), idle}, RouteRequest{Model: "m", Prefix: p}, nil)
	assert.Equal(t, "a", got[0].Member.ID)

	// The cheapest member over the load bound is skipped, kept last.
	busy := holder(0)
	l := busy.State.Load["m"]
	l.Running = 40
	l.QueuedPromptTokens = 0
	l.PrefillTokensPerSecond = 1e9 // cheapest by far
	busy.State.Load["m"] = l
	got = RouteMembers([]Member{busy, idle, costed("c", ModelLoad{PrefillTokensPerSecond: rate}, p)}, req, nil)
	require.Len(t, got, 3)
	assert.NotEqual(t, "a", got[0].Member.ID)
	assert.Equal(t, "a", got[2].Member.ID)
	assert.Equal(t, ReasonOverloaded, got[2].Reason)
}

// TestCostSaturatedKeepsHolder: with requests waiting across the pool, a
// miss's prefill is charged once more for each of them (on average), so the
// member holding the prefix keeps a request that its TTFT alone would send
// to a member with a shorter queue; the PredictedTTFT stays the TTFT.
func TestCostSaturatedKeepsHolder(t *testing.T) {
	t.Parallel()
	p := chain(5, 64) // 1024 tokens at 16
	rate := 10_000.0
	load := func(queued, waiting int) ModelLoad {
		return ModelLoad{Running: 8, Waiting: waiting, QueuedPromptTokens: queued, PrefillTokensPerSecond: rate, BlockTokens: 16}
	}
	req := RouteRequest{Model: "m", Prefix: p, PromptTokens: 1030, Policy: PolicyCost}

	// Idle pool: the holder's 2,000 queued tokens outweigh the 1,008 it saves.
	holder := costed("a", load(2000, 0), p, 1, 2, 4, 8, 16, 32, 64)
	other := costed("b", load(0, 0), p)
	got := RouteMembers([]Member{holder, other}, req, nil)
	assert.Equal(t, "b", got[0].Member.ID)

	// Saturated pool (3 waiting on average): the other member's prefill of
	// 1,030 tokens would delay the requests behind it, so the holder wins.
	holder = costed("a", load(40_000, 4), p, 1, 2, 4, 8, 16, 32, 64)
	other = costed("b", load(38_000, 2), p)
	got = RouteMembers([]Member{holder, other}, req, nil)
	assert.Equal(t, "a", got[0].Member.ID)
	assert.Equal(t, secs(40_000+6+8, rate), got[0].PredictedTTFT, "the TTFT, not the score")
	assert.Less(t, got[1].PredictedTTFT, got[0].PredictedTTFT)
}

// TestCostTies: between like members the prefix holder, then the ring
// owner of the conversation, takes a near tie, as prefix routing would.
func TestCostTies(t *testing.T) {
	t.Parallel()
	p := chain(3, 8)
	l := ModelLoad{PrefillTokensPerSecond: 10_000, BlockTokens: 16}
	members := []Member{costed("a", l, p), costed("b", l, p), costed("c", l, p)}
	for _, key := range []string{"conversation-1", "conversation-2", "conversation-3", "conversation-4"} {
		want := RouteMembers(members, RouteRequest{Model: "m", AffinityKey: key, Prefix: p}, nil)[0].Member.ID
		got := RouteMembers(members, RouteRequest{Model: "m", AffinityKey: key, Prefix: p, Policy: PolicyCost}, nil)
		assert.Equal(t, want, got[0].Member.ID, "the ring owner of %s", key)
	}
	// One block more than the others is within the tie: the holder wins.
	members[1] = costed("b", l, p, 1)
	got := RouteMembers(members, RouteRequest{Model: "m", AffinityKey: "conversation-1", Prefix: p, PromptTokens: 1000, Policy: PolicyCost}, nil)
	assert.Equal(t, "b", got[0].Member.ID)
	// A holder with a short queue still wins within the tie (2%).
	busier := l
	busier.QueuedPromptTokens = 30
	members[1] = costed("b", busier, p, 1)
	got = RouteMembers(members, RouteRequest{Model: "m", AffinityKey: "conversation-1", Prefix: p, PromptTokens: 1000, Policy: PolicyCost}, nil)
	assert.Equal(t, "b", got[0].Member.ID)
	assert.Greater(t, got[0].PredictedTTFT, got[1].PredictedTTFT)
	// A longer queue is not a tie.
	busier.QueuedPromptTokens = 100
	members[1] = costed("b", busier, p, 1)
	got = RouteMembers(members, RouteRequest{Model: "m", AffinityKey: "conversation-1", Prefix: p, PromptTokens: 1000, Policy: PolicyCost}, nil)
	assert.NotEqual(t, "b", got[0].Member.ID)
}

// TestCostZones: the zone rule applies to the cost policy as to the
// others.
func TestCostZones(t *testing.T) {
	t.Parallel()
	p := chain(4, 8)
	l := ModelLoad{PrefillTokensPerSecond: 10_000, BlockTokens: 16}
	far := costed("c", l, p, 1, 2, 4, 8)
	far.Zone = "us"
	near := costed("a", ModelLoad{PrefillTokensPerSecond: 10_000, BlockTokens: 16, QueuedPromptTokens: 5000}, p)
	near.Zone = "eu"
	got := RouteMembers([]Member{near, far}, RouteRequest{Model: "m", Prefix: p, Zone: "eu", Policy: PolicyCost}, nil)
	require.Len(t, got, 2)
	assert.Equal(t, "a", got[0].Member.ID)
	assert.True(t, got[1].CrossZone)
}

// secs is tokens at rate as predictTTFT computes it.
func secs(tokens int, rate float64) time.Duration {
	return time.Duration(float64(tokens) / rate * float64(time.Second))
}
