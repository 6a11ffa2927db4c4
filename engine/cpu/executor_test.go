package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// testSeq is a sequence driven by hand: its tokens (prompt, then the
// tokens it generated), its block table, and how many tokens have K/V in
// the cache.
type testSeq struct {
	id     uint64
	toks   []int32
	blocks []int32
	done   int
	prompt int
	gen    []int32
	seed   uint64
	params engine.SamplingParams // zero: greedy
}

func newTestSeq(id uint64, prompt, blocks []int32) *testSeq {
	return &testSeq{id: id, toks: slices.Clone(prompt), blocks: blocks, prompt: len(prompt)}
}

// next returns the input that processes the next n tokens (fewer if fewer
// are pending) and counts them as done.
func (s *testSeq) next(n int, sample bool) engine.SeqInput {
	n = min(n, len(s.toks)-s.done)
	in := engine.SeqInput{
		SeqID: s.id, Tokens: s.toks[s.done : s.done+n], Pos: s.done, Context: s.done + n,
		Blocks: s.blocks, Sample: sample, Generated: len(s.gen), History: s.toks[:s.done+n],
		Seed: s.seed, Sampling: s.params,
	}
	s.done += n
	return in
}

// accept appends a generated token.
func (s *testSeq) accept(tok int32) {
	s.gen = append(s.gen, tok)
	s.toks = append(s.toks, tok)
}

// seqBlocks returns sequence i's share of the cache when it is split
// evenly between n sequences: contiguous block ids.
func seqBlocks(e *Executor, i, n int) []int32 {
	per := e.info.NumBlocks / n
	out := make([]int32, per)
	for j := range out {
		out[j] = int32(i*per + j)
	}
	return out
}

// scatteredBlocks returns n distinct block ids in a random order.
func scatteredBlocks(e *Executor, n int, seed uint64) []int32 {
	perm := rand.New(rand.NewPCG(seed, 2)).Perm(e.info.NumBlocks)
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(perm[i])
	}
	return out
}

// runSeqs runs seqs together until each has generated gen tokens: every
// step carries every unfinished sequence, prefilling at most chunk tokens
// of each, then decoding one token, sampled with the sequence's
// parameters (greedy by default). It returns each sequence's logits of
// every sampled step.
func runSeqs(t testing.TB, e *Executor, seqs []*testSeq, chunk, gen int) [][][]float32 {
	t.Helper()
	logits := make([][][]float32, len(seqs))
	for {
		var b engine.Batch
		var idx []int
		for i, s := range seqs {
			if len(s.gen) >= gen {
				continue
			}
			n := min(chunk, len(s.toks)-s.done)
			b.Seqs = append(b.Seqs, s.next(n, s.done+n == len(s.toks)))
			idx = append(idx, i)
		}
		if len(idx) == 0 {
			return logits
		}
		out, l := forwardLogits(t, e, &b)
		row := 0
		for j, i := range idx {
			if b.Seqs[j].Sample {
				require.GreaterOrEqual(t, out.Tokens[j], int32(0))
				seqs[i].accept(out.Tokens[j])
				logits[i] = append(logits[i], l[row])
				row++
			} else {
				require.Equal(t, int32(-1), out.Tokens[j])
			}
		}
	}
}

// maxRelDiff is relErr between two float32 logit sets.
func maxRelDiff(a, b [][]float32) float64 {
	worst := 0.0
	for i := range a {
		w := make([]float64, len(b[i]))
		for j, v := range b[i] {
			w[j] = float64(v)
		}
		worst = max(worst, relErr(a[i], w))
	}
	return worst
}

