package api

import "time"

// UsageRow is one group of a usage report: its key (a day "2006-01-02", a
// tenant, a model, a tier or a model-choice decision, per the report's By;
// "" for the requests without a decision) and its totals. Tokens count
// only what was really processed and generated.
type UsageRow struct {
	Key string `json:"key"`
	// Requests counts requests that reached the engine; Cancelled, Errors
	// and Finished are among them. Rejected counts requests refused before
	// any compute (quota, overload).
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
	// Finished counts the requests that ended normally (stop or length);
	// MeanTTFTMs and MeanITLMs, the mean time to first token and mean
	// inter-token latency in milliseconds, are over them (0 when none).
	// A report from an llmd that predates them has all three 0.
	Finished   int64   `json:"finished,omitempty"`
	MeanTTFTMs float64 `json:"mean_ttft_ms,omitempty"`
	MeanITLMs  float64 `json:"mean_itl_ms,omitempty"`
}

// AddCounts adds o's request and token counts to r (not its key or cost)
// and folds o's mean latencies into r's, weighted by their Finished
// counts.
func (r *UsageRow) AddCounts(o UsageRow) {
	if n := r.Finished + o.Finished; n > 0 {
		r.MeanTTFTMs = (r.MeanTTFTMs*float64(r.Finished) + o.MeanTTFTMs*float64(o.Finished)) / float64(n)
		r.MeanITLMs = (r.MeanITLMs*float64(r.Finished) + o.MeanITLMs*float64(o.Finished)) / float64(n)
	}
	r.Finished += o.Finished
	r.Requests += o.Requests
	r.Cancelled += o.Cancelled
	r.Errors += o.Errors
	r.Rejected += o.Rejected
	r.InputTokens += o.InputTokens
	r.CachedTokens += o.CachedTokens
	r.OutputTokens += o.OutputTokens
}

// CostPerMillionTokens is what a million of the row's tokens (input,
// cached included, plus output) cost: Cost / tokens x 1e6, in the
// report's currency; nil when Cost is nil or the row has no tokens.
func (r UsageRow) CostPerMillionTokens() *float64 {
	tokens := r.InputTokens + r.OutputTokens
	if r.Cost == nil || tokens <= 0 {
		return nil
	}
	c := *r.Cost / float64(tokens) * 1e6
	return &c
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
// 24h), until (RFC 3339; default now), by (day, tenant, model, tier or
// decision; default day).
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
	// Reservations are the tenants' provisioned throughput (of the report's
	// tenant and model when it names them), one per tenant and model
	// served here; absent when no tenant holds one.
	Reservations []ReservationUsage `json:"reservations,omitempty"`
}

// ReservationUsage is a tenant's reserved output rate on a model against
// what it was delivered.
type ReservationUsage struct {
	Tenant string `json:"tenant"`
	Model  string `json:"model"`
	// ReservedTPS is the reservation in output tokens per second;
	// DeliveredTPS the rate the model's engine delivered the tenant over
	// its last 2 s (live).
	ReservedTPS  float64 `json:"reserved_tps"`
	DeliveredTPS float64 `json:"delivered_tps"`
	// OutputTokens are the tenant's output tokens on the model in the
	// report's window; MeanTPS is them over the window's length.
	OutputTokens int64   `json:"output_tokens"`
	MeanTPS      float64 `json:"mean_tps"`
}
