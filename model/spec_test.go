package model

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// specTestFile writes m, lets edit change the writer, and parses it.
func specTestFile(t *testing.T, m synth.Model, edit func(w *gguf.Writer)) *gguf.File {
	t.Helper()
	w, err := m.Writer()
	require.NoError(t, err)
	if edit != nil {
		edit(w)
	}
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	return f
}

// specWithout replaces w by a writer without the metadata keys and
// tensors named (tests only): it writes w, parses the result and copies
// what is kept, keys in sorted order and tensors in file order.
func specWithout(t *testing.T, w *gguf.Writer, keys, tensors []string) {
	t.Helper()
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	nw := gguf.NewWriter()
	for _, k := range f.Keys() {
		if !slices.Contains(keys, k) {
			v, _ := f.Value(k)
			require.NoError(t, nw.Set(k, v))
		}
	}
	for _, ti := range f.Tensors {
		if !slices.Contains(tensors, ti.Name) {
			require.NoError(t, nw.AddTensorData(ti.Name, ti.Dims, ti.Type, f.TensorData(ti)))
		}
	}
	*w = *nw
}

var specLlama = synth.Model{Arch: "llama", Name: "tiny", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, Vocab: 40, Type: gguf.TypeF16, ContextLength: 512}

func TestSpecFromRandomModels(t *testing.T) {
	cases := map[string]struct {
		m    synth.Model
		want Spec
	}{
		"llama untied": {specLlama, Spec{
			Arch: "llama", Name: "tiny", Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, ValueDim: 16,
			FFN: 128, Vocab: 40, ContextLength: 512, RopeBase: 10000, RopeDims: 16, RMSEps: float64(float32(1e-5)),
			FileType:   "F16",
			ParamCount: 64*40*2 + 64 + 2*(64*64*2+64*32*2+64*128*3+64*2),
		}},
		"qwen2 tied": {synth.Model{Arch: "qwen2", Dim: 64, Layers: 1, Heads: 4, KVHeads: 1, FFN: 64, Vocab: 30, Type: gguf.TypeQ8_0, Tied: true}, Spec{
			Arch: "qwen2", Layers: 1, Dim: 64, Heads: 4, KVHeads: 1, HeadDim: 16, ValueDim: 16,
			FFN: 64, Vocab: 30, ContextLength: 2048, RopeBase: 1e6, RopeDims: 16, RMSEps: float64(float32(1e-6)),
			RopeNeox: true, TiedOutput: true, QKVBias: true, FileType: "Q8_0",
			ParamCount: 64*30 + 64 + (64*64*2 + 64*16*2 + 64*64*3 + 64*2 + 64 + 16*2),
		}},
		"head dim not dim/heads": {synth.Model{Arch: "llama", Dim: 64, Layers: 1, Heads: 2, HeadDim: 64, FFN: 64, Vocab: 4, Type: gguf.TypeF32}, Spec{
			Arch: "llama", Layers: 1, Dim: 64, Heads: 2, KVHeads: 2, HeadDim: 64, ValueDim: 64,
			FFN: 64, Vocab: 4, ContextLength: 2048, RopeBase: 10000, RopeDims: 64, RMSEps: float64(float32(1e-5)),
			FileType:   "F32",
			ParamCount: 64*4*2 + 64 + (64*128*2 + 64*128*2 + 64*64*3 + 64*2),
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := specTestFile(t, c.m, nil)
			s, err := SpecFromFile(f)
			require.NoError(t, err)
			var wb int64
			for _, ti := range f.Tensors {
				wb += int64(ti.Size)
			}
			c.want.WeightBytes = wb
			require.Equal(t, c.want, s)
		})
	}
}

func TestSpecKVBytesPerToken(t *testing.T) {
	// Llama 3.1 8B: 32 layers, 8 KV heads of 128: 128 KiB per token at F16.
	s := Spec{Layers: 32, KVHeads: 8, HeadDim: 128, ValueDim: 128}
	require.Equal(t, int64(131072), s.KVBytesPerToken(2))
	require.Equal(t, int64(65536), s.KVBytesPerToken(1))
}

