package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limits are one tenant's limits; 0 means unlimited.
type Limits struct {
	// RPM is requests per minute: the capacity of the request bucket, which
	// refills RPM/60 requests per second.
	RPM int64
	// TPM is tokens per minute: the capacity of the token bucket, which
	// refills TPM/60 tokens per second.
	TPM int64
	// Concurrency is the most reservations the tenant may hold unsettled.
	Concurrency int64
	// DailyTokens is the most tokens reserved and reconciled per UTC day.
	DailyTokens int64
	// Shards splits each of the tenant's buckets into that many
	// sub-buckets, each its own Redis key (a hot tenant; 0 or 1: one
	// bucket), at most MaxShards. Memory ignores it: one process has no hot
	// key. See "Hot tenants" in the package doc.
	Shards int
}

// Request asks to reserve quota for one request.
type Request struct {
	// ID is the reservation id: the request id, unique, at least 128 bits
	// random. It becomes part of a Redis key: see [MaxIDLen].
	ID string
	// Tenant owns the limits. It becomes part of a Redis key: see
	// [MaxTenantLen].
	Tenant string
	// Limits are the tenant's limits at this request.
	Limits Limits
	// Tokens are the input plus the expected output tokens to reserve.
	Tokens int64
	// MaxTokens is the most tokens the request may use (input plus
	// max_tokens for each choice), at least Tokens; 0 means Tokens. When it
	// is above Tokens the reservation is estimated: it may be settled for up
	// to MaxTokens, the excess charged to the TPM bucket even below zero (a
	// debt), and until it is settled its potential overage, MaxTokens -
	// Tokens, counts against the admission of the tenant's other requests
	// (see "Estimated reservations" in the package doc).
	MaxTokens int64
}

// most is the most tokens r may use.
func (r *Request) most() int64 { return max(r.Tokens, r.MaxTokens) }

// Reason names the limit that denied a reservation. Its values are stable:
// they appear in usage rows ("quota_" + reason) and error messages.
type Reason string

// Deny reasons, in the order Reserve checks them (see the package doc).
const (
	ReasonTooLarge    Reason = "too_large"
	ReasonDailyTokens Reason = "daily_tokens"
	ReasonConcurrency Reason = "concurrency"
	ReasonRequests    Reason = "requests"
	ReasonTokens      Reason = "tokens"
)

// Hard reports whether a denial for r cannot pass by retrying soon: the
// request is larger than the tokens-per-minute limit, or the daily budget is
// spent.
func (r Reason) Hard() bool { return r == ReasonTooLarge || r == ReasonDailyTokens }

// PerRequest reports whether r limits requests (their rate or how many run
// at once) rather than tokens.
func (r Reason) PerRequest() bool { return r == ReasonRequests || r == ReasonConcurrency }

// ConcurrencyRetryAfter is the RetryAfter of a request denied only for
// concurrency: how soon a slot frees depends on other requests, so this is a
// hint for clients, not a promise.
const ConcurrencyRetryAfter = time.Second

// Decision is the outcome of [Limiter.Reserve].
type Decision struct {
	// Allowed reports that the reservation was made: the caller must
	// Reconcile it exactly once when the request ends.
	Allowed bool
	// Reason is, when denied, the first limit that failed: "requests",
	// "tokens", "concurrency", "daily_tokens" or "too_large".
	Reason Reason
	// RetryAfter is, when denied and not Hard, the wait after which the
	// same request could pass. For daily_tokens it is the time until the
	// next UTC midnight (0 when Tokens exceed the whole daily budget); for
	// too_large it is 0.
	RetryAfter time.Duration
	// Hard reports a denial that retrying soon cannot help: the daily
	// budget is spent, or the request is too_large. The daemon sends
	// x-should-retry: false.
	Hard bool

	// The x-ratelimit-* header values, after this decision. A 0 limit is
	// unlimited, and then the remaining count and the reset time are 0.
	// Reset* is the time until the bucket is full.
	LimitRequests, RemainingRequests int64
	ResetRequests                    time.Duration
	LimitTokens, RemainingTokens     int64
	ResetTokens                      time.Duration

	// Fallback reports a decision made by the local fallback limiter
	// because Redis failed: the limits were divided by the live nodes, and
	// the Limit*, Remaining* and Reset* fields are this node's share.
	Fallback bool
}

