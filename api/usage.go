package api

import "time"

// UsageRow is one group of a usage report: its key (a day "2006-01-02", a
// tenant, a model or a tier, per the report's By) and its totals. Tokens
// count only what was really processed and generated.
type UsageRow struct {
	Key string `json:"key"`
	// Requests counts requests that reached the engine; Cancelled and
	// Errors are among them. Rejected counts requests refused before any
	// compute (quota, overload).
	Requests     int64 `json:"requests"`
	Cancelled    int64 `json:"cancelled"`
	Errors       int64 `json:"errors"`
	Rejected     int64 `json:"rejected"`
	InputTokens  int64 `json:"input_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// Cost is in the report's currency, from the configured prices per
	// million input (uncached), cached and output tokens; nil when no
	// price is configured for a model in the group.
	Cost *float64 `json:"cost,omitempty"`
}

// AddCounts adds o's request and token counts to r (not its key or cost).
func (r *UsageRow) AddCounts(o UsageRow) {
	r.Requests += o.Requests
	r.Cancelled += o.Cancelled
	r.Errors += o.Errors
	r.Rejected += o.Rejected
	r.InputTokens += o.InputTokens
	r.CachedTokens += o.CachedTokens
	r.OutputTokens += o.OutputTokens
}

// OutputCost is the dashboard figure for one model and tier: what a million
// output tokens cost in GPU time. GPUHours is the model's GPUs times the
// report's window, attributed to tiers by their share of the model's
// tokens (input plus output).
type OutputCost struct {
	Model        string  `json:"model"`
	Tier         string  `json:"tier"`
	GPUs         int     `json:"gpus"`
	GPUHours     float64 `json:"gpu_hours"`
	OutputTokens int64   `json:"output_tokens"`
	// CostPerMillion is GPUHours x the GPU-hour price / OutputTokens x 1e6;
	// nil without a GPU-hour price or output tokens.
	CostPerMillion *float64 `json:"cost_per_million_output_tokens,omitempty"`
}

// UsageReport is the body of GET /v1/admin/usage. Query parameters: tenant,
// model, since (a duration back from now such as "24h", or RFC 3339; default
// 24h), until (RFC 3339; default now), by (day, tenant, model or tier;
// default day).
type UsageReport struct {
	Since    time.Time  `json:"since"`
	Until    time.Time  `json:"until"`
	By       string     `json:"by"`
	Tenant   string     `json:"tenant,omitempty"`
	Model    string     `json:"model,omitempty"`
	Currency string     `json:"currency"`
	Rows     []UsageRow `json:"rows"`
	Total    UsageRow   `json:"total"`
	// GPUHourPrice is the configured price of one GPU-hour (0: none).
	GPUHourPrice float64      `json:"gpu_hour_price"`
	OutputCosts  []OutputCost `json:"output_costs"`
}
