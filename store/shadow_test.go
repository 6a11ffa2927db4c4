package store

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shadowResult is a greedy comparison of flagship-v1 and flagship-v2 under
// alias flagship, both finished, answers equal.
func shadowResult(id string, started time.Time) ShadowResult {
	return ShadowResult{
		RequestID: id, Alias: "flagship", PrimaryModel: "flagship-v1", ShadowModel: "flagship-v2",
		Started: started, PrimaryStatus: ShadowFinished, ShadowStatus: ShadowFinished,
		PrimaryTTFT: 100 * time.Millisecond, ShadowTTFT: 150 * time.Millisecond,
		PrimaryITL: 10 * time.Millisecond, ShadowITL: 12500 * time.Microsecond,
		PrimaryDuration: time.Second, ShadowDuration: 1200 * time.Millisecond,
		PrimaryTokens: 40, ShadowTokens: 40,
		Greedy: true, ExactMatch: new(true), EditDistance: new(int64(0)),
	}
}

func TestRecordShadowRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()

	full := shadowResult("r1", t0)
	full.ExactMatch, full.EditDistance = new(false), new(int64(7))
	full.Score, full.ScorerError = new(0.75), ""
	sampled := shadowResult("r2", t0.Add(time.Minute))
	sampled.Greedy, sampled.ExactMatch, sampled.EditDistance = false, nil, nil
	sampled.ScorerError = "scorer: timeout"
	failed := shadowResult("r3", t0.Add(2*time.Minute))
	failed.ShadowStatus, failed.ShadowTTFT, failed.ShadowITL, failed.ShadowTokens = ShadowError, 0, 0, 0
	failed.ExactMatch, failed.EditDistance = nil, nil
	for _, r := range []ShadowResult{full, sampled, failed} {
		require.NoError(t, s.RecordShadow(ctx, r))
	}

	got, err := s.ShadowResults(ctx, ShadowQuery{}, 0)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i, want := range []ShadowResult{failed, sampled, full} { // newest first
		assert.Positive(t, got[i].ID)
		want.ID = got[i].ID
		assert.Equal(t, want, got[i], "row %d", i)
	}

	unstamped := shadowResult("r0", time.Time{})
	require.NoError(t, s.RecordShadow(ctx, unstamped))
	got, err = s.ShadowResults(ctx, ShadowQuery{Until: t0.Add(time.Millisecond)}, 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "r0", got[0].RequestID, "at the same time, the last recorded first")
	assert.Equal(t, t0, got[0].Started, "zero is the store's now")

	got, err = s.ShadowResults(ctx, ShadowQuery{}, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "r3", got[0].RequestID)
	assert.Equal(t, "r2", got[1].RequestID)
}

func TestShadowResultsQuery(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	add := func(id, alias, shadow string, started time.Time) {
		r := shadowResult(id, started)
		r.Alias, r.ShadowModel = alias, shadow
		require.NoError(t, s.RecordShadow(ctx, r))
	}
	add("a", "flagship", "v2", t0)
	add("b", "flagship", "v3", t0.Add(time.Hour))
	add("c", "cheap", "v2", t0.Add(2*time.Hour))
	add("d", "flagship", "v2", t0.Add(2*time.Hour)) // same time as c: by insertion

	tests := map[string]struct {
		q    ShadowQuery
		want []string
	}{
		"all":                   {q: ShadowQuery{}, want: []string{"d", "c", "b", "a"}},
		"one alias":             {q: ShadowQuery{Alias: "flagship"}, want: []string{"d", "b", "a"}},
		"one shadow model":      {q: ShadowQuery{ShadowModel: "v2"}, want: []string{"d", "c", "a"}},
		"alias and shadow":      {q: ShadowQuery{Alias: "flagship", ShadowModel: "v3"}, want: []string{"b"}},
		"since inclusive":       {q: ShadowQuery{Since: t0.Add(time.Hour)}, want: []string{"d", "c", "b"}},
		"until exclusive":       {q: ShadowQuery{Until: t0.Add(time.Hour)}, want: []string{"a"}},
		"window":                {q: ShadowQuery{Since: t0, Until: t0.Add(2 * time.Hour)}, want: []string{"b", "a"}},
		"no such alias":         {q: ShadowQuery{Alias: "none"}, want: nil},
		"empty window":          {q: ShadowQuery{Since: t0, Until: t0}, want: nil},
		"alias with time range": {q: ShadowQuery{Alias: "cheap", Since: t0.Add(time.Hour)}, want: []string{"c"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := s.ShadowResults(ctx, tc.q, 0)
			require.NoError(t, err)
			var ids []string
			for _, r := range got {
				ids = append(ids, r.RequestID)
			}
			assert.Equal(t, tc.want, ids)
		})
	}

	_, err := s.ShadowResults(ctx, ShadowQuery{}, -1)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = s.ShadowResults(ctx, ShadowQuery{Since: t0, Until: t0.Add(-time.Second)}, 0)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = s.ShadowReport(ctx, ShadowQuery{Since: t0, Until: t0.Add(-time.Second)})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestRecordShadowInvalid(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	tests := map[string]func(r *ShadowResult){
		"no request id":        func(r *ShadowResult) { r.RequestID = "" },
		"no primary model":     func(r *ShadowResult) { r.PrimaryModel = "" },
		"no shadow model":      func(r *ShadowResult) { r.ShadowModel = "" },
		"no primary status":    func(r *ShadowResult) { r.PrimaryStatus = "" },
		"unknown status":       func(r *ShadowResult) { r.ShadowStatus = "in_flight" },
		"negative tokens":      func(r *ShadowResult) { r.ShadowTokens = -1 },
		"negative duration":    func(r *ShadowResult) { r.PrimaryITL = -time.Millisecond },
		"match without greedy": func(r *ShadowResult) { r.Greedy, r.EditDistance = false, nil },
		"edit distance without greedy": func(r *ShadowResult) {
			r.Greedy, r.ExactMatch = false, nil
		},
		"negative edit distance": func(r *ShadowResult) { r.EditDistance = new(int64(-1)) },
		"NaN score":              func(r *ShadowResult) { r.Score = new(math.NaN()) },
		"infinite score":         func(r *ShadowResult) { r.Score = new(math.Inf(1)) },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := shadowResult("r1", t0)
			mutate(&r)
			require.ErrorIs(t, s.RecordShadow(t.Context(), r), ErrInvalid)
		})
	}
	got, err := s.ShadowResults(t.Context(), ShadowQuery{}, 0)
	require.NoError(t, err)
	assert.Empty(t, got, "nothing invalid was stored")
}