// Err returns nil for an allowed decision and an [*ExceededError] for a
// denied one.
func (d Decision) Err() error {
	if d.Allowed {
		return nil
	}
	return &ExceededError{Limit: d.Reason, RetryAfter: d.RetryAfter, Hard: d.Hard}
}

// ExceededError is a denied [Decision] as an error, for callers that carry
// denials through error returns (test with errors.As).
type ExceededError struct {
	// Limit is the deny reason: the limit that failed.
	Limit Reason
	// RetryAfter is the decision's RetryAfter.
	RetryAfter time.Duration
	// Hard reports that retrying soon cannot help.
	Hard bool
}

func (e *ExceededError) Error() string {
	if e.Hard {
		return fmt.Sprintf("quota: %s limit exceeded", e.Limit)
	}
	return fmt.Sprintf("quota: %s limit exceeded, retry after %v", e.Limit, e.RetryAfter)
}

// Usage is a tenant's state now.
type Usage struct {
	// InFlight counts unsettled, unexpired reservations.
	InFlight int64
	// RequestsAvailable and TokensAvailable are the whole requests and
	// tokens in the buckets (0 when the limit is 0, or the bucket is in
	// debt).
	RequestsAvailable, TokensAvailable int64
	// TokensOwed is the TPM bucket's debt: the tokens it is below zero,
	// rounded up, after estimated reservations were settled above what they
	// reserved (0 when the limit is 0).
	TokensOwed int64
	// DailyTokensUsed are the tokens reserved and reconciled today (UTC),
	// counted even when DailyTokens is 0.
	DailyTokensUsed int64
}

// Counters count decisions since the limiter was made, for the
// limiter_decisions_total{result=...} metric.
type Counters struct {
	// Allow and Deny count decisions made by the backend itself.
	Allow, Deny uint64
	// ErrorAllowed and ErrorDenied count decisions made by the local
	// fallback because Redis failed (always 0 for Memory).
	ErrorAllowed, ErrorDenied uint64
	// Resets counts the times Redis was found to have lost a tenant's
	// state (restarted empty, failover).
	Resets uint64
	// Borrowed counts hot tenants' requests admitted in pieces over
	// several sub-buckets, none of which could hold them alone.
	Borrowed uint64
	// HotDetected counts the tenants this limiter's reserve script found
	// over RedisConfig.HotRPS and split into sub-buckets (one per split,
	// counted by the node whose request made it).
	HotDetected uint64
	// FallbackActive reports that Redis is failing now: the last Redis call
	// failed or the circuit breaker is open.
	FallbackActive bool
}

// Limiter reserves and settles quota. Implementations are safe for
// concurrent use.
type Limiter interface {
	// Reserve decides, atomically, whether the request may start: it takes
	// one request from the RPM bucket, Tokens from the TPM bucket, one
	// concurrency slot and Tokens of the daily budget, or nothing at all.
	// It returns an error only for an invalid request ([ErrInvalid]), a
	// reused id ([ErrDuplicateID]) or a closed limiter ([ErrClosed]).
	Reserve(ctx context.Context, r Request) (Decision, error)
	// Reconcile settles a reservation at finish, cancel or error to the
	// tokens actually used: refunds the difference (capped at the
	// reservation) or charges the shortfall (below zero up to the
	// reservation's MaxTokens, beyond it with the bucket floored at 0),
	// frees the concurrency slot. Settling twice, or an unknown/expired id, is a
	// no-op returning nil.
	Reconcile(ctx context.Context, tenant, id string, actual int64) error
	// Usage reports a tenant's state under limits l.
	Usage(ctx context.Context, tenant string, l Limits) (Usage, error)
	// Counters returns the decision counters.
	Counters() Counters
	// Close releases the limiter's resources; later calls return ErrClosed.
	Close() error
}

