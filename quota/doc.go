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
// from empty in exactly 60 s. Balances stay in [0, capacity], except that
// the TPM bucket may go below zero by the debt of estimated reservations
// (below). Remaining counts are whole tokens rounded down (0 in debt);
// waits are milliseconds rounded up.
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
//  1. "too_large": Tokens > TPM. It can never pass: Hard. (An estimated
//     request's MaxTokens may exceed TPM.)
//  2. "daily_tokens": the day's used tokens + Tokens > DailyTokens. Hard;
//     RetryAfter is the time until the next UTC midnight, or 0 when
//     Tokens > DailyTokens (it can never pass).
//  3. "concurrency": the tenant already holds Concurrency reservations.
//     The wait depends on other requests finishing: RetryAfter is at least
//     [ConcurrencyRetryAfter].
//  4. "requests": the RPM bucket holds less than one request.
//  5. "tokens": the TPM bucket holds less than Tokens, or, when estimated
//     reservations are held, less than the need of "Estimated reservations"
//     below. When that need exceeds TPM, requests in flight must settle
//     before it can pass, and RetryAfter is at least ConcurrencyRetryAfter.
//
// When a soft check (3-5) fails, RetryAfter is the longest wait among all
// the soft checks that fail, so that the same request can pass after it (if
// nothing else takes from the buckets meanwhile; a debt charged by a
// settlement takes from them).
//
// # Reconcile
//
// Reconcile settles a reservation to the tokens actually used: the TPM
// bucket gets back reserved-actual (never more than the reservation, never
// above capacity) or is charged actual-reserved: the part up to the
// reservation's [Request.MaxTokens] even below 0 (a debt), the part beyond
// it only down to 0 (it never raises a balance already below 0). The day's
// used tokens move by actual-reserved (when the reservation was made the
// same UTC day; a reservation settled after midnight leaves the new day
// alone), and the concurrency slot is freed. The RPM bucket is not refunded:
// a request was made. Settling twice, or an unknown or expired id, does
// nothing.
//
// In the default (exact) mode a request reserves the most it may use
// (MaxTokens is 0 or Tokens), so it is never charged more than it reserved
// and the TPM balance stays in [0, TPM].
//
// # Estimated reservations
//
// A reservation whose MaxTokens is above its Tokens is estimated (llmd's
// --quota-estimate reserves the prompt plus the tenant's usual answer
// length, and MaxTokens is the prompt plus max_tokens). Its potential
// overage is o = MaxTokens - Tokens; while it is held (not settled, not
// expired) it counts in the tenant's held overage O, the sum of the held
// reservations' o (reservations not taken from the TPM bucket count 0).
// An estimated reservation settled above its Tokens leaves the bucket in
// debt, and every request then waits until the bucket refills past its
// debt and its need. The need of a request (Tokens r, overage o) is
//
//	need = r + max(0, O - max(0, TPM - o))
//
// its reservation plus the overage held beyond an allowance of one TPM
// less its own overage. With nothing estimated held (O = 0) the need is r,
// the default mode's check.
//
// Invariant: the worst-case balance W = balance - O (the balance if every
// held reservation used its MaxTokens) is at least -max(TPM, o) after each
// admission (o of the request admitted), and refills, settlements (of at
// most MaxTokens) and expiry only raise it. So W and the balance stay in
// [-D, TPM] with D = max(TPM, the largest potential overage of one
// request), under fixed limits.
//
// The bound: from a full bucket with nothing held, the requests admitted
// within t seconds use at most TPM*(1 + t/60) + D tokens, even if all of
// them run concurrently and use their MaxTokens; the default mode's bound is
// TPM*(1 + t/60). Whatever was used beyond it is then a debt that delays
// the tenant's next requests, so over time the tenant uses no more than
// TPM per minute plus D once.
//
// The allowance is a choice between the worst case and concurrency.
// Without it (need = r + O) the overshoot would be at most the largest
// single overage, but every request in flight would hold its whole
// MaxTokens from the worst-case balance, so a tenant could run only one
// more request at once than by reserving MaxTokens. No admission rule does
// better: the limiter cannot tell at admission which requests will use
// their MaxTokens, and requests admitted together whose MaxTokens add up to
// more than the balance + D overshoot by more than D when they all do. With
// the allowance a tenant whose answers match its estimate holds up to twice
// as much MaxTokens in flight as in the default mode (its reservations
// still within the balance).
//
// # Expiry
//
// A reservation that is not reconciled within the TTL expires (a crashed
// request): its concurrency slot is freed and its tokens stay charged as
// reserved, i.e. it is settled with actual = reserved. Expiry is applied
// lazily, by the next call for that tenant, so a tenant's held reservations
// are at most those made within the last TTL. An expired estimated
// reservation leaves the held overage.
//
// # Hot tenants
//
// A tenant whose [Limits.Shards] is n > 1 has each of its buckets split into
// n sub-buckets in Redis, each its own keys with its own hash tag
// (llmd:qs:{tenant/i}:s, :r, :e), so that in a Redis Cluster they spread
// over slots and no single key takes all of the tenant's traffic. Sub-bucket
// i gets limit/n of each limit, plus one for each of the first limit mod n
// sub-buckets, so the parts add up to the limit exactly; n is lowered to the
// smallest limit set, so that no part is 0 (unlimited). A request goes to a
// sub-bucket chosen round robin (each node starts at a random one); when it
// refuses, the others are tried in turn, and the first that admits holds the
// reservation, which the limiter remembers for its Reconcile. When every
// sub-bucket refuses and only tokens stood in the way (the request is
// larger than what any one holds), the request borrows: the sub-buckets'
// balances are read, and if together they hold it, it is reserved in pieces
// (the first piece takes the request and carries the overage), each settled
// in its own sub-bucket. A piece refused meanwhile gives the others back.
//
// The bound: each sub-bucket keeps its own part exactly, so over any time t
// the tokens the tenant is admitted are at most TPM*(1 + t/60), the bound of
// one bucket (never more, whatever the nodes and the concurrency), and the
// requests at most RPM*(1 + t/60). Splitting can only under-admit: a token
// request is refused while the sub-buckets together hold it only when a
// borrow races with other admissions, so at the end of any burst the
// tenant's unused balance is below n times its largest request (each
// sub-bucket strands less than one request); requests per minute may strand
// less than one request per sub-bucket. TestRedisShardTotalsUnderConcurrency
// checks both sides with three limiters sharing a Redis. The Remaining*
// fields of a decision are the chosen sub-bucket's times n (an estimate);
// [Redis.Usage] sums the sub-buckets. A borrowed request holds a piece, and
// so a concurrency slot, in each sub-bucket it borrowed from until it is
// settled.
//
// Changing a tenant's Shards moves it to other keys whose buckets start
// full: up to one more window of each limit can be admitted at the change
// (as when Redis loses a tenant's state). [Memory] ignores Shards: in one
// process there is no hot key, and its per-tenant lock is not shared.
//
// # Hot tenants detected by their request rate
//
// With [RedisConfig.HotRPS] set, a tenant with one bucket is split when it
// is hot, and the switch is agreed in Redis itself. The reserve script
// counts the requests that reach the tenant's bucket in each second of
// Redis's clock; the call that makes the count exceed HotRPS, in the same
// atomic script on the tenant's own slot, writes a split record into the
// tenant's state hash (the time of the split, which is also its epoch, the
// n sub-buckets, the limits, and the balance moved out: the request and
// token units refilled to that instant, the token units less the overage
// of the estimated reservations held, the day's used tokens plus that
// overage) and answers "split". From then on the whole bucket admits
// nothing: every reserve that reaches it gets the record instead, so no
// node can admit against both, and each node follows the record whatever
// its own settings (a node with detection off too). The sub-buckets of the
// split have keys of their own ({tenant/epoch/i}). Each starts with its
// part of the moved balance, computed from the record alone (the same on
// every node: parts in proportion to the sub-bucket's share of the limit,
// adding up to the balance exactly), and set by the first reserve that
// reaches it, only if it does not exist: it never starts full. A node
// keeps the record it read for 10 s before it reads it again from the
// tenant's bucket (which keeps the record alive in Redis), so a split
// tenant's own key is touched at most once per 10 s per node. A
// reservation held in the whole bucket at the split is settled there,
// where it was taken; its worst case was charged to the parts at the
// split, so its settlement needs to reach no sub-bucket.
//
// The bound: the parts together hold exactly what the one bucket held
// (less the held overage) and each refills at its share of the limit, so
// across the switch the tokens admitted over any t seconds stay within
// the one-bucket bound TPM*(1 + t/60) (requests within RPM*(1 + t/60), the
// day within its budget), whatever the nodes and the concurrency.
// Splitting only under-admits: the refunds of reservations held in the
// whole bucket at the split stay there, and each part strands less than
// one request, as above. One limit is not moved: the reservations held in
// the whole bucket at the split do not count in the parts' concurrency, so
// until they settle or expire (the TTL) the tenant may hold up to that
// many more than Concurrency. TestRedisHotDetection and
// TestRedisHotDetectionTotalsUnderConcurrency check the bound with three
// limiters on a real Redis.
//
// In a Redis Cluster the sub-buckets live in other slots than the record,
// and no script spans slots, so the split does not write them: it only
// takes the balance out of the tenant's bucket and records how it divides;
// each part is created in its own slot, atomically and only if absent,
// from the record's numbers. Nothing is then left half done: a node that
// dies between the two leaves a part not yet created, which the next
// reserve creates with the same numbers. What the bound does not cover is
// Redis losing state: a part lost (its shard failed over) is created
// again from the record's numbers refilled to now, up to one full part
// more; a record lost sends the nodes back to the whole bucket, which
// starts full, after at most 10 s, during which nodes that still hold the
// record admit against the parts: up to one more window of each limit, as
// for any tenant whose state Redis loses. A detected split has no
// cool-down: it lasts until the tenant's state expires after 48 h unread;
// marking the tenant with Shards takes precedence over it.
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
