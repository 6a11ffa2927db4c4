package sim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
)

// BenchmarkSharedSystemPrompt runs a shared-system-prompt workload on the
// simulated executor (sim/small on one H100, virtual clock) with the prefix
// cache on and off: 256 requests arrive at once, each a 1,024-token system
// prompt shared by all plus a 64-token question of its own, and 64 output
// tokens. It reports the simulated TTFT p50 and output throughput; ns/op is
// only the host time to simulate the workload.
func BenchmarkSharedSystemPrompt(b *testing.B) {
	for _, cache := range []bool{true, false} {
		b.Run(fmt.Sprintf("prefix-cache=%v", cache), func(b *testing.B) {
			var ttft time.Duration
			var tps float64
			for b.Loop() {
				ttft, tps = runSharedPrompt(b, !cache)
			}
			b.ReportMetric(float64(ttft.Microseconds())/1000, "ttft-p50-ms")
			b.ReportMetric(tps, "tokens/s")
		})
	}
}

func runSharedPrompt(b *testing.B, disableCache bool) (time.Duration, float64) {
	const requests, systemTokens, questionTokens, outTokens = 256, 1024, 64, 64
	start := time.Unix(0, 0)
	clock := engine.NewVirtualClock(start)
	cfg := sim.DefaultConfig()
	cfg.MeanOutputTokens = 0 // always run to max_tokens
	exec, err := sim.New(cfg, clock)
	if err != nil {
		b.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.DisablePrefixCache = disableCache
	eng, err := engine.New(exec, clock, ecfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	tok := exec.Tokenizer()
	system := tok.Encode(strings.Repeat("You are a careful assistant who answers briefly. ", 200))[:systemTokens]

	streams := make([]*engine.Stream, requests)
	for i := range streams {
		q := tok.Encode(strings.Repeat(fmt.Sprintf("question%d about topic%d ", i, i*7), 40))[:questionTokens]
		p := append(slices.Clone(system), q...)
		streams[i], err = eng.Submit(context.Background(), engine.Request{
			ID: fmt.Sprint(i), Prompt: p, MaxTokens: outTokens, N: 1, Seed: uint64(i),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()

	ttfts := make([]time.Duration, requests)
	var last time.Time
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() {
			first := true
			for {
				ev, err := st.Next(ctx)
				if err != nil {
					return
				}
				if ev.Kind == engine.EventToken && first {
					ttfts[i] = ev.Time.Sub(start)
					first = false
				}
				if ev.Last() {
					mu.Lock()
					if ev.Time.After(last) {
						last = ev.Time
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(ttfts)
	elapsed := last.Sub(start).Seconds()
	return ttfts[len(ttfts)/2], float64(requests*outTokens) / elapsed
}
