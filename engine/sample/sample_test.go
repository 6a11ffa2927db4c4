package sample

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

var (
	inf = float32(math.Inf(1))
	nan = float32(math.NaN())
)

// logitsOf returns logits whose softmax (at temperature 1) is probs.
func logitsOf(probs ...float64) []float32 {
	l := make([]float32, len(probs))
	for i, p := range probs {
		l[i] = float32(math.Log(p))
	}
	return l
}

// frequencies samples n tokens at steps 0 to n-1 with a fresh copy of
// logits each time and returns how often each id came up.
func frequencies(t *testing.T, logits []float32, p engine.SamplingParams, seed uint64, n int) []float64 {
	t.Helper()
	s := NewSampler(len(logits))
	buf := make([]float32, len(logits))
	freq := make([]float64, len(logits))
	for step := range n {
		copy(buf, logits)
		tok := s.Sample(buf, p, seed, step, nil, 0)
		require.True(t, tok >= 0 && int(tok) < len(logits), "token %d out of range", tok)
		freq[tok]++
	}
	for i := range freq {
		freq[i] /= float64(n)
	}
	return freq
}

func TestGreedy(t *testing.T) {
	tests := map[string]struct {
		logits []float32
		want   int32
	}{
		"argmax":               {[]float32{0.1, 3, -1, 2.9}, 1},
		"tie picks lowest id":  {[]float32{1, 5, 5, 2}, 1},
		"all negative":         {[]float32{-3, -2, -7}, 1},
		"last":                 {[]float32{0, 0, 0, 1}, 3},
		"NaN never wins":       {[]float32{nan, -5, nan}, 1},
		"+Inf wins":            {[]float32{1e30, inf, 3, inf}, 1},
		"all -Inf falls to 0":  {[]float32{-inf, -inf}, 0},
		"all NaN falls to 0":   {[]float32{nan, nan, nan}, 0},
		"single token":         {[]float32{-2}, 0},
		"empty falls to 0":     {nil, 0},
		"max float32 not +Inf": {[]float32{math.MaxFloat32, -math.MaxFloat32}, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSampler(len(tc.logits))
			for step := range 5 {
				require.Equal(t, tc.want, s.Sample(tc.logits, engine.SamplingParams{}, 7, step, nil, 0))
			}
		})
	}
}

func TestTemperature(t *testing.T) {
	logits := []float32{1, 1.2, 0.9, 1.1}
	tests := map[string]struct {
		temperature float64
		greedy      bool
	}{
		"zero is greedy":                       {0, true},
		"negative is greedy":                   {-1, true},
		"NaN is greedy":                        {math.NaN(), true},
		"below MinTemperature":                 {MinTemperature / 2, true},
		"at MinTemperature the best dominates": {MinTemperature, true},
		"one samples":                          {1, false},
		"infinite samples uniformly":           {math.Inf(1), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			freq := frequencies(t, logits, engine.SamplingParams{Temperature: tc.temperature}, 3, 2000)
			if tc.greedy {
				require.Equal(t, []float64{0, 1, 0, 0}, freq)
				return
			}
			for id, f := range freq {
				require.Greater(t, f, 0.1, "token %d should come up at temperature %v", id, tc.temperature)
			}
		})
	}
}

func TestTopKOneIsGreedy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	greedy, topk := NewSampler(1000), NewSampler(1000)
	for step := range 200 {
		logits := make([]float32, 1000)
		for i := range logits {
			logits[i] = float32(math.Round(r.NormFloat64()*4) / 2) // ties are common
		}
		want := greedy.Sample(append([]float32(nil), logits...), engine.SamplingParams{}, 1, step, nil, 0)
		got := topk.Sample(logits, engine.SamplingParams{Temperature: 1.5, TopK: 1, TopP: 0.5}, 1, step, nil, 0)
		require.Equal(t, want, got)
	}
}

