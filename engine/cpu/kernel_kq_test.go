package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

// kernKQuantTypes are the K-quant types of the Q4_K_M mix, whose kernels
// (one token, four, rows) are taken as a family.
var kernKQuantTypes = []gguf.TensorType{gguf.TypeQ4_K, gguf.TypeQ6_K}

// TestKQuantRowsRegistered checks, where this CPU has AVX-512, how MatMul
// takes the types of the Q4_K_M mix there (the kernels register from
// several files, and a slip in their order would silently change it):
// through their tile families (kernel_tile.go), with no rows kernels
// beside them.
func TestKQuantRowsRegistered(t *testing.T) {
	if kernBest < kernLevelAVX512 {
		t.Skipf("this CPU has no %s", kernLevelAVX512)
	}
	ks := kernSetFor(kernLevelAVX512)
	for _, typ := range kernKQuantTypes {
		require.NotNil(t, ks.tile[typ], "%s has no tile family", typ)
		require.Nil(t, ks.dotQRows[typ], "%s's per-32 rows kernel is not of the tile family", typ)
	}
}

// TestKQuantRowsMatchFamily checks, at every level with a K-quant rows
// kernel, that each row gets exactly the bits that the one-token, the
// four-token and (where there is one) the eight-token kernels give it, for
// the block counts of the 1.5B shape's rows (6 and 35) and others, and
// that an empty call writes nothing.
func TestKQuantRowsMatchFamily(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		for _, typ := range kernKQuantTypes {
			rowsDot := ks.dotQRows[typ]
			if rowsDot == nil {
				continue
			}
			for _, nb := range []int{1, 4, 6, 35} {
				t.Run(fmt.Sprintf("kern=%s/type=%s/blocks=%d", level, typ, nb), func(t *testing.T) {
					const rows, toks = 11, 8
					cols := nb * typ.BlockSize()
					nq := cols / kernQK
					w := kernRandBlocks(rng, typ, rows*nb)
					rb := len(w) / rows
					xq, xd, xs := kernQuantized(kernRandActivations(rng, toks, cols), toks, cols)
					dot4, dot8 := ks.dotQ4[typ], ks.dotQ8[typ]
					require.NotNil(t, dot4)
					four := make([][4]float32, rows)
					eight := make([][8]float32, rows)
					for r := range rows {
						wr := w[r*rb : (r+1)*rb]
						dot4(&four[r], wr, xq[:4*cols], xd[:4*nq], xs[:4*nq])
						if dot8 != nil {
							dot8(&eight[r], wr, xq, xd, xs)
						}
					}
					for tok := range toks {
						q, d, s := xq[tok*cols:(tok+1)*cols], xd[tok*nq:(tok+1)*nq], xs[tok*nq:(tok+1)*nq]
						var xc []int32
						if ks.rowsSums[typ] {
							xc = make([]int32, cols/4)
							kernLaneSums(xc, q)
						}
						out := make([]float32, rows+1)
						out[rows] = 42
						rowsDot(out[:rows], w, rb, q, d, s, xc)
						for r := range rows {
							one := ks.dotQ[typ](w[r*rb:(r+1)*rb], q, d, s)
							require.Equal(t, math.Float32bits(one), math.Float32bits(out[r]), "token %d row %d: rows vs one", tok, r)
							if tok < 4 {
								require.Equal(t, math.Float32bits(four[r][tok]), math.Float32bits(out[r]), "token %d row %d: rows vs four", tok, r)
							}
							if dot8 != nil {
								require.Equal(t, math.Float32bits(eight[r][tok]), math.Float32bits(out[r]), "token %d row %d: rows vs eight", tok, r)
							}
						}
						require.Equal(t, float32(42), out[rows], "wrote past the rows")
						rowsDot(out[:0], w[:0], rb, q, d, s, xc)
						require.Equal(t, float32(42), out[rows], "an empty call wrote")
					}
				})
			}
		}
	}
}

// TestKQuantMatMulOneTokenInvariant checks through MatMul, on the 1.5B
// shape's K-quant matrices cut to fewer rows, that a token decoded alone
// (the rows kernel) gets the bits it gets among 1..9 tokens (the four-token
// kernels, then the rows kernel for what is left), and that the result is
// close to the float64 product.
func TestKQuantMatMulOneTokenInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	pool := NewPool(2)
	defer pool.Close()
	for _, typ := range kernKQuantTypes {
		for _, shape := range [][2]int{{37, 1536}, {9, 8960}} {
			rows, cols := shape[0], shape[1]
			w, deq := kernRandWeight(t, rng, typ, rows, cols)
			const toks = 9
			x := kernRandFloats(rng, toks*cols, 1)
			alone := make([]float32, toks*rows)
			for tok := range toks {
				MatMul(pool, alone[tok*rows:], w, x[tok*cols:], 1)
			}
			var num, den float64
			for tok := range toks {
				for r := range rows {
					var want float64
					for c := range cols {
						want += float64(deq[r*cols+c]) * float64(x[tok*cols+c])
					}
					d := float64(alone[tok*rows+r]) - want
					num, den = num+d*d, den+want*want
				}
			}
			require.Less(t, math.Sqrt(num/den), kernTolerance(typ), "%s %v: error against float64", typ, shape)
			for n := 2; n <= toks; n++ {
				out := make([]float32, n*rows)
				MatMul(pool, out, w, x[(toks-n)*cols:], n)
				require.Equal(t, alone[(toks-n)*rows:], out, "%s %v n=%d", typ, shape, n)
			}
		}
	}
}
