package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

// reference returns the distribution Sample draws from, computed the slow
// and obvious way: sort the whole vocabulary, softmax in float64, cut.
func reference(logits []float32, p engine.SamplingParams) map[int32]float64 {
	ids := make([]int32, len(logits))
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return cmp.Compare(logits[b], logits[a]) })
	m := float64(logits[ids[0]])
	probs := make([]float64, len(ids))
	for i, id := range ids {
		// As documented, a tempered logit more than 87 below the best
		// has probability 0.
		if x := (float64(logits[id]) - m) / p.Temperature; x >= -87 {
			probs[i] = math.Exp(x)
		}
	}
	n := len(ids)
	if p.TopK > 0 && p.TopK < n {
		n = p.TopK
	}
	if p.TopP > 0 && p.TopP < 1 {
		var z float64
		for _, q := range probs[:n] {
			z += q
		}
		var acc float64
		for i, q := range probs[:n] {
			acc += q / z
			if acc >= p.TopP {
				n = i + 1
				break
			}
		}
	}
	out := map[int32]float64{}
	var z float64
	for i, id := range ids[:n] {
		if probs[i] > 0 && probs[i] >= p.MinP*probs[0] {
			out[id] = probs[i]
			z += probs[i]
		}
	}
	for id := range out {
		out[id] /= z
	}
	return out
}

// kept returns the distribution the sampler draws from, normalized, by the
// same path Sample takes.
func kept(s *Sampler, logits []float32, p engine.SamplingParams) map[int32]float64 {
	s.grow(len(logits))
	q := normalize(p, len(logits))
	var c []cand
	switch {
	case q.topK > 0:
		c, _ = s.topK(logits, q)
	case q.topP > 0:
		c = s.nucleus(logits, q, logits[argmax(logits)])
	default:
		best := argmax(logits)
		expShifted(s.probs, logits, logits[best], q.invT, s.sums)
		for i, w := range s.probs[:len(logits)] {
			if w >= q.minP {
				c = append(c, cand{id: int32(i), w: w})
			}
		}
	}
	out := map[int32]float64{}
	var z float64
	for _, x := range c {
		if x.w > 0 {
			out[x.id] = float64(x.w)
			z += float64(x.w)
		}
	}
	for id := range out {
		out[id] /= z
	}
	return out
}

// TestTruncationMatchesReference compares the surviving tokens and their
// probabilities with the sort-everything reference over random logits,
// including heavy ties and vocabularies large enough that the top-p
// histogram has to refine its boundary bucket.
func TestTruncationMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := map[string]func(vocab int) []float32{
		"model": func(vocab int) []float32 { return modelLogits(vocab, r.Uint64()) },
		"flat": func(vocab int) []float32 {
			l := make([]float32, vocab)
			for i := range l {
				l[i] = float32(r.NormFloat64() * 0.3)
			}
			return l
		},
		"ties": func(vocab int) []float32 {
			l := make([]float32, vocab)
			for i := range l {
				l[i] = float32(r.IntN(6)) / 2
			}
			return l
		},
		"all equal": func(vocab int) []float32 { return make([]float32, vocab) },
		"signed zeros and NaN": func(vocab int) []float32 {
			l := make([]float32, vocab)
			for i := range l {
				l[i] = []float32{0, float32(math.Copysign(0, -1)), 1, -1, nan}[r.IntN(5)]
			}
			return l
		},
		"with -Inf": func(vocab int) []float32 {
			l := modelLogits(vocab, r.Uint64())
			for i := range l {
				if r.IntN(3) == 0 {
					l[i] = negInf
				}
			}
			return l
		},
	}
	s := NewSampler(16)
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			for trial := range 60 {
				vocab := []int{1, 2, 7, 100, 5000}[trial%5]
				logits := shape(vocab)
				p := engine.SamplingParams{Temperature: []float64{0.3, 1, 2.5}[r.IntN(3)]}
				switch r.IntN(3) {
				case 0:
					p.TopK = 1 + r.IntN(60) // a heap
				case 1:
					p.TopK = heapMaxK + 1 + r.IntN(3000) // a radix selection
				}
				if r.IntN(3) > 0 {
					p.TopP = 0.05 + 0.9*r.Float64()
				}
				if r.IntN(3) == 0 {
					p.MinP = 0.5 * r.Float64()
				}
				if normalize(p, vocab).greedy || argmax(logits) < 0 {
					continue
				}
				want := reference(logits, p)
				got := kept(s, logits, p)
				require.Equal(t, len(want), len(got), "trial %d, vocab %d, %+v: tokens kept", trial, vocab, p)
				for id, pw := range want {
					pg, ok := got[id]
					if !ok || math.Abs(pw-pg) > 1e-5+1e-5*pw {
						require.Failf(t, "wrong probability", "trial %d, vocab %d, %+v: token %d has %v, want %v (kept %v)", trial, vocab, p, id, pg, pw, ok)
					}
				}
			}
		})
	}
}