// TestTruncation checks which tokens survive top-k, top-p and min-p, by
// sampling: every kept token must come up and no other.
func TestTruncation(t *testing.T) {
	probs := logitsOf(0.05, 0.5, 0.15, 0.3) // by rank: 1, 3, 2, 0
	tests := map[string]struct {
		p    engine.SamplingParams
		kept []int32
	}{
		"no truncation":             {engine.SamplingParams{Temperature: 1}, []int32{0, 1, 2, 3}},
		"top-k 2":                   {engine.SamplingParams{Temperature: 1, TopK: 2}, []int32{1, 3}},
		"top-k 3":                   {engine.SamplingParams{Temperature: 1, TopK: 3}, []int32{1, 2, 3}},
		"top-k at vocab is off":     {engine.SamplingParams{Temperature: 1, TopK: 4}, []int32{0, 1, 2, 3}},
		"top-k above vocab is off":  {engine.SamplingParams{Temperature: 1, TopK: 9}, []int32{0, 1, 2, 3}},
		"top-p below the top token": {engine.SamplingParams{Temperature: 1, TopP: 0.4}, []int32{1}},
		"top-p reached by two":      {engine.SamplingParams{Temperature: 1, TopP: 0.79}, []int32{1, 3}},
		"top-p just above two":      {engine.SamplingParams{Temperature: 1, TopP: 0.81}, []int32{1, 2, 3}},
		"top-p needs all":           {engine.SamplingParams{Temperature: 1, TopP: 0.99}, []int32{0, 1, 2, 3}},
		"top-p 1 is off":            {engine.SamplingParams{Temperature: 1, TopP: 1}, []int32{0, 1, 2, 3}},
		// Over the top two, renormalized, the top token holds 0.625.
		"top-p after top-k renormalizes": {engine.SamplingParams{Temperature: 1, TopK: 2, TopP: 0.6}, []int32{1}},
		"top-p after top-k keeps two":    {engine.SamplingParams{Temperature: 1, TopK: 2, TopP: 0.7}, []int32{1, 3}},
		"min-p 0.2 keeps p >= 0.1":       {engine.SamplingParams{Temperature: 1, MinP: 0.2}, []int32{1, 2, 3}},
		"min-p 0.5 keeps p >= 0.25":      {engine.SamplingParams{Temperature: 1, MinP: 0.5}, []int32{1, 3}},
		"min-p above 1 keeps the top":    {engine.SamplingParams{Temperature: 1, MinP: 3}, []int32{1}},
		"min-p with top-k":               {engine.SamplingParams{Temperature: 1, TopK: 3, MinP: 0.5}, []int32{1, 3}},
		"min-p with top-p":               {engine.SamplingParams{Temperature: 1, TopP: 0.99, MinP: 0.2}, []int32{1, 2, 3}},
		// At temperature 0.5 the probabilities are 0.25:0.09:0.0025:0.0225
		// over 0.365, so top and second hold 0.932.
		"temperature before top-p": {engine.SamplingParams{Temperature: 0.5, TopP: 0.9}, []int32{1, 3}},
		"temperature before min-p": {engine.SamplingParams{Temperature: 0.5, MinP: 0.2}, []int32{1, 3}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			freq := frequencies(t, probs, tc.p, 11, 4000)
			var got []int32
			for id, f := range freq {
				if f > 0 {
					got = append(got, int32(id))
				}
			}
			require.Equal(t, tc.kept, got)
		})
	}
}

// TestDistribution checks that the draws follow the softmax of the
// surviving tokens. The seeds are fixed, so the test is deterministic; the
// tolerance is five standard deviations of 20,000 draws.
func TestDistribution(t *testing.T) {
	logits := logitsOf(0.02, 0.3, 0.08, 0.25, 0.15, 0.1, 0.05, 0.05)
	tests := map[string]struct {
		p    engine.SamplingParams
		want []float64
	}{
		"softmax": {
			engine.SamplingParams{Temperature: 1},
			[]float64{0.02, 0.3, 0.08, 0.25, 0.15, 0.1, 0.05, 0.05},
		},
		"top-k 3 renormalizes": {
			engine.SamplingParams{Temperature: 1, TopK: 3},
			[]float64{0, 0.3 / 0.7, 0, 0.25 / 0.7, 0.15 / 0.7, 0, 0, 0},
		},
		"top-p 0.6 renormalizes": {
			engine.SamplingParams{Temperature: 1, TopP: 0.6},
			[]float64{0, 0.3 / 0.7, 0, 0.25 / 0.7, 0.15 / 0.7, 0, 0, 0},
		},
		"temperature 2 flattens": {
			engine.SamplingParams{Temperature: 2},
			sqrtNormalized(0.02, 0.3, 0.08, 0.25, 0.15, 0.1, 0.05, 0.05),
		},
	}
	const n = 20000
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			freq := frequencies(t, logits, tc.p, 2024, n)
			for id, want := range tc.want {
				tol := 5 * math.Sqrt(want*(1-want)/n)
				require.InDelta(t, want, freq[id], tol+1e-9, "token %d", id)
			}
		})
	}
}