// batchInvariant reports whether MatMul gives each token the same bits
// whatever else is in the call: how many tokens, and where the token sits
// among them. Only then do two runs of a sequence that differ in batching
// (batched or alone, prefilled at once or in chunks, preempted and
// recomputed) agree bit for bit, and so in every sampled token. Attention,
// norms and RoPE in this package work per row and are invariant; the
// matrix kernels decide.
var batchInvariant = sync.OnceValue(func() bool {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 8, 256
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		vals := make([]float32, rows*cols)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		data, err := gguf.Quantize(typ, vals)
		if err != nil {
			panic(err)
		}
		w, err := NewWeight(typ, rows, cols, data)
		if err != nil {
			panic(err)
		}
		x := make([]float32, 9*cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		one := make([]float32, rows)
		all := make([]float32, 9*rows)
		for _, n := range []int{2, 3, 4, 5, 9} {
			MatMul(p, all, w, x, n)
			for tok := range n {
				MatMul(p, one, w, x[tok*cols:], 1)
				if !slices.Equal(one, all[tok*rows:(tok+1)*rows]) {
					return false
				}
			}
		}
	}
	return true
})

// looseBatchTolerance bounds the logit difference between two runs of a
// sequence that differ only in batching when the kernels are not
// batch-invariant: float32 noise of 1e-7 that tips one activation across
// an 8-bit rounding step moves the logits by up to a few percent of their
// scale (see refTolerance).
const looseBatchTolerance = 5e-2

// requireSameRun checks that got, a run of a sequence that differs from
// want only in batching, generated want's tokens with want's logits (nil
// logits are not compared): bit for bit when the kernels are
// batch-invariant. Otherwise the logits must agree within
// looseBatchTolerance up to the first token that differs, from which on the
// runs are different sequences; a divergence is logged, not failed.
func requireSameRun(t *testing.T, want, got []int32, wantLogits, gotLogits [][]float32, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	if batchInvariant() {
		require.Equal(t, want, got, what)
		if wantLogits != nil {
			require.Equal(t, wantLogits, gotLogits, what)
		}
		return
	}
	diverge := len(want)
	for i := range want {
		if want[i] != got[i] {
			diverge = i
			break
		}
	}
	if wantLogits != nil {
		n := min(diverge+1, len(wantLogits))
		require.LessOrEqual(t, maxRelDiff(gotLogits[:n], wantLogits[:n]), looseBatchTolerance, what)
	}
	if diverge < len(want) {
		t.Logf("%s: the matrix kernels are not batch-invariant, and the tokens diverge at %d of %d", what, diverge, len(want))
	}
}

var prompts = [][]int32{
	randomTokens(1, 5, 300), randomTokens(2, 17, 300), randomTokens(3, 33, 300),
	randomTokens(4, 1, 300), randomTokens(5, 48, 300),
}

// sampled are the sampling parameters of the tests' sampled sequences.
var sampled = engine.SamplingParams{Temperature: 0.9, TopP: 0.95, RepetitionPenalty: 1.1}

// TestExecutorBatchEqualsSingle checks that generation for a batch of
// sequences (prefills and decodes of many sequences in one step) gives the
// tokens of the same sequences run one at a time, for both architectures
// and F16 and Q8_0 weights; every other sequence samples with a
// temperature and its own seed, the others decode greedily.
func TestExecutorBatchEqualsSingle(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2"} {
		for _, typ := range []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0} {
			t.Run(arch+"/"+typ.String(), func(t *testing.T) {
				t.Parallel()
				f := openModel(t, tinyModel(arch, typ, false), nil)
				cfg := testConfig()
				cfg.KVType = "f16"
				e := newExec(t, f, cfg)
				seq := func(i int, blocks []int32) *testSeq {
					s := newTestSeq(uint64(i), prompts[i], blocks)
					if i%2 == 1 {
						s.seed, s.params = uint64(100+i), sampled
					}
					return s
				}
				batch := make([]*testSeq, len(prompts))
				for i := range prompts {
					batch[i] = seq(i, seqBlocks(e, i, len(prompts)))
				}
				together := runSeqs(t, e, batch, 1000, 6)
				for i := range prompts {
					alone := seq(i, seqBlocks(e, len(prompts)-1-i, len(prompts)))
					logits := runSeqs(t, e, []*testSeq{alone}, 1000, 6)
					requireSameRun(t, alone.gen, batch[i].gen, logits[0], together[i], fmt.Sprint("sequence ", i))
				}
			})
		}
	}
}

