package api

import "time"

// NodeModelLoad is one model's load on a node, as gossiped.
type NodeModelLoad struct {
	Running int     `json:"running"`
	Waiting int     `json:"waiting"`
	KVUsage float64 `json:"kv_usage"`
	// TokensPerSecond is the model's recent output rate on the node.
	TokensPerSecond float64 `json:"tokens_per_second"`
	// WaitingByTier splits Waiting by tier (enterprise, paid, free,
	// batch); tiers with none are left out.
	WaitingByTier map[string]int `json:"waiting_by_tier,omitempty"`
}

// NodeInfo is one cluster member as the answering node sees it.
type NodeInfo struct {
	ID      string   `json:"id"`
	APIAddr string   `json:"api_addr"`
	Version string   `json:"version"`
	Models  []string `json:"models"`
	// Role is the node's part in disaggregated prefill and decode:
	// prefill, decode or both.
	Role string `json:"role,omitempty"`
	// Status is alive, suspect, dead or left.
	Status   string                   `json:"status"`
	Local    bool                     `json:"local"`
	Draining bool                     `json:"draining"`
	Load     map[string]NodeModelLoad `json:"load"`
	// PrefixKeys counts the cached-prefix hashes in its gossiped summary.
	PrefixKeys int       `json:"prefix_keys"`
	Updated    time.Time `json:"updated"`
}

// NodeList is the body of GET /v1/admin/nodes. Clustered is false when
// llmd runs alone (then Nodes holds only itself).
type NodeList struct {
	Clustered bool       `json:"clustered"`
	Nodes     []NodeInfo `json:"nodes"`
}