// sqrtNormalized returns the distribution p^(1/2), normalized: p at
// temperature 2.
func sqrtNormalized(probs ...float64) []float64 {
	var z float64
	out := make([]float64, len(probs))
	for i, p := range probs {
		out[i] = math.Sqrt(p)
		z += out[i]
	}
	for i := range out {
		out[i] /= z
	}
	return out
}

// TestDistributionAcrossBlocks is TestDistribution over a vocabulary of
// several blocks, with the likely tokens at the ends of blocks, in the
// short last block and apart, and min-p, which sums the blocks again.
func TestDistributionAcrossBlocks(t *testing.T) {
	const vocab = 3*blockLen + 10
	probs := map[int]float64{0: 0.1, blockLen - 1: 0.2, blockLen: 0.15, 2*blockLen + 7: 0.25, vocab - 1: 0.3}
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(math.Log(1e-9)) // 1e-9 each: below 1e-6 in all
		if p, ok := probs[i]; ok {
			logits[i] = float32(math.Log(p))
		}
	}
	const n = 20000
	for name, p := range map[string]engine.SamplingParams{
		"softmax": {Temperature: 1},
		"min-p":   {Temperature: 1, MinP: 0.01},
	} {
		t.Run(name, func(t *testing.T) {
			freq := frequencies(t, logits, p, 77, n)
			for id, f := range freq {
				want := probs[id]
				tol := 5 * math.Sqrt(want*(1-want)/n)
				require.InDelta(t, want, f, tol+1e-9, "token %d", id)
			}
		})
	}
}

func TestDrawBlock(t *testing.T) {
	w := []float32{0, 1, 0, 2, 0}
	tests := map[string]struct {
		t, acc float64
		want   int
	}{
		"first positive weight": {t: 10, acc: 10, want: 1},
		"inside the second":     {t: 11.5, acc: 10, want: 3},
		"at the boundary":       {t: 11, acc: 10, want: 3},
		// The caller's block sum covered t but the running total does
		// not reach it: the last token of positive weight, never a 0.
		"rounding past the end": {t: 13, acc: 10, want: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, drawBlock(w, tc.t, tc.acc))
		})
	}
}

func TestDeterminism(t *testing.T) {
	logits := modelLogits(5000, 9)
	modes := map[string]engine.SamplingParams{
		"temperature": {Temperature: 1.3},
		"top-k":       {Temperature: 1.3, TopK: 50},
		"top-p":       {Temperature: 1.3, TopP: 0.95},
		"min-p":       {Temperature: 1.3, MinP: 0.01},
	}
	// A model whose bulk sits 20 below the top tokens samples them almost
	// always; flatten it so that steps really differ.
	for i := range logits {
		logits[i] /= 4
	}
	for name, p := range modes {
		t.Run(name, func(t *testing.T) {
			a, b := NewSampler(5000), NewSampler(10)
			first := make([]int32, 100)
			distinct := map[int32]bool{}
			for step := range first {
				first[step] = a.Sample(append([]float32(nil), logits...), p, 99, step, nil, 0)
				distinct[first[step]] = true
			}
			// Again, interleaved with other sequences' calls on the same
			// sampler and in reverse order, on a fresh sampler that had to
			// grow: the same (seed, step) gives the same token.
			for step := len(first) - 1; step >= 0; step-- {
				b.Sample(append([]float32(nil), logits...), p, 12345, step, nil, 0)
				require.Equal(t, first[step], b.Sample(append([]float32(nil), logits...), p, 99, step, nil, 0), "step %d", step)
			}
			require.Greater(t, len(distinct), 10, "different steps should draw different tokens")

			other := 0
			for step := range first {
				if a.Sample(append([]float32(nil), logits...), p, 100, step, nil, 0) != first[step] {
					other++
				}
			}
			require.Greater(t, other, 50, "another seed should draw other tokens")
		})
	}
}

