package gguf_test

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// ggufFixture is what fixtures/README.md says about a file.
type ggufFixture struct {
	spec      model.Spec // the fields compared; others are filled from the file
	matrix    gguf.TensorType
	q6k       []string // tensors that are Q6_K instead of matrix
	tokenizer string
	tokens    int
	merges    int
	bos, eos  int64 // -1: absent
	normScale float64
	embStd    float64
}

func ggufFixtures() map[string]ggufFixture {
	spm := func(ft string, typ gguf.TensorType) ggufFixture {
		return ggufFixture{
			spec: model.Spec{Arch: "llama", Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, ValueDim: 16, FFN: 192,
				Vocab: 32000, ContextLength: 1024, RopeBase: 10000, RopeDims: 16, RMSEps: float64(float32(1e-5)),
				FileType: ft, ParamCount: 4194624},
			matrix: typ, tokenizer: "llama", tokens: 32000, bos: 1, eos: 2, normScale: 16, embStd: 1,
		}
	}
	return map[string]ggufFixture{
		"llama-spm-d64-f32.gguf":  spm("F32", gguf.TypeF32),
		"llama-spm-d64-f16.gguf":  spm("F16", gguf.TypeF16),
		"llama-spm-d64-bf16.gguf": spm("BF16", gguf.TypeBF16),
		"llama-spm-d64-q8_0.gguf": spm("Q8_0", gguf.TypeQ8_0),
		"llama-spm-d64-q4_0.gguf": spm("Q4_0", gguf.TypeQ4_0),
		"llama-spm-d64-q5_0.gguf": spm("Q5_0", gguf.TypeQ5_0),
		"llama-spm-d256-q4_k_m.gguf": {
			spec: model.Spec{Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 4, HeadDim: 64, ValueDim: 64, FFN: 512,
				Vocab: 32000, ContextLength: 1024, RopeBase: 10000, RopeDims: 64, RMSEps: float64(float32(1e-5)),
				FileType: "Q4_K_M", ParamCount: 17696000},
			matrix: gguf.TypeQ4_K, q6k: []string{"output.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"},
			tokenizer: "llama", tokens: 32000, bos: 1, eos: 2, normScale: 4, embStd: 1,
		},
		"llama3-bpe-d64-q8_0.gguf": {
			spec: model.Spec{Arch: "llama", Layers: 2, Dim: 64, Heads: 4, KVHeads: 1, HeadDim: 16, ValueDim: 16, FFN: 192,
				Vocab: 128256, ContextLength: 1024, RopeBase: 500000, RopeDims: 16, RMSEps: float64(float32(1e-5)),
				TiedOutput: true, FileType: "Q8_0", ParamCount: 8302912},
			matrix: gguf.TypeQ8_0, tokenizer: "gpt2", tokens: 128256, merges: 280147, bos: 128000, eos: 128001, normScale: 8, embStd: 0.0625,
		},
		"qwen2-d64-q8_0.gguf": {
			spec: model.Spec{Arch: "qwen2", Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, ValueDim: 16, FFN: 192,
				Vocab: 151936, ContextLength: 1024, RopeBase: 1000000, RopeDims: 16, RMSEps: float64(float32(1e-6)),
				TiedOutput: true, QKVBias: true, RopeNeox: true, FileType: "Q8_0", ParamCount: 9822784},
			matrix: gguf.TypeQ8_0, tokenizer: "gpt2", tokens: 151936, merges: 151387, bos: -1, eos: 151645, normScale: 8, embStd: 0.0625,
		},
	}
}

func TestGGUFFixturesMetadataAndShapes(t *testing.T) {
	dir := fixtures.Dir(t)
	for file, want := range ggufFixtures() {
		t.Run(file, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join(dir, file))
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, uint32(3), f.Version)
			require.Equal(t, 32, f.Alignment)

			s, err := model.SpecFromFile(f)
			require.NoError(t, err)
			w := want.spec
			w.Name, w.WeightBytes = s.Name, s.WeightBytes
			require.Equal(t, w, s)
			require.Equal(t, int64(2*w.Layers*w.KVHeads*w.HeadDim*2), s.KVBytesPerToken(2))

			for _, ti := range f.Tensors {
				switch {
				case len(ti.Dims) == 1:
					require.Equal(t, gguf.TypeF32, ti.Type, ti.Name)
				case slices.Contains(want.q6k, ti.Name):
					require.Equal(t, gguf.TypeQ6_K, ti.Type, ti.Name)
				default:
					require.Equal(t, want.matrix, ti.Type, ti.Name)
				}
				require.NotNil(t, f.TensorData(ti))
			}

			tokModel, _ := f.String("tokenizer.ggml.model")
			require.Equal(t, want.tokenizer, tokModel)
			tokens, ok := f.Strings("tokenizer.ggml.tokens")
			require.True(t, ok)
			require.Len(t, tokens, want.tokens)
			types, ok := f.Int32s("tokenizer.ggml.token_type")
			require.True(t, ok)
			require.Len(t, types, want.tokens)
			if want.merges > 0 {
				merges, ok := f.Strings("tokenizer.ggml.merges")
				require.True(t, ok)
				require.Len(t, merges, want.merges)
			} else {
				scores, ok := f.Float32s("tokenizer.ggml.scores")
				require.True(t, ok)
				require.Len(t, scores, want.tokens)
				require.Equal(t, "<0x00>", tokens[3])
				require.Equal(t, int32(6), types[3], "byte token")
			}
			bos, ok := f.Uint("tokenizer.ggml.bos_token_id")
			if want.bos < 0 {
				require.False(t, ok)
			} else {
				require.True(t, ok)
				require.Equal(t, uint64(want.bos), bos)
			}
			eos, _ := f.Uint("tokenizer.ggml.eos_token_id")
			require.Equal(t, uint64(want.eos), eos)

			// The weights are the README's draws: norms U(0.75, 1.25) (the
			// output norm scaled), token_embd N(0, embStd²).
			norm := ggufFixtureValues(t, f, "blk.0.attn_norm.weight")
			require.InDelta(t, 1.0, ggufMean(norm), 0.1)
			for _, v := range norm {
				require.True(t, v >= 0.75 && v <= 1.25, "attn_norm value %v", v)
			}
			out := ggufFixtureValues(t, f, "output_norm.weight")
			for _, v := range out {
				require.True(t, float64(v) >= 0.75*want.normScale && float64(v) <= 1.25*want.normScale, "output_norm value %v", v)
			}
			emb := ggufFixtureValues(t, f, "token_embd.weight")
			require.InDelta(t, 0, ggufMean(emb), 0.02*want.embStd)
			require.InEpsilon(t, want.embStd, ggufStd(emb), 0.03)
		})
	}
}

