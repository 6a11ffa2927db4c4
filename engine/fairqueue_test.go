package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// saturate runs a scheduler with every request queued up front and the
// running set capped, for steps steps, and returns the output tokens
// generated per request (by id).
func saturate(t *testing.T, reqs []Request, weights [NumPriorities]float64, steps int) map[string]int {
	t.Helper()
	pool, err := kvcache.NewPool(4096, 16)
	require.NoError(t, err)
	out := map[string]int{}
	s, err := NewScheduler(SchedulerConfig{
		MaxBatchTokens: 512, MaxRunning: 8, ContextLength: 4096, DefaultExpectedOutput: 64, TierWeights: weights,
	}, pool, func(r *Request, ev Event) {
		if ev.Kind == EventToken {
			out[r.ID]++
		}
	})
	require.NoError(t, err)
	for _, r := range reqs {
		require.NoError(t, s.Add(r))
	}
	o := &Output{}
	for range steps {
		plan := s.Step()
		o.Tokens = o.Tokens[:0]
		for i := range plan.Batch.Seqs {
			tok := int32(-1)
			if in := &plan.Batch.Seqs[i]; in.Sample {
				tok = fakeToken(in.Seed, in.Generated)
			}
			o.Tokens = append(o.Tokens, tok)
		}
		s.Apply(plan, o, time.Time{})
	}
	return out
}

// TestTierSharesFollowWeights: under saturation each class above shadow
// gets a share of the generated tokens within 10% of its weight's share,
// and the lowest of them still progresses (never starved); the shadow
// class, below them all whatever its weight, gets nothing while they wait.
func TestTierSharesFollowWeights(t *testing.T) {
	var reqs []Request
	for p := range NumPriorities {
		for i := range 200 {
			reqs = append(reqs, Request{ID: fmt.Sprintf("p%d-%d", p, i), Tenant: fmt.Sprintf("t%d", i%3), Priority: Priority(p),
				Prompt: prompt(64, p*100000+i*100), MaxTokens: 64, N: 1, Seed: uint64(i)})
		}
	}
	weights := [NumPriorities]float64{PriorityShadow: 0.5, PriorityBatch: 1, PriorityFree: 2, PriorityPaid: 4, PriorityEnterprise: 8}
	out := saturate(t, reqs, weights, 3000)
	var perClass [NumPriorities]int
	total := 0
	for _, r := range reqs {
		perClass[r.Priority] += out[r.ID]
		total += out[r.ID]
	}
	require.Positive(t, total)
	require.Zero(t, perClass[PriorityShadow], "shadow ran while other classes waited (%v)", perClass)
	for p := PriorityBatch; p < NumPriorities; p++ {
		share := float64(perClass[p]) / float64(total)
		want := weights[p] / 15
		require.InDelta(t, want, share, 0.1*want, "class %s: share %.3f, want %.3f (%v)", p, share, want, perClass)
	}
}

// TestHeavyTenantGetsItsShare: one tenant with 300 queued requests beside
// ten tenants with 30 each, all in one class: while the light tenants have
// work, the heavy one gets no more than its fair share of the tokens.
func TestHeavyTenantGetsItsShare(t *testing.T) {
	var reqs []Request
	add := func(tenant string, n int) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", tenant, i)
			reqs = append(reqs, Request{ID: id, Tenant: tenant, Priority: PriorityPaid,
				Prompt: prompt(64, len(reqs)*100), MaxTokens: 64, N: 1, Seed: uint64(len(reqs))})
		}
	}
	add("heavy", 300) // queued first: FIFO would serve it alone for a long while
	for i := range 10 {
		add(fmt.Sprintf("light%d", i), 30)
	}
	// Run for about 180 admissions, while the light tenants still have work.
	out := saturate(t, reqs, [NumPriorities]float64{}, 1500)
	byTenant := map[string]int{}
	total := 0
	for _, r := range reqs {
		byTenant[r.Tenant] += out[r.ID]
		total += out[r.ID]
	}
	require.Positive(t, total)
	fair := float64(total) / 11
	require.LessOrEqual(t, float64(byTenant["heavy"]), 1.1*fair, "heavy tenant: %d of %d tokens", byTenant["heavy"], total)
	for i := range 10 {
		require.Positive(t, byTenant[fmt.Sprintf("light%d", i)], "light tenant %d starved", i)
	}
}
