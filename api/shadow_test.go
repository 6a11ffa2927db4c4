package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestShadowReportJSON pins the wire names of the shadow report.
func TestShadowReportJSON(t *testing.T) {
	t.Parallel()
	r := ShadowReport{
		Since: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		Rows: []ShadowSummary{{Alias: "flagship", PrimaryModel: "v1", ShadowModel: "v2", Runs: 10, ShadowErrors: 1,
			ShadowSkipped: 2, Greedy: 7, Compared: 6, ExactMatches: 5, MeanEditDistance: 1.5,
			PrimaryTTFTP50Ms: 100, ShadowTTFTP50Ms: 120, PrimaryTTFTP95Ms: 300, ShadowTTFTP95Ms: 320,
			PrimaryITLMeanMs: 10, ShadowITLMeanMs: 11, PrimaryTokensMean: 40, ShadowTokensMean: 42,
			Scored: 3, MeanScore: 0.8}},
	}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.JSONEq(t, `{"since":"2026-03-01T00:00:00Z","until":"2026-03-02T00:00:00Z","rows":[{
		"alias":"flagship","primary_model":"v1","shadow_model":"v2","runs":10,"shadow_errors":1,
		"shadow_skipped":2,"greedy":7,"compared":6,"exact_matches":5,"mean_edit_distance":1.5,
		"primary_ttft_p50_ms":100,"shadow_ttft_p50_ms":120,"primary_ttft_p95_ms":300,"shadow_ttft_p95_ms":320,
		"primary_itl_mean_ms":10,"shadow_itl_mean_ms":11,"primary_tokens_mean":40,"shadow_tokens_mean":42,
		"scored":3,"mean_score":0.8}]}`, string(b))
	var back ShadowReport
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r, back)
}
