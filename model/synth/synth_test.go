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