// TestExecutorBF16MatMul checks Config.F16MatMul "bf16" on an F16 model:
// refused with a clear error on a CPU without AVX512_BF16; where it runs,
// a batch of sequences gets the tokens and logits of each run alone, a
// chunked prefill those of a whole one (bit for bit: the BF16 tile kernels
// are batch-invariant), and the logits stay within bfloat16's rounding of
// those of the exact "f32" multiplication without being equal to them.
func TestExecutorBF16MatMul(t *testing.T) {
	f := openModel(t, tinyModel("qwen2", gguf.TypeF16, false), nil)
	cfg := testConfig()
	cfg.F16MatMul = "bf16"
	if !HasBF16MatMul() {
		_, err := New(f, cfg)
		require.ErrorContains(t, err, "AVX512_BF16")
		t.Skipf("no AVX512_BF16 on this CPU (best kernel level %s): checked that bf16 is refused", kernBest)
	}
	e := newExec(t, f, cfg)
	batch := make([]*testSeq, len(prompts))
	for i := range prompts {
		batch[i] = newTestSeq(uint64(i), prompts[i], seqBlocks(e, i, len(prompts)))
	}
	together := runSeqs(t, e, batch, 1000, 6)
	for i := range prompts {
		alone := newTestSeq(uint64(i), prompts[i], seqBlocks(e, len(prompts)-1-i, len(prompts)))
		logits := runSeqs(t, e, []*testSeq{alone}, 1000, 6)
		require.Equal(t, alone.gen, batch[i].gen, "sequence %d", i)
		require.Equal(t, logits[0], together[i], "sequence %d", i)
	}
	whole := newTestSeq(1, prompts[4], scatteredBlocks(e, 8, 1))
	want := runSeqs(t, e, []*testSeq{whole}, 1000, 1)
	chunked := newTestSeq(1, prompts[4], scatteredBlocks(e, 8, 2))
	require.Equal(t, want, runSeqs(t, e, []*testSeq{chunked}, 7, 1), "a prefill in chunks of 7")

	cfg.F16MatMul = "f32"
	exact := newExec(t, f, cfg)
	ref := newTestSeq(1, prompts[4], seqBlocks(exact, 0, 1))
	wantExact := runSeqs(t, exact, []*testSeq{ref}, 1000, 1)
	d := maxRelDiff(want[0], wantExact[0])
	t.Logf("largest relative difference of the logits, bf16 against f32: %.2g", d)
	require.Less(t, d, 0.05, "bf16 logits against f32's")
	require.Positive(t, d, "bf16 must round, not multiply exactly")
}

// TestExecutorPagedEqualsContiguous checks that a sequence whose block
// table is scattered over the cache gives exactly the logits of one whose
// blocks are contiguous and in order, also when the work is split over
// another number of threads.
func TestExecutorPagedEqualsContiguous(t *testing.T) {
	for _, kv := range []string{"f32", "f16"} {
		t.Run(kv, func(t *testing.T) {
			f := openModel(t, tinyModel("qwen2", gguf.TypeQ8_0, false), nil)
			cfg := testConfig()
			cfg.KVType = kv
			cfg.Threads = 1
			e1 := newExec(t, f, cfg)
			contiguous := newTestSeq(1, prompts[4], seqBlocks(e1, 0, 1))
			want := runSeqs(t, e1, []*testSeq{contiguous}, 1000, 20)
			cfg.Threads = 3
			e3 := newExec(t, f, cfg)
			paged := newTestSeq(1, prompts[4], scatteredBlocks(e3, 8, 9))
			got := runSeqs(t, e3, []*testSeq{paged}, 1000, 20)
			require.Equal(t, contiguous.gen, paged.gen)
			require.Equal(t, want, got)
		})
	}
}

// TestExecutorChunkedPrefill checks that a prompt prefilled in chunks that
// do not line up with blocks gives the logits and tokens of a prompt
// prefilled in one step.
func TestExecutorChunkedPrefill(t *testing.T) {
	f := openModel(t, tinyModel("llama", gguf.TypeQ4_0, false), nil)
	e := newExec(t, f, testConfig())
	whole := newTestSeq(1, prompts[4], scatteredBlocks(e, 8, 1))
	want := runSeqs(t, e, []*testSeq{whole}, 1000, 8)
	for _, chunk := range []int{1, 7, 16, 20} {
		chunked := newTestSeq(1, prompts[4], scatteredBlocks(e, 8, 2))
		got := runSeqs(t, e, []*testSeq{chunked}, chunk, 8)
		requireSameRun(t, whole.gen, chunked.gen, want[0], got[0], fmt.Sprint("chunk ", chunk))
	}
}

