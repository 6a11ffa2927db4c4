package daemon

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// TestUpstreamRelayFigures measures what llmd in front of an engine adds:
// TTFT p50 and ITL p50 of streams through llmd (an upstream model) minus
// the same streams sent to the engine directly, at 1 and 64 concurrent
// streams, the two arms alternating round by round. The engine is an llmd
// serving the simulated 8B profile at real speed (it speaks vLLM's routes
// and metrics). It prints the figures for BENCHMARKS.md and asserts
// nothing about speed; it runs only with LLMD_UPSTREAM_BENCH=1.
func TestUpstreamRelayFigures(t *testing.T) {
	if os.Getenv("LLMD_UPSTREAM_BENCH") == "" {
		t.Skip("set LLMD_UPSTREAM_BENCH=1 to measure the upstream relay's added latency")
	}
	// One client machine opens every stream: no per-client connection cap
	// on either server.
	ecfg := testConfig()
	ecfg.Models = []string{"small"}
	ecfg.MaxConnections, ecfg.MaxClientConnections = 0, 0
	engine, err := Open(ecfg, nil)
	require.NoError(t, err)
	engineBase := startServer(t, engine)
	// LLMD_UPSTREAM_MAX_WAITING sets the engine-queue bound (default 8).
	maxWaiting, _ := strconv.Atoi(os.Getenv("LLMD_UPSTREAM_MAX_WAITING"))
	fcfg := testConfig()
	fcfg.Models = nil
	fcfg.DataDir = t.TempDir()
	fcfg.MaxConnections, fcfg.MaxClientConnections = 0, 0
	fcfg.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: []string{engineBase}, MaxWaiting: maxWaiting, MaxInflight: 2048}}
	fd, err := Open(fcfg, nil)
	require.NoError(t, err)
	front := startServer(t, fd)
	direct := fleetClient(t, engineBase)
	via := fleetClient(t, front)
	ctx := t.Context()
	round := func(c *api.Client, model string, streams, each int) (ttft, itl time.Duration) {
		var mu sync.Mutex
		var ttfts, itls []time.Duration
		var wg sync.WaitGroup
		for k := range streams {
			wg.Go(func() {
				for i := range each {
					max := 64
					start := time.Now()
					var last time.Time
					var first time.Duration
					err := c.ChatCompletionStream(ctx, api.ChatCompletionRequest{Model: model, MaxTokens: &max,
						Controls: api.Controls{IgnoreEOS: true},
						Messages: []api.Message{{Role: "user", Content: api.Content(fmt.Sprintf("stream %d request %d", k, i))}}},
						func(ch api.ChatCompletionChunk) error {
							if len(ch.Choices) == 0 || ch.Choices[0].Delta.Content == nil || *ch.Choices[0].Delta.Content == "" {
								return nil
							}
							now := time.Now()
							mu.Lock()
							if first == 0 {
								first = now.Sub(start)
								ttfts = append(ttfts, first)
							} else {
								itls = append(itls, now.Sub(last))
							}
							mu.Unlock()
							last = now
							return nil
						})
					require.NoError(t, err)
				}
			})
		}
		wg.Wait()
		slices.Sort(ttfts)
		slices.Sort(itls)
		return ttfts[len(ttfts)/2], itls[len(itls)/2]
	}
	// LLMD_UPSTREAM_STREAMS lists the concurrency levels (default 1,64).
	levels := []int{1, 64}
	if v := os.Getenv("LLMD_UPSTREAM_STREAMS"); v != "" {
		levels = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "LLMD_UPSTREAM_STREAMS")
			levels = append(levels, n)
		}
	}
	for _, streams := range levels {
		each := 8
		if streams > 1 {
			each = 2
		}
		if streams > 256 {
			each = 1
		}
		var dTTFT, dITL []float64
		for p := range 5 {
			t1, i1 := round(direct, "sim/small", streams, each)
			t2, i2 := round(via, "qwen", streams, each)
			dTTFT = append(dTTFT, float64(t2-t1)/float64(time.Millisecond))
			dITL = append(dITL, float64(i2-i1)/float64(time.Millisecond))
			t.Logf("%d streams, pair %d: TTFT p50 direct %v via llmd %v; ITL p50 direct %v via llmd %v", streams, p+1, t1, t2, i1, i2)
		}
		slices.Sort(dTTFT)
		slices.Sort(dITL)
		t.Logf("%d streams: added TTFT p50 median %.3f ms (%.3f to %.3f), added ITL p50 median %.3f ms (%.3f to %.3f)",
			streams, dTTFT[2], dTTFT[0], dTTFT[4], dITL[2], dITL[0], dITL[4])
	}
}
