package cpu

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// tinyModel is the shape most tests use: two layers, grouped-query
// attention (4 query heads over 2 KV heads), a vocabulary of 300.
func tinyModel(arch string, typ gguf.TensorType, tied bool) synth.Model {
	m := synth.Model{Arch: arch, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, Type: typ, Tied: tied, Seed: 7, ContextLength: 512}
	if typ == gguf.TypeQ4_K || typ == gguf.TypeQ6_K {
		// Rows of 256, so that the K-quants do not fall back.
		m.Dim, m.FFN = 256, 256
	}
	return m
}

// openModel writes m, changed by edit when not nil, to a temporary file and
// opens it; the file is closed when the test ends.
func openModel(t testing.TB, m synth.Model, edit func(w *gguf.Writer)) *gguf.File {
	t.Helper()
	w, err := m.Writer()
	require.NoError(t, err)
	if edit != nil {
		edit(w)
	}
	path := filepath.Join(t.TempDir(), "model.gguf")
	require.NoError(t, w.WriteFile(path))
	f, err := gguf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// testConfig is a small configuration: two threads, 64 blocks of 16, F32
// K/V, 32 blocks of swap space.
func testConfig() Config {
	return Config{Threads: 2, BlockSize: 16, KVBlocks: 64, KVType: "f32"}
}

// newExec returns an executor closed when the test ends. Unless cfg sets
// SwapBytes or NoSwap, it gets 32 blocks of swap space.
func newExec(t testing.TB, f *gguf.File, cfg Config) *Executor {
	t.Helper()
	if cfg.SwapBytes == 0 && !cfg.NoSwap {
		spec, err := model.SpecFromFile(f)
		require.NoError(t, err)
		typ, err := parseKVType(cfg.KVType)
		require.NoError(t, err)
		cfg.SwapBytes = 32 * kvBytesPerBlock(spec, max(cfg.BlockSize, 1), typ)
	}
	e, err := New(f, cfg)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

// forwardLogits runs b and returns the output and a copy of the logits of
// each sampled sequence, in batch order.
func forwardLogits(t testing.TB, e *Executor, b *engine.Batch) (*engine.Output, [][]float32) {
	t.Helper()
	n := 0
	for _, s := range b.Seqs {
		if s.Sample {
			n++
		}
	}
	logits := make([][]float32, n)
	e.sample = func(w, row int, l []float32, s *engine.SeqInput) int32 {
		logits[row] = slices.Clone(l) // each row is sampled once, by one worker
		return e.sampleSeq(w, row, l, s)
	}
	defer func() { e.sample = e.sampleSeq }()
	out, err := e.Forward(t.Context(), b)
	require.NoError(t, err)
	return out, logits
}

// randomTokens returns n token ids below vocab drawn from seed.
func randomTokens(seed uint64, n, vocab int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// relErr is the largest absolute difference between got and want over the
// largest magnitude of want: an error relative to the logits' scale.
func relErr(got []float32, want []float64) float64 {
	var diff, scale float64
	for i, w := range want {
		diff = max(diff, math.Abs(float64(got[i])-w))
		scale = max(scale, math.Abs(w))
	}
	return diff / scale
}

// refTolerance is the largest relErr accepted against the reference, per
// weight type. The executor computes in float32, so the float types agree
// to float32 rounding. For block-quantized weights the kernels round each
// matrix's input to 8 bits per 32 values (as ggml does), which moves the
// logits by up to about 4% of their scale over two layers. (A reference
// that rounds activations the same way agrees to 1e-7 in most cases, but
// not robustly: float32 noise that tips one value across a rounding step
// cascades through every later rounding, so it cannot be a tight gate.)
// With an F16 cache the reference rounds K and V to half floats too.
var refTolerance = map[gguf.TensorType]float64{
	gguf.TypeF32:  1e-4,
	gguf.TypeF16:  1e-4,
	gguf.TypeBF16: 1e-4,
	gguf.TypeQ8_0: 5e-2,
	gguf.TypeQ5_0: 5e-2,
	gguf.TypeQ4_0: 6e-2,
	gguf.TypeQ4_K: 6e-2,
	gguf.TypeQ6_K: 5e-2,
}

// checkAgainstRef prefills prompt in one step, then decodes steps greedy
// tokens one step at a time, comparing the logits of every step with the
// reference's (rounding K/V to F16 when the cache does) within tol.
func checkAgainstRef(t *testing.T, f *gguf.File, cfg Config, prompt []int32, steps int, tol float64) {
	t.Helper()
	e := newExec(t, f, cfg)
	ref := newRefModel(t, f)
	ref.kvHalf = cfg.KVType == "f16"
	rs := ref.newSeq()
	s := newTestSeq(1, prompt, seqBlocks(e, 0, 1))
	worst := 0.0
	for step := 0; step <= steps; step++ {
		n := len(prompt)
		if step > 0 {
			n = 1
		}
		in := s.next(n, true)
		want := rs.feed(in.Tokens...)
		out, logits := forwardLogits(t, e, &engine.Batch{Seqs: []engine.SeqInput{in}})
		require.Len(t, logits, 1)
		err := relErr(logits[0], want)
		worst = max(worst, err)
		require.LessOrEqual(t, err, tol, "step %d: logits differ from the reference", step)
		s.accept(out.Tokens[0])
	}
	t.Logf("max error relative to the logit scale: %.2g (tolerance %.2g)", worst, tol)
}

// TestForwardMatchesReference checks the executor's logits against the
// float64 reference on random models of both architectures, tied and
// untied, for every weight type, with F32 and F16 caches: a prompt in one
// step, then decode steps.
func TestForwardMatchesReference(t *testing.T) {
	types := []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ5_0, gguf.TypeQ4_0, gguf.TypeQ4_K, gguf.TypeQ6_K}
	for _, arch := range []string{"llama", "qwen2"} {
		for _, tied := range []bool{false, true} {
			for _, typ := range types {
				for _, kv := range []string{"f32", "f16"} {
					name := arch + "/" + typ.String() + "/kv=" + kv
					if tied {
						name += "/tied"
					}
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						m := tinyModel(arch, typ, tied)
						f := openModel(t, m, nil)
						cfg := testConfig()
						cfg.KVType = kv
						checkAgainstRef(t, f, cfg, randomTokens(uint64(typ), 37, m.Vocab), 3, refTolerance[typ])
					})
				}
			}
		}
	}
}

