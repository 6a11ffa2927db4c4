package sim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
)

// specRun is the result of one simulated run.
type specRun struct {
	outputs [][][]int32 // per request, per choice
	stats   engine.Stats
	elapsed time.Duration
}

// runSpec submits requests prompts (of promptTokens tokens, n choices each)
// to an engine on the simulator with speculation as given, waits for all
// answers and stops the engine.
func runSpec(t *testing.T, cfg sim.Config, spec bool, requests, promptTokens, maxTokens, n int) specRun {
	t.Helper()
	start := time.Unix(0, 0)
	clock := engine.NewVirtualClock(start)
	exec, err := sim.New(cfg, clock)
	require.NoError(t, err)
	ecfg := engine.DefaultConfig()
	ecfg.ExpectedOutputTokens = 1 // admit optimistically, so sequences get preempted
	if spec {
		ecfg.Spec = engine.SpecConfig{Drafter: exec, MaxTokens: 6, MaxBatch: 1 << 20}
	}
	eng, err := engine.New(exec, clock, ecfg, nil)
	require.NoError(t, err)
	// Submit everything before the loop starts, so that every run sees
	// the same load.
	tok := exec.Tokenizer()
	streams := make([]*engine.Stream, requests)
	for i := range requests {
		prompt := tok.Encode(fmt.Sprintf("Request %d asks about the river and the market.", i))
		for len(prompt) < promptTokens {
			prompt = append(prompt, prompt...)
		}
		streams[i], err = eng.Submit(t.Context(), engine.Request{
			ID: fmt.Sprint(i), Tenant: "t", Prompt: prompt[:promptTokens], MaxTokens: maxTokens,
			N: n, Priority: engine.Priority(1 + i%(engine.NumPriorities-1)), Seed: uint64(1000 + i),
		})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	run := specRun{outputs: make([][][]int32, requests)}
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() {
			toks, _, _, err := engine.Collect(t.Context(), st)
			if err != nil {
				t.Error(err)
			}
			run.outputs[i] = toks
		})
	}
	wg.Wait()
	run.elapsed = clock.Now().Sub(start)
	cancel()
	require.NoError(t, <-done)
	run.stats = eng.Stats()
	return run
}

// TestSpeculativeSameTokens runs the same load with and without
// speculation, with memory tight enough to preempt (by swap and by
// recompute) sequences in the middle of speculating, and n = 2 forks
// sharing blocks: the tokens are the same, drafts were accepted and every
// block is back in the pool at the end.
func TestSpeculativeSameTokens(t *testing.T) {
	t.Parallel()
	for name, swap := range map[string]int64{"swap": 64 << 30, "recompute": 0} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := sim.DefaultConfig()
			var err error
			cfg.Model, err = sim.ModelByName("flagship") // 1,223 blocks on one H100
			require.NoError(t, err)
			cfg.HostSwapBytes = swap
			cfg.MeanOutputTokens = 0
			cfg.SpecAcceptance = 0.8
			plain := runSpec(t, cfg, false, 40, 1500, 600, 2)
			spec := runSpec(t, cfg, true, 40, 1500, 600, 2)
			require.Equal(t, plain.outputs, spec.outputs)
			st := spec.stats
			t.Logf("drafts %d, draft tokens %d, accepted %d, preemptions %d (swap %d)",
				st.SpecDrafts, st.SpecDraftTokens, st.SpecAcceptedTokens, st.Preemptions, st.PreemptionsSwap)
			require.NotZero(t, st.SpecAcceptedTokens)
			require.NotZero(t, st.Preemptions, "the load must preempt to test rollback under preemption")
			require.Zero(t, st.BlocksUsed, "blocks leaked")
			require.Equal(t, plain.stats.GeneratedTokens, st.GeneratedTokens)
			require.Zero(t, plain.stats.SpecDrafts)
		})
	}
}

// TestSpeculativeLowersLatency checks the simulator's model of
// speculation: at one stream, drafts accepted 80% of the time finish the
// same answer in less virtual time, even with a draft model costing a
// tenth of the target per token; and acceptance 0 only adds cost.
func TestSpeculativeLowersLatency(t *testing.T) {
	t.Parallel()
	cfg := sim.DefaultConfig()
	cfg.MeanOutputTokens = 0
	cfg.DraftCost = 0.1
	cfg.SpecAcceptance = 0.8
	plain := runSpec(t, cfg, false, 1, 200, 300, 1)
	spec := runSpec(t, cfg, true, 1, 200, 300, 1)
	require.Equal(t, plain.outputs, spec.outputs)
	ratio := plain.elapsed.Seconds() / spec.elapsed.Seconds()
	t.Logf("plain %v, speculative %v: %.2fx; acceptance %.2f", plain.elapsed, spec.elapsed, ratio,
		float64(spec.stats.SpecAcceptedTokens)/float64(spec.stats.SpecDraftTokens))
	require.Greater(t, ratio, 1.5)

	cfg.SpecAcceptance = 0
	bad := runSpec(t, cfg, true, 1, 200, 300, 1)
	require.Equal(t, plain.outputs, bad.outputs)
	require.Zero(t, bad.stats.SpecAcceptedTokens)
	require.GreaterOrEqual(t, bad.elapsed, plain.elapsed)
}
