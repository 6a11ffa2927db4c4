//go:build amd64 && !purego

package sample

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireAVX512 skips a test of the AVX-512 kernels on a CPU without them.
func requireAVX512(t *testing.T) {
	t.Helper()
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
}

// oddLengths are vector lengths around the kernels' strides (16 lanes, 64
// logits per argmax iteration, blocks of 256), and a vocabulary.
var oddLengths = []int{0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 255, 256, 257, 511, 1000, 4099, 32000}

// specialLogits are the inputs where fastExp's edges lie, for m = 0 and
// invT = 1: the signed zeros, the -87 cutoff and its neighbours,
// subnormals, huge and infinite values, NaN, and the points where the
// table index wraps. None is above 0, so m = 0 is in expBlocks' contract.
var specialLogits = []float32{
	0, float32(math.Copysign(0, -1)),
	-87, math.Nextafter32(-87, 0), math.Nextafter32(-87, negInf), -86.99, -87.01,
	-math.SmallestNonzeroFloat32, -1e-38, -1e-30,
	-math.MaxFloat32, negInf, nan,
	-float32(math.Ln2) / 128, -float32(math.Ln2) / 64, -float32(math.Ln2), -float32(math.Ln2) * 31.5 / 64,
	-1, -0.5, -10, -40, -86,
}

// randomLogits returns n logits mixing a model-like spread with the
// special values and, rarely, +Inf.
func randomLogits(r *rand.Rand, n int) []float32 {
	l := make([]float32, n)
	for i := range l {
		switch r.IntN(4) {
		case 0:
			if j := r.IntN(len(specialLogits) + 1); j < len(specialLogits) {
				l[i] = specialLogits[j]
			} else {
				l[i] = inf
			}
		case 1:
			l[i] = -float32(r.Float64() * 100)
		default:
			l[i] = float32(r.NormFloat64() * 5)
		}
	}
	return l
}

func TestExpBlocksAVX512MatchesGo(t *testing.T) {
	requireAVX512(t)
	r := rand.New(rand.NewPCG(3, 14))
	check := func(src []float32, m, invT float32) {
		t.Helper()
		n := numBlocks(len(src))
		// One spare entry each: the kernel must write nothing past len(src).
		want, got := make([]float32, len(src)+1), make([]float32, len(src)+1)
		wantSums, gotSums := make([]float64, n+1), make([]float64, n+1)
		got[len(src)], gotSums[n] = 7, 7
		want[len(src)], wantSums[n] = 7, 7
		expBlocksGo(want[:len(src)], src, m, invT, wantSums[:n])
		expBlocksAVX512(got[:len(src)], src, m, invT, gotSums[:n])
		for i := range want {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
				require.Failf(t, "weights differ", "len %d, m %v, invT %v: index %d (logit %v): %v (%#x), want %v (%#x)",
					len(src), m, invT, i, src[min(i, len(src)-1)], got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
		for b := range wantSums {
			require.Equal(t, math.Float64bits(wantSums[b]), math.Float64bits(gotSums[b]), "len %d, m %v, invT %v: block %d", len(src), m, invT, b)
		}
	}
	t.Run("special values", func(t *testing.T) {
		for _, m := range []float32{0, 1, -1} {
			for _, invT := range []float32{1, 0, 0.5, 2} {
				src := make([]float32, len(specialLogits))
				for i, l := range specialLogits {
					src[i] = l + m // the same exponents as for m = 0, where exact
				}
				check(src, m, invT)
			}
		}
	})
	t.Run("every float32 exponent", func(t *testing.T) {
		// Each float32 exponent and sign with random mantissas: x from
		// the subnormals to the largest magnitude.
		src := make([]float32, 0, 1<<14)
		for e := range uint32(256) {
			for range 32 {
				src = append(src, math.Float32frombits(1<<31|e<<23|r.Uint32()&(1<<23-1)))
			}
		}
		check(src, 0, 1)
	})
	t.Run("random", func(t *testing.T) {
		for _, n := range oddLengths {
			for _, invT := range []float32{0, 0.5, 1, 1.25, 40, 1e5, inf} {
				src := randomLogits(r, n)
				if r.IntN(2) == 0 {
					// +Inf as m makes every weight 0: rarely.
					for i, l := range src {
						if l == inf {
							src[i] = 3
						}
					}
				}
				m := float32(0)
				if i := argmaxGo(src); i >= 0 {
					m = src[i]
				}
				check(src, m, invT)
			}
		}
	})
}

func TestArgmaxAVX512MatchesGo(t *testing.T) {
	requireAVX512(t)
	r := rand.New(rand.NewPCG(15, 92))
	shapes := map[string]func(n int) []float32{
		"model": func(n int) []float32 { return modelLogits(max(n, 1), r.Uint64())[:n] },
		"ties":  func(n int) []float32 { return fillWith(n, func() float32 { return float32(r.IntN(4)) }) },
		"signed zeros": func(n int) []float32 {
			return fillWith(n, func() float32 { return []float32{0, float32(math.Copysign(0, -1)), -1}[r.IntN(3)] })
		},
		"special": func(n int) []float32 { return randomLogits(r, n) },
		"NaN and -Inf": func(n int) []float32 {
			return fillWith(n, func() float32 { return []float32{nan, negInf, nan, -3}[r.IntN(4)] })
		},
		"all NaN":  func(n int) []float32 { return fillWith(n, func() float32 { return nan }) },
		"all -Inf": func(n int) []float32 { return fillWith(n, func() float32 { return negInf }) },
		"max in the tail": func(n int) []float32 {
			l := fillWith(n, func() float32 { return float32(r.NormFloat64()) })
			if n > 0 {
				l[n-1] = 100
			}
			return l
		},
		"max at 0 and in the tail": func(n int) []float32 {
			l := fillWith(n, func() float32 { return float32(r.NormFloat64()) })
			if n > 0 {
				l[0], l[n-1] = 100, 100
			}
			return l
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			for _, n := range oddLengths {
				for range 5 {
					l := shape(n)
					require.Equal(t, argmaxGo(l), argmax(l), "length %d", n)
				}
			}
		})
	}
}

// fillWith returns n values drawn from next.
func fillWith(n int, next func() float32) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = next()
	}
	return l
}

func TestFirstAboveAVX512MatchesGo(t *testing.T) {
	requireAVX512(t)
	r := rand.New(rand.NewPCG(65, 35))
	floors := []float32{negInf, -1, 0, float32(math.Copysign(0, -1)), 0.5, 2.9, inf, -math.MaxFloat32}
	for _, n := range oddLengths {
		for range 10 {
			x := fillWith(n, func() float32 {
				return []float32{nan, negInf, 0, float32(math.Copysign(0, -1)), 1, 3, inf, float32(r.NormFloat64())}[r.IntN(8)]
			})
			for _, floor := range floors {
				for start := range min(n, 40) {
					require.Equal(t, firstAboveGo(x[start:], floor), firstAbove(x[start:], floor), "length %d from %d, floor %v", n, start, floor)
				}
			}
		}
	}
	// Rare hits far apart, as in a top-k scan.
	x := fillWith(5000, func() float32 { return float32(r.NormFloat64()) })
	x[1234], x[4999] = 10, 10
	require.Equal(t, 1234, firstAbove(x, 5))
	require.Equal(t, 4999-1235, firstAbove(x[1235:], 5))
	require.Equal(t, 0, firstAbove(x[4999:], 5))
	require.Equal(t, 0, firstAbove(nil, 5))
}
