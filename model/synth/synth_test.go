package synth

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

func TestModelIsDeterministic(t *testing.T) {
	write := func(seed uint64) []byte {
		w, err := Model{Arch: "llama", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 50, Type: gguf.TypeQ4_K, Seed: seed}.Writer()
		require.NoError(t, err)
		var buf bytes.Buffer
		_, err = w.WriteTo(&buf)
		require.NoError(t, err)
		return buf.Bytes()
	}
	a, b, c := write(1), write(1), write(2)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)

	// Rows of 64 or 96 are not whole Q4_K blocks: llama-quantize's
	// fallback, Q5_0, is used instead.
	f, err := gguf.Parse(a)
	require.NoError(t, err)
	for _, ti := range f.Tensors {
		if len(ti.Dims) == 2 {
			require.Equal(t, gguf.TypeQ5_0, ti.Type, ti.Name)
		} else {
			require.Equal(t, gguf.TypeF32, ti.Type, ti.Name)
		}
	}
	ft, _ := f.Uint("general.file_type")
	require.Equal(t, uint64(14), ft)

	_, err = Model{Arch: "gpt2", Dim: 64, Layers: 1, Heads: 1, FFN: 64, Vocab: 2, Type: gguf.TypeF16}.Writer()
	require.ErrorContains(t, err, "gpt2")
	_, err = Model{Arch: "llama", Dim: 64, Layers: 1, Heads: 3, KVHeads: 2, FFN: 64, Vocab: 2, Type: gguf.TypeF16}.Writer()
	require.Error(t, err)
	_, err = Model{Arch: "llama", Dim: 64, Layers: 0, Heads: 1, FFN: 64, Vocab: 2, Type: gguf.TypeF16}.Writer()
	require.ErrorContains(t, err, "layers")
	_, err = Model{Arch: "llama", Dim: 64, Layers: 1, Heads: 1, FFN: 64, Vocab: 2, Type: gguf.TensorType(3)}.Writer()
	require.Error(t, err)
}

// TestModelArchitectures checks each architecture's tensor layout: the
// names llama.cpp's loaders look for, with their shapes.
func TestModelArchitectures(t *testing.T) {
	cases := map[string]struct {
		m    Model
		want map[string][]uint64
		none []string
	}{
		"bert": {Model{Arch: "bert", Dim: 64, Layers: 1, Heads: 4, FFN: 96, Vocab: 8, Type: gguf.TypeQ8_0},
			map[string][]uint64{"position_embd.weight": {64, 512}, "token_types.weight": {64, 2}, "blk.0.attn_q.bias": {64},
				"blk.0.ffn_up.bias": {96}, "blk.0.layer_output_norm.bias": {64}},
			[]string{"blk.0.attn_qkv.weight", "output.weight", "output_norm.weight", "blk.0.ffn_gate.weight"}},
		"nomic-bert": {Model{Arch: "nomic-bert", Dim: 64, Layers: 1, Heads: 4, FFN: 96, Vocab: 8, Type: gguf.TypeQ8_0},
			map[string][]uint64{"blk.0.attn_qkv.weight": {64, 192}, "blk.0.ffn_gate.weight": {64, 96}, "token_embd_norm.weight": {64}},
			[]string{"position_embd.weight", "blk.0.attn_q.bias", "blk.0.ffn_up.bias", "output.weight"}},
		"qwen3": {Model{Arch: "qwen3", Dim: 64, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 96, Vocab: 8, Type: gguf.TypeQ8_0},
			map[string][]uint64{"blk.0.attn_q.weight": {64, 128}, "blk.0.attn_q_norm.weight": {32}, "blk.0.attn_output.weight": {128, 64}},
			[]string{"blk.0.attn_q.bias"}},
		"qwen3moe": {Model{Arch: "qwen3moe", Dim: 64, Layers: 1, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 8, Type: gguf.TypeQ8_0, Experts: 4, ExpertsUsed: 2, ExpertFFN: 32},
			map[string][]uint64{"blk.0.ffn_gate_inp.weight": {64, 4}, "blk.0.ffn_gate_exps.weight": {64, 32, 4}, "blk.0.ffn_down_exps.weight": {32, 64, 4}},
			[]string{"blk.0.ffn_gate.weight"}},
		"phi3": {Model{Arch: "phi3", Dim: 64, Layers: 1, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 8, Type: gguf.TypeF16, RopeDims: 12},
			map[string][]uint64{"blk.0.attn_qkv.weight": {64, 128}, "blk.0.ffn_up.weight": {64, 192}},
			[]string{"blk.0.attn_q.weight", "blk.0.ffn_gate.weight"}},
		"gemma3": {Model{Arch: "gemma3", Dim: 64, Layers: 1, Heads: 4, KVHeads: 1, HeadDim: 32, FFN: 96, Vocab: 8, Type: gguf.TypeF32},
			map[string][]uint64{"blk.0.post_attention_norm.weight": {64}, "blk.0.post_ffw_norm.weight": {64}, "blk.0.attn_k_norm.weight": {32}},
			nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := c.m.Writer()
			require.NoError(t, err)
			var buf bytes.Buffer
			_, err = w.WriteTo(&buf)
			require.NoError(t, err)
			f, err := gguf.Parse(buf.Bytes())
			require.NoError(t, err)
			for n, dims := range c.want {
				ti, ok := f.Tensor(n)
				require.True(t, ok, n)
				require.Equal(t, dims, ti.Dims, n)
			}
			for _, n := range c.none {
				_, ok := f.Tensor(n)
				require.False(t, ok, n)
			}
			if name == "qwen3moe" {
				ti, _ := f.Tensor("blk.0.ffn_gate_inp.weight")
				require.Equal(t, gguf.TypeF32, ti.Type, "the router stays F32")
			}
		})
	}
	_, err := Model{Arch: "qwen3moe", Dim: 64, Layers: 1, Heads: 4, FFN: 64, Vocab: 2, Type: gguf.TypeF16, Experts: 2, ExpertsUsed: 3}.Writer()
	require.ErrorContains(t, err, "experts")
	_, err = Model{Arch: "phi3", Dim: 64, Layers: 1, Heads: 4, FFN: 64, Vocab: 2, Type: gguf.TypeF16, RopeDims: 7}.Writer()
	require.ErrorContains(t, err, "rope dims")
}

