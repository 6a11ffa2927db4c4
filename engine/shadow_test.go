package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// shadowWatch is a fakeExec that looks at the scheduler each time a step
// is planned (Forward runs on the goroutine that called Engine.Step, which
// owns the scheduler) and checks the shadow class's two promises: a step
// that runs a shadow sequence leaves no sequence of another class waiting,
// and no sequence of another class is ever preempted (in this workload
// they fit the pool together, so only shadow work could push them out).
type shadowWatch struct {
	*fakeExec
	t *testing.T
	e *Engine
	// admitted is each running non-shadow sequence's admission number: a
	// preempted sequence leaves the running set, and one readmitted gets a
	// new number.
	admitted map[*sequence]uint64
	// Steps that ran shadow work, and those that also ran other work.
	shadowSteps, sharedSteps int
}

func (w *shadowWatch) Forward(ctx context.Context, b *Batch) (*Output, error) {
	s := w.e.sched
	var shadow, other bool
	for _, seq := range s.running {
		if seq.planned != s.stepNo {
			continue
		}
		if classOf(seq) == PriorityShadow {
			shadow = true
		} else {
			other = true
		}
	}
	if shadow {
		w.shadowSteps++
		if other {
			w.sharedSteps++
		}
		require.Empty(w.t, s.swapped, "step %d runs shadow work while a swapped-out sequence waits", s.stepNo)
		require.True(w.t, s.waiting.shadowOnly(), "step %d runs shadow work while others wait: %v",
			s.stepNo, s.WaitingByPriority())
	}
	for seq, n := range w.admitted {
		if seq.state == stateFinished {
			delete(w.admitted, seq)
			continue
		}
		require.Equal(w.t, stateRunning, seq.state, "%s was preempted at step %d", seq.r.req.ID, s.stepNo)
		require.Equal(w.t, n, seq.admitted, "%s was preempted and readmitted at step %d", seq.r.req.ID, s.stepNo)
	}
	for _, seq := range s.running {
		if _, ok := w.admitted[seq]; !ok && classOf(seq) != PriorityShadow {
			w.admitted[seq] = seq.admitted
		}
	}
	return w.fakeExec.Forward(ctx, b)
}

// shadowRun drives an engine with Step through waves of real requests
// (batch to enterprise) arriving every 40 turns, and, when withShadow, 6
// shadow requests queued with the first wave. It returns the turn at which
// each real request's tokens arrived, and the watch.
func shadowRun(t *testing.T, withShadow bool) (map[string][]int, *shadowWatch) {
	t.Helper()
	// 32 blocks of 16 tokens hold the 4 real sequences that may run (at
	// most 4 blocks each) twice over, so real work never preempts real
	// work; the 6 shadow requests (5 blocks each) do not fit beside them.
	w := &shadowWatch{fakeExec: newFakeExec(32, 16, 4096), t: t, admitted: map[*sequence]uint64{}}
	cfg := DefaultConfig()
	cfg.MaxRunning = 4
	cfg.MaxBatchTokens = 64 // prefill comes in chunks: the budget is contended
	// The ladder has its own test; here it would only blur the comparison
	// (the two runs' virtual clocks differ once shadow work fills idle turns).
	cfg.Ladder.Disabled = true
	e, err := New(w, w.clock, cfg, nil)
	require.NoError(t, err)
	w.e = e
	ctx := t.Context()

	classes := []Priority{PriorityBatch, PriorityFree, PriorityPaid, PriorityEnterprise}
	type live struct {
		st     *Stream
		seed   uint64
		shadow bool
		tokens []int32
	}
	var reqs []*live
	turns := map[string][]int{}
	submit := func(req Request) {
		st, err := e.Submit(ctx, req)
		require.NoError(t, err)
		reqs = append(reqs, &live{st: st, seed: req.Seed, shadow: req.Priority == PriorityShadow})
	}
	if withShadow {
		for i := range 6 {
			submit(Request{ID: fmt.Sprint("shadow-", i), Tenant: "mirror", Priority: PriorityShadow,
				Prompt: prompt(48, 900000+i*1000), MaxTokens: 24, N: 1, Seed: uint64(900 + i)})
		}
	}
	for turn := 0; turn < 2000; turn++ {
		if wave := turn / 40; turn%40 == 0 && wave < 4 {
			for i := range 6 {
				n := wave*6 + i
				submit(Request{ID: fmt.Sprint("real-", n), Tenant: fmt.Sprint("t", n%3), Priority: classes[n%len(classes)],
					Prompt: prompt(20+n%20, n*1000), MaxTokens: 8 + n%9, N: 1, Seed: uint64(n)})
			}
		}
		_, err := e.Step(ctx)
		require.NoError(t, err)
		for _, r := range reqs {
			for _, ev := range drain(t, r.st) {
				if ev.Kind != EventToken {
					continue
				}
				r.tokens = append(r.tokens, ev.Token)
				if !r.shadow {
					turns[r.st.ID()] = append(turns[r.st.ID()], turn)
				}
			}
		}
		if turn >= 120 && e.Stats().Running+e.Stats().Waiting == 0 {
			break
		}
	}
	require.NoError(t, e.sched.CheckIdle())
	for _, r := range reqs {
		require.NotEmpty(t, r.tokens, r.st.ID())
		for j, tok := range r.tokens {
			require.Equal(t, fakeToken(r.seed, j), tok, "%s token %d", r.st.ID(), j)
		}
	}
	require.Len(t, turns, 24)
	return turns, w
}

