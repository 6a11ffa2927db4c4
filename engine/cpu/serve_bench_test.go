package cpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/gguf"
)

// BenchmarkFileServe measures the engine in process on LLMD_BENCH_GGUF:
// the scheduler, the executor and sampling, with no HTTP. Each iteration
// submits serveStreams requests of servePrompt random prompt tokens and
// serveOutput output tokens at once (as `llmctl bench --concurrency 8`
// does through HTTP) and reads their streams on one goroutine each, as the
// server's handlers do. It reports:
//
//   - decode-tokens/s: the tokens delivered after the last request's first
//     token over the time from then to the last token, the figure to set
//     beside BenchmarkFile's gen/seqs=8 (decode steps only);
//   - tpot-tokens/s: serveStreams over the mean time per output token
//     after the first (llmctl bench's TPOT), the same figure as the HTTP
//     report gives;
//   - itl-tokens/s: serveStreams over the median gap between two tokens
//     of a request (llmctl bench's ITL p50): the typical decode step;
//   - tokens/s: every output token over the whole iteration, prefills
//     included;
//   - runs/step, caller-parks/step and worker-parks/step: the pool's
//     barriers per engine step and how often they were waited for parked.
//
// The sampling is the HTTP default (temperature 1, top-p 1) with the
// sampled token's log-probability (llmctl bench --token-basis logprobs);
// sampling=greedy runs it without either. exec-http-sampling/seqs=8 is
// BenchmarkFile's gen/seqs=8 decode step with that sampling.
//
//	LLMD_BENCH_GGUF=FILE LLMD_BENCH_THREADS=2 go test -run '^$' -bench '^BenchmarkFileServe$' -benchtime 2x ./engine/cpu/
func BenchmarkFileServe(b *testing.B) {
	f, spec, name := benchFile(b)
	for _, mode := range []string{"http", "greedy"} {
		b.Run(fmt.Sprintf("%s/sampling=%s", name, mode), func(b *testing.B) {
			benchServe(b, f, spec.Vocab, mode == "http")
		})
	}
	b.Run(name+"/exec-http-sampling/seqs=8", func(b *testing.B) {
		benchGen(b, f, spec.Vocab, serveStreams, 64, true)
	})
}

const (
	serveStreams = 8
	servePrompt  = 128
	serveOutput  = 128
)

func benchServe(b *testing.B, f *gguf.File, vocab int, httpSampling bool) {
	exec := newExec(b, f, Config{KVType: "f16", NoSwap: true, Threads: benchThreads()})
	eng, err := engine.New(exec, engine.RealClock{}, engine.DefaultConfig(), nil)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	var loop sync.WaitGroup
	loop.Go(func() { _ = eng.Run(ctx) })
	b.Cleanup(func() { cancel(); loop.Wait() })

	var decodeTokens, allTokens int
	var decodeTime, tpotSum time.Duration
	var tpotN int
	var gaps []time.Duration
	pool0, steps0 := exec.pool.Stats(), eng.Stats().Steps
	round := 0
	for b.Loop() {
		res := serveRound(b, eng, vocab, round, httpSampling)
		round++
		lastFirst, end := res[0].first, res[0].last
		for _, r := range res {
			lastFirst = later(lastFirst, r.first)
			end = later(end, r.last)
		}
		for _, r := range res {
			allTokens += len(r.times)
			for _, t := range r.times {
				if t.After(lastFirst) {
					decodeTokens++
				}
			}
			for j := 1; j < len(r.times); j++ {
				gaps = append(gaps, r.times[j].Sub(r.times[j-1]))
			}
			if len(r.times) > 1 {
				tpotSum += r.last.Sub(r.first) / time.Duration(len(r.times)-1)
				tpotN++
			}
		}
		decodeTime += end.Sub(lastFirst)
	}
	b.ReportMetric(float64(allTokens)/b.Elapsed().Seconds(), "tokens/s")
	reportPool(b, exec.pool.Stats(), pool0, eng.Stats().Steps-steps0)
	if decodeTime > 0 {
		b.ReportMetric(float64(decodeTokens)/decodeTime.Seconds(), "decode-tokens/s")
	}
	if tpotN > 0 {
		b.ReportMetric(serveStreams/(tpotSum/time.Duration(tpotN)).Seconds(), "tpot-tokens/s")
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		b.ReportMetric(serveStreams/gaps[len(gaps)/2].Seconds(), "itl-tokens/s")
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// serveResult is one request's token arrival times, as its reader saw them.
type serveResult struct {
	times       []time.Time
	first, last time.Time
}

// serveRound submits serveStreams requests at once and reads them to the
// end, each on its own goroutine.
func serveRound(b *testing.B, eng *engine.Engine, vocab, round int, httpSampling bool) []serveResult {
	res := make([]serveResult, serveStreams)
	errs := make([]error, serveStreams)
	var wg sync.WaitGroup
	for i := range serveStreams {
		seed := uint64(round*serveStreams + i + 1)
		req := engine.Request{
			ID: fmt.Sprintf("r%d", seed), Tenant: "bench", Prompt: randomTokens(seed, servePrompt, vocab),
			MaxTokens: serveOutput, N: 1, Priority: engine.PriorityPaid, Seed: seed, IgnoreEOS: true,
		}
		if httpSampling {
			req.Sampling = engine.SamplingParams{Temperature: 1, TopP: 1}
			req.Logprobs = true
		}
		st, err := eng.Submit(b.Context(), req)
		require.NoError(b, err)
		wg.Go(func() {
			r := &res[i]
			r.times = make([]time.Time, 0, serveOutput)
			for {
				ev, err := st.Next(b.Context())
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					errs[i] = err
					return
				}
				if ev.Kind == engine.EventToken {
					r.times = append(r.times, time.Now())
				}
				if ev.Err != nil {
					errs[i] = ev.Err
				}
			}
			if len(r.times) > 0 {
				r.first, r.last = r.times[0], r.times[len(r.times)-1]
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(b, err, "request %d", i)
		require.Len(b, res[i].times, serveOutput, "request %d", i)
	}
	return res
}

// reportPool reports the pool's barriers (Runs) and parks per engine
// step.
func reportPool(b *testing.B, now, before PoolStats, steps uint64) {
	if steps == 0 {
		return
	}
	per := func(n, m uint64) float64 { return float64(n-m) / float64(steps) }
	b.ReportMetric(per(now.Runs, before.Runs), "runs/step")
	b.ReportMetric(per(now.CallerParks, before.CallerParks), "caller-parks/step")
	b.ReportMetric(per(now.WorkerParks, before.WorkerParks), "worker-parks/step")
}
