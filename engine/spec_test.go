package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// fakeNow stamps the events of hand-driven steps.
var fakeNow = time.Unix(0, 0)

// verifyFake is fakeExec's verification: the drafts are accepted while
// they equal fakeToken at their output index.
func verifyFake(b *Batch) *Output {
	out := &Output{Tokens: make([]int32, len(b.Seqs)), Accepted: make([]int, len(b.Seqs))}
	for i, s := range b.Seqs {
		out.Tokens[i] = -1
		if !s.Sample {
			continue
		}
		drafts := s.Tokens[len(s.Tokens)-s.Draft:]
		acc := 0
		for acc < len(drafts) && drafts[acc] == fakeToken(s.Seed, s.Generated+acc) {
			acc++
		}
		out.Accepted[i] = acc
		out.Tokens[i] = fakeToken(s.Seed, s.Generated+acc)
	}
	return out
}

// scriptDrafter proposes fakeToken's tokens, right for the first
// right(step, seq) of them and wrong after.
type scriptDrafter struct {
	step   int
	right  func(step int, seq uint64) int
	forgot []uint64
}

func (d *scriptDrafter) Draft(_ context.Context, reqs []DraftRequest) error {
	d.step++
	for i := range reqs {
		r := &reqs[i]
		r.Tokens = r.Tokens[:0]
		n := d.right(d.step, r.SeqID)
		for j := range r.Max {
			tok := fakeToken(r.Seed, r.Generated+j)
			if j >= n {
				tok = 1001 // fakeToken is in [1, 1000]
			}
			r.Tokens = append(r.Tokens, tok)
		}
	}
	return nil
}

func (d *scriptDrafter) Forget(id uint64) { d.forgot = append(d.forgot, id) }

// TestSpeculativeRollback drives the scheduler by hand through
// verification steps with every outcome (all drafts accepted, some, none)
// in a pool tight enough to preempt, and checks after every step that a
// running sequence holds exactly the blocks its committed tokens need (the
// blocks of rejected drafts are back in the pool), that the prefix index
// holds only committed tokens' blocks, that no step exceeds the token
// budget, and that the answers are fakeToken's, the tokens plain decoding
// gives.
func TestSpeculativeRollback(t *testing.T) {
	const bs, blocks, maxTok = 4, 14, 24
	pool, err := kvcache.NewPool(blocks, bs)
	require.NoError(t, err)
	var got = map[string][]int32{}
	emit := func(r *Request, ev Event) {
		if ev.Kind == EventToken {
			got[r.ID] = append(got[r.ID], ev.Token)
		}
	}
	d := &scriptDrafter{right: func(step int, seq uint64) int { return (step + int(seq)) % 5 }}
	s, err := NewScheduler(SchedulerConfig{
		MaxBatchTokens: 12, MaxRunning: 8, ContextLength: 200, EOS: []int32{0}, DefaultExpectedOutput: 1,
		SpecMaxTokens: 4, SpecMaxBatch: 8, ForgetDraft: d.Forget,
	}, pool, emit)
	require.NoError(t, err)
	for i := range 3 {
		prompt := make([]int32, 6+i)
		for j := range prompt {
			prompt[j] = int32(2000 + 10*i + j)
		}
		require.NoError(t, s.Add(Request{ID: fmt.Sprint("r", i), Prompt: prompt, MaxTokens: maxTok, N: 1,
			Priority: PriorityPaid, Seed: uint64(i)}))
	}
	verified := 0
	for step := 0; s.NumRunning()+s.NumWaiting() > 0; step++ {
		require.Less(t, step, 500, "no progress")
		reqs := s.DraftRequests()
		require.NoError(t, d.Draft(t.Context(), reqs))
		s.SetDrafts(reqs)
		plan := s.Step()
		require.LessOrEqual(t, plan.Batch.NumTokens(), 12, "the budget counts draft tokens")
		for _, in := range plan.Batch.Seqs {
			if in.Draft > 0 {
				verified++
				require.Equal(t, in.Pos+len(in.Tokens), in.Context)
				require.GreaterOrEqual(t, len(in.Blocks)*bs, in.Context)
			}
		}
		s.Apply(plan, verifyFake(&plan.Batch), fakeNow)
		used := 0
		for _, seq := range s.running {
			require.Len(t, seq.blocks, pool.BlocksFor(seq.computed), "seq %d holds blocks past its committed tokens", seq.id)
			require.LessOrEqual(t, seq.hashed*bs, seq.computed)
			require.Equal(t, kvcache.HashChain(seq.tokens[:seq.computed], bs)[:seq.hashed], seq.hashes[:seq.hashed])
			used += len(seq.blocks)
		}
		require.Equal(t, used, pool.NumUsed(), "blocks in use are exactly the running sequences'")
	}
	require.Positive(t, verified)
	st := s.Stats()
	require.Positive(t, st.SpecAcceptedTokens)
	require.Less(t, st.SpecAcceptedTokens, st.SpecDraftTokens)
	require.Positive(t, st.Preemptions, "the pool must be tight enough to preempt")
	for i := range 3 {
		want := make([]int32, maxTok)
		for j := range want {
			want[j] = fakeToken(uint64(i), j)
		}
		require.Equal(t, want, got[fmt.Sprint("r", i)], "request %d", i)
	}
	require.NoError(t, s.CheckIdle())
	slices.Sort(d.forgot)
	require.Subset(t, d.forgot, []uint64{1, 2, 3}, "the drafter hears of every finished sequence")
}