func TestUniformIndependentOfNeighbours(t *testing.T) {
	// splitmix64 over a scrambled seed: nearby seeds and steps must not
	// produce shifted copies of one stream.
	seen := map[float64]bool{}
	for seed := range uint64(50) {
		for step := range 50 {
			u := uniform(seed, step)
			require.True(t, u >= 0 && u < 1)
			require.False(t, seen[u], "seed %d step %d repeats a number", seed, step)
			seen[u] = true
		}
	}
	require.Equal(t, uniform(7, 3), uniform(7, 3))
}

func TestPenalties(t *testing.T) {
	tests := map[string]struct {
		logits    []float32
		p         engine.SamplingParams
		history   []int32
		generated int
		want      []float32
	}{
		"repetition divides positive, multiplies negative": {
			logits:  []float32{2, -2, 1, 0.5, 0},
			p:       engine.SamplingParams{RepetitionPenalty: 2},
			history: []int32{0, 1, 1, 3, 4},
			want:    []float32{1, -4, 1, 0.25, 0},
		},
		"repetition counts each token once": {
			logits:  []float32{3, 1},
			p:       engine.SamplingParams{RepetitionPenalty: 1.5},
			history: []int32{0, 0, 0, 0},
			want:    []float32{2, 1},
		},
		"repetition covers the prompt": {
			logits:    []float32{3, 3},
			p:         engine.SamplingParams{RepetitionPenalty: 3},
			history:   []int32{0, 1},
			generated: 1,
			want:      []float32{1, 1},
		},
		"repetition 1 is off": {
			logits:  []float32{3, -3},
			p:       engine.SamplingParams{RepetitionPenalty: 1},
			history: []int32{0, 1},
			want:    []float32{3, -3},
		},
		"presence once per generated token": {
			logits:    []float32{1, 1, 1, 1},
			p:         engine.SamplingParams{PresencePenalty: 0.5},
			history:   []int32{0, 1, 2, 2, 2, 1},
			generated: 4, // 2, 2, 2, 1
			want:      []float32{1, 0.5, 0.5, 1},
		},
		"frequency by count over generated tokens": {
			logits:    []float32{1, 1, 1, 1},
			p:         engine.SamplingParams{FrequencyPenalty: 0.25},
			history:   []int32{0, 1, 2, 2, 2, 1},
			generated: 4,
			want:      []float32{1, 0.75, 0.25, 1},
		},
		"negative presence and frequency encourage": {
			logits:    []float32{0, 0},
			p:         engine.SamplingParams{PresencePenalty: -1, FrequencyPenalty: -0.5},
			history:   []int32{1, 1},
			generated: 2,
			want:      []float32{0, 2},
		},
		"all three, repetition first": {
			logits:    []float32{2, -2, 1, 0.5},
			p:         engine.SamplingParams{RepetitionPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25},
			history:   []int32{0, 1, 1, 3},
			generated: 2, // 1, 3
			want:      []float32{1, -4.75, 1, -0.5},
		},
		"bias before penalties": {
			logits:  []float32{1, 1},
			p:       engine.SamplingParams{LogitBias: map[int32]float32{0: 3}, RepetitionPenalty: 2},
			history: []int32{0},
			want:    []float32{2, 1},
		},
		"out of range ids are ignored": {
			logits:    []float32{1, 1},
			p:         engine.SamplingParams{LogitBias: map[int32]float32{-1: 5, 2: 5}, RepetitionPenalty: 2, PresencePenalty: 1},
			history:   []int32{-1, 7, 1},
			generated: 3,
			want:      []float32{1, -0.5},
		},
		"generated beyond history is clamped": {
			logits:    []float32{1, 1},
			p:         engine.SamplingParams{PresencePenalty: 1},
			history:   []int32{0},
			generated: 5,
			want:      []float32{0, 1},
		},
		"negative generated is none": {
			logits:    []float32{1, 1},
			p:         engine.SamplingParams{PresencePenalty: 1},
			history:   []int32{0},
			generated: -2,
			want:      []float32{1, 1},
		},
		"non-finite penalties are off": {
			logits:    []float32{1, -1},
			p:         engine.SamplingParams{RepetitionPenalty: math.Inf(1), PresencePenalty: math.NaN(), FrequencyPenalty: math.Inf(-1)},
			history:   []int32{0, 1},
			generated: 2,
			want:      []float32{1, -1},
		},
		"NaN bias is ignored": {
			logits: []float32{1, 1},
			p:      engine.SamplingParams{LogitBias: map[int32]float32{1: nan}},
			want:   []float32{1, 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSampler(len(tc.logits))
			// Twice on one sampler: the marks of the first call must not
			// leak into the second.
			for range 2 {
				logits := append([]float32(nil), tc.logits...)
				s.Sample(logits, tc.p, 1, 0, tc.history, tc.generated)
				require.InDeltaSlice(t, tc.want, logits, 1e-6)
			}
		})
	}
}

