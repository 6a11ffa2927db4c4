package sample

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

func TestLogprobs(t *testing.T) {
	tests := map[string]struct {
		logits []float32
		token  int32
		top    int
		wantLp float32
		want   []TokenLogprob
	}{
		"softmax": {
			logits: logitsOf(0.1, 0.6, 0.3),
			token:  2, top: 2,
			wantLp: float32(math.Log(0.3)),
			want:   []TokenLogprob{{1, float32(math.Log(0.6))}, {2, float32(math.Log(0.3))}},
		},
		"ties by id": {
			logits: []float32{1, 2, 2, 1},
			token:  3, top: 4,
			wantLp: float32(-math.Log(2 + 2*math.E)),
			want: []TokenLogprob{
				{1, float32(1 - math.Log(2+2*math.E))}, {2, float32(1 - math.Log(2+2*math.E))},
				{0, float32(-math.Log(2 + 2*math.E))}, {3, float32(-math.Log(2 + 2*math.E))},
			},
		},
		"no tops": {
			logits: []float32{0, 0},
			token:  0, top: 0,
			wantLp: float32(-math.Ln2),
		},
		"top beyond vocab": {
			logits: []float32{0, 0},
			token:  1, top: 5,
			wantLp: float32(-math.Ln2),
			want:   []TokenLogprob{{0, float32(-math.Ln2)}, {1, float32(-math.Ln2)}},
		},
		"token out of range": {
			logits: []float32{0, 0},
			token:  2, top: 0,
			wantLp: negInf,
		},
		"NaN counts as -Inf": {
			logits: []float32{nan, 0, -inf},
			token:  0, top: 3,
			wantLp: negInf,
			want:   []TokenLogprob{{1, 0}, {0, negInf}, {2, negInf}},
		},
		"+Inf share the mass": {
			logits: []float32{inf, 3, inf},
			token:  2, top: 2,
			wantLp: float32(-math.Ln2),
			want:   []TokenLogprob{{0, float32(-math.Ln2)}, {2, float32(-math.Ln2)}},
		},
		"all -Inf": {
			logits: []float32{-inf, -inf},
			token:  1, top: 1,
			wantLp: negInf,
			want:   []TokenLogprob{{0, negInf}},
		},
		"vocab of one": {
			logits: []float32{-7},
			token:  0, top: 1,
			wantLp: 0,
			want:   []TokenLogprob{{0, 0}},
		},
		"empty": {token: 0, top: 3, wantLp: negInf},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSampler(len(tc.logits))
			before := slices.Clone(tc.logits)
			lp, tops := s.Logprobs(tc.logits, tc.token, tc.top)
			require.InDelta(t, tc.wantLp, lp, 1e-6)
			require.Len(t, tops, len(tc.want))
			for i := range tc.want {
				require.Equal(t, tc.want[i].Token, tops[i].Token, "rank %d", i)
				require.InDelta(t, tc.want[i].Logprob, tops[i].Logprob, 1e-6, "rank %d", i)
			}
			for i := range before {
				require.Equal(t, math.Float32bits(before[i]), math.Float32bits(tc.logits[i]), "Logprobs changed logit %d", i)
			}
		})
	}
}

func TestLogprobsNormalizedAndSorted(t *testing.T) {
	logits := modelLogits(3000, 12)
	s := NewSampler(len(logits))
	var total float64
	for id := range logits {
		lp, _ := s.Logprobs(logits, int32(id), 0)
		total += math.Exp(float64(lp))
	}
	require.InDelta(t, 1, total, 1e-5)

	_, tops := s.Logprobs(logits, 0, 20)
	require.Len(t, tops, 20)
	require.True(t, slices.IsSortedFunc(tops, func(a, b TokenLogprob) int {
		return -cmpFloat(a.Logprob, b.Logprob)
	}), "tops must be most likely first")
	require.Equal(t, int32(argmax(logits)), tops[0].Token)
	for _, tl := range tops {
		lp, _ := s.Logprobs(logits, tl.Token, 0)
		require.Equal(t, lp, tl.Logprob)
	}
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestLogprobsConvention checks the documented convention: on the slice
// Sample worked on, Logprobs sees the penalties and bias but not the
// temperature or the truncation.
func TestLogprobsConvention(t *testing.T) {
	raw := []float32{2, 1, 0, -1}
	p := engine.SamplingParams{Temperature: 0.5, TopK: 2, RepetitionPenalty: 2, LogitBias: map[int32]float32{3: 1}}
	s := NewSampler(len(raw))

	logits := slices.Clone(raw)
	rawLp, _ := s.Logprobs(logits, 0, 0)
	tok := s.Sample(logits, p, 1, 0, []int32{0}, 0)
	require.Contains(t, []int32{0, 1}, tok)
	lp, tops := s.Logprobs(logits, 3, 4)

	// After Sample, logits are {1, 1, 0, 0}: token 0 halved, token 3
	// biased; no temperature, all four tokens present.
	want := []float32{1, 1, 0, 0}
	require.Equal(t, want, logits)
	z := 2*math.E + 2
	require.InDelta(t, -math.Log(z), lp, 1e-6)
	require.Len(t, tops, 4)
	require.InDelta(t, 1-math.Log(z), tops[0].Logprob, 1e-6)
	require.InDelta(t, 2-math.Log(math.Exp(2)+math.E+1+math.Exp(-1)), rawLp, 1e-6)
}
