package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/internal/cpushapes"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// BenchmarkShapes measures, for each shape and weight type, prompt
// processing (one 512-token prefill) and generation (decode steps of 1, 8
// and 32 concurrent sequences at about 128 tokens of context), on the
// executor alone, every core the machine has. Run it with
// `go test -run '^$' -bench Shapes -benchtime 2s ./engine/cpu/`.
func BenchmarkShapes(b *testing.B) {
	for _, sh := range cpushapes.Shapes {
		for _, typ := range cpushapes.Types {
			m := sh.Model
			m.Type, m.Seed = typ, 1
			// Written once per shape and type, closed when the whole
			// benchmark ends (the outer b owns it).
			var f *gguf.File
			outer := b
			open := func(b *testing.B) *gguf.File {
				if f == nil {
					f = openModel(outer, m, nil)
				}
				return f
			}
			benchExecutor(b, fmt.Sprintf("model=%s/type=%s", sh.Name, typ), open, m.Vocab)
		}
	}
}

// benchExecutor measures one model file on the executor alone: one
// 512-token prefill, and decode steps of 1, 8 and 32 sequences.
func benchExecutor(b *testing.B, name string, open func(*testing.B) *gguf.File, vocab int) {
	b.Run(name+"/prompt=512", func(b *testing.B) {
		const n = 512
		e := newExec(b, open(b), Config{BlockSize: 16, KVBlocks: n / 16, KVType: "f16", NoSwap: true, Threads: benchThreads(), F16MatMul: benchF16MatMul()})
		blocks := seqBlocks(e, 0, 1)
		toks := randomTokens(1, n, vocab)
		for b.Loop() {
			batch := engine.Batch{Seqs: []engine.SeqInput{{SeqID: 1, Tokens: toks, Pos: 0, Context: n, Blocks: blocks, Sample: true, History: toks}}}
			_, err := e.Forward(b.Context(), &batch)
			require.NoError(b, err)
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
	for _, seqs := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("%s/gen/seqs=%d", name, seqs), func(b *testing.B) {
			benchGen(b, open(b), vocab, seqs, 64, false)
		})
	}
}

// benchGen measures decode steps of seqs sequences from a prompt of
// promptLen tokens through the next 128 positions (then again from the
// prompt's end), in tokens per second. Greedy, every sequence fed the
// first one's token, unless served: then as llmd serves `llmctl bench`'s
// requests, each sequence sampled at temperature 1 with its own seed,
// with the sampled token's log-probability, and fed its own token.
func benchGen(b *testing.B, f *gguf.File, vocab, seqs, promptLen int, served bool) {
	const window = 128
	e := newExec(b, f, Config{BlockSize: 16, KVBlocks: seqs * (promptLen + window) / 16, KVType: "f16", NoSwap: true, Threads: benchThreads(), F16MatMul: benchF16MatMul()})
	var batch engine.Batch
	ts := make([]*testSeq, seqs)
	for i := range ts {
		ts[i] = newTestSeq(uint64(i), randomTokens(uint64(i), promptLen, vocab), seqBlocks(e, i, seqs))
		batch.Seqs = append(batch.Seqs, ts[i].next(promptLen, false))
	}
	_, err := e.Forward(b.Context(), &batch)
	require.NoError(b, err)
	// Greedy, every sequence reads toks[:1]; served, sequence i toks[i].
	toks := make([]int32, seqs)
	for i := range toks {
		toks[i] = 1
	}
	steps := 0
	pool0 := e.pool.Stats()
	for b.Loop() {
		pos := promptLen + steps%window
		for i := range batch.Seqs {
			tok := toks[:1]
			if served {
				tok = toks[i : i+1]
			}
			in := engine.SeqInput{SeqID: uint64(i), Tokens: tok, Pos: pos, Context: pos + 1, Blocks: ts[i].blocks, Sample: true}
			if served {
				in.Sampling.Temperature, in.Seed, in.Generated, in.Logprobs = 1, uint64(i), steps, true
			}
			batch.Seqs[i] = in
		}
		out, err := e.Forward(b.Context(), &batch)
		if err != nil {
			b.Fatal(err)
		}
		if served {
			copy(toks, out.Tokens)
		} else {
			toks[0] = out.Tokens[0]
		}
		steps++
	}
	b.ReportMetric(float64(seqs*steps)/b.Elapsed().Seconds(), "tokens/s")
	reportPool(b, e.pool.Stats(), pool0, uint64(steps))
}

// benchThreads is the executor's threads in the benchmarks:
// LLMD_BENCH_THREADS, else 0 (the executor's default, every CPU), so that
// a comparison with llama.cpp's -t N uses as many on both sides.
func benchThreads() int {
	n, _ := strconv.Atoi(os.Getenv("LLMD_BENCH_THREADS"))
	return max(n, 0)
}

// benchF16MatMul is the executor's Config.F16MatMul in the benchmarks:
// LLMD_BENCH_F16_MATMUL (empty: the default, f32).
func benchF16MatMul() string { return os.Getenv("LLMD_BENCH_F16_MATMUL") }

// BenchmarkFile is BenchmarkShapes for a model file of one's own:
// LLMD_BENCH_GGUF=path (for example one `llmctl model init` wrote, which
// llama.cpp's llama-bench reads too, for a comparison in the same run).
//
// It also measures 8 sequences decoding as llmd serves the 8-stream load of
// make bench-peer (gen-served: 128-token prompts, so 129 to 256 tokens of
// context, sampled at temperature 1 with log-probabilities): the step that
// the load's inter-token latency through HTTP is set beside.
func BenchmarkFile(b *testing.B) {
	f, spec, name := benchFile(b)
	benchExecutor(b, name, func(*testing.B) *gguf.File { return f }, spec.Vocab)
	b.Run(name+"/gen-served/seqs=8", func(b *testing.B) {
		benchGen(b, f, spec.Vocab, 8, 128, true)
	})
}

// BenchmarkFileWeights measures one token's matrix products alone over
// LLMD_BENCH_GGUF's weights, called as the forward calls them: per layer
// Q, K and V (or the fused QKV) in one MatMuls, O, gate and up (or the
// fused up) in one MatMuls, down (a mixture's experts are left out); then
// the output head, on the executor's pool, the weights coming from memory
// as in a decode step. It reports the pass's weight bytes over its time
// (GB/s; set it beside BenchmarkMemoryRead's) and, per call, its time
// (qkv-us, ...) and its share of the pass (qkv-%): what a one-stream decode
// spends in its matrices, and where. Run it with `LLMD_BENCH_GGUF=FILE go
// test -run '^$' -bench FileWeights -benchtime 100x -cpu 2 ./engine/cpu/`.
func BenchmarkFileWeights(b *testing.B) {
	f, _, name := benchFile(b)
	b.Run(name, func(b *testing.B) {
		e := newExec(b, f, Config{BlockSize: 16, KVBlocks: 16, NoSwap: true, Threads: benchThreads(), F16MatMul: benchF16MatMul()})
		type call struct {
			kind int
			ws   []Weight
		}
		kinds := []string{"qkv", "o", "gateup", "down", "output"}
		var calls []call
		add := func(kind int, ws ...Weight) {
			var c call
			for _, w := range ws {
				if w.Rows > 0 {
					c.ws = append(c.ws, w)
				}
			}
			if len(c.ws) > 0 {
				c.kind = kind
				calls = append(calls, c)
			}
		}
		for i := range e.w.layers {
			l := &e.w.layers[i]
			add(0, l.q, l.k, l.v, l.qkv)
			add(1, l.o)
			add(2, l.gate, l.up)
			add(3, l.down)
		}
		add(4, e.w.output)
		cols, bytes := 0, 0
		for _, c := range calls {
			for _, w := range c.ws {
				cols, bytes = max(cols, w.Cols), bytes+len(w.Data)
			}
		}
		x := alignedMake[float32](cols)
		for i := range x {
			x[i] = float32(i%7-3) * 0.01
		}
		outs := make([][]MatOut, len(calls))
		for i, c := range calls {
			for _, w := range c.ws {
				outs[i] = append(outs[i], MatOut{Out: alignedMake[float32](w.Rows), W: w})
			}
		}
		spent := make([]time.Duration, len(kinds))
		count := make([]int, len(kinds))
		for b.Loop() {
			for i, c := range calls {
				t0 := time.Now()
				MatMuls(e.pool, x[:c.ws[0].Cols], 1, outs[i]...)
				spent[c.kind] += time.Since(t0)
				count[c.kind]++
			}
		}
		b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		var all time.Duration
		for _, d := range spent {
			all += d
		}
		for k, n := range count {
			if n > 0 {
				b.ReportMetric(float64(spent[k].Nanoseconds())/1e3/float64(n), kinds[k]+"-us")
				b.ReportMetric(100*spent[k].Seconds()/all.Seconds(), kinds[k]+"-%")
			}
		}
	})
}

// BenchmarkFileLoad measures building an executor for LLMD_BENCH_GGUF's
// file (already in the page cache after the first round): wrapping and
// repacking its weights, and allocating its cache. Run it with
// `LLMD_BENCH_GGUF=FILE go test -run '^$' -bench FileLoad ./engine/cpu/`.
func BenchmarkFileLoad(b *testing.B) {
	f, _, name := benchFile(b)
	b.Run(name, func(b *testing.B) {
		for b.Loop() {
			e, err := New(f, Config{BlockSize: 16, KVBlocks: 64, NoSwap: true, Threads: benchThreads(), F16MatMul: benchF16MatMul()})
			require.NoError(b, err)
			e.Close()
		}
	})
}

// benchFile opens the file LLMD_BENCH_GGUF names (skipping b without it)
// for the benchmark's duration, with its spec and its benchmark name.
func benchFile(b *testing.B) (*gguf.File, model.Spec, string) {
	path := os.Getenv("LLMD_BENCH_GGUF")
	if path == "" {
		b.Skip("set LLMD_BENCH_GGUF to a GGUF file to measure it")
	}
	f, err := gguf.Open(path)
	require.NoError(b, err)
	b.Cleanup(func() { _ = f.Close() })
	spec, err := model.SpecFromFile(f)
	require.NoError(b, err)
	return f, spec, "file=" + filepath.Base(path)
}
