// Package store keeps llmd's durable state in one SQLite file in the data
// directory: tenants, API keys (hashed), tier and tenant quota settings, and
// the schema's migrations. It imports nothing of llmd's.
//
// The file is dir/llmd.db in WAL mode, so readers never wait for the writer
// and two processes (llmd and an offline "llmctl keys create --data-dir")
// may open it at once. Write transactions start with BEGIN IMMEDIATE, so
// they take the write lock before reading and wait up to 5 s for another
// writer instead of failing with "database is locked" half-way through.
// Times are stored as Unix milliseconds and returned in UTC.
//
// # Tiers and their default limits
//
// Every tenant has a [Tier]. The first migration seeds these limits per tier
// (0 means unlimited); [Store.SetTierLimits] changes them and
// [Store.UpdateQuota] overrides them per tenant:
//
//	tier        requests/min  tokens/min  concurrency  tokens/day
//	enterprise             0           0            0           0
//	paid                 600   2,000,000           64           0
//	free                  60     200,000            8           0
//	batch                120   2,000,000           16           0
//
// The first migration also creates the tenant [LocalTenant] (tier paid, every
// limit overridden to unlimited), which llmd uses for unauthenticated
// requests on loopback.
//
// # API keys
//
// A key's secret is "llmd-", 43 base62 characters encoding 32 random bytes,
// and 6 base62 characters of the CRC-32 (IEEE) of everything before them, 54
// characters in all; the checksum lets [Store.Authenticate] reject a mistyped
// key without reading the database. The key's ID is the secret's first 12
// characters; it is shown in listings and names the key to revoke. Only the
// SHA-256 of the secret is stored: a lost secret cannot be recovered, only
// revoked and replaced.
//
// # Errors
//
// Callers branch on [ErrNotFound], [ErrInvalid] (wrapped with the reason) and
// [ErrBadKey] with errors.Is; other errors are the database's and mean the
// store itself failed.
package store