func TestLogitBias(t *testing.T) {
	logits := modelLogits(1000, 3)
	top := argmax(logits)
	forced, banned := int32(17), int32(top)
	for name, p := range map[string]engine.SamplingParams{
		"greedy":  {LogitBias: map[int32]float32{forced: 100}},
		"sampled": {Temperature: 1, LogitBias: map[int32]float32{forced: 100}},
		"top-k":   {Temperature: 1, TopK: 40, LogitBias: map[int32]float32{forced: 100}},
		"top-p":   {Temperature: 1, TopP: 0.9, LogitBias: map[int32]float32{forced: 100}},
	} {
		t.Run("force/"+name, func(t *testing.T) {
			s := NewSampler(len(logits))
			for step := range 200 {
				require.Equal(t, forced, s.Sample(append([]float32(nil), logits...), p, 5, step, nil, 0))
			}
		})
	}
	for name, p := range map[string]engine.SamplingParams{
		"greedy":  {LogitBias: map[int32]float32{banned: -100}},
		"sampled": {Temperature: 1, LogitBias: map[int32]float32{banned: -100}},
		"top-k":   {Temperature: 1, TopK: 40, LogitBias: map[int32]float32{banned: -100}},
		"top-p":   {Temperature: 1, TopP: 0.9, LogitBias: map[int32]float32{banned: -100}},
	} {
		t.Run("ban/"+name, func(t *testing.T) {
			s := NewSampler(len(logits))
			for step := range 200 {
				require.NotEqual(t, banned, s.Sample(append([]float32(nil), logits...), p, 5, step, nil, 0))
			}
		})
	}
}

// TestOddInput feeds NaN, infinities and degenerate parameters to every
// mode: Sample must return an id in range, never NaN's, and the documented
// fallbacks.
func TestOddInput(t *testing.T) {
	modes := map[string]engine.SamplingParams{
		"greedy":           {},
		"temperature":      {Temperature: 0.7},
		"top-k":            {Temperature: 0.7, TopK: 3},
		"top-p":            {Temperature: 0.7, TopP: 0.5},
		"min-p":            {Temperature: 0.7, MinP: 0.5},
		"everything":       {Temperature: 0.7, TopK: 3, TopP: 0.5, MinP: 0.1, RepetitionPenalty: 1.3, PresencePenalty: 1, FrequencyPenalty: 1},
		"huge temperature": {Temperature: math.MaxFloat64, TopK: 3},
		"bad values": {
			Temperature: 1, TopK: -4, TopP: math.NaN(), MinP: math.NaN(),
			RepetitionPenalty: -2, PresencePenalty: math.Inf(1), FrequencyPenalty: math.NaN(),
		},
	}
	inputs := map[string]struct {
		logits []float32
		want   []int32 // the ids Sample may return
	}{
		"NaN":                 {[]float32{nan, 1, nan, 0.5}, []int32{1, 3}},
		"NaN first only":      {[]float32{nan, -1}, []int32{1}},
		"-Inf":                {[]float32{-inf, 2, -inf, 2}, []int32{1, 3}},
		"+Inf":                {[]float32{3, inf, nan, inf}, []int32{1}},
		"all -Inf":            {[]float32{-inf, -inf, -inf}, []int32{0}},
		"all NaN":             {[]float32{nan, nan}, []int32{0}},
		"vocab of one":        {[]float32{-4}, []int32{0}},
		"vocab of one, -Inf":  {[]float32{-inf}, []int32{0}},
		"empty":               {nil, []int32{0}},
		"extreme range":       {[]float32{math.MaxFloat32, -math.MaxFloat32, math.MaxFloat32}, []int32{0, 2}},
		"subnormal and zeros": {[]float32{0, 1e-45, -1e-45, 0}, []int32{0, 1, 2, 3}},
	}
	for mname, p := range modes {
		for iname, in := range inputs {
			t.Run(mname+"/"+iname, func(t *testing.T) {
				s := NewSampler(len(in.logits))
				for step := range 50 {
					got := s.Sample(append([]float32(nil), in.logits...), p, 1, step, []int32{1, 2, 3, 99}, 2)
					require.Contains(t, in.want, got)
				}
			})
		}
	}
}