func TestSpecDefaultsAndScaling(t *testing.T) {
	f := specTestFile(t, specLlama, func(w *gguf.Writer) {
		// Drop the optional keys to exercise llama.cpp's defaults.
		specWithout(t, w, []string{"llama.attention.head_count_kv", "llama.rope.freq_base", "llama.rope.dimension_count"}, nil)
		for l := range 2 {
			for _, n := range []string{"attn_k.weight", "attn_v.weight"} {
				specWithout(t, w, nil, []string{"blk." + string(rune('0'+l)) + "." + n})
				require.NoError(t, w.AddTensor("blk."+string(rune('0'+l))+"."+n, []uint64{64, 64}, gguf.TypeF32, make([]float32, 64*64)))
			}
		}
		w.SetFloat32("llama.rope.scaling.factor", 8)
		w.SetUint32("llama.rope.scaling.original_context_length", 8192)
	})
	s, err := SpecFromFile(f)
	require.NoError(t, err)
	require.Equal(t, 4, s.KVHeads, "head_count_kv defaults to head_count")
	require.Equal(t, 10000.0, s.RopeBase)
	require.Equal(t, 16, s.RopeDims)
	require.Equal(t, RopeScaling{Type: "linear", Factor: 8, OriginalContext: 8192}, s.RopeScaling)
}

func TestSpecRefusesBadModels(t *testing.T) {
	set := func(k string, v any) func(w *gguf.Writer) {
		return func(w *gguf.Writer) { require.NoError(t, w.Set(k, v)) }
	}
	drop := func(name string) func(w *gguf.Writer) {
		return func(w *gguf.Writer) { specWithout(t, w, nil, []string{name}) }
	}
	cases := map[string]struct {
		m        synth.Model
		edit     func(w *gguf.Writer)
		contains string
	}{
		"no architecture": {specLlama, func(w *gguf.Writer) {
			specWithout(t, w, []string{"general.architecture"}, nil)
		}, "general.architecture is missing"},
		"other architecture":   {specLlama, set("general.architecture", "mamba"), `"mamba" is not supported (supported: bert, gemma3, llama, nomic-bert, phi3, qwen2, qwen3, qwen3moe)`},
		"mixture of experts":   {specLlama, set("llama.expert_count", uint32(8)), "mixture-of-experts llama models are not supported"},
		"missing layers":       {specLlama, set("llama.block_count", "two"), "llama.block_count"},
		"too many layers":      {specLlama, set("llama.block_count", uint32(1025)), "1025"},
		"zero heads":           {specLlama, set("llama.attention.head_count", uint32(0)), "head_count is 0"},
		"heads not multiple":   {specLlama, set("llama.attention.head_count_kv", uint32(3)), "not a multiple of 3 KV heads"},
		"kv heads > heads":     {specLlama, set("llama.attention.head_count_kv", uint32(8)), "not a multiple"},
		"head dim zero":        {specLlama, set("llama.embedding_length", uint32(3)), "head dimension 0"},
		"odd rope dims":        {specLlama, set("llama.rope.dimension_count", uint32(7)), "even"},
		"rope dims > head dim": {specLlama, set("llama.rope.dimension_count", uint32(32)), "at most the head dimension"},
		"negative rope base":   {specLlama, set("llama.rope.freq_base", float32(-1)), "freq_base"},
		"eps missing": {specLlama, func(w *gguf.Writer) {
			require.NoError(t, w.Set("llama.attention.layer_norm_rms_epsilon", "x"))
		}, "want a float"},
		"eps zero":             {specLlama, set("llama.attention.layer_norm_rms_epsilon", float32(0)), "epsilon"},
		"unknown rope scaling": {specLlama, set("llama.rope.scaling.type", "magic"), `"magic"`},
		"yarn without factor":  {specLlama, set("llama.rope.scaling.type", "yarn"), "factor"},
		"missing embedding":    {specLlama, drop("token_embd.weight"), `"token_embd.weight" is missing`},
		"missing ffn_up":       {specLlama, drop("blk.1.ffn_up.weight"), `"blk.1.ffn_up.weight" is missing`},
		"missing output norm":  {specLlama, drop("output_norm.weight"), "output_norm"},
		"wrong q shape": {specLlama, func(w *gguf.Writer) {
			specWithout(t, w, nil, []string{"blk.0.attn_q.weight"})
			require.NoError(t, w.AddTensor("blk.0.attn_q.weight", []uint64{64, 32}, gguf.TypeF32, make([]float32, 64*32)))
		}, "has shape [64 32], want [64 64]"},
		"wrong output shape": {specLlama, func(w *gguf.Writer) {
			specWithout(t, w, nil, []string{"output.weight"})
			require.NoError(t, w.AddTensor("output.weight", []uint64{64, 41}, gguf.TypeF32, make([]float32, 64*41)))
		}, `"output.weight" has shape`},
		"qwen2 missing bias": {synth.Model{Arch: "qwen2", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64, Vocab: 8, Type: gguf.TypeF32},
			drop("blk.1.attn_v.bias"), `"blk.1.attn_v.bias" is missing`},
		"vocab size mismatch": {specLlama, set("llama.vocab_size", uint32(41)), "vocab_size 41"},
		"more tokens than rows": {specLlama, func(w *gguf.Writer) {
			w.SetStrings("tokenizer.ggml.tokens", make([]string, 41))
		}, "41 tokens"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := specTestFile(t, c.m, c.edit)
			_, err := SpecFromFile(f)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.contains)
			require.Regexp(t, "^model: ", err.Error())
		})
	}
}