// TestForwardRopeVariants checks rope_freqs, linear and YaRN scaling and
// partial rotation (rope.dimension_count below the head dimension)
// against the reference, for both pairings.
func TestForwardRopeVariants(t *testing.T) {
	cases := map[string]func(w *gguf.Writer, arch string){
		"rope_freqs": func(w *gguf.Writer, arch string) {
			freqs := make([]float32, 8)
			for i := range freqs {
				freqs[i] = 1 + float32(i)*0.7
			}
			require.NoError(t, w.AddTensor("rope_freqs.weight", []uint64{8}, gguf.TypeF32, freqs))
		},
		"linear": func(w *gguf.Writer, arch string) {
			w.SetString(arch+".rope.scaling.type", "linear")
			w.SetFloat32(arch+".rope.scaling.factor", 4)
		},
		"yarn": func(w *gguf.Writer, arch string) {
			w.SetString(arch+".rope.scaling.type", "yarn")
			w.SetFloat32(arch+".rope.scaling.factor", 4)
			w.SetUint32(arch+".rope.scaling.original_context_length", 128)
		},
		"partial": func(w *gguf.Writer, arch string) {
			w.SetUint32(arch+".rope.dimension_count", 8)
		},
	}
	for name, edit := range cases {
		for _, arch := range []string{"llama", "qwen2"} {
			t.Run(name+"/"+arch, func(t *testing.T) {
				t.Parallel()
				m := tinyModel(arch, gguf.TypeF32, false)
				m.RopeBase = 100 // fast-turning pairs, so positions matter
				f := openModel(t, m, func(w *gguf.Writer) { edit(w, arch) })
				spec, err := model.SpecFromFile(f)
				require.NoError(t, err)
				switch name {
				case "rope_freqs":
					require.True(t, spec.RopeFreqs)
				case "partial":
					require.Equal(t, 8, spec.RopeDims)
				default:
					require.Equal(t, name, spec.RopeScaling.Type)
				}
				checkAgainstRef(t, f, testConfig(), randomTokens(3, 40, m.Vocab), 2, refTolerance[gguf.TypeF32])
			})
		}
	}
}

// TestForwardRopeUnsupported checks that a model with a RoPE scaling the
// executor does not implement is refused at New.
func TestForwardRopeUnsupported(t *testing.T) {
	f := openModel(t, tinyModel("llama", gguf.TypeF32, false), func(w *gguf.Writer) {
		w.SetString("llama.rope.scaling.type", "longrope")
		w.SetFloat32("llama.rope.scaling.factor", 4)
	})
	_, err := New(f, testConfig())
	require.ErrorContains(t, err, "longrope")
}

