package api

import "time"

// Tier names, highest priority first. A tenant's tier sets its default
// quota and its requests' priority in the engine's scheduler.
const (
	TierEnterprise = "enterprise"
	TierPaid       = "paid"
	TierFree       = "free"
	TierBatch      = "batch"
)

// KeyCreateRequest is the body of POST /v1/admin/keys. With no admin key in
// existence yet, a loopback client may call it without a key to create the
// first admin key.
type KeyCreateRequest struct {
	// Tenant owns the key; it is created (with Tier, default "paid") when
	// it does not exist. Default "default".
	Tenant string `json:"tenant,omitempty"`
	// Tier is the tier of a tenant created by this call; ignored for an
	// existing tenant (use PUT /v1/admin/quotas/{tenant}).
	Tier string `json:"tier,omitempty"`
	// Admin keys may call the /v1/admin routes.
	Admin bool `json:"admin,omitempty"`
	// Name is a free-form label.
	Name string `json:"name,omitempty"`
	// Key, when set, is an existing key (made by another llmd) to add
	// instead of a new one, so that one key works on every node of a
	// cluster. The answer echoes it.
	Key string `json:"key,omitempty"`
}

// KeyInfo describes an API key; it never holds the key itself.
type KeyInfo struct {
	// ID identifies the key (for revoking); it is the key's display
	// prefix, e.g. "llmd-Ab3xYz9".
	ID       string     `json:"id"`
	Tenant   string     `json:"tenant"`
	Admin    bool       `json:"admin"`
	Name     string     `json:"name,omitempty"`
	Created  time.Time  `json:"created"`
	LastUsed *time.Time `json:"last_used,omitempty"`
	Revoked  *time.Time `json:"revoked,omitempty"`
}

// KeyCreated is the answer to POST /v1/admin/keys: the only time the key
// is shown.
type KeyCreated struct {
	Key string `json:"key"`
	KeyInfo
}

// KeyList is the body of GET /v1/admin/keys.
type KeyList struct {
	Keys []KeyInfo `json:"keys"`
}

// TenantInfo is one tenant in GET /v1/admin/tenants.
type TenantInfo struct {
	ID      string    `json:"id"`
	Tier    string    `json:"tier"`
	Created time.Time `json:"created"`
	// Keys counts the tenant's keys that are not revoked.
	Keys int `json:"keys"`
}

// TenantList is the body of GET /v1/admin/tenants.
type TenantList struct {
	Tenants []TenantInfo `json:"tenants"`
}

// QuotaLimits are a tenant's limits; 0 means unlimited.
type QuotaLimits struct {
	// RequestsPerMinute and TokensPerMinute (input plus output) are token
	// buckets that refill continuously.
	RequestsPerMinute int64 `json:"rpm"`
	TokensPerMinute   int64 `json:"tpm"`
	// Concurrency is the most requests in flight at once.
	Concurrency int64 `json:"concurrency"`
	// DailyTokens is a budget per UTC day; once spent, requests get 429
	// with x-should-retry: false until the day ends.
	DailyTokens int64 `json:"daily_tokens"`
}

// QuotaUsage is what a tenant has left now.
type QuotaUsage struct {
	InFlight          int64 `json:"in_flight"`
	RequestsAvailable int64 `json:"requests_available"`
	TokensAvailable   int64 `json:"tokens_available"`
	DailyTokensUsed   int64 `json:"daily_tokens_used"`
	// Rejected counts the tenant's requests refused by the quota since
	// llmd started.
	Rejected uint64 `json:"rejected"`
}

// QuotaInfo is a tenant's quota: its tier, the effective limits (the tier's
// defaults with the tenant's overrides), which limits are overridden, and
// the current usage.
type QuotaInfo struct {
	Tenant string      `json:"tenant"`
	Tier   string      `json:"tier"`
	Limits QuotaLimits `json:"limits"`
	// Overridden names the limits set for this tenant ("rpm", "tpm",
	// "concurrency", "daily_tokens"); the others are the tier's.
	Overridden []string `json:"overridden,omitempty"`
	// Capacity is the tenant's capacity settings; nil when none is set.
	Capacity *QuotaCapacity `json:"capacity,omitempty"`
	Usage    *QuotaUsage    `json:"usage,omitempty"`
}

// QuotaCapacity is a tenant's capacity settings beside its limits.
type QuotaCapacity struct {
	// HotShards is the number of Redis sub-buckets each of the tenant's
	// buckets is split into (0: one bucket).
	HotShards int64 `json:"hot_shards,omitempty"`
	// UserRPM and UserTPM limit each end user of the tenant (the OpenAI
	// "user" field, Anthropic's metadata.user_id or the X-LLMD-User
	// header); 0 sets no per-user limit.
	UserRPM int64 `json:"user_rpm,omitempty"`
	UserTPM int64 `json:"user_tpm,omitempty"`
	// ReservedTPS is the output tokens per second the engine keeps for the
	// tenant on ReservedModel ("" every model).
	ReservedTPS   float64 `json:"reserved_tps,omitempty"`
	ReservedModel string  `json:"reserved_model,omitempty"`
}

// QuotaList is the body of GET /v1/admin/quotas.
type QuotaList struct {
	Quotas []QuotaInfo `json:"quotas"`
}

// QuotaUpdate is the body of PUT /v1/admin/quotas/{tenant}. Nil fields keep
// their value; a limit of -1 removes the tenant's override (the tier's
// default applies again), 0 sets it unlimited. The tenant is created when
// it does not exist.
type QuotaUpdate struct {
	Tier              *string `json:"tier,omitempty"`
	RequestsPerMinute *int64  `json:"rpm,omitempty"`
	TokensPerMinute   *int64  `json:"tpm,omitempty"`
	Concurrency       *int64  `json:"concurrency,omitempty"`
	DailyTokens       *int64  `json:"daily_tokens,omitempty"`
	// The capacity settings (see QuotaCapacity): nil keeps the value, 0
	// (or "") clears it.
	HotShards     *int64   `json:"hot_shards,omitempty"`
	UserRPM       *int64   `json:"user_rpm,omitempty"`
	UserTPM       *int64   `json:"user_tpm,omitempty"`
	ReservedTPS   *float64 `json:"reserved_tps,omitempty"`
	ReservedModel *string  `json:"reserved_model,omitempty"`
}
