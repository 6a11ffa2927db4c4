package api

import "time"

// ShadowSummary compares a shadow model with the primary model it
// shadowed under one alias, over the requests of a report's window. Times
// are milliseconds; the latency and token figures of each side are over
// the requests whose side finished (0 when none did), and the percentiles
// are nearest-rank.
type ShadowSummary struct {
	Alias        string `json:"alias"`
	PrimaryModel string `json:"primary_model"`
	ShadowModel  string `json:"shadow_model"`
	// Runs counts the requests copied to the shadow; ShadowErrors and
	// ShadowSkipped those whose shadow failed or was not run.
	Runs          int64 `json:"runs"`
	ShadowErrors  int64 `json:"shadow_errors"`
	ShadowSkipped int64 `json:"shadow_skipped"`
	// Greedy counts the runs whose answers were both decoded greedily;
	// Compared those among them whose answers were compared, and
	// ExactMatches those whose answers were token for token equal.
	Greedy       int64 `json:"greedy"`
	Compared     int64 `json:"compared"`
	ExactMatches int64 `json:"exact_matches"`
	// MeanEditDistance is the mean token-level edit distance between the
	// compared answers.
	MeanEditDistance  float64 `json:"mean_edit_distance"`
	PrimaryTTFTP50Ms  float64 `json:"primary_ttft_p50_ms"`
	ShadowTTFTP50Ms   float64 `json:"shadow_ttft_p50_ms"`
	PrimaryTTFTP95Ms  float64 `json:"primary_ttft_p95_ms"`
	ShadowTTFTP95Ms   float64 `json:"shadow_ttft_p95_ms"`
	PrimaryITLMeanMs  float64 `json:"primary_itl_mean_ms"`
	ShadowITLMeanMs   float64 `json:"shadow_itl_mean_ms"`
	PrimaryTokensMean float64 `json:"primary_tokens_mean"`
	ShadowTokensMean  float64 `json:"shadow_tokens_mean"`
	// Scored counts the runs the scorer rated; MeanScore is their mean
	// score (0 when none).
	Scored    int64   `json:"scored"`
	MeanScore float64 `json:"mean_score"`
}

// ShadowReport is the report of shadow traffic over [Since, Until): one
// row per (alias, primary model, shadow model), ordered by them. Alias and
// ShadowModel echo the report's filters ("" for none).
type ShadowReport struct {
	Since       time.Time       `json:"since"`
	Until       time.Time       `json:"until"`
	Alias       string          `json:"alias,omitempty"`
	ShadowModel string          `json:"shadow_model,omitempty"`
	Rows        []ShadowSummary `json:"rows"`
}