// TestExecutorPrefixCacheHit checks that a sequence whose block table
// reuses another's full blocks, starting at the first uncached position,
// gets the logits of a cold prefill of its whole prompt, while the first
// sequence decodes on in the same steps.
func TestExecutorPrefixCacheHit(t *testing.T) {
	for _, kv := range KVTypes {
		t.Run(kv, func(t *testing.T) {
			f := openModel(t, kvTinyModel("qwen2", gguf.TypeF16, true, kv), nil)
			cfg := testConfig()
			cfg.KVType = kv
			e := newExec(t, f, cfg)
			shared := randomTokens(21, 32, 300) // two full blocks
			pa := append(slices.Clone(shared), randomTokens(22, 9, 300)...)
			pb := append(slices.Clone(shared), randomTokens(23, 13, 300)...)

			cold := newTestSeq(2, pb, scatteredBlocks(e, 4, 3))
			want := runSeqs(t, e, []*testSeq{cold}, 1000, 5)

			a := newTestSeq(1, pa, []int32{40, 41, 42, 43})
			runSeqs(t, e, []*testSeq{a}, 1000, 2)
			b := newTestSeq(2, pb, []int32{40, 41, 50, 51})
			b.done = len(shared) // the prefix cache hit
			got := runSeqs(t, e, []*testSeq{a, b}, 1000, 5)
			requireSameRun(t, cold.gen, b.gen, want[0], got[1], "prefix hit")
		})
	}
}

// snapshot returns the raw bytes of block blk of c: K then V of every
// layer, as blockBytes hands them out.
func (c *kvCache) snapshot(blk int) []byte {
	var out []byte
	for l := range c.layers() {
		k, v := c.blockBytes(l, blk)
		out = append(append(out, k...), v...)
	}
	return out
}

// kvTinyModel is tinyModel with heads of 32 dims where kv is a quantized
// cache type (which needs whole 32-value blocks).
func kvTinyModel(arch string, typ gguf.TensorType, tied bool, kv string) synth.Model {
	m := tinyModel(arch, typ, tied)
	if t, _ := parseKVType(kv); t.quantized() {
		m.HeadDim = 32
	}
	return m
}