// TestShadowRunsOnLeftoverCapacity: real and shadow requests on a busy
// engine. Shadow work runs only in steps that leave nothing else waiting
// (beside real work when there is room, and alone between waves), never
// preempts real work (the real requests fit the pool alone), and is the
// one preempted when real work needs the room. Every real request gets its
// tokens at exactly the turns it gets them with no shadow traffic at all.
func TestShadowRunsOnLeftoverCapacity(t *testing.T) {
	t.Parallel()
	alone, base := shadowRun(t, false)
	require.Zero(t, base.e.Stats().Preemptions, "real work alone fits the pool")
	mixed, w := shadowRun(t, true)
	require.Positive(t, w.shadowSteps, "shadow work never ran")
	require.Positive(t, w.sharedSteps, "shadow work never ran beside real work")
	require.Positive(t, w.e.Stats().Preemptions, "real work never had to take room from shadow work")
	require.Zero(t, w.e.Stats().PreemptionsSwap)
	require.Equal(t, alone, mixed, "shadow traffic changed when real requests got their tokens")
}

// TestShadowAdmittedWhenIdle: on an idle engine a shadow request is
// admitted at the first step and runs to the end.
func TestShadowAdmittedWhenIdle(t *testing.T) {
	t.Parallel()
	exec := newFakeExec(64, 16, 4096)
	e, err := New(exec, exec.clock, DefaultConfig(), nil)
	require.NoError(t, err)
	st, err := e.Submit(t.Context(), Request{ID: "s", Tenant: "mirror", Priority: PriorityShadow,
		Prompt: prompt(20, 0), MaxTokens: 4, N: 1, Seed: 3})
	require.NoError(t, err)
	var tokens []int32
	for {
		ran, err := e.Step(t.Context())
		require.NoError(t, err)
		if !ran {
			break
		}
		for _, ev := range drain(t, st) {
			if ev.Kind == EventToken {
				tokens = append(tokens, ev.Token)
			}
		}
		require.NotEmpty(t, tokens, "the first step prefills and samples")
	}
	require.Equal(t, []int32{fakeToken(3, 0), fakeToken(3, 1), fakeToken(3, 2), fakeToken(3, 3)}, tokens)
	require.NoError(t, e.sched.CheckIdle())
}

