//go:build !race

// The race detector makes sync.Pool drop what it is given, so these
// counts only hold without it.

package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

// TestMatMulsAllocs checks that one token's products through the tile
// kernels allocate nothing: a decode step makes a few hundred of them.
func TestMatMulsAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	q, _ := kernRandWeight(t, rng, gguf.TypeQ4_0, 96, 256)
	k, _ := kernRandWeight(t, rng, gguf.TypeQ6_K, 32, 256)
	x := kernRandFloats(rng, 256, 1)
	oq, ok := make([]float32, 96), make([]float32, 32)
	pool := NewPool(2)
	defer pool.Close()
	allocs := testing.AllocsPerRun(100, func() {
		MatMuls(pool, x, 1, MatOut{oq, q}, MatOut{ok, k})
		MatMul(pool, oq, q, x, 1)
	})
	require.Zero(t, allocs)
}