// TestExecutorSwapAndCopyPreserveKV checks that swapping blocks out to
// host memory and back into other device blocks, and copying a block,
// preserve K/V bit for bit, and that a sequence resumed on the new blocks
// generates exactly what an uninterrupted one does. It also runs
// copy-on-write: two sequences sharing a partial last block, each writing
// its own copy.
func TestExecutorSwapAndCopyPreserveKV(t *testing.T) {
	for _, kv := range KVTypes {
		t.Run(kv, func(t *testing.T) {
			f := openModel(t, kvTinyModel("llama", gguf.TypeQ8_0, false, kv), nil)
			cfg := testConfig()
			cfg.KVType = kv
			e := newExec(t, f, cfg)
			prompt := prompts[4] // 48 tokens: three full blocks

			plain := newTestSeq(1, prompt, []int32{0, 1, 2, 3, 4})
			runSeqs(t, e, []*testSeq{plain}, 1000, 10)

			s := newTestSeq(1, prompt, []int32{10, 11, 12, 13, 14})
			runSeqs(t, e, []*testSeq{s}, 1000, 3) // 50 tokens with K/V: 4 blocks
			before := make([][]byte, 4)
			for i := range before {
				before[i] = e.dev.snapshot(int(s.blocks[i]))
			}
			swap := engine.Batch{}
			for i := range 4 {
				swap.SwapOut = append(swap.SwapOut, engine.BlockSwap{Device: s.blocks[i], Host: int32(7 + i)})
			}
			out, err := e.Forward(t.Context(), &swap)
			require.NoError(t, err)
			require.Empty(t, out.Tokens)
			for i := range 4 {
				require.Equal(t, before[i], e.host.snapshot(7+i), "host slot %d", 7+i)
			}
			// Another sequence overwrites the old blocks.
			other := newTestSeq(2, prompts[2], []int32{10, 11, 12})
			runSeqs(t, e, []*testSeq{other}, 1000, 1)
			require.NotEqual(t, before[0], e.dev.snapshot(10))

			// Swap in to other blocks, and resume in the same step.
			resume := engine.Batch{}
			s.blocks = []int32{20, 21, 22, 23, 24}
			for i := range 4 {
				resume.SwapIn = append(resume.SwapIn, engine.BlockSwap{Device: s.blocks[i], Host: int32(7 + i)})
			}
			resume.Seqs = []engine.SeqInput{s.next(1, true)}
			out, err = e.Forward(t.Context(), &resume)
			require.NoError(t, err)
			s.accept(out.Tokens[0])
			for i := range 3 { // the fourth now holds one more token
				require.Equal(t, before[i], e.dev.snapshot(int(s.blocks[i])), "block %d", s.blocks[i])
			}
			runSeqs(t, e, []*testSeq{s}, 1000, 10)
			require.Equal(t, plain.gen, s.gen)

			// A block copy is exact.
			_, err = e.Forward(t.Context(), &engine.Batch{Copies: []engine.BlockCopy{{Src: 21, Dst: 30}}})
			require.NoError(t, err)
			require.Equal(t, e.dev.snapshot(21), e.dev.snapshot(30))

			// Copy-on-write: a and b share a 40-token prefix whose last
			// block is partial; b copies it before writing.
			shared := prompts[4][:40]
			a := newTestSeq(3, shared, []int32{40, 41, 42, 43})
			runSeqs(t, e, []*testSeq{a}, 1000, 1) // fills the prefix and samples
			b := newTestSeq(4, shared, []int32{40, 41, 44, 45})
			b.done = 40
			b.accept(a.gen[0]) // both start from the same first token
			cow := engine.Batch{Copies: []engine.BlockCopy{{Src: 42, Dst: 44}}}
			_, err = e.Forward(t.Context(), &cow)
			require.NoError(t, err)
			runSeqs(t, e, []*testSeq{a, b}, 1000, 6)
			require.Equal(t, a.gen, b.gen)
			alone := newTestSeq(5, shared, []int32{50, 51, 52, 53})
			runSeqs(t, e, []*testSeq{alone}, 1000, 6)
			requireSameRun(t, alone.gen, a.gen, nil, nil, "copy-on-write")
		})
	}
}