// TestLadderPausesShadow: the ladder's first level pauses the shadow
// class. A free-tier queue climbs to it; a shadow request queued then is
// not admitted, neither while free requests wait nor once the engine is
// otherwise idle, as long as the level holds; when the level drops back
// to none it runs.
func TestLadderPausesShadow(t *testing.T) {
	t.Parallel()
	exec := newFakeExec(256, 16, 4096)
	exec.step = 50 * time.Millisecond
	clock := exec.clock.(*VirtualClock)
	cfg := DefaultConfig()
	cfg.MaxRunning = 1
	// Eight 4-token requests on one slot: the queue wait passes the high
	// mark early and holds for a hold (one level up), and the queue is
	// empty before a second hold of pressure.
	cfg.Ladder.QueueWaitHigh = 300 * time.Millisecond
	cfg.Ladder.QueueWaitLow = 100 * time.Millisecond
	cfg.Ladder.Hold = time.Second
	e, err := New(exec, clock, cfg, nil)
	require.NoError(t, err)
	ctx := t.Context()
	for i := range 8 {
		_, err := e.Submit(ctx, Request{ID: fmt.Sprint("f", i), Tenant: "flood", Priority: PriorityFree,
			Prompt: prompt(16, i*100), MaxTokens: 4, N: 1})
		require.NoError(t, err)
	}
	step := func() bool {
		t.Helper()
		ran, err := e.Step(ctx)
		require.NoError(t, err)
		return ran
	}
	for e.Stats().Degrade == DegradeNone {
		require.True(t, step(), "the flood ended before the ladder climbed")
	}
	require.Equal(t, DegradePauseBatch, e.Stats().Degrade)
	sh, err := e.Submit(ctx, Request{ID: "sh", Tenant: "mirror", Priority: PriorityShadow,
		Prompt: prompt(16, 5000), MaxTokens: 2, N: 1})
	require.NoError(t, err)

	pausedIdle := false
	for turn := 0; ; turn++ {
		require.Less(t, turn, 1000, "the shadow request never ran")
		ran := step()
		st := e.Stats()
		evs := drain(t, sh)
		if st.Degrade != DegradeNone {
			require.Empty(t, evs, "the shadow request ran at level %s", st.Degrade)
			require.Equal(t, 1, st.WaitingByPriority[PriorityShadow])
			if st.Degrade == DegradePauseBatch && st.Running == 0 {
				pausedIdle = true // nothing else waits or runs: only the pause holds it
			}
		} else if len(evs) > 0 {
			break
		}
		if !ran {
			clock.Advance(cfg.Ladder.Hold / 4) // idle: let the ladder's calm accrue
		}
	}
	require.True(t, pausedIdle, "never saw the engine idle at the first level with the shadow request queued")
	for step() {
	}
	_, _, _, err = Collect(ctx, sh)
	require.NoError(t, err)
	require.NoError(t, e.sched.CheckIdle())
}

// TestShadowWaitsBehindPausedClass: a waiting shadow request is admitted
// only when no other class has anything waiting, paused or not; shadow
// answers do not teach the tenant's output estimate.
func TestShadowWaitsBehindPausedClass(t *testing.T) {
	t.Parallel()
	pool, err := kvcache.NewPool(256, 16)
	require.NoError(t, err)
	s, err := NewScheduler(SchedulerConfig{MaxBatchTokens: 1024, MaxRunning: 16, ContextLength: 1024, DefaultExpectedOutput: 4},
		pool, nil)
	require.NoError(t, err)
	s.SetClassPaused(PriorityBatch, true)
	require.NoError(t, s.Add(Request{ID: "b", Tenant: "t", Priority: PriorityBatch, Prompt: prompt(8, 1), MaxTokens: 4, N: 1}))
	for i := range minSamples {
		require.NoError(t, s.Add(Request{ID: fmt.Sprint("s", i), Tenant: "t", Priority: PriorityShadow,
			Prompt: prompt(8, 100*(i+1)), MaxTokens: 40, N: 1}))
	}
	s.Step()
	require.Zero(t, s.NumRunning(), "the shadow requests wait behind the paused batch one")

	s.SetClassPaused(PriorityBatch, false)
	out := &Output{}
	for range 100 {
		plan := s.Step()
		out.Tokens = out.Tokens[:0]
		for i := range plan.Batch.Seqs {
			out.Tokens = append(out.Tokens, fakeToken(uint64(i), plan.Batch.Seqs[i].Generated))
		}
		s.Apply(plan, out, time.Time{})
	}
	require.NoError(t, s.CheckIdle())
	require.Equal(t, 4, s.est.expected("t", 1000), "the default still: shadow answers are not history")
}
