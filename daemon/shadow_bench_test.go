package daemon

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/store"
)

// TestShadowTTFTFigures measures what shadow traffic costs the requests it
// copies, on the simulator at its real speed: the primary's TTFT p50 with
// the alias's shadow at 100% against 0%, at the same load (8 clients
// streaming 32-token answers to 1,500-token prompts from the 33B profile, each version on its
// own simulated H100), the two arms alternating round by round so
// the VM's drift hits both. It prints each pair's ratio and their median
// and range, for BENCHMARKS.md; it asserts nothing about speed. It runs
// only with LLMD_SHADOW_BENCH=1 (about a minute).
func TestShadowTTFTFigures(t *testing.T) {
	if os.Getenv("LLMD_SHADOW_BENCH") == "" {
		t.Skip("set LLMD_SHADOW_BENCH=1 to measure the primary's TTFT with and without shadow traffic")
	}
	cfg := withModelsConfig(t, `
models:
  - {id: sim/v1, source: "sim:mid"}
  - {id: sim/v2, source: "sim:mid"}
aliases:
  m: {version: sim/v1}
`)
	cfg.StepTimeScale = 1 // the simulator at real speed
	d, err := Open(cfg, nil)
	require.NoError(t, err)
	c := fleetClient(t, startServer(t, d))
	ctx := t.Context()
	const clients, perClient, pairs = 8, 8, 6
	// Prompts of about 1,500 tokens, distinct from their first word (no
	// prefix cache hits): TTFT is prefill, tens to hundreds of
	// milliseconds, as on a real GPU.
	filler := strings.Repeat("the quick brown fox jumps over the lazy dog ", 170)
	round := func() time.Duration {
		var mu sync.Mutex
		var ttfts []time.Duration
		var wg sync.WaitGroup
		for k := range clients {
			wg.Go(func() {
				for i := range perClient {
					max := 32
					start := time.Now()
					var first time.Duration
					err := c.ChatCompletionStream(ctx, api.ChatCompletionRequest{Model: "m", MaxTokens: &max,
						Messages: []api.Message{{Role: "user", Content: api.Content(fmt.Sprintf("client %d question %d %s", k, i, filler))}}},
						func(ch api.ChatCompletionChunk) error {
							if first == 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != nil && *ch.Choices[0].Delta.Content != "" {
								first = time.Since(start)
							}
							return nil
						})
					require.NoError(t, err)
					mu.Lock()
					ttfts = append(ttfts, first)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(ttfts)
		return ttfts[len(ttfts)/2]
	}
	cat := d.config.cat
	var ratios []float64
	for p := range pairs {
		require.NoError(t, cat.ClearShadow("m"))
		off := round()
		require.NoError(t, cat.SetShadow("m", "sim/v2", 100))
		on := round()
		ratios = append(ratios, float64(on)/float64(off))
		t.Logf("pair %d: TTFT p50 shadow off %v, on %v, on/off %.3f", p+1, off, on, ratios[p])
	}
	rep, err := d.deps.Store.ShadowReport(ctx, store.ShadowQuery{Alias: "m"})
	require.NoError(t, err)
	require.Len(t, rep, 1)
	t.Logf("shadow runs recorded: %d (%d errors)", rep[0].Runs, rep[0].ShadowErrors)
	slices.Sort(ratios)
	t.Logf("primary TTFT p50, shadow 100%% / 0%%: median %.3f (range %.3f-%.3f) over %d pairs",
		ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], len(ratios))
}