// TestExecutorRejectsBadBatches checks that malformed batches return an
// error, never panic, and leave the executor usable.
func TestExecutorRejectsBadBatches(t *testing.T) {
	f := openModel(t, tinyModel("llama", gguf.TypeF32, false), nil)
	e := newExec(t, f, testConfig())
	ok := func() engine.SeqInput {
		return engine.SeqInput{SeqID: 1, Tokens: []int32{1, 2, 3}, Pos: 0, Context: 3, Blocks: []int32{0}, Sample: true}
	}
	with := func(edit func(s *engine.SeqInput)) *engine.Batch {
		s := ok()
		edit(&s)
		return &engine.Batch{Seqs: []engine.SeqInput{s}}
	}
	cases := map[string]*engine.Batch{
		"nil":                  nil,
		"no tokens":            with(func(s *engine.SeqInput) { s.Tokens = nil; s.Context = 0 }),
		"token out of vocab":   with(func(s *engine.SeqInput) { s.Tokens[1] = 300 }),
		"negative token":       with(func(s *engine.SeqInput) { s.Tokens[1] = -1 }),
		"negative position":    with(func(s *engine.SeqInput) { s.Pos = -1; s.Context = 2 }),
		"huge position":        with(func(s *engine.SeqInput) { s.Pos = math.MaxInt - 1; s.Context = math.MinInt + 1 }),
		"wrong context":        with(func(s *engine.SeqInput) { s.Context = 4 }),
		"beyond context":       with(func(s *engine.SeqInput) { s.Pos = 511; s.Context = 514 }),
		"short block table":    with(func(s *engine.SeqInput) { s.Blocks = nil }),
		"block out of range":   with(func(s *engine.SeqInput) { s.Blocks = []int32{64} }),
		"negative block":       with(func(s *engine.SeqInput) { s.Blocks = []int32{-1} }),
		"negative generated":   with(func(s *engine.SeqInput) { s.Generated = -1 }),
		"block read of range":  with(func(s *engine.SeqInput) { s.Pos, s.Context, s.Blocks = 16, 19, []int32{99, 1} }),
		"block written twice":  with(func(s *engine.SeqInput) { s.Tokens = make([]int32, 20); s.Context = 20; s.Blocks = []int32{3, 3} }),
		"copy out of range":    {Copies: []engine.BlockCopy{{Src: 0, Dst: 64}}},
		"swap out of range":    {SwapOut: []engine.BlockSwap{{Device: 0, Host: 32}}},
		"swap out twice":       {SwapOut: []engine.BlockSwap{{Device: 0, Host: 1}, {Device: 1, Host: 1}}},
		"swap in empty slot":   {SwapIn: []engine.BlockSwap{{Device: 0, Host: 5}}},
		"swap in block range":  {SwapIn: []engine.BlockSwap{{Device: -1, Host: 5}}},
		"swap in slot swapped": {SwapOut: []engine.BlockSwap{{Device: 2, Host: 5}}, SwapIn: []engine.BlockSwap{{Device: 0, Host: 5}}},
		"two seqs one block": {Seqs: []engine.SeqInput{
			{SeqID: 1, Tokens: []int32{1}, Context: 1, Blocks: []int32{4}},
			{SeqID: 2, Tokens: []int32{1}, Context: 1, Blocks: []int32{4}},
		}},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := e.Forward(t.Context(), b)
			require.Error(t, err)
			require.Regexp(t, "^cpu: ", err.Error())
		})
	}
	// A failed batch changes nothing: the same slot is still free, and a
	// good batch runs.
	_, err := e.Forward(t.Context(), &engine.Batch{SwapIn: []engine.BlockSwap{{Device: 0, Host: 5}}})
	require.Error(t, err)
	out, err := e.Forward(t.Context(), &engine.Batch{Seqs: []engine.SeqInput{ok()}})
	require.NoError(t, err)
	require.Len(t, out.Tokens, 1)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = e.Forward(ctx, &engine.Batch{Seqs: []engine.SeqInput{ok()}})
	require.ErrorIs(t, err, context.Canceled)

	e.Close()
	_, err = e.Forward(t.Context(), &engine.Batch{Seqs: []engine.SeqInput{ok()}})
	require.ErrorIs(t, err, ErrClosed)
}

