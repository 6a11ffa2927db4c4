// Package quota decides whether a tenant's request may start, by reserving
// from the tenant's limits at admission and settling the reservation to the
// tokens actually used when the request ends (reserve-then-reconcile).
//
// A tenant has four limits ([Limits]), each 0 for unlimited:
//
//   - RPM and TPM are token buckets: capacity = the limit, refilled
//     continuously at limit/60 per second, full at first use. A request takes
//     one from the RPM bucket and [Request.Tokens] from the TPM bucket.
//   - Concurrency bounds the tenant's unsettled reservations.
//   - DailyTokens bounds the tokens reserved and reconciled in one UTC
//     calendar day.
//
// # Arithmetic
//
// Both backends compute with integers only, so that they agree to the unit
// (the Redis scripts use Lua numbers, which are exact below 2^53). Time is
// counted in whole milliseconds. A bucket holds units: one token is 60,000
// units, and a bucket of limit L gains L units per millisecond, so it fills
// from empty in exactly 60 s. Balances stay in [0, capacity]. Remaining
// counts are whole tokens rounded down; waits are milliseconds rounded up.
//
// A tenant's clock never goes backward: each decision uses the later of the
// current time and the last time used for that tenant, so a clock step back
// cannot refill a bucket twice.
//
// # Reserve
//
// Reserve checks the limits in this order and denies with the first that
// fails; a denied Reserve changes nothing:
//
//  1. "too_large": Tokens > TPM. It can never pass: Hard.
//  2. "daily_tokens": the day's used tokens + Tokens > DailyTokens. Hard;
//     RetryAfter is the time until the next UTC midnight, or 0 when
//     Tokens > DailyTokens (it can never pass).
//  3. "concurrency": the tenant already holds Concurrency reservations.
//     The wait depends on other requests finishing: RetryAfter is at least
//     [ConcurrencyRetryAfter].
//  4. "requests": the RPM bucket holds less than one request.
//  5. "tokens": the TPM bucket holds less than Tokens.
//
// When a soft check (3-5) fails, RetryAfter is the longest wait among all
// the soft checks that fail, so that the same request can pass after it (if
// nothing else takes from the buckets meanwhile).
//
// # Reconcile
//
// Reconcile settles a reservation to the tokens actually used: the TPM
// bucket gets back reserved-actual (never more than the reservation, never
// above capacity) or is charged actual-reserved (never below 0), the day's
// used tokens move by the same difference (when the reservation was made the
// same UTC day; a reservation settled after midnight leaves the new day
// alone), and the concurrency slot is freed. The RPM bucket is not refunded:
// a request was made. Settling twice, or an unknown or expired id, does
// nothing.
//
// # Expiry
//
// A reservation that is not reconciled within the TTL expires (a crashed
// request): its concurrency slot is freed and its tokens stay charged as
// reserved, i.e. it is settled with actual = reserved. Expiry is applied
// lazily, by the next call for that tenant, so a tenant's held reservations
// are at most those made within the last TTL.
//
// # Backends
//
// [Memory] keeps everything in the process (one node). [Redis] shares the
// limits between nodes with one atomic Lua script per Reserve and per
// Reconcile; when Redis is slow or down it decides from a local Memory with
// every limit divided by the number of live nodes, behind a circuit breaker.
// Both give the same decisions for the same operations at the same instants.
//
// Package quota imports nothing of llmd; the request pipeline reserves and
// reconciles through a [Limiter], and the HTTP server maps a denied
// [Decision] to a 429 with Retry-After and x-ratelimit-* headers.
package quota
