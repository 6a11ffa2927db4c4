//go:build amd64 && !purego

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// kernKQuantRowsVariants returns the AVX-512 rows kernels of k that this
// CPU runs, by name: "base" and, with GFNI, "gfni".
func kernKQuantRowsVariants(rows, gfni kernRowsFunc) map[string]kernRowsFunc {
	v := map[string]kernRowsFunc{"base": rows}
	if kernHasGFNI {
		v["gfni"] = gfni
	}
	return v
}

// TestKQuantRowsVariantsAgree checks both variants of each AVX-512 K-quant
// rows kernel (the registered one is also checked by the family tests)
// against the one-token kernel, bit for bit.
func TestKQuantRowsVariantsAgree(t *testing.T) {
	if kernBest < kernLevelAVX512 {
		t.Skipf("this CPU has no %s", kernLevelAVX512)
	}
	rng := rand.New(rand.NewPCG(27, 28))
	for _, k := range kernKQuantRowsAVX512 {
		for name, rowsDot := range kernKQuantRowsVariants(k.rows, k.gfni) {
			for _, nb := range []int{1, 2, 6, 35} {
				t.Run(fmt.Sprintf("type=%s/variant=%s/blocks=%d", k.typ, name, nb), func(t *testing.T) {
					const rows = 5
					cols := nb * k.typ.BlockSize()
					w := kernRandBlocks(rng, k.typ, rows*nb)
					rb := len(w) / rows
					xq, xd, xs := kernQuantized(kernRandActivations(rng, 1, cols), 1, cols)
					var xc []int32
					if k.sums {
						xc = make([]int32, cols/4)
						kernLaneSums(xc, xq)
					}
					out := make([]float32, rows)
					rowsDot(out, w, rb, xq, xd, xs, xc)
					for r := range rows {
						want := k.one(w[r*rb:(r+1)*rb], xq, xd, xs)
						require.Equal(t, math.Float32bits(want), math.Float32bits(out[r]), "row %d", r)
					}
				})
			}
		}
	}
}

// BenchmarkKQRowsVariants is BenchmarkKQRows for each variant of the
// AVX-512 K-quant rows kernels: 64 rows in L2, one thread, MB/s of
// weights. Run it with -count and compare the variants run by run.
func BenchmarkKQRowsVariants(b *testing.B) {
	if kernBest < kernLevelAVX512 {
		b.Skipf("this CPU has no %s", kernLevelAVX512)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const rows = 64
	for _, k := range kernKQuantRowsAVX512 {
		for _, cols := range []int{1536, 8960} {
			nb := cols / k.typ.BlockSize()
			w := kernRandBlocks(rng, k.typ, rows*nb)
			rb := len(w) / rows
			xq, xd, xs := kernQuantized(kernRandFloats(rng, cols, 1), 1, cols)
			var xc []int32
			if k.sums {
				xc = make([]int32, cols/4)
				kernLaneSums(xc, xq)
			}
			out := make([]float32, rows)
			for _, name := range []string{"base", "gfni"} {
				rowsDot := kernKQuantRowsVariants(k.rows, k.gfni)[name]
				b.Run(fmt.Sprintf("type=%s/cols=%d/variant=%s", strings.ToLower(k.typ.String()), cols, name), func(b *testing.B) {
					if rowsDot == nil {
						b.Skip("this CPU has no GFNI")
					}
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						rowsDot(out, w, rb, xq, xd, xs, xc)
					}
				})
			}
		}
	}
}
