// Package store keeps llmd's durable state in one SQLite file in the data
// directory: tenants, API keys (hashed), tier and tenant quota settings, the
// usage ledger, shadow-traffic results, and the schema's migrations. It
// imports nothing of llmd's.
//
// The file is dir/llmd.db in WAL mode, so readers never wait for the writer
// and two processes (llmd and an offline "llmctl keys create --data-dir")
// may open it at once, with synchronous=FULL, so that a commit is on disk
// when it returns. Write transactions start with BEGIN IMMEDIATE, so
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
// # Usage ledger
//
// The table usage_events holds one row per request, keyed by its request
// id: [UsageWriter.Begin] writes it as in_flight at admission,
// [UsageWriter.Progress] checkpoints the output tokens of a streaming
// answer into it, and [UsageWriter.Record] (or RecordAsync, for
// rejections) replaces it with the final event. Writes are idempotent: an
// in-flight event replaces only an in-flight row with fewer output tokens,
// and the first final event wins, so an event may be recorded or replayed
// any number of times. A row also carries the request's model-choice
// decision and safety verdict ([UsageEvent].Decision and Safety).
// [Store.UsageReport] sums the final rows by day, tenant, model, tier or
// decision, with the mean latencies of the finished ones.
//
// A [UsageWriter] writes the events in group commits. When SQLite fails
// (busy past its timeout, a full disk, an I/O error), the events are
// appended to an fsynced JSON-lines spool, dir/usage-spool.jsonl, and
// Record still succeeds: a request is never refused because the ledger is
// down, and its usage is never dropped silently. The writer replays the
// spool once SQLite works again; at startup, [Store.RecoverUsage] replays
// whatever is left and marks the rows that were in flight when llmd died as
// interrupted. Only when the spool fails too does Record return an error
// (counted in [UsageWriterStats].Failed).
//
// [Store.NewUsageWriter] starts no goroutine: the caller runs
// [UsageWriter.Run] on a goroutine it owns (cmd/llmd's errgroup). Run writes
// until its context ends, then refuses new events (ErrClosed), flushes the
// queue, within [UsageWriterConfig].FlushTimeout or else to the spool, and
// returns; it must have returned before [Store.Close]. So its context must
// end only after the last event was queued (after the HTTP server's
// Shutdown), not with the process's signal context.
//
// # Shadow results
//
// The table shadow_results holds one row per request copied to a shadow
// model (a new version run on live traffic, its answer discarded and never
// billed): both sides' status, latency and output length, and, for greedy
// answers, whether they match and their token edit distance.
// [Store.RecordShadow] writes a row; [Store.ShadowReport] summarises them
// per alias and model pair, [Store.ShadowResults] lists them.
//
// # Replicated control state
//
// Every change to a tenant, an API key (the SHA-256 of its secret, never
// the secret), a tenant's quota overrides or a tier's limits also writes,
// in the same transaction, a [Record] of that thing's whole state in the
// table control_records, versioned by a hybrid logical clock timestamp and
// the node that made it ([Store.SetNode]; without one, the database's own
// random name). [Store.OnChange] is told of them after the commit, for a
// cluster to gossip; [Store.Records] lists them for a peer; [Store.Apply]
// merges a peer's: the newer version wins, an older one is ignored, and a
// key revocation is never lost (see [Record]). Usage rows are per node.
//
// # Errors
//
// Callers branch on [ErrNotFound], [ErrInvalid] (wrapped with the reason) and
// [ErrBadKey] with errors.Is; other errors are the database's and mean the
// store itself failed.
package store