// TestGGUFFixturesDequantizeLikeF32 checks every tensor of the F16, BF16,
// Q8_0, Q4_0 and Q5_0 files (quantized by llama-quantize from the F32 file)
// against the F32 file, within each type's precision, and reports whether
// this package's quantizers reproduce llama-quantize's bytes.
func TestGGUFFixturesDequantizeLikeF32(t *testing.T) {
	dir := fixtures.Dir(t)
	ref, err := gguf.Open(filepath.Join(dir, "llama-spm-d64-f32.gguf"))
	require.NoError(t, err)
	defer ref.Close()
	for _, name := range []string{"f16", "bf16", "q8_0", "q4_0", "q5_0"} {
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join(dir, "llama-spm-d64-"+name+".gguf"))
			require.NoError(t, err)
			defer f.Close()
			require.Len(t, f.Tensors, len(ref.Tensors))
			var blocks, same int
			for _, rt := range ref.Tensors {
				ti, ok := f.Tensor(rt.Name)
				require.True(t, ok, rt.Name)
				require.Equal(t, rt.Dims, ti.Dims, rt.Name)
				want := ggufFixtureValues(t, ref, rt.Name)
				got := ggufFixtureValues(t, f, rt.Name)
				gguf.QuantRequireClose(t, ti.Type, want, got)

				// Byte-for-byte against our quantizer.
				if ti.Type != gguf.TypeF32 {
					ours, err := gguf.Quantize(ti.Type, want)
					require.NoError(t, err)
					theirs := f.TensorData(ti)
					bb := ti.Type.BlockBytes()
					for b := 0; b < len(ours); b += bb {
						blocks++
						if string(ours[b:b+bb]) == string(theirs[b:b+bb]) {
							same++
						}
					}
				}
			}
			if blocks > 0 {
				t.Logf("%s: %d of %d blocks identical to llama-quantize's", name, same, blocks)
				require.Equal(t, blocks, same, "ggml's reference quantizers, which llama-quantize uses without an imatrix, are bit-exact here")
			}
		})
	}
}

// TestGGUFFixtureKQuants checks the Q4_K_M file's K-quant tensors against
// the distributions they were drawn from (there is no F32 twin of it), and
// that requantizing them with this package's quantizers stays close.
func TestGGUFFixtureKQuants(t *testing.T) {
	dir := fixtures.Dir(t)
	f, err := gguf.Open(filepath.Join(dir, "llama-spm-d256-q4_k_m.gguf"))
	require.NoError(t, err)
	defer f.Close()
	cases := map[string]struct {
		typ gguf.TensorType
		std float64
	}{
		"token_embd.weight":        {gguf.TypeQ4_K, 1},
		"blk.0.attn_q.weight":      {gguf.TypeQ4_K, 1 / math.Sqrt(256)},
		"blk.0.ffn_down.weight":    {gguf.TypeQ4_K, 0.5 / math.Sqrt(512)},
		"output.weight":            {gguf.TypeQ6_K, 1 / math.Sqrt(256)},
		"blk.1.attn_v.weight":      {gguf.TypeQ6_K, 1 / math.Sqrt(256)},
		"blk.1.ffn_down.weight":    {gguf.TypeQ6_K, 0.5 / math.Sqrt(512)},
		"blk.1.attn_output.weight": {gguf.TypeQ4_K, 0.5 / math.Sqrt(256)},
	}
	for name, c := range cases {
		ti, ok := f.Tensor(name)
		require.True(t, ok, name)
		require.Equal(t, c.typ, ti.Type, name)
		v := ggufFixtureValues(t, f, name)
		require.InDelta(t, 0, ggufMean(v), 0.05*c.std, name)
		tol := 0.05
		if len(v) < 1<<17 {
			tol = 0.08 // fewer draws
		}
		require.InEpsilon(t, c.std, ggufStd(v), tol, name)
		raw, err := gguf.Quantize(c.typ, v)
		require.NoError(t, err)
		again := make([]float32, len(v))
		require.NoError(t, gguf.Dequantize(c.typ, raw, again))
		gguf.QuantRequireClose(t, c.typ, v, again)
	}
}

func ggufFixtureValues(t *testing.T, f *gguf.File, name string) []float32 {
	t.Helper()
	ti, ok := f.Tensor(name)
	require.True(t, ok, name)
	out := make([]float32, ti.Elements())
	require.NoError(t, gguf.Dequantize(ti.Type, f.TensorData(ti), out), name)
	return out
}

func ggufMean(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

func ggufStd(v []float32) float64 {
	m := ggufMean(v)
	var s float64
	for _, x := range v {
		s += (float64(x) - m) * (float64(x) - m)
	}
	return math.Sqrt(s / float64(len(v)))
}
