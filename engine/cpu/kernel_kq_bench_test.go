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