func TestShadowReport(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	ms := time.Millisecond

	// flagship v1 -> v2: 20 greedy runs with TTFTs 10, 20, ... 200 ms on
	// the primary and twice that on the shadow; every 4th answer differs
	// (edit distance 4), and every other run is scored.
	for i := range 20 {
		r := shadowResult(fmt.Sprintf("f%d", i), t0.Add(time.Duration(i)*time.Second))
		r.PrimaryTTFT, r.ShadowTTFT = time.Duration(i+1)*10*ms, time.Duration(i+1)*20*ms
		r.PrimaryITL, r.ShadowITL = 10*ms, time.Duration(10+i%2*10)*ms // 10 and 20: mean 15
		r.PrimaryTokens, r.ShadowTokens = 40, int64(40+i%2*2)          // shadow mean 41
		if i%4 == 3 {
			r.ExactMatch, r.EditDistance = new(false), new(int64(4))
		}
		if i%2 == 0 {
			r.Score = new(float64(i) / 20)
		}
		require.NoError(t, s.RecordShadow(ctx, r))
	}
	// Two runs that do not count in the shadow's latency or tokens.
	failed := shadowResult("f-err", t0)
	failed.ShadowStatus, failed.ExactMatch, failed.EditDistance = ShadowError, nil, nil
	failed.ShadowTTFT, failed.ShadowTokens = time.Hour, 1000
	require.NoError(t, s.RecordShadow(ctx, failed))
	skipped := shadowResult("f-skip", t0)
	skipped.ShadowStatus, skipped.Greedy, skipped.ExactMatch, skipped.EditDistance = ShadowSkipped, false, nil, nil
	require.NoError(t, s.RecordShadow(ctx, skipped))

	// cheap v1 -> v9: one sampled run, with a primary that was cancelled.
	cheap := shadowResult("c1", t0.Add(time.Hour))
	cheap.Alias, cheap.PrimaryModel, cheap.ShadowModel = "cheap", "cheap-v1", "cheap-v9"
	cheap.PrimaryStatus, cheap.Greedy, cheap.ExactMatch, cheap.EditDistance = ShadowCancelled, false, nil, nil
	require.NoError(t, s.RecordShadow(ctx, cheap))

	got, err := s.ShadowReport(ctx, ShadowQuery{})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, ShadowSummary{
		Alias: "cheap", PrimaryModel: "cheap-v1", ShadowModel: "cheap-v9",
		Runs: 1, ShadowTTFTp50: 150 * ms, ShadowTTFTp95: 150 * ms, ShadowITLMean: 12500 * time.Microsecond,
		ShadowTokensMean: 40,
	}, got[0])
	// Primary TTFTs: 22 finished runs, 20 of 10..200 ms and two of 100 ms.
	// Sorted: 10..90, 100, 100, 100, 110..200: p50 is the 11th (100 ms),
	// p95 the 21st (ceil(0.95*22) = 21: 190 ms).
	assert.Equal(t, ShadowSummary{
		Alias: "flagship", PrimaryModel: "flagship-v1", ShadowModel: "flagship-v2",
		Runs: 22, ShadowErrors: 1, ShadowSkipped: 1,
		Greedy: 21, Compared: 20, ExactMatches: 15, MeanEditDistance: 1,
		PrimaryTTFTp50: 100 * ms, PrimaryTTFTp95: 190 * ms,
		// Shadow TTFTs: 20..400 ms, p50 the 10th (200 ms), p95 the 19th
		// (380 ms).
		ShadowTTFTp50: 200 * ms, ShadowTTFTp95: 380 * ms,
		PrimaryITLMean: 10 * ms, ShadowITLMean: 15 * ms,
		PrimaryTokensMean: 40, ShadowTokensMean: 41,
		Scored: 10, MeanScore: 0.45, // 0, 0.1, ... 0.9
	}, roundScore(got[1]))

	got, err = s.ShadowReport(ctx, ShadowQuery{Alias: "flagship", Since: t0.Add(10 * time.Second)})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.EqualValues(t, 10, got[0].Runs, "f10 to f19")

	got, err = s.ShadowReport(ctx, ShadowQuery{ShadowModel: "none"})
	require.NoError(t, err)
	assert.Empty(t, got)
}

// roundScore rounds MeanScore to 1e-9, so that sums of floats compare.
func roundScore(s ShadowSummary) ShadowSummary {
	s.MeanScore = math.Round(s.MeanScore*1e9) / 1e9
	return s
}

func TestNearestRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		values []float64
		p      int
		want   float64
	}{
		{[]float64{7}, 50, 7},
		{[]float64{7}, 95, 7},
		{[]float64{1, 2}, 50, 1},
		{[]float64{1, 2}, 95, 2},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 50, 5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 10},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 100, 10},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, nearestRank(tc.values, tc.p), "p%d of %v", tc.p, tc.values)
	}
}
