package sim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/stretchr/testify/require"
)

// TestEngineOnSim drives a real engine with the simulated executor on a
// virtual clock, with memory tight enough that the scheduler preempts, and
// checks every answer is exactly the seeded placeholder text, however its
// sequence was preempted (swapped or recomputed).
func TestEngineOnSim(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		swapBytes int64
		mean      int
	}{
		"swap":              {swapBytes: 64 << 30},
		"recompute":         {swapBytes: 0},
		"natural lengths":   {swapBytes: 64 << 30, mean: 150},
		"recompute natural": {swapBytes: 0, mean: 150},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := sim.DefaultConfig()
			var err error
			cfg.Model, err = sim.ModelByName("flagship") // 1,223 blocks on one H100
			require.NoError(t, err)
			cfg.HostSwapBytes = tc.swapBytes
			cfg.MeanOutputTokens = tc.mean
			start := time.Unix(0, 0)
			clock := engine.NewVirtualClock(start)
			exec, err := sim.New(cfg, clock)
			require.NoError(t, err)
			ecfg := engine.DefaultConfig()
			ecfg.ExpectedOutputTokens = 1 // admit optimistically, so sequences get preempted
			eng, err := engine.New(exec, clock, ecfg, nil)
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- eng.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()

			const requests, promptTokens, maxTokens = 40, 1500, 600
			tok := exec.Tokenizer()
			var wg sync.WaitGroup
			outputs := make([][]int32, requests)
			finishes := make([]engine.FinishReason, requests)
			for i := range requests {
				wg.Go(func() {
					prompt := tok.Encode(fmt.Sprintf("Request %d asks about the river and the market.", i))
					for len(prompt) < promptTokens {
						prompt = append(prompt, prompt...)
					}
					st, err := eng.Submit(t.Context(), engine.Request{
						ID: fmt.Sprint(i), Tenant: "t", Prompt: prompt[:promptTokens], MaxTokens: maxTokens,
						N: 1, Priority: engine.Priority(i % engine.NumPriorities), Seed: uint64(1000 + i),
					})
					if err != nil {
						t.Error(err)
						return
					}
					for {
						ev, err := st.Next(t.Context())
						if errors.Is(err, io.EOF) {
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						switch {
						case ev.Kind == engine.EventToken:
							outputs[i] = append(outputs[i], ev.Token)
						case ev.Kind == engine.EventFinish && ev.Index >= 0:
							finishes[i] = ev.Finish
							if ev.Err != nil {
								t.Error(ev.Err)
							}
						}
					}
				})
			}
			wg.Wait()
			stats := eng.Stats()
			t.Logf("preemptions: %d (%d swapped), virtual time %v", stats.Preemptions, stats.PreemptionsSwap, clock.Now().Sub(start))
			if tc.swapBytes == 0 {
				require.Zero(t, stats.PreemptionsSwap)
			}
			require.Greater(t, clock.Now(), start)

			for i, out := range outputs {
				seed := uint64(1000 + i)
				want := maxTokens
				if n, ok := exec.NaturalLength(seed); ok && n < maxTokens {
					want = n
				}
				// The EOS token itself is not delivered.
				require.Len(t, out, want, "request %d", i)
				for j, id := range out {
					require.Equal(t, exec.TokenAt(seed, j), id, "request %d token %d", i, j)
				}
				if want == maxTokens {
					require.Equal(t, engine.FinishLength, finishes[i])
				} else {
					require.Equal(t, engine.FinishStop, finishes[i])
				}
			}
		})
	}
}
