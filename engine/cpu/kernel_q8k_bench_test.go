package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkQ8KKernels compares, within one binary, one thread's K-quant
// kernels on the two activation formats, 64 weight rows that stay in L2:
// way=per32 is the per-32 family (the rows kernel for one token, the
// four-token kernel row by row for four), way=q8k the Q8_K kernels (one
// token, the tile of four). MB/s is weight bytes times the tokens, so the
// kernels compare per token; the activations are quantized outside the
// loop. Run the ways alternately (-count) on a shared machine.
func BenchmarkQ8KKernels(b *testing.B) {
	ks := kernSetFor(kernUse)
	rng := rand.New(rand.NewPCG(5, 6))
	const rows = 64
	for _, typ := range kernQ8KTypes {
		for _, cols := range []int{1536, 8960} {
			nb := cols / typ.BlockSize()
			var w []byte
			for range rows {
				w = append(w, kernRandBlocks(rng, typ, nb)...)
			}
			rb := len(w) / rows
			x := kernRandFloats(rng, 4*cols, 1)
			xq, xd, xs := kernQuantized(x, 4, cols)
			xc := make([]int32, cols/4)
			kernLaneSums(xc, xq[:cols])
			xk := alignedMake[byte](4 * nb * kernQ8KBlock)
			for t := range 4 {
				kernQuantizeQ8K(xk[t*nb*kernQ8KBlock:(t+1)*nb*kernQ8KBlock], x[t*cols:(t+1)*cols])
			}
			out := make([]float32, 4*rows)
			for _, n := range []int{1, 4} {
				for _, way := range []string{"per32", "q8k"} {
					name := fmt.Sprintf("type=%s/cols=%d/n=%d/way=%s", strings.ToLower(typ.String()), cols, n, way)
					b.Run(name, func(b *testing.B) {
						k := ks.q8k[typ]
						rowsDot, dot4 := ks.dotQRows[typ], ks.dotQ4[typ]
						if way == "q8k" && k == nil || way == "per32" && (rowsDot == nil || dot4 == nil) {
							b.Skipf("no %s kernels for %s at %s", way, typ, kernUse)
						}
						var c []int32
						if ks.rowsSums[typ] {
							c = xc
						}
						nq := cols / kernQK
						var res [4]float32
						b.SetBytes(int64(n * len(w)))
						for b.Loop() {
							switch {
							case way == "q8k" && n == 1:
								k.one(out, rows, w, rows, rb, xk[:nb*kernQ8KBlock], nb)
							case way == "q8k":
								k.tile(out, rows, w, rows, rb, xk, nb)
							case n == 1:
								rowsDot(out[:rows], w, rb, xq[:cols], xd[:nq], xs[:nq], c)
							default:
								for r := range rows {
									dot4(&res, w[r*rb:(r+1)*rb], xq, xd, xs)
								}
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkQuantizeQ8K measures the quantization of one token's 8960
// activations (the 1.5B shape's FFN width) to Q8_K (way=q8k) and to the
// per-32 format (way=per32), with the level's kernels. MB/s is float32
// bytes in.
func BenchmarkQuantizeQ8K(b *testing.B) {
	const cols = 8960
	x := kernRandFloats(rand.New(rand.NewPCG(9, 9)), cols, 1)
	for _, way := range []string{"per32", "q8k"} {
		b.Run("way="+way, func(b *testing.B) {
			ks := kernSetFor(kernUse)
			q8k := kernQuantizeQ8K
			if k := ks.q8k[kernQ8KTypes[0]]; k != nil && k.quantize != nil {
				q8k = k.quantize
			}
			xk := alignedMake[byte](cols / kernQ8KValues * kernQ8KBlock)
			xq := alignedMake[int8](cols)
			xd, xs := make([]float32, cols/kernQK), make([]float32, cols/kernQK)
			b.SetBytes(4 * cols)
			for b.Loop() {
				if way == "q8k" {
					q8k(xk, x)
				} else {
					ks.quantize(xq, xd, xs, x)
				}
			}
		})
	}
}
