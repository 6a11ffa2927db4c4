package cpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// kvBoundRun is one run of the KV-bound load on one cache type.
type kvBoundRun struct {
	blocks     int     // KV blocks the budget buys
	maxRunning int     // most sequences running in one step
	meanBatch  float64 // mean sequences per step
	tokPerSec  float64 // generated tokens over the wall time
	preempt    uint64  // preemptions
}

// kvBoundLoad runs reqs requests of prompt random tokens and gen greedy
// output tokens each, all submitted at once, through an engine (stepped on
// this goroutine) over an executor with a KV cache of kvBytes bytes of
// type typ and no swap space.
func kvBoundLoad(tb testing.TB, f *gguf.File, typ string, kvBytes int64, reqs, prompt, gen int) kvBoundRun {
	e, err := New(f, Config{Threads: 2, BlockSize: 16, KVCacheBytes: kvBytes, KVType: typ, NoSwap: true})
	require.NoError(tb, err)
	defer e.Close()
	ecfg := engine.DefaultConfig()
	ecfg.ExpectedOutputTokens = gen // admit a sequence only with room for its whole answer
	eng, err := engine.New(e, engine.RealClock{}, ecfg, nil)
	require.NoError(tb, err)
	streams := make([]*engine.Stream, reqs)
	for i := range streams {
		streams[i], err = eng.Submit(tb.Context(), engine.Request{ID: fmt.Sprint("r", i), Prompt: randomTokens(uint64(500+i), prompt, 1000),
			MaxTokens: gen, N: 1})
		require.NoError(tb, err)
	}
	var run kvBoundRun
	run.blocks = e.Info().NumBlocks
	steps, batched := 0, 0
	start := time.Now()
	for {
		ran, err := eng.Step(tb.Context())
		require.NoError(tb, err)
		if !ran {
			break
		}
		st := eng.Stats()
		run.maxRunning = max(run.maxRunning, st.Running)
		steps++
		batched += st.Running
	}
	wall := time.Since(start)
	st := eng.Stats()
	require.Equal(tb, uint64(reqs), st.Completed)
	for _, s := range streams {
		toks, fin, _, err := engine.Collect(tb.Context(), s)
		require.NoError(tb, err)
		require.Equal(tb, []engine.FinishReason{engine.FinishLength}, fin)
		require.Len(tb, toks[0], gen)
	}
	run.meanBatch = float64(batched) / float64(steps)
	run.tokPerSec = float64(st.GeneratedTokens) / wall.Seconds()
	run.preempt = st.Preemptions
	return run
}

// kvBoundLoads are the loads of BenchmarkKVBoundServing: requests of
// prompt and gen tokens, all submitted at once, into a KV cache of kvBytes
// that holds a few sequences at f16.
var kvBoundLoads = []struct {
	name              string
	model             synth.Model
	kvBytes           int64
	reqs, prompt, gen int
}{
	// A model whose weights (3 MB) stay in cache: decode is compute
	// bound, so a larger batch buys little. 8 MiB holds 6 sequences of
	// 320 tokens at f16.
	{"compute-bound", synth.Model{Arch: "llama", Dim: 256, Layers: 4, Heads: 4, KVHeads: 4, FFN: 512, Vocab: 1000,
		ContextLength: 512, Type: gguf.TypeQ8_0, Seed: 3}, 8 << 20, 24, 128, 192},
	// The "small" shape's layers (dim 768, 12 layers, 12 heads over 4 KV
	// heads of 64, FFN 2048) with a 4096-token vocabulary: 80 MB of Q8_0
	// weights, read from memory every step, so a decode step of a few
	// sequences costs about what one costs. 13 MiB holds 2 sequences of
	// 512 tokens at f16.
	{"memory-bound", synth.Model{Arch: "llama", Dim: 768, Layers: 12, Heads: 12, KVHeads: 4, FFN: 2048, Vocab: 4096,
		ContextLength: 512, Type: gguf.TypeQ8_0, Seed: 3}, 13 << 20, 12, 128, 384},
}

// BenchmarkKVBoundServing measures what a quantized KV cache buys at a
// KV-bound load (kvBoundLoads): the requests all at once into a cache of a
// few sequences at f16, two threads. Each iteration is one round that runs
// f16, q8_0 and q4_0 in turn (A/B interleaved, so drift in the machine's
// speed hits every type alike); it reports per type the KV blocks, the
// most sequences running at once, the mean batch and the tokens/s (median
// over the rounds), and the per-round tokens/s ratio against f16 (median,
// with the range as spread). Run with -benchtime=Nx for N rounds.
func BenchmarkKVBoundServing(b *testing.B) {
	for _, load := range kvBoundLoads {
		b.Run("load="+load.name, func(b *testing.B) {
			f := openModel(b, load.model, nil)
			types := []string{"f16", "q8_0", "q4_0"}
			runs := map[string][]kvBoundRun{}
			for b.Loop() {
				for _, typ := range types {
					runs[typ] = append(runs[typ], kvBoundLoad(b, f, typ, load.kvBytes, load.reqs, load.prompt, load.gen))
				}
			}
			var sb strings.Builder
			sb.WriteString("| KV type | blocks | most running | mean batch | preemptions | tokens/s (median, range) | vs f16 (median, range) |\n")
			sb.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
			for _, typ := range types {
				rs := runs[typ]
				var tps, ratio []float64
				maxRun, batch, pre := 0, 0.0, uint64(0)
				for i, r := range rs {
					tps = append(tps, r.tokPerSec)
					ratio = append(ratio, r.tokPerSec/runs["f16"][i].tokPerSec)
					maxRun = max(maxRun, r.maxRunning)
					batch += r.meanBatch / float64(len(rs))
					pre += r.preempt
				}
				fmt.Fprintf(&sb, "| %s | %d | %d | %.1f | %d | %.0f (%.0f–%.0f) | %.2fx (%.2f–%.2f) |\n", typ, rs[0].blocks, maxRun, batch, pre,
					median(tps), slices.Min(tps), slices.Max(tps), median(ratio), slices.Min(ratio), slices.Max(ratio))
				b.ReportMetric(float64(rs[0].blocks), typ+"-blocks")
				b.ReportMetric(float64(maxRun), typ+"-max-running")
				b.ReportMetric(median(tps), typ+"-tokens/s")
			}
			b.Logf("%s, %d rounds:\n%s", load.name, len(runs["f16"]), sb.String())
		})
	}
}

// median returns the median of x (the mean of the middle two for an even
// count); x is not changed.
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
