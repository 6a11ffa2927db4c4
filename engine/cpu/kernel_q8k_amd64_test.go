//go:build amd64 && !purego

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQ8KVariantsMatchGo checks each AVX-512 Q8_K kernel, the GFNI
// variants too (where the CPU has GFNI), against the portable kernel bit
// for bit, whichever of them MatMul registered.
func TestQ8KVariantsMatchGo(t *testing.T) {
	if kernBest < kernLevelAVX512 {
		t.Skipf("this CPU has no %s", kernLevelAVX512)
	}
	rng := rand.New(rand.NewPCG(73, 74))
	for _, k := range kernQ8KAVX512 {
		variants := map[string]struct {
			f      kernQ8KFunc
			tokens int
		}{"one": {k.one, 1}, "tile": {k.tile, kernQ8KTile}}
		if kernHasGFNI {
			variants["one-gfni"] = struct {
				f      kernQ8KFunc
				tokens int
			}{k.oneGFNI, 1}
			variants["tile-gfni"] = struct {
				f      kernQ8KFunc
				tokens int
			}{k.tileGFNI, kernQ8KTile}
		}
		for name, v := range variants {
			for _, nsb := range []int{1, 6, 35} {
				t.Run(fmt.Sprintf("type=%s/%s/blocks=%d", k.typ, name, nsb), func(t *testing.T) {
					const rows, ostride = 9, 11
					rb := nsb * k.blockBytes
					w := kernRandBlocks(rng, k.typ, rows*nsb)
					x := make([]byte, v.tokens*nsb*kernQ8KBlock)
					kernQuantizeQ8K(x, kernRandActivations(rng, v.tokens, nsb*kernQ8KValues))
					want := make([]float32, (v.tokens-1)*ostride+rows)
					got := make([]float32, len(want))
					kernQ8KGo(k.typ, v.tokens)(want, ostride, w, rows, rb, x, nsb)
					kernQ8KChecked(v.f, v.tokens, k.blockBytes)(got, ostride, w, rows, rb, x, nsb)
					for i := range want {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "out[%d] = %v, want %v", i, got[i], want[i])
					}
				})
			}
		}
	}
}

// TestQuantizeQ8KAVX512 checks the AVX-512 quantizer against the portable
// one byte for byte: Gaussian super-blocks, zero ones, ones below 1e-30
// and ones with an outlier (kernRandActivations), and exact ties.
func TestQuantizeQ8KAVX512(t *testing.T) {
	if kernBest < kernLevelAVX512 {
		t.Skipf("this CPU has no %s", kernLevelAVX512)
	}
	rng := rand.New(rand.NewPCG(75, 76))
	for _, nsb := range []int{0, 1, 6, 35} {
		x := kernRandActivations(rng, 1, nsb*kernQ8KValues)
		if nsb > 1 {
			for i := range x[256:512] {
				x[256+i] = float32(i%255-127) / 2
			}
		}
		want := make([]byte, nsb*kernQ8KBlock)
		got := make([]byte, len(want))
		for i := range got {
			got[i] = 0xa5
		}
		kernQuantizeQ8K(want, x)
		kernQuantizeQ8KChecked(got, x)
		require.Equal(t, want, got, "%d super-blocks", nsb)
	}
}

// BenchmarkQ8KVariants compares one thread's AVX-512 Q8_K kernels with and
// without GFNI, 64 rows of 1536 values in L2, one token and four. MB/s is
// weight bytes times the tokens.
func BenchmarkQ8KVariants(b *testing.B) {
	if kernBest < kernLevelAVX512 || !kernHasGFNI {
		b.Skip("this CPU has no AVX-512 with GFNI")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, nsb = 64, 6
	for _, k := range kernQ8KAVX512 {
		rb := nsb * k.blockBytes
		w := kernRandBlocks(rng, k.typ, rows*nsb)
		x := alignedMake[byte](kernQ8KTile * nsb * kernQ8KBlock)
		kernQuantizeQ8K(x, kernRandFloats(rng, kernQ8KTile*nsb*kernQ8KValues, 1))
		out := make([]float32, kernQ8KTile*rows)
		for _, n := range []int{1, kernQ8KTile} {
			for _, gfni := range []bool{false, true} {
				f := map[[2]bool]kernQ8KFunc{{false, false}: k.one, {false, true}: k.oneGFNI, {true, false}: k.tile, {true, true}: k.tileGFNI}[[2]bool{n > 1, gfni}]
				b.Run(fmt.Sprintf("type=%s/n=%d/gfni=%v", k.typ, n, gfni), func(b *testing.B) {
					b.SetBytes(int64(n * len(w)))
					for b.Loop() {
						f(out, rows, w, rows, rb, x[:n*nsb*kernQ8KBlock], nsb)
					}
				})
			}
		}
	}
}