// TestDraftRequestsEligibility: no drafts above SpecMaxBatch, for a
// constrained, logprobs or min_tokens request, or with one token left.
func TestDraftRequestsEligibility(t *testing.T) {
	pool, err := kvcache.NewPool(64, 4)
	require.NoError(t, err)
	s, err := NewScheduler(SchedulerConfig{MaxBatchTokens: 256, MaxRunning: 8, ContextLength: 200, EOS: []int32{0},
		SpecMaxTokens: 4, SpecMaxBatch: 3, Logprobs: true, VocabSize: 4096}, pool, nil)
	require.NoError(t, err)
	add := func(id string, mut func(*Request)) {
		r := Request{ID: id, Prompt: []int32{5, 6, 7}, MaxTokens: 10, N: 1, Priority: PriorityPaid}
		if mut != nil {
			mut(&r)
		}
		require.NoError(t, s.Add(r))
	}
	add("plain", nil)
	add("logprobs", func(r *Request) { r.Logprobs = true })
	add("min", func(r *Request) { r.MinTokens = 5 })
	step := func() {
		plan := s.Step()
		out := &Output{Tokens: make([]int32, len(plan.Batch.Seqs))}
		for i := range out.Tokens {
			out.Tokens[i] = 9
		}
		s.Apply(plan, out, fakeNow)
	}
	step() // prefill all three
	reqs := s.DraftRequests()
	require.Len(t, reqs, 1)
	require.Equal(t, 4, reqs[0].Max)
	add("late", func(r *Request) { r.Prompt = make([]int32, 40) })
	require.Empty(t, s.DraftRequests(), "a request waits to prefill")
	s.cfg.MaxBatchTokens = 16 // the late prompt takes several steps
	step()
	require.Equal(t, 4, s.NumRunning())
	s.cfg.SpecMaxBatch = 4
	require.Empty(t, s.DraftRequests(), "a running sequence still prefills")
	for range 3 {
		step()
	}
	require.Len(t, s.DraftRequests(), 3, "prefill done: plain, late and min (past its min_tokens) draft")
	s.cfg.SpecMaxBatch = 3
	require.Empty(t, s.DraftRequests(), "four running sequences exceed SpecMaxBatch 3")
}

// TestSpecGate: speculation is tried first, then plain decoding measured,
// then kept where it delivers more tokens per second and dropped where it
// delivers fewer, with a probe the other way now and then (specGateProbe
// steps apart, twice as far after each probe that changed nothing), per
// batch size.
func TestSpecGate(t *testing.T) {
	var g specGate
	require.True(t, g.allow(1), "untried: speculate")
	g.observe(1, true, 3, time.Second) // cold: the drafter caught up, not measured
	require.True(t, g.allow(1), "the first step with drafts is not measured")
	g.observe(1, true, 3, 100*time.Millisecond) // 30 tokens/s
	require.False(t, g.allow(1), "plain not measured yet")
	g.observe(1, false, 1, 50*time.Millisecond) // 20 tokens/s

	// probes runs steps allow calls and returns the lengths of the runs
	// that went against the majority, and the gaps before them.
	probes := func(steps int, majority bool) (runs, gaps []int) {
		run, gap := 0, 0
		for range steps {
			if g.allow(1) != majority {
				if run == 0 {
					gaps = append(gaps, gap)
					gap = 0
				}
				run++
				continue
			}
			if run > 0 {
				runs = append(runs, run)
				run = 0
			}
			gap++
		}
		return runs, gaps
	}
	runs, gaps := probes(16+32+64+10, true)
	require.Equal(t, []int{1, 1, 1}, runs, "pays: on but for one-step plain probes")
	require.Equal(t, []int{15, 31, 63}, gaps, "the probes back off")

	g.observe(1, true, 3, 100*time.Millisecond) // warm again
	for range 20 {
		g.observe(1, true, 1, 100*time.Millisecond) // now 10 tokens/s
	}
	g.observe(1, false, 1, 50*time.Millisecond)
	// Off but for the probes, each of which speculates specGateBurst steps
	// in a row (so that its later steps are measured warm), backing off
	// anew from specGateProbe since the decision changed.
	runs, gaps = probes(16+32+64+3*specGateBurst+10, false)
	require.Equal(t, []int{specGateBurst, specGateBurst, specGateBurst}, runs, "does not pay: off but for the probes")
	require.Equal(t, []int{15, 31, 63}, gaps)
	require.True(t, g.allow(2), "another batch size is measured on its own")

	// A slow cold step after plain ones leaves the estimate alone.
	before := g.spec[1]
	g.observe(1, true, 1, 10*time.Second)
	require.Equal(t, before, g.spec[1])

	b := &Batch{Seqs: []SeqInput{{Tokens: []int32{1, 2}, Draft: 1, Sample: true}, {Tokens: []int32{3}, Sample: true}}}
	decode, drafts := decodeOnly(b)
	require.True(t, decode)
	require.True(t, drafts)
	b.Seqs = append(b.Seqs, SeqInput{Tokens: []int32{4, 5}})
	decode, _ = decodeOnly(b)
	require.False(t, decode, "a prefill chunk makes the step incomparable")
}