var (
	_ Limiter = (*Memory)(nil)
	_ Limiter = (*Redis)(nil)
)

var (
	// ErrInvalid is wrapped by the errors for invalid arguments: an empty
	// or malformed tenant or id, negative or too large tokens or limits.
	ErrInvalid = errors.New("quota: invalid argument")
	// ErrDuplicateID is returned by Reserve for an id that already holds an
	// unsettled reservation of the tenant.
	ErrDuplicateID = errors.New("quota: reservation id already in use")
	// ErrClosed is returned by calls on a closed limiter.
	ErrClosed = errors.New("quota: limiter closed")
)

// Bounds on arguments. They keep every bucket value below 2^53, where the
// Redis scripts' Lua numbers are exact integers.
const (
	// MaxTenantLen and MaxIDLen bound the tenant and id in bytes.
	MaxTenantLen = 128
	MaxIDLen     = 128
	// MaxRate bounds RPM, TPM, Concurrency, Tokens, MaxTokens and the
	// actual tokens of Reconcile.
	MaxRate = 1_000_000_000
	// MaxDailyTokens bounds DailyTokens.
	MaxDailyTokens = 1_000_000_000_000_000
	// MaxShards bounds Request.Shards.
	MaxShards = 64
)

// validKey checks a tenant or id that becomes part of a Redis key: not
// empty, at most max bytes, no hash-tag braces, no control characters.
func validKey(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, what, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '{' || c == '}' || c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %s %q contains %q", ErrInvalid, what, s, c)
		}
	}
	return nil
}

func (l Limits) validate() error {
	switch {
	case l.RPM < 0 || l.TPM < 0 || l.Concurrency < 0 || l.DailyTokens < 0:
		return fmt.Errorf("%w: negative limit %+v", ErrInvalid, l)
	case l.RPM > MaxRate || l.TPM > MaxRate || l.Concurrency > MaxRate:
		return fmt.Errorf("%w: limit above %d in %+v", ErrInvalid, MaxRate, l)
	case l.DailyTokens > MaxDailyTokens:
		return fmt.Errorf("%w: daily tokens %d above %d", ErrInvalid, l.DailyTokens, MaxDailyTokens)
	case l.Shards < 0 || l.Shards > MaxShards:
		return fmt.Errorf("%w: shards %d outside [0, %d]", ErrInvalid, l.Shards, MaxShards)
	}
	return nil
}

func (r *Request) validate() error {
	if err := validKey("tenant", r.Tenant, MaxTenantLen); err != nil {
		return err
	}
	if err := validKey("reservation id", r.ID, MaxIDLen); err != nil {
		return err
	}
	if r.Tokens < 0 || r.Tokens > MaxRate {
		return fmt.Errorf("%w: tokens %d outside [0, %d]", ErrInvalid, r.Tokens, MaxRate)
	}
	if r.MaxTokens != 0 && (r.MaxTokens < r.Tokens || r.MaxTokens > MaxRate) {
		return fmt.Errorf("%w: max tokens %d outside [tokens %d, %d]", ErrInvalid, r.MaxTokens, r.Tokens, MaxRate)
	}
	return r.Limits.validate()
}

func validateReconcile(tenant, id string, actual int64) error {
	if err := validKey("tenant", tenant, MaxTenantLen); err != nil {
		return err
	}
	if err := validKey("reservation id", id, MaxIDLen); err != nil {
		return err
	}
	if actual < 0 || actual > MaxRate {
		return fmt.Errorf("%w: actual tokens %d outside [0, %d]", ErrInvalid, actual, MaxRate)
	}
	return nil
}

// perNode divides each limit by n live nodes, rounding up, at least 1; an
// unlimited (0) limit stays unlimited.
func (l Limits) perNode(n int) Limits {
	if n <= 1 {
		return l
	}
	div := func(v int64) int64 {
		if v == 0 {
			return 0
		}
		return max(1, (v+int64(n)-1)/int64(n))
	}
	return Limits{RPM: div(l.RPM), TPM: div(l.TPM), Concurrency: div(l.Concurrency), DailyTokens: div(l.DailyTokens)}
}
