package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmd/llmd/model/gguf"
)

// kernWithoutRows removes the rows kernel of typ from ks for the length of
// the benchmark, so that one token goes through the one-token kernel row
// by row (the path before the rows kernel): an A/B within one binary.
func kernWithoutRows(b *testing.B, ks *kernSet, typ gguf.TensorType) {
	rows, sums := ks.dotQRows[typ], ks.rowsSums[typ]
	delete(ks.dotQRows, typ)
	delete(ks.rowsSums, typ)
	b.Cleanup(func() {
		if rows != nil {
			ks.dotQRows[typ], ks.rowsSums[typ] = rows, sums
		}
	})
}

// BenchmarkKQRows measures one thread's one-token dot of 64 weight rows
// that stay in L2: the kernels' compute per byte, apart from the memory
// system (which BenchmarkKQMatMul adds). way=rows is the rows kernel,
// way=one the one-token kernel called row by row; MB/s is weight bytes.
// Run way=rows and way=one alternately (-count) on a shared machine.
func BenchmarkKQRows(b *testing.B) {
	ks := kernSetFor(kernUse)
	rng := rand.New(rand.NewPCG(5, 6))
	const rows = 64
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		for _, cols := range []int{1536, 8960} {
			nb := cols / typ.BlockSize()
			var w []byte
			for range rows {
				w = append(w, kernRandBlocks(rng, typ, nb)...)
			}
			rb := len(w) / rows
			xq, xd, xs := kernQuantized(kernRandFloats(rng, cols, 1), 1, cols)
			xc := make([]int32, cols/4)
			kernLaneSums(xc, xq)
			out := make([]float32, rows)
			for _, way := range []string{"rows", "one"} {
				name := fmt.Sprintf("type=%s/cols=%d/way=%s", strings.ToLower(typ.String()), cols, way)
				b.Run(name, func(b *testing.B) {
					rowsDot := ks.dotQRows[typ]
					if way == "rows" && rowsDot == nil {
						b.Skipf("%s has no rows kernel at %s", typ, kernUse)
					}
					var c []int32
					if ks.rowsSums[typ] {
						c = xc
					}
					dot := ks.dotQ[typ]
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						if way == "rows" {
							rowsDot(out, w, rb, xq, xd, xs, c)
							continue
						}
						for r := range rows {
							out[r] = dot(w[r*rb:(r+1)*rb], xq, xd, xs)
						}
					}
				})
			}
		}
	}
}

// BenchmarkKQMatMul is BenchmarkMatMul for one token on the K-quant
// matrices of the 1.5B Q4_K_M shape (Qwen2.5-1.5B: dim 1536, ffn 8960; the
// output head cut to 32768 rows), with (rows=on) and without (rows=off)
// the rows kernel, on the pool's threads, the weights cycling through
// kernBenchSpan bytes so that they come from memory. Compare MB/s with
// BenchmarkMemoryRead's, run alternately.
func BenchmarkKQMatMul(b *testing.B) {
	shapes := []struct {
		typ        gguf.TensorType
		rows, cols int
	}{
		{gguf.TypeQ4_K, 1536, 1536}, {gguf.TypeQ4_K, 8960, 1536}, {gguf.TypeQ4_K, 1536, 8960},
		{gguf.TypeQ6_K, 1536, 8960}, {gguf.TypeQ6_K, 32768, 1536}, {gguf.TypeQ4_0, 8960, 1536},
	}
	for _, sh := range shapes {
		for _, on := range []bool{true, false} {
			name := fmt.Sprintf("type=%s/rows=%d/cols=%d/rowskern=%v", strings.ToLower(sh.typ.String()), sh.rows, sh.cols, on)
			b.Run(name, func(b *testing.B) {
				kernBenchLevel(b)
				if !on {
					kernWithoutRows(b, kernSetFor(kernUse), sh.typ)
				}
				ws := kernBenchWeights(b, sh.typ, sh.rows, sh.cols)
				x := kernRandFloats(rand.New(rand.NewPCG(1, 1)), sh.cols, 1)
				out := make([]float32, sh.rows)
				pool := NewPool(*kernThreads)
				defer pool.Close()
				for _, w := range ws { // fault the pages in before timing
					MatMul(pool, out, w, x, 1)
				}
				b.SetBytes(int64(len(ws[0].Data)))
				i := 0
				for b.Loop() {
					MatMul(pool, out, ws[i%len(ws)], x, 1)
					i++
				}
			})
		}
	}
}

// BenchmarkKQDot measures the K-quant dots of n tokens (1, 4, 8) with one
// row of 1536 values (6 blocks; the eight tokens' activations fit in L1):
// the kernels' compute per token. MB/s is weight bytes times n, so that
// the kernels of any n compare per token.
func BenchmarkKQDot(b *testing.B) {
	const cols = 1536
	ks := kernSetFor(kernUse)
	rng := rand.New(rand.NewPCG(7, 8))
	xq, xd, xs := kernQuantized(kernRandFloats(rng, 8*cols, 1), 8, cols)
	nq := cols / kernQK
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		w := kernRandBlocks(rng, typ, cols/typ.BlockSize())
		for _, n := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("type=%s/n=%d", strings.ToLower(typ.String()), n), func(b *testing.B) {
				var res4 [4]float32
				var res8 [8]float32
				dot, dot4, dot8 := ks.dotQ[typ], ks.dotQ4[typ], ks.dotQ8[typ]
				if (n == 4 && dot4 == nil) || (n == 8 && dot8 == nil) {
					b.Skipf("%s has no %d-token kernel at %s", typ, n, kernUse)
				}
				b.SetBytes(int64(n * len(w)))
				for b.Loop() {
					switch n {
					case 1:
						dot(w, xq[:cols], xd[:nq], xs[:nq])
					case 4:
						dot4(&res4, w, xq[:4*cols], xd[:4*nq], xs[:4*nq])
					case 8:
						dot8(&res8, w, xq, xd, xs)
					}
				}
			})
		}
	}
}

// BenchmarkKQPrompt measures MatMul of 64 tokens (a prompt's chunk: the
// four-token kernels) on the 1.5B shape's K-quant matrices, on the pool's
// threads. MB/s is weight bytes times the tokens: per token, as
// BenchmarkKQDot.
func BenchmarkKQPrompt(b *testing.B) {
	const n = 64
	shapes := []struct {
		typ        gguf.TensorType
		rows, cols int
	}{
		{gguf.TypeQ4_K, 8960, 1536}, {gguf.TypeQ4_K, 1536, 8960}, {gguf.TypeQ6_K, 1536, 8960},
	}
	for _, sh := range shapes {
		w, _ := kernRandWeight(b, rand.New(rand.NewPCG(3, 3)), sh.typ, sh.rows, sh.cols)
		x := kernRandFloats(rand.New(rand.NewPCG(1, 1)), n*sh.cols, 1)
		out := make([]float32, n*sh.rows)
		name := fmt.Sprintf("type=%s/rows=%d/cols=%d", strings.ToLower(sh.typ.String()), sh.rows, sh.cols)
		b.Run(name, func(b *testing.B) {
			kernBenchLevel(b)
			pool := NewPool(*kernThreads)
			defer pool.Close()
			b.SetBytes(int64(n * len(w.Data)))
			for b.Loop() {
				MatMul(pool, out, w, x, n)
			}
		})
	}
}
