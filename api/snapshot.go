package api

import "time"

// Snapshot is the body of GET /v1/admin/snapshot: one node's live state for
// llmctl top.
type Snapshot struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
	// Uptime is in seconds.
	Uptime float64         `json:"uptime_s"`
	Models []ModelSnapshot `json:"models"`
	// Requests are the live requests (queued, running or swapped), newest
	// first, at most 500.
	Requests []RequestSnapshot `json:"requests"`
	// Tenants are the tenants with a quota or recent traffic.
	Tenants []TenantSnapshot `json:"tenants"`
	// GPUs are the node's GPUs from NVML, or the simulated ones (Simulated
	// set) of the sim models; empty when there are none.
	GPUs  []GPUInfo   `json:"gpus"`
	Quota *QuotaStats `json:"quota,omitempty"`
	// Cluster are the cluster's members as this node sees them, itself
	// included (Local set), as GET /v1/admin/nodes lists them; absent when
	// llmd is not clustered.
	Cluster []NodeInfo `json:"cluster,omitempty"`
	// Rollouts are the models config's aliases with a canary (running or
	// rolled back) or a shadow; Safety the safety check's counts and
	// latency, absent without one.
	Rollouts []RolloutBrief `json:"rollouts,omitempty"`
	Safety   *SafetyStats   `json:"safety,omitempty"`
}

// RolloutBrief is one alias's rollout as llmctl top shows it.
type RolloutBrief struct {
	Alias  string `json:"alias"`
	Stable string `json:"stable"`
	Canary string `json:"canary,omitempty"`
	// State is "running", "rolled_back" (Reason says why) or "none".
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Percent is the canary's share per tier; Shadow and ShadowPercent the
	// shadow version and its share.
	Percent       map[string]float64 `json:"percent,omitempty"`
	Shadow        string             `json:"shadow,omitempty"`
	ShadowPercent float64            `json:"shadow_percent,omitempty"`
}

// SafetyStats counts the safety checks since llmd started, with the
// latency percentiles of the recent ones (milliseconds).
type SafetyStats struct {
	Checks   uint64  `json:"checks"`
	Flagged  uint64  `json:"flagged"`
	Blocked  uint64  `json:"blocked"`
	Failures uint64  `json:"failures"`
	P50Ms    float64 `json:"latency_p50_ms"`
	P95Ms    float64 `json:"latency_p95_ms"`
}

// ModelSnapshot is one model's engine state and its recent latencies.
type ModelSnapshot struct {
	EngineStats
	// Latencies over the last minute's finished requests, in seconds (0
	// when there were none).
	TTFTP50 float64 `json:"ttft_p50_s"`
	TTFTP95 float64 `json:"ttft_p95_s"`
	ITLP50  float64 `json:"itl_p50_s"`
	ITLP95  float64 `json:"itl_p95_s"`
}

// Request states in a snapshot.
const (
	StateQueued  = "queued"
	StatePrefill = "prefill"
	StateDecode  = "decode"
	StateSwapped = "swapped"
)

// RequestSnapshot is one live request.
type RequestSnapshot struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Model  string `json:"model"`
	Tier   string `json:"tier"`
	// State is queued, prefill, decode or swapped.
	State           string `json:"state"`
	PromptTokens    int    `json:"prompt_tokens"`
	CachedTokens    int    `json:"cached_tokens"`
	GeneratedTokens int    `json:"generated_tokens"`
	// TTFT is in seconds, 0 before the first token; TokensPerSecond is the
	// output rate since the first token; Age is seconds since arrival.
	TTFT            float64 `json:"ttft_s"`
	TokensPerSecond float64 `json:"tokens_per_s"`
	Age             float64 `json:"age_s"`
	Resumable       bool    `json:"resumable"`
}

// TenantSnapshot is a tenant's quota burn: its limits, what is left, and
// its refusals in the last minute.
type TenantSnapshot struct {
	Tenant    string      `json:"tenant"`
	Tier      string      `json:"tier"`
	Limits    QuotaLimits `json:"limits"`
	Usage     QuotaUsage  `json:"usage"`
	Running   int         `json:"running"`
	Rejected1 int         `json:"rejected_1m"`
	// Reserved is the tenant's provisioned throughput on this node, nil
	// when it holds none.
	Reserved *ReservedRate `json:"reserved,omitempty"`
}

// ReservedRate is a tenant's reserved output rate against what it is
// delivered, in output tokens per second.
type ReservedRate struct {
	// Model is the model the reservation holds on; "" for every model.
	Model string `json:"model,omitempty"`
	// ReservedTPS is the reservation (per engine serving the model);
	// DeliveredTPS the output the engines delivered the tenant over their
	// last measuring window (2 s), summed over the node's models.
	ReservedTPS  float64 `json:"reserved_tps"`
	DeliveredTPS float64 `json:"delivered_tps"`
}

// GPUInfo is one GPU's telemetry. Memory is in bytes; Utilization is a
// fraction 0..1; fields a device does not report are 0.
type GPUInfo struct {
	Index        int     `json:"index"`
	Name         string  `json:"name"`
	MemoryUsed   int64   `json:"memory_used"`
	MemoryTotal  int64   `json:"memory_total"`
	Utilization  float64 `json:"utilization"`
	TemperatureC float64 `json:"temperature_c"`
	PowerW       float64 `json:"power_w"`
	// Simulated marks a sim executor's GPU: memory is the model's KV pool
	// in the roofline model, not a real device.
	Simulated bool `json:"simulated"`
}