// specArch returns a small random model of arch with its peculiarities
// switched on.
func specArch(arch string) synth.Model {
	m := synth.Model{Arch: arch, Dim: 64, Layers: 3, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 40, Type: gguf.TypeF32, ContextLength: 256}
	switch arch {
	case "qwen3":
		m.HeadDim = 32
	case "qwen3moe":
		m.HeadDim = 32
		m.Experts, m.ExpertsUsed, m.ExpertFFN = 6, 2, 48
	case "phi3":
		m.RopeDims = 12
	case "gemma3":
		m.HeadDim, m.KVHeads = 32, 1
		m.SlidingWindow, m.SlidingPattern, m.RopeBaseSWA = 5, 3, 20000
	}
	return m
}

func TestSpecArchitectures(t *testing.T) {
	cases := map[string]func(t *testing.T, s Spec){
		"qwen3": func(t *testing.T, s Spec) {
			require.True(t, s.QKNorm)
			require.True(t, s.RopeNeox)
			require.Equal(t, 32, s.HeadDim)
			require.Zero(t, s.Experts)
		},
		"qwen3moe": func(t *testing.T, s Spec) {
			require.True(t, s.QKNorm)
			require.Equal(t, []int{6, 2, 48}, []int{s.Experts, s.ExpertsUsed, s.ExpertFFN})
			require.True(t, s.ExpertWeightsNorm)
			require.Zero(t, s.ExpertWeightsScale)
		},
		"phi3": func(t *testing.T, s Spec) {
			require.True(t, s.FusedQKV)
			require.True(t, s.FusedGateUp)
			require.True(t, s.RopeNeox)
			require.Equal(t, 12, s.RopeDims)
			require.Equal(t, 16, s.HeadDim)
			require.False(t, s.QKNorm)
		},
		"gemma3": func(t *testing.T, s Spec) {
			require.True(t, s.QKNorm && s.GELU && s.PostNorms)
			require.Equal(t, 8.0, s.EmbedScale)
			require.InDelta(t, 1/math.Sqrt(32), s.AttnScale, 1e-15)
			require.Equal(t, []int{5, 3}, []int{s.SlidingWindow, s.SlidingPattern})
			require.Equal(t, 20000.0, s.RopeBaseSWA)
			require.Equal(t, []bool{true, true, false}, []bool{s.SlidingLayer(0), s.SlidingLayer(1), s.SlidingLayer(2)})
		},
		"llama": func(t *testing.T, s Spec) {
			require.False(t, s.RopeNeox)
			require.False(t, s.SlidingLayer(0))
			require.Zero(t, s.AttnScale)
		},
	}
	for arch, check := range cases {
		t.Run(arch, func(t *testing.T) {
			s, err := SpecFromFile(specTestFile(t, specArch(arch), nil))
			require.NoError(t, err)
			require.Equal(t, arch, s.Arch)
			check(t, s)
		})
	}
}