// TestMixTensorTypes checks the mixtures' per-tensor types against
// llama-quantize's choices for an eight-layer model: use_more_bits picks
// layers 0, 3, 6 and 7 of eight.
func TestMixTensorTypes(t *testing.T) {
	const layers = 8
	more := map[int]bool{0: true, 3: true, 6: true, 7: true}
	for _, mix := range []Mix{MixQ3_K_M, MixQ4_K_M, MixQ5_K_M} {
		t.Run(mix.String(), func(t *testing.T) {
			w, err := Model{Arch: "llama", Dim: 256, Layers: layers, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 64, Mix: mix, Seed: 1}.Writer()
			require.NoError(t, err)
			var buf bytes.Buffer
			_, err = w.WriteTo(&buf)
			require.NoError(t, err)
			f, err := gguf.Parse(buf.Bytes())
			require.NoError(t, err)
			got := map[string]gguf.TensorType{}
			for _, ti := range f.Tensors {
				got[ti.Name] = ti.Type
			}
			base := map[Mix]gguf.TensorType{MixQ3_K_M: gguf.TypeQ3_K, MixQ4_K_M: gguf.TypeQ4_K, MixQ5_K_M: gguf.TypeQ5_K}[mix]
			require.Equal(t, gguf.TypeQ6_K, got["output.weight"])
			require.Equal(t, base, got["token_embd.weight"])
			require.Equal(t, gguf.TypeF32, got["output_norm.weight"])
			for l := range layers {
				p := fmt.Sprintf("blk.%d.", l)
				v, down, out := base, base, base
				switch mix {
				case MixQ3_K_M:
					v, down, out = gguf.TypeQ4_K, gguf.TypeQ4_K, gguf.TypeQ4_K
					if l < 2 {
						v = gguf.TypeQ5_K
					}
				default:
					if more[l] {
						v, down = gguf.TypeQ6_K, gguf.TypeQ6_K
					}
				}
				require.Equal(t, v, got[p+"attn_v.weight"], p+"attn_v")
				require.Equal(t, down, got[p+"ffn_down.weight"], p+"ffn_down")
				require.Equal(t, out, got[p+"attn_output.weight"], p+"attn_output")
				for _, n := range []string{"attn_q", "attn_k", "ffn_gate", "ffn_up"} {
					require.Equal(t, base, got[p+n+".weight"], p+n)
				}
			}
			ft, _ := f.Uint("general.file_type")
			require.Equal(t, uint64(map[Mix]int{MixQ3_K_M: 12, MixQ4_K_M: 15, MixQ5_K_M: 17}[mix]), ft)
		})
	}

	// Tied embeddings take the output's type; rows of 64 fall back.
	w, err := Model{Arch: "llama", Dim: 64, Layers: 2, Heads: 4, FFN: 256, Vocab: 64, Mix: MixQ4_K_M, Tied: true}.Writer()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	for _, ti := range f.Tensors {
		switch ti.Name {
		case "token_embd.weight":
			require.Equal(t, gguf.TypeQ8_0, ti.Type) // the output rule: 64 is no whole Q4_K block
		case "blk.0.ffn_down.weight":
			require.Equal(t, gguf.TypeQ4_K, ti.Type) // rows of 256; use_more_bits(0, 2) is false
		case "blk.1.ffn_down.weight":
			require.Equal(t, gguf.TypeQ6_K, ti.Type) // the last eighth
		case "blk.1.attn_q.weight":
			require.Equal(t, gguf.TypeQ5_0, ti.Type) // rows of 64: Q4_K's fallback
		}
	}
}

func TestParseType(t *testing.T) {
	typ, mix, err := ParseType("Q5_K_M")
	require.NoError(t, err)
	require.Equal(t, MixQ5_K_M, mix)
	require.Zero(t, typ)
	typ, mix, err = ParseType("iq4_xs")
	require.NoError(t, err)
	require.Equal(t, MixNone, mix)
	require.Equal(t, gguf.TypeIQ4_XS, typ)
	_, _, err = ParseType("q4_k_l")
	require.ErrorContains(t, err, "q4_k_m")
}