// TestForwardFixtures checks the executor against the reference on the
// GGUF files llama.cpp's tools wrote (shared/fixtures): both
// architectures, tied and untied outputs, the qwen2 biases and every
// weight type there, F16 cache.
func TestForwardFixtures(t *testing.T) {
	dir := fixtures.Dir(t)
	files := map[string]gguf.TensorType{
		"llama-spm-d64-f32.gguf":     gguf.TypeF32,
		"llama-spm-d64-f16.gguf":     gguf.TypeF16,
		"llama-spm-d64-bf16.gguf":    gguf.TypeBF16,
		"llama-spm-d64-q8_0.gguf":    gguf.TypeQ8_0,
		"llama-spm-d64-q4_0.gguf":    gguf.TypeQ4_0,
		"llama-spm-d64-q5_0.gguf":    gguf.TypeQ5_0,
		"llama-spm-d256-q4_k_m.gguf": gguf.TypeQ4_K,
		"llama3-bpe-d64-q8_0.gguf":   gguf.TypeQ8_0,
		"qwen2-d64-q8_0.gguf":        gguf.TypeQ8_0,
	}
	for name, typ := range files {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, name)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("fixture %s not found", path)
			}
			f, err := gguf.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			spec, err := model.SpecFromFile(f)
			require.NoError(t, err)
			cfg := testConfig()
			cfg.KVType = "f16"
			checkAgainstRef(t, f, cfg, randomTokens(11, 21, spec.Vocab), 2, refTolerance[typ])
		})
	}
}

// TestForwardFixturesBF16MatMul checks the executor with Config.F16MatMul
// "bf16" against the float64 reference on llama.cpp's F16 and BF16
// fixtures: the weights (F16's) and every MatMul input rounded to
// bfloat16 keep the logits within refBF16Tolerance of the exact ones.
func TestForwardFixturesBF16MatMul(t *testing.T) {
	if !HasBF16MatMul() {
		t.Skipf("no AVX512_BF16 on this CPU (best kernel level %s)", kernBest)
	}
	for _, name := range []string{"llama-spm-d64-f16.gguf", "llama-spm-d64-bf16.gguf"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := openFixture(t, name)
			spec, err := model.SpecFromFile(f)
			require.NoError(t, err)
			cfg := testConfig()
			cfg.KVType, cfg.F16MatMul = "f16", "bf16"
			checkAgainstRef(t, f, cfg, randomTokens(11, 21, spec.Vocab), 2, refBF16Tolerance)
		})
	}
}

// refBF16Tolerance is refTolerance for Config.F16MatMul "bf16": each
// MatMul's inputs carry bfloat16's 2^-9 relative rounding, which moved
// the fixtures' logits by 3-4e-3 of their scale (Q8_0 and Q4_0 weights:
// 1-2e-2).
const refBF16Tolerance = 1e-2

// TestExpNeg checks the attention's exponential against math.Exp over its
// domain.
func TestExpNeg(t *testing.T) {
	for x := float32(0); x > -90; x -= 0.001 {
		want := math.Exp(float64(x))
		got := float64(expNeg(x))
		if x < -87.3 {
			require.Zero(t, got)
			continue
		}
		require.InDelta(t, 1, got/want, 3e-7, "x = %v", x)
	}
	require.Zero(t, expNeg(float32(math.Inf(-1))))
	require.Equal(t, float32(1), expNeg(0))
}

// TestSwiGLU checks silu(g)·u against float64 over a wide range, including
// values whose exponential would overflow.
func TestSwiGLU(t *testing.T) {
	for g := float32(-200); g < 200; g += 0.01 {
		gate, up := []float32{g}, []float32{1.5}
		swigluGo(gate, up)
		want := float64(g) / (1 + math.Exp(-float64(g))) * 1.5
		require.InDelta(t, want, float64(gate[0]), 1e-6*max(1, math.Abs(want)), "g = %v", g)
	}
}

// TestUntiedEmbeddingsNotRepacked checks that untied token embeddings,
// only read by row, get no copy repacked for MatMul while the output head
// does (on a CPU with tile kernels for the type), and that tied ones,
// which are the output head, keep theirs.
func TestUntiedEmbeddingsNotRepacked(t *testing.T) {
	if len(kernTileLevels(gguf.TypeQ8_0)) == 0 {
		t.Skipf("no Q8_0 tile kernels on this CPU (best level %s)", kernBest)
	}
	for _, tied := range []bool{false, true} {
		e := newExec(t, openModel(t, tinyModel("llama", gguf.TypeQ8_0, tied), nil), testConfig())
		require.NotNil(t, e.w.output.tiles, "tied=%v: the output head is repacked", tied)
		if tied {
			require.NotNil(t, e.w.embd.tiles, "tied embeddings are the output head")
		} else {
			require.Nil(t, e.w.embd.tiles, "untied embeddings are only read by row")
		}
	}
}