func TestSpecRefusesBadArchModels(t *testing.T) {
	set := func(k string, v any) func(w *gguf.Writer) {
		return func(w *gguf.Writer) { require.NoError(t, w.Set(k, v)) }
	}
	drop := func(name string) func(w *gguf.Writer) {
		return func(w *gguf.Writer) { specWithout(t, w, nil, []string{name}) }
	}
	reshape := func(name string, dims ...uint64) func(w *gguf.Writer) {
		return func(w *gguf.Writer) {
			specWithout(t, w, nil, []string{name})
			n := uint64(1)
			for _, d := range dims {
				n *= d
			}
			require.NoError(t, w.AddTensor(name, dims, gguf.TypeF32, make([]float32, n)))
		}
	}
	cases := map[string]struct {
		arch     string
		edit     func(w *gguf.Writer)
		contains string
	}{
		"qwen3 missing k norm":   {"qwen3", drop("blk.2.attn_k_norm.weight"), `"blk.2.attn_k_norm.weight" is missing`},
		"qwen3 q norm shape":     {"qwen3", reshape("blk.0.attn_q_norm.weight", 16), `"blk.0.attn_q_norm.weight" has shape [16], want [32]`},
		"moe no expert count":    {"qwen3moe", func(w *gguf.Writer) { specWithout(t, w, []string{"qwen3moe.expert_count"}, nil) }, "expert_count is missing"},
		"moe too many used":      {"qwen3moe", set("qwen3moe.expert_used_count", uint32(7)), "expert_used_count 7 exceeds expert_count 6"},
		"moe expert stack shape": {"qwen3moe", reshape("blk.1.ffn_up_exps.weight", 64, 48, 5), `"blk.1.ffn_up_exps.weight" has shape [64 48 5], want [64 48 6]`},
		"moe router missing":     {"qwen3moe", drop("blk.0.ffn_gate_inp.weight"), `"blk.0.ffn_gate_inp.weight" is missing`},
		"phi3 qkv shape":         {"phi3", reshape("blk.0.attn_qkv.weight", 64, 96), `"blk.0.attn_qkv.weight" has shape [64 96], want [64 128]`},
		"phi3 gate-up shape":     {"phi3", reshape("blk.1.ffn_up.weight", 64, 96), `"blk.1.ffn_up.weight" has shape [64 96], want [64 192]`},
		"phi3 longrope": {"phi3", func(w *gguf.Writer) {
			require.NoError(t, w.AddTensor("rope_factors_long.weight", []uint64{6}, gguf.TypeF32, make([]float32, 6)))
		}, "LongRoPE"},
		"gemma3 post norm":     {"gemma3", drop("blk.1.post_ffw_norm.weight"), `"blk.1.post_ffw_norm.weight" is missing`},
		"gemma3 swa base":      {"gemma3", set("gemma3.rope.freq_base_swa", float32(-1)), "freq_base_swa"},
		"gemma3 pattern array": {"gemma3", set("gemma3.attention.sliding_window_pattern", []int32{1, 1, 0}), "sliding_window_pattern"},
		"gemma3 softcap":       {"gemma3", set("gemma3.final_logit_softcapping", float32(-30)), "final_logit_softcapping"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := SpecFromFile(specTestFile(t, specArch(c.arch), c.edit))
			require.Error(t, err)
			require.Contains(t, err.Error(), c.contains)
			require.Regexp(t, "^model: ", err.Error())
		})
	}
}
