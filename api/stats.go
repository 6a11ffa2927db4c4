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
}

// StatsResponse is the body of GET /v1/stats.
type StatsResponse struct {
	Models []EngineStats `json:"models"`
}
