package cpu

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

// archFixtures are the second set of shared fixtures (README-set2.md):
// one Q8_0 file per architecture beyond llama and qwen2.
var archFixtures = []string{"qwen3-d64-q8_0.gguf", "gemma3-d64-q8_0.gguf", "phi3-d64-q8_0.gguf", "qwen3moe-d64-q8_0.gguf"}

// openFixture opens the shared fixture name, or skips the test when it is
// absent.
func openFixture(t *testing.T, name string) *gguf.File {
	t.Helper()
	path := filepath.Join(fixtures.Dir(t), name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("fixture %s not found", path)
	}
	f, err := gguf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// checkBatchAgainstRef runs the prompts together through the executor as
// sequences whose blocks are scattered over the cache, prefilling at most
// chunk tokens of each per step and then decoding gen greedy tokens each,
// and compares the logits of every sampled step of every sequence with
// the reference fed the same tokens.
func checkBatchAgainstRef(t *testing.T, f *gguf.File, cfg Config, prompts [][]int32, chunk, gen int, tol float64) {
	t.Helper()
	e := newExec(t, f, cfg)
	ref := newRefModel(t, f)
	ref.kvHalf = cfg.KVType == "f16"
	perm := scatteredBlocks(e, e.info.NumBlocks, 77)
	per := e.info.NumBlocks / len(prompts)
	seqs := make([]*testSeq, len(prompts))
	for i, p := range prompts {
		seqs[i] = newTestSeq(uint64(i+1), p, perm[i*per:(i+1)*per])
	}
	logits := runSeqs(t, e, seqs, chunk, gen)
	worst := 0.0
	for i, s := range seqs {
		require.Len(t, logits[i], gen)
		rs := ref.newSeq()
		want := rs.feed(prompts[i]...)
		for step := range gen {
			err := relErr(logits[i][step], want)
			worst = max(worst, err)
			require.LessOrEqual(t, err, tol, "sequence %d step %d: logits differ from the reference", i, step)
			want = rs.feed(s.gen[step])
		}
	}
	t.Logf("batched: max error relative to the logit scale: %.2g (tolerance %.2g)", worst, tol)
}

// TestArchFixtures checks the executor against the float64 reference on
// the second set of fixtures that llama.cpp's tools wrote: qwen3 (q/k
// norms, head dim not dim/heads), gemma3 (scaled embeddings, post-norms,
// GELU, sliding-window layers with their own RoPE base), phi3 (fused qkv
// and gate-up, partial rotary) and qwen3moe (top-2 of 4 experts). A
// 21-token prompt in one step and five decode steps with an F16 cache,
// then two sequences together, prefilled in chunks of 5 through 4-token
// blocks in scattered order (so gemma3's 8-position window spans and
// leaves blocks) and decoded side by side, with an F32 cache.
func TestArchFixtures(t *testing.T) {
	for _, name := range archFixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := openFixture(t, name)
			spec, err := model.SpecFromFile(f)
			require.NoError(t, err)
			tol := refTolerance[gguf.TypeQ8_0]
			cfg := testConfig()
			cfg.KVType = "f16"
			checkAgainstRef(t, f, cfg, randomTokens(11, 21, spec.Vocab), 5, tol)

			cfg = testConfig()
			cfg.BlockSize, cfg.KVBlocks = 4, 32
			prompts := [][]int32{randomTokens(12, 19, spec.Vocab), randomTokens(13, 11, spec.Vocab)}
			checkBatchAgainstRef(t, f, cfg, prompts, 5, 6, tol)
		})
	}
}

// TestArchFixturesTokenize checks that each fixture's vocabulary loads and
// round-trips text, and that the executor's spec agrees with the
// tokenizer on the vocabulary.
func TestArchFixturesTokenize(t *testing.T) {
	for _, name := range archFixtures {
		t.Run(name, func(t *testing.T) {
			f := openFixture(t, name)
			tok, err := tokenizer.New(f)
			require.NoError(t, err)
			const text = "The quick brown fox jumps over the lazy dog, 42 times."
			ids := tok.Encode(text, false)
			require.NotEmpty(t, ids)
			require.Less(t, len(ids), len(text))
			require.Equal(t, text, strings.TrimPrefix(tok.Decode(ids), " "))
			e := newExec(t, f, testConfig())
			require.LessOrEqual(t, tok.VocabSize(), e.Info().VocabSize)
		})
	}
}