// TestExecutorConfig checks defaults, Info and config validation.
func TestExecutorConfig(t *testing.T) {
	m := tinyModel("llama", gguf.TypeQ8_0, false)
	m.Name = "tiny"
	f := openModel(t, m, nil)
	e, err := New(f, Config{Threads: 1, EOS: []int32{2}})
	require.NoError(t, err)
	defer e.Close()
	info := e.Info()
	spec := e.Spec()
	blockBytes := kvBytesPerBlock(spec, 16, kvF16)
	require.Equal(t, engine.ExecutorInfo{
		Model: "tiny", NumBlocks: int(DefaultKVCacheBytes / blockBytes), BlockSize: 16,
		ContextLength: 512, EOS: []int32{2}, SwapBlocks: int(DefaultSwapBytes / blockBytes), Logprobs: true, VocabSize: spec.Vocab,
	}, info)
	require.Positive(t, e.SwapTime(10))
	require.Greater(t, e.PrefillTime(1000), e.PrefillTime(10))

	// A small cache still holds one sequence of the full context.
	e2, err := New(f, Config{Threads: 1, KVCacheBytes: 1, NoSwap: true, Name: "x"})
	require.NoError(t, err)
	defer e2.Close()
	require.Equal(t, 512/16, e2.Info().NumBlocks)
	require.Zero(t, e2.Info().SwapBlocks)
	require.Equal(t, "x", e2.Info().Model)

	// The raise to a full context stops at MaxAutoKVBytes; an explicit
	// budget above it is kept.
	cfg := Config{BlockSize: 16, KVCacheBytes: 1 << 20}
	require.EqualValues(t, 1<<20/4096, kvBlocks(cfg, 1000, 4096))           // more than a context
	require.EqualValues(t, 1<<24/16, kvBlocks(cfg, 1<<24, 16))              // raised to a context
	require.EqualValues(t, MaxAutoKVBytes/4096, kvBlocks(cfg, 1<<24, 4096)) // raised to the bound
	cfg.KVCacheBytes = 4 * MaxAutoKVBytes
	require.EqualValues(t, 4*MaxAutoKVBytes/4096, kvBlocks(cfg, 1<<24, 4096))
	cfg.KVBlocks = 3
	require.EqualValues(t, 3, kvBlocks(cfg, 1<<24, 4096))

	for name, cfg := range map[string]Config{
		"threads":    {Threads: -1},
		"block size": {BlockSize: 12},
		"kv type":    {KVType: "q8"},
		"f16 matmul": {F16MatMul: "fp8"},
		"kv bytes":   {KVCacheBytes: -1},
		"swap":       {SwapBytes: -1},
		"eos":        {EOS: []int32{300}},
	} {
		_, err := New(f, cfg)
		require.Error(t, err, name)
	}
}

// generateAlone generates n tokens for prompt with seed and sampling
// parameters p on e, with a fresh sequence in blocks starting at block 0.
func generateAlone(t testing.TB, e *Executor, prompt []int32, n int, seed uint64, p engine.SamplingParams) []int32 {
	s := newTestSeq(1, prompt, seqBlocks(e, 0, 1))
	s.seed, s.params = seed, p
	runSeqs(t, e, []*testSeq{s}, 1000, n)
	return s.gen
}

// reqParams are request i's sampling parameters in TestExecutorEngine:
// every other request samples with a temperature.
func reqParams(i int) engine.SamplingParams {
	if i%2 == 1 {
		return sampled
	}
	return engine.SamplingParams{}
}

// TestExecutorEngine runs the engine on the CPU executor end to end:
// concurrent requests, greedy and sampled, complete with the tokens of the
// same prompts run alone, including an over-admitted load (more sequences
// than the cache holds) that forces preemption by recompute and by swap,
// with an F16 and a Q8_0 cache.
func TestExecutorEngine(t *testing.T) {
	for _, kv := range []string{"f16", "q8_0"} {
		t.Run("kv="+kv, func(t *testing.T) { testExecutorEngine(t, kv) })
	}
}

