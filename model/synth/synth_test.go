package synth

import (
	"bytes"
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