// rewriteFixture copies fixture name into a new file with the tensor
// called tensor replaced by zeros of shape dims (F32), and opens it.
func rewriteFixture(t *testing.T, name, tensor string, dims []uint64) *gguf.File {
	t.Helper()
	src := openFixture(t, name)
	w := gguf.NewWriter()
	for _, k := range src.Keys() {
		v, _ := src.Value(k)
		require.NoError(t, w.Set(k, v))
	}
	found := false
	for _, ti := range src.Tensors {
		if ti.Name == tensor {
			found = true
			n := uint64(1)
			for _, d := range dims {
				n *= d
			}
			require.NoError(t, w.AddTensor(ti.Name, dims, gguf.TypeF32, make([]float32, n)))
			continue
		}
		require.NoError(t, w.AddTensorData(ti.Name, ti.Dims, ti.Type, src.TensorData(ti)))
	}
	require.True(t, found, tensor)
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	return f
}

// TestArchRefusesMalformedShapes checks that a fixture with one tensor of
// the wrong size is refused at load with an error naming the tensor.
func TestArchRefusesMalformedShapes(t *testing.T) {
	cases := map[string]struct {
		file, tensor string
		dims         []uint64
	}{
		"qwen3 q norm":          {"qwen3-d64-q8_0.gguf", "blk.1.attn_q_norm.weight", []uint64{16}},
		"qwen3 q width":         {"qwen3-d64-q8_0.gguf", "blk.0.attn_q.weight", []uint64{64, 64}},
		"gemma3 post norm":      {"gemma3-d64-q8_0.gguf", "blk.0.post_ffw_norm.weight", []uint64{32}},
		"gemma3 output":         {"gemma3-d64-q8_0.gguf", "blk.1.attn_output.weight", []uint64{64, 64}},
		"phi3 fused qkv":        {"phi3-d64-q8_0.gguf", "blk.0.attn_qkv.weight", []uint64{64, 96}},
		"phi3 fused gate-up":    {"phi3-d64-q8_0.gguf", "blk.1.ffn_up.weight", []uint64{64, 192}},
		"qwen3moe experts":      {"qwen3moe-d64-q8_0.gguf", "blk.0.ffn_up_exps.weight", []uint64{64, 64, 3}},
		"qwen3moe expert width": {"qwen3moe-d64-q8_0.gguf", "blk.1.ffn_down_exps.weight", []uint64{32, 64, 4}},
		"qwen3moe router":       {"qwen3moe-d64-q8_0.gguf", "blk.1.ffn_gate_inp.weight", []uint64{64, 5}},
		"qwen3moe 2-D experts":  {"qwen3moe-d64-q8_0.gguf", "blk.0.ffn_gate_exps.weight", []uint64{64, 256}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := rewriteFixture(t, c.file, c.tensor, c.dims)
			_, err := New(f, testConfig())
			require.Error(t, err)
			require.ErrorContains(t, err, c.tensor)
		})
	}
}

// TestArchRefusesUnknown checks that an architecture the executor does not
// run is refused at load, with the list of those it does.
func TestArchRefusesUnknown(t *testing.T) {
	f := openModel(t, tinyModel("llama", gguf.TypeF32, false), func(w *gguf.Writer) {
		w.SetString("general.architecture", "mamba")
	})
	_, err := New(f, testConfig())
	require.ErrorContains(t, err, `architecture "mamba" is not supported`)
	for _, a := range model.Architectures {
		require.ErrorContains(t, err, a)
	}
}

// TestGeGLU checks the GELU activation against float64 over a wide range:
// ggml's half-float table is off by at most a half float's rounding of
// the input and of the result.
func TestGeGLU(t *testing.T) {
	for g := float32(-12); g < 12; g += 0.003 {
		gate, up := []float32{g}, []float32{1.5}
		gegluGo(gate, up)
		x := float64(g)
		want := 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*x*(1+0.044715*x*x))) * 1.5
		// d gelu/dx <= 1.13; the input moves by up to 2^-11 relative.
		tol := 1.5 * (1.13*math.Abs(x)*math.Pow(2, -11) + math.Abs(want)*math.Pow(2, -11) + 1e-7)
		require.InDelta(t, want, float64(gate[0]), tol, "g = %v", g)
	}
	gate := []float32{-10, -50, 10, 30}
	gegluGo(gate, []float32{2, 2, 2, 2})
	require.Equal(t, []float32{0, 0, 20, 60}, gate)
}