func testExecutorEngine(t *testing.T, kv string) {
	f := openModel(t, kvTinyModel("qwen2", gguf.TypeQ8_0, true, kv), nil)
	const seqs, promptLen, maxTok = 12, 20, 40
	reqPrompts := make([][]int32, seqs)
	for i := range reqPrompts {
		reqPrompts[i] = randomTokens(uint64(100+i), promptLen, 300)
		if i%3 == 1 {
			// A shared first block: prefix cache hits.
			copy(reqPrompts[i], reqPrompts[i-1][:16])
		}
	}
	ref := newExec(t, f, Config{Threads: 2, KVBlocks: 8, KVType: kv, NoSwap: true})
	want := make([][]int32, seqs)
	for i, p := range reqPrompts {
		want[i] = generateAlone(t, ref, p, maxTok, uint64(i), reqParams(i))
	}
	cases := map[string]Config{
		"roomy":     {Threads: 2, KVBlocks: 64, KVType: kv},
		"recompute": {Threads: 2, KVBlocks: 10, KVType: kv, NoSwap: true},
		"swap":      {Threads: 2, KVBlocks: 10, KVType: kv},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			e := newExec(t, f, cfg)
			ecfg := engine.DefaultConfig()
			ecfg.ExpectedOutputTokens = 1 // admit on the prompt alone
			eng, err := engine.New(e, engine.RealClock{}, ecfg, nil)
			require.NoError(t, err)
			streams := make([]*engine.Stream, seqs)
			for i, p := range reqPrompts {
				streams[i], err = eng.Submit(t.Context(), engine.Request{ID: fmt.Sprint("r", i), Priority: engine.PriorityBatch, Prompt: p, MaxTokens: maxTok, N: 1, Seed: uint64(i), Sampling: reqParams(i)})
				require.NoError(t, err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- eng.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()
			var wg sync.WaitGroup
			got := make([][]int32, seqs)
			for i, st := range streams {
				wg.Go(func() {
					toks, fin, _, err := engine.Collect(t.Context(), st)
					if err == nil && fin[0] == engine.FinishLength {
						got[i] = toks[0]
					}
				})
			}
			wg.Wait()
			for i := range want {
				requireSameRun(t, want[i], got[i], nil, nil, fmt.Sprint("request ", i))
			}
			// A repeated prompt is served from the prefix cache when
			// there is room to keep it, with the same tokens; its two
			// choices share the prompt's blocks and copy the partial
			// last one on write.
			const g = seqs - 2 // a greedy request, so both choices match it
			again, err := eng.Submit(t.Context(), engine.Request{ID: "again", Prompt: reqPrompts[g], MaxTokens: maxTok, N: 2, Sampling: reqParams(g)})
			require.NoError(t, err)
			toks, _, usage, err := engine.Collect(t.Context(), again)
			require.NoError(t, err)
			require.Len(t, toks, 2)
			requireSameRun(t, want[g], toks[0], nil, nil, "repeated prompt, choice 0")
			requireSameRun(t, want[g], toks[1], nil, nil, "repeated prompt, choice 1")
			st := eng.Stats()
			t.Logf("%+v", st.SchedStats)
			switch name {
			case "roomy":
				require.Zero(t, st.Preemptions)
				require.Equal(t, 16, usage.CachedTokens)
			case "recompute":
				require.Positive(t, st.Preemptions)
				require.Zero(t, st.PreemptionsSwap)
			case "swap":
				require.Positive(t, st.PreemptionsSwap)
			}
			require.Eventually(t, func() bool { return eng.Stats().BlocksUsed == 0 }, 5*time.Second, time.Millisecond)
		})
	}
}

// BenchmarkDecodeStep measures one decode step of seqs sequences on a
// tiny llama (dim 288, 6 layers, 6 heads, FFN 768, vocab 32000, Q8_0):
// aggregate tokens/s grows with the batch as the weights are read once per
// step for all rows.
func BenchmarkDecodeStep(b *testing.B) {
	m := synth.Model{Arch: "llama", Dim: 288, Layers: 6, Heads: 6, KVHeads: 6, FFN: 768, Vocab: 32000, Type: gguf.TypeQ8_0, Seed: 1}
	f := openModel(b, m, nil)
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("model=tiny/seqs=%d", n), func(b *testing.B) {
			const promptLen, window = 32, 128
			e := newExec(b, f, Config{BlockSize: 16, KVBlocks: n * (promptLen + window) / 16, KVType: "f16", NoSwap: true})
			seqs := make([]*testSeq, n)
			var batch engine.Batch
			for i := range seqs {
				seqs[i] = newTestSeq(uint64(i), randomTokens(uint64(i), promptLen, m.Vocab), seqBlocks(e, i, n))
				batch.Seqs = append(batch.Seqs, seqs[i].next(promptLen, false))
			}
			_, err := e.Forward(b.Context(), &batch)
			require.NoError(b, err)
			tok := []int32{1}
			b.ReportAllocs()
			steps := 0
			for b.Loop() {
				pos := promptLen + steps%window
				for i := range batch.Seqs {
					batch.Seqs[i] = engine.SeqInput{SeqID: uint64(i), Tokens: tok, Pos: pos, Context: pos + 1, Blocks: seqs[i].blocks, Sample: true}
				}
				out, err := e.Forward(b.Context(), &batch)
				if err != nil {
					b.Fatal(err)
				}
				tok[0] = out.Tokens[0]
				steps++
			}
			b.ReportMetric(float64(n*steps)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