// TestNucleusLargeTies puts the top-p boundary inside a run of equal
// weights, where the histogram cannot separate them: the lowest ids among
// the equals must be kept, and only as many as needed.
func TestNucleusLargeTies(t *testing.T) {
	tests := map[string]struct {
		rest float32 // the logit of the 9,999 equals; the favourite's is 5
		topP float64
	}{
		"equals above the histogram floor": {0, 0.5},
		// e^-12 is below 2^-16, so the first histogram skips the equals
		// and a second pass must count them.
		"equals below the histogram floor": {5 - 12, 0.95},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSampler(10000)
			logits := make([]float32, 10000)
			for i := range logits {
				logits[i] = tc.rest
			}
			logits[9999] = 5 // the favourite, at the end
			p := engine.SamplingParams{Temperature: 1, TopP: tc.topP}
			got := kept(s, logits, p)
			want := reference(logits, p)
			require.Equal(t, len(want), len(got))
			for id := range want {
				_, ok := got[id]
				require.True(t, ok, "token %d", id)
			}
			_, top := got[9999]
			_, first := got[0]
			_, last := got[9998]
			require.True(t, top && first && !last, "the favourite and the lowest ids among the equals")
		})
	}
}

func TestFastExp(t *testing.T) {
	for x := float32(0); x >= -87; x -= 0.00731 {
		want := math.Exp(float64(x))
		require.InEpsilon(t, want, float64(fastExp(x)), 3e-7, "x = %v", x)
	}
	require.Equal(t, float32(1), fastExp(0))
	require.Equal(t, float32(1), fastExp(float32(math.Copysign(0, -1))))
	require.Zero(t, fastExp(-88))
	require.Zero(t, fastExp(negInf))
	require.Zero(t, fastExp(nan))
}

func TestExpShiftedMatchesFastExp(t *testing.T) {
	src := modelLogits(20000, 8)
	src[3], src[4] = negInf, nan
	dst := make([]float32, len(src))
	sums := make([]float64, numBlocks(len(src)))
	m := src[argmax(src)]
	for _, invT := range []float32{0, 0.5, 1, 1.25, 40} {
		z := expShifted(dst, src, m, invT, sums)
		for i, l := range src {
			w := fastExp((l - m) * invT)
			require.Equal(t, math.Float32bits(w), math.Float32bits(dst[i]), "index %d", i)
		}
		var want float64
		for b := range sums {
			require.Equal(t, laneSum(blockOf(dst, b)), sums[b], "block %d", b)
			want += sums[b]
		}
		require.Equal(t, want, z)
	}
}

// TestLaneSum checks laneSum's order with sums where it shows: 2^60 + 1
// is 2^60 in float64, so whether a 1 survives says what was added first.
func TestLaneSum(t *testing.T) {
	const big = 0x1p60
	tests := map[string]struct {
		w    map[int]float32 // index: weight; the rest are 0
		want float64
	}{
		// In index order the 1 would be lost: 0.
		"lane j+8 into lane j first": {map[int]float32{0: big, 1: 1, 8: -big}, 1},
		// Lanes 4 and 0 first would keep the 1.
		"halves before quarters": {map[int]float32{0: big, 4: -big, 8: 1}, 0},
		// Each lane in index order: (2^60 + 1) - 2^60 is 0.
		"a lane in index order": {map[int]float32{0: big, 16: 1, 32: -big, 1: 1}, 1},
		"short":                 {map[int]float32{0: 1, 1: 2, 2: 3, 3: 4, 4: 5}, 15},
		"empty":                 {nil, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var w []float32
			for i, x := range tc.w {
				w = append(w, make([]float32, max(0, i+1-len(w)))...)
				w[i] = x
			}
			require.Equal(t, tc.want, laneSum(w))
		})
	}
}

func TestHistAboveSkipsOnlyBlocksBelowTheFloor(t *testing.T) {
	src := modelLogits(5000, 12)
	s := NewSampler(len(src))
	m := src[argmax(src)]
	expShifted(s.probs, src, m, 1.25, s.sums)
	clear(s.mass[:])
	s.histAbove(s.probs[:len(src)], histFloor)
	var want [numBuckets]float64
	for _, w := range s.probs[:len(src)] {
		if w > histFloor {
			want[distance(w)>>weightLevels[0].shift] += float64(w)
		}
	}
	require.Equal(t, want, s.mass)
}