// TestMoERoute checks the router's choice and weights: the top k by
// probability in increasing expert order, ties to the lower index,
// renormalised or not, and scaled.
func TestMoERoute(t *testing.T) {
	softmax := func(l []float64) []float64 {
		var s float64
		out := make([]float64, len(l))
		for i, v := range l {
			out[i] = math.Exp(v)
			s += out[i]
		}
		for i := range out {
			out[i] /= s
		}
		return out
	}
	logits := []float32{0.5, 2, -1, 2, 1.5, 3}
	p := softmax([]float64{0.5, 2, -1, 2, 1.5, 3})
	cases := map[string]struct {
		k      int
		norm   bool
		scale  float32
		choice []int32
		weight []float64
	}{
		"top2 normalised":  {2, true, 0, []int32{1, 5}, []float64{p[1] / (p[1] + p[5]), p[5] / (p[1] + p[5])}},
		"top3 tie to low":  {3, false, 0, []int32{1, 3, 5}, []float64{p[1], p[3], p[5]}},
		"top1 scaled":      {1, false, 2.5, []int32{5}, []float64{2.5 * p[5]}},
		"top1 normalised":  {1, true, 1, []int32{5}, []float64{1}},
		"all six":          {6, true, 0, []int32{0, 1, 2, 3, 4, 5}, p},
		"top4 with scale1": {4, false, 1, []int32{1, 3, 4, 5}, []float64{p[1], p[3], p[4], p[5]}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			choice, weight := make([]int32, c.k), make([]float32, c.k)
			moeRoute(slices.Clone(logits), choice, weight, c.norm, c.scale)
			require.Equal(t, c.choice, choice)
			for i, w := range c.weight {
				require.InDelta(t, w, float64(weight[i]), 1e-6)
			}
		})
	}
}

// geluFloatTolerance is refTolerance for float weights in a model with
// GELU, whose activation ggml (and so the executor) reads from a
// half-float table.
const geluFloatTolerance = 1e-3

// archModel is a small random model of arch with each architecture's
// peculiarities switched on: a head dim that is not dim/heads (qwen3,
// qwen3moe, gemma3), partial rotary (phi3), six experts of which two are
// used (qwen3moe), and for gemma3 one KV head, a tied output and a
// five-position window on layers 0 and 1 of three.
func archModel(arch string, typ gguf.TensorType) synth.Model {
	m := synth.Model{Arch: arch, Dim: 64, Layers: 3, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 300, Type: typ, Seed: 9, ContextLength: 512}
	switch arch {
	case "qwen3":
		m.HeadDim = 32
	case "qwen3moe":
		m.HeadDim = 32
		m.Experts, m.ExpertsUsed, m.ExpertFFN = 6, 2, 64
	case "phi3":
		m.RopeDims = 12
	case "gemma3":
		m.HeadDim, m.KVHeads, m.Tied = 32, 1, true
		m.SlidingWindow, m.SlidingPattern = 5, 3
	}
	return m
}

// TestArchMatchesReference checks the new architectures against the
// float64 reference on random models: with F32 weights to float32
// rounding (so that a small slip, a wrong window edge or a missing
// renormalisation, cannot hide in the 8-bit rounding of quantized
// activations), with F16 K/V, and with Q8_0 weights; each alone (a
// prompt in one step, then decode steps) and two sequences batched,
// prefilled in chunks of 3 through 4-token blocks.
func TestArchMatchesReference(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen3moe", "phi3", "gemma3"} {
		for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeQ8_0} {
			t.Run(arch+"/"+typ.String(), func(t *testing.T) {
				t.Parallel()
				m := archModel(arch, typ)
				f := openModel(t, m, nil)
				tol := refTolerance[typ]
				if arch == "gemma3" && typ == gguf.TypeF32 {
					// GELU from a half-float table: float32 noise that
					// tips an input across a half-float rounding step
					// moves that activation by 2⁻¹¹ (the reference rounds
					// the same way, but not always on the same side).
					tol = geluFloatTolerance
				}
				for _, kv := range []string{"f32", "f16"} {
					cfg := testConfig()
					cfg.KVType = kv
					checkAgainstRef(t, f, cfg, randomTokens(21, 23, m.Vocab), 3, tol)
				}
				cfg := testConfig()
				cfg.BlockSize, cfg.KVBlocks = 4, 32
				prompts := [][]int32{randomTokens(22, 17, m.Vocab), randomTokens(23, 9, m.Vocab)}
				checkBatchAgainstRef(t, f, cfg, prompts, 3, 5, tol)
			})
		}
	}
}
