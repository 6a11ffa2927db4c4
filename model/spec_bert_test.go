package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

var (
	specBert  = synth.Model{Arch: "bert", Name: "bge-tiny", Dim: 64, Layers: 2, Heads: 4, FFN: 128, Vocab: 40, Type: gguf.TypeF16, ContextLength: 128, Pooling: "cls"}
	specNomic = synth.Model{Arch: "nomic-bert", Dim: 64, Layers: 2, Heads: 4, FFN: 96, Vocab: 40, Type: gguf.TypeQ8_0}
)

func TestSpecEncoders(t *testing.T) {
	s, err := SpecFromFile(specTestFile(t, specBert, nil))
	require.NoError(t, err)
	require.True(t, s.Encoder)
	require.True(t, s.PosEmbed && s.GELU && s.QKVBias && s.AttnOutBias && s.FFNBias)
	require.False(t, s.FusedQKV)
	require.Equal(t, PoolingCLS, s.Pooling)
	require.Equal(t, 2, s.TokenTypes)
	require.Equal(t, 40, s.Vocab)
	require.Equal(t, 128, s.ContextLength)
	require.InDelta(t, 1e-12, s.NormEps, 1e-18)
	require.Zero(t, s.RMSEps)
	require.False(t, s.Matryoshka)

	s, err = SpecFromFile(specTestFile(t, specNomic, nil))
	require.NoError(t, err)
	require.True(t, s.Encoder && s.FusedQKV)
	require.False(t, s.PosEmbed || s.GELU || s.QKVBias || s.AttnOutBias || s.FFNBias)
	require.Equal(t, PoolingMean, s.Pooling)
	require.Equal(t, 1000.0, s.RopeBase)
	require.Equal(t, 16, s.RopeDims)
	require.True(t, s.RopeNeox)

	// Matryoshka: llmd's key, or a known model's name.
	m := specNomic
	m.Matryoshka = true
	s, err = SpecFromFile(specTestFile(t, m, nil))
	require.NoError(t, err)
	require.True(t, s.Matryoshka)
	m = specNomic
	m.Name = "nomic-embed-text-v1.5"
	s, err = SpecFromFile(specTestFile(t, m, nil))
	require.NoError(t, err)
	require.True(t, s.Matryoshka)

	// No pooling_type: mean.
	f := specTestFile(t, specBert, func(w *gguf.Writer) { specWithout(t, w, []string{"bert.pooling_type"}, nil) })
	s, err = SpecFromFile(f)
	require.NoError(t, err)
	require.Equal(t, PoolingMean, s.Pooling)
	require.Equal(t, "mean", s.Pooling.String())
}

func TestSpecRefusesBadEncoders(t *testing.T) {
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
		"pooling none":      {specBert, set("bert.pooling_type", uint32(0)), "pooling_type is none"},
		"pooling rank":      {specBert, set("bert.pooling_type", uint32(4)), "pooling_type is rank"},
		"pooling unknown":   {specBert, set("bert.pooling_type", uint32(9)), "pooling_type is 9"},
		"causal":            {specBert, set("bert.attention.causal", true), "causal"},
		"no layernorm eps":  {specBert, func(w *gguf.Writer) { specWithout(t, w, []string{"bert.attention.layer_norm_epsilon"}, nil) }, "layer_norm_epsilon is missing"},
		"no positions":      {specBert, drop("position_embd.weight"), `"position_embd.weight" is missing`},
		"no embd norm bias": {specBert, drop("token_embd_norm.bias"), `"token_embd_norm.bias" is missing`},
		"no out norm":       {specBert, drop("blk.1.layer_output_norm.weight"), `"blk.1.layer_output_norm.weight" is missing`},
		"half the biases":   {specBert, drop("blk.1.attn_k.bias"), `"blk.1.attn_k.bias" is missing`},
		"nomic no gate":     {specNomic, drop("blk.0.ffn_gate.weight"), `"blk.0.ffn_gate.weight" is missing`},
		"nomic moe":         {specNomic, set("nomic-bert.moe_every_n_layers", uint32(2)), "nomic-bert-moe"},
		"nomic experts":     {specNomic, set("nomic-bert.expert_count", uint32(8)), "mixture-of-experts"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := SpecFromFile(specTestFile(t, c.m, c.edit))
			require.ErrorContains(t, err, c.contains)
		})
	}
}
