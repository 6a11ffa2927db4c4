package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

// matMulsSet returns weights of 256 columns of every kind MatMuls meets:
// tile types packed and packed as it goes, F16 for the F16 and the BF16
// tile kernels, types with rows kernels only, F32, and no rows at all.
func matMulsSet(t *testing.T, rng *rand.Rand) []Weight {
	const cols = 256
	var ws []Weight
	for _, c := range []struct {
		typ  gguf.TensorType
		rows int
	}{{gguf.TypeQ4_0, 37}, {gguf.TypeQ6_K, 80}, {gguf.TypeQ4_K, 16}, {gguf.TypeQ8_0, 21}, {gguf.TypeQ5_0, 48},
		{gguf.TypeF16, 33}, {gguf.TypeIQ4_NL, 19}, {gguf.TypeQ3_K, 17}, {gguf.TypeQ5_K, 23}, {gguf.TypeF32, 5}} {
		w, _ := kernRandWeight(t, rng, c.typ, c.rows, cols)
		ws = append(ws, w)
	}
	unpacked := ws[3]
	unpacked.tiles = nil // Q8_0 packed as MatMul goes
	ws[3] = unpacked
	data, err := gguf.Quantize(gguf.TypeF16, kernRandFloats(rng, 19*cols, 0.05))
	require.NoError(t, err)
	bf, err := newWeight(gguf.TypeF16, 19, cols, data, packBF16)
	require.NoError(t, err)
	return append(ws, bf, Weight{Type: gguf.TypeQ4_0, Cols: cols})
}

// TestMatMuls checks that MatMuls gives each product the bits MatMul gives
// it alone, at every kernel level, for any number of tokens, with and
// without a pool, and writes nothing past the outputs.
func TestMatMuls(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ws := matMulsSet(t, rng)
	const cols, toks = 256, 17
	x := kernRandFloats(rng, toks*cols, 1)
	pool := NewPool(3)
	defer pool.Close()
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		for _, n := range []int{1, 2, 5, 9, toks} {
			for _, p := range []*Pool{nil, pool} {
				t.Run(fmt.Sprintf("kern=%s/tokens=%d/threads=%d", level, n, p.Threads()), func(t *testing.T) {
					ms := make([]MatOut, len(ws))
					for i, w := range ws {
						ms[i] = MatOut{Out: make([]float32, n*w.Rows+1), W: w}
						ms[i].Out[n*w.Rows] = 42
					}
					kernMatMuls(p, ks, x, n, ms)
					for i, w := range ws {
						want := make([]float32, n*w.Rows)
						kernMatMul(p, ks, want, w, x, n)
						require.Equal(t, want, ms[i].Out[:n*w.Rows], "weight %d (%s, %d rows)", i, w.Type, w.Rows)
						require.Equal(t, float32(42), ms[i].Out[n*w.Rows], "weight %d: wrote past the outputs", i)
					}
				})
			}
		}
	}
}

// TestMatMulsRefused checks that weights of different widths, or outputs
// too short, panic with a message instead of reading out of bounds.
func TestMatMulsRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	a, _ := kernRandWeight(t, rng, gguf.TypeQ4_0, 16, 64)
	b, _ := kernRandWeight(t, rng, gguf.TypeQ4_0, 16, 96)
	x := kernRandFloats(rng, 96, 1)
	require.PanicsWithValue(t, "cpu: matmul of 16 x 96 with 1 tokens: len(x) 96, len(out) 16, first cols 64", func() {
		MatMuls(nil, x, 1, MatOut{make([]float32, 16), a}, MatOut{make([]float32, 16), b})
	})
	require.Panics(t, func() { MatMuls(nil, x, 1, MatOut{make([]float32, 15), a}) })
}