func TestSampleAllocatesNothing(t *testing.T) {
	src := modelLogits(benchVocab, 4)
	logits := make([]float32, len(src))
	history := []int32{1, 2, 3, 4, 5, 5, 5, 9}
	for name, p := range map[string]engine.SamplingParams{
		"greedy": {},
		"top-k":  {Temperature: 0.8, TopK: 40},
		"top-p":  {Temperature: 0.8, TopP: 0.9},
		"full": {
			Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1,
			PresencePenalty: 0.5, FrequencyPenalty: 0.5, LogitBias: map[int32]float32{1: 5},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := NewSampler(len(src))
			step := 0
			allocs := testing.AllocsPerRun(20, func() {
				copy(logits, src)
				s.Sample(logits, p, 3, step, history, 4)
				step++
			})
			require.Zero(t, allocs)
		})
	}
}

func TestPenaltyMarksSurviveEpochWrap(t *testing.T) {
	s := NewSampler(3)
	s.epoch = math.MaxUint32
	s.mark[2] = 1 // stale: without a clear at the wrap it aliases epoch 1
	p := engine.SamplingParams{FrequencyPenalty: 1}
	for range 3 {
		logits := []float32{4, 4, 4}
		s.Sample(logits, p, 0, 0, []int32{0, 2, 2}, 2)
		require.Equal(t, []float32{4, 4, 2}, logits)
	}
}

// TestOddInputLargeTopK is TestOddInput for a top-k above heapMaxK, which
// takes the radix selection.
func TestOddInputLargeTopK(t *testing.T) {
	const vocab = 2000
	p := engine.SamplingParams{Temperature: 1, TopK: heapMaxK + 100, TopP: 0.9}
	fill := func(v float32) []float32 {
		l := make([]float32, vocab)
		for i := range l {
			l[i] = v
		}
		return l
	}
	nanMostly := fill(nan)
	nanMostly[1500], nanMostly[1700] = 2, 2
	withInf := modelLogits(vocab, 1)
	withInf[1234], withInf[1800] = inf, inf
	tests := map[string]struct {
		logits []float32
		want   []int32
	}{
		"NaN but two": {nanMostly, []int32{1500, 1700}},
		"+Inf":        {withInf, []int32{1234}},
		"all -Inf":    {fill(negInf), []int32{0}},
		"all NaN":     {fill(nan), []int32{0}},
		"all equal":   {fill(3), nil}, // the lowest ids

		"all +Inf":     {fill(inf), []int32{0}},
		"huge spreads": {append(fill(-math.MaxFloat32)[:vocab-1], math.MaxFloat32), []int32{vocab - 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSampler(vocab)
			for step := range 50 {
				got := s.Sample(append([]float32(nil), tc.logits...), p, 1, step, nil, 0)
				if tc.want == nil {
					// Top-k keeps the lowest ids of the equals, top-p 90%
					// of those.
					require.Less(t, got, int32(0.9*float64(p.TopK)+1))
					require.GreaterOrEqual(t, got, int32(0))
					continue
				}
				require.Contains(t, tc.want, got)
			}
		})
	}
}
