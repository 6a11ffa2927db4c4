package api

// EngineStats is one model replica's state in GET /v1/stats: KV-cache
// blocks, queues, and counters since start.
type EngineStats struct {
	Model string `json:"model"`
	// Executor is "simulated" for the sim/ models.
	Executor string `json:"executor"`
	// KV blocks: total, in use, and cached (free but holding a reusable
	// prefix). BlockSize is in tokens.
	BlocksTotal  int `json:"blocks_total"`
	BlocksUsed   int `json:"blocks_used"`
	BlocksCached int `json:"blocks_cached"`
	BlockSize    int `json:"block_size"`
	Running      int `json:"running"`
	Waiting      int `json:"waiting"`
	// WaitingByTier counts queued sequences per priority class.
	WaitingByTier map[string]int `json:"waiting_by_tier"`
	// Swapped sequences sit in host swap space, using SwapBlocksUsed of
	// SwapBlocksTotal blocks.
	Swapped         int `json:"swapped"`
	SwapBlocksUsed  int `json:"swap_blocks_used"`
	SwapBlocksTotal int `json:"swap_blocks_total"`

	Steps                uint64 `json:"steps"`
	Completed            uint64 `json:"requests_completed"`
	GeneratedTokens      uint64 `json:"generated_tokens"`
	ComputedTokens       uint64 `json:"computed_tokens"`
	PrefixQueryTokens    uint64 `json:"prefix_query_tokens"`
	PrefixHitTokens      uint64 `json:"prefix_hit_tokens"`
	Preemptions          uint64 `json:"preemptions"`
	PreemptionsSwap      uint64 `json:"preemptions_swap"`
	PreemptionsRecompute uint64 `json:"preemptions_recompute"`
	Evictions            uint64 `json:"evictions"`
	// Degrade is the degradation ladder's step ("none", "pause_batch",
	// "limit_free", "shed_free", "queue_paid") and DegradeLevel its number
	// (0 to 4).
	Degrade      string `json:"degrade"`
	DegradeLevel int    `json:"degrade_level"`
}

// QuotaStats counts the quota service's decisions since start.
type QuotaStats struct {
	// Backend is "memory" or "redis".
	Backend string `json:"backend"`
	Allow   uint64 `json:"allow"`
	Deny    uint64 `json:"deny"`
	// ErrorAllowed and ErrorDenied count decisions made by the local
	// fallback while Redis was failing; FallbackActive says it is now.
	ErrorAllowed   uint64 `json:"error_allowed"`
	ErrorDenied    uint64 `json:"error_denied"`
	FallbackActive bool   `json:"fallback_active"`
	// Resets counts times Redis was found to have lost the quota state.
	Resets uint64 `json:"resets"`
}

// StatsResponse is the body of GET /v1/stats.
type StatsResponse struct {
	Models []EngineStats `json:"models"`
	Quota  *QuotaStats   `json:"quota,omitempty"`
}
