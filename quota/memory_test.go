package quota

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryBuckets(t *testing.T) {
	clock := newFakeClock(t0)
	m := newTestMemory(t, clock)
	lim := Limits{RPM: 2, TPM: 100}

	d, _ := reserve(t, m, "acme", lim, 60)
	require.True(t, d.Allowed)
	assert.Equal(t, Decision{
		Allowed:       true,
		LimitRequests: 2, RemainingRequests: 1, ResetRequests: 30 * time.Second, // 1 request at 2/min
		LimitTokens: 100, RemainingTokens: 40, ResetTokens: 36 * time.Second, // 60 tokens at 100/min
	}, d)

	d, _ = reserve(t, m, "acme", lim, 50)
	assert.Equal(t, Decision{
		Reason: ReasonTokens, RetryAfter: 6 * time.Second, // 10 tokens short at 100/min
		LimitRequests: 2, RemainingRequests: 1, ResetRequests: 30 * time.Second,
		LimitTokens: 100, RemainingTokens: 40, ResetTokens: 36 * time.Second,
	}, d, "a denied reserve changes nothing")

	d, _ = reserve(t, m, "acme", lim, 40)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(0), d.RemainingRequests)
	assert.Equal(t, int64(0), d.RemainingTokens)
	assert.Equal(t, time.Minute, d.ResetRequests)
	assert.Equal(t, time.Minute, d.ResetTokens)

	// Both buckets are short: the reason is the first in order, the wait
	// the longest.
	d, _ = reserve(t, m, "acme", lim, 1)
	assert.Equal(t, ReasonRequests, d.Reason)
	assert.Equal(t, 30*time.Second, d.RetryAfter)
	assert.False(t, d.Hard)

	clock.Advance(30 * time.Second)
	u, err := m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 2, RequestsAvailable: 1, TokensAvailable: 50, DailyTokensUsed: 100}, u)
	d, _ = reserve(t, m, "acme", lim, 50)
	assert.True(t, d.Allowed, "RetryAfter later the same request passes")

	// A bucket never holds more than its capacity, however long it waits.
	clock.Advance(time.Hour)
	u, err = m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(2), u.RequestsAvailable)
	assert.Equal(t, int64(100), u.TokensAvailable)
}

func TestMemoryRetryAfterIsExact(t *testing.T) {
	clock := newFakeClock(t0)
	m := newTestMemory(t, clock)
	lim := Limits{TPM: 7} // 7 tokens per minute: one token per 8571.43 ms
	d, _ := reserve(t, m, "acme", lim, 7)
	require.True(t, d.Allowed)
	d, _ = reserve(t, m, "acme", lim, 3)
	require.Equal(t, ReasonTokens, d.Reason)
	require.Equal(t, 25715*time.Millisecond, d.RetryAfter, "ceil(3*60000/7) ms")

	clock.Advance(d.RetryAfter - time.Millisecond)
	d2, _ := reserve(t, m, "acme", lim, 3)
	require.False(t, d2.Allowed, "1 ms before RetryAfter the request still fails")
	assert.Equal(t, time.Millisecond, d2.RetryAfter)
	clock.Advance(time.Millisecond)
	d2, _ = reserve(t, m, "acme", lim, 3)
	require.True(t, d2.Allowed)
}

func TestMemoryTooLarge(t *testing.T) {
	m := newTestMemory(t, newFakeClock(t0))
	// too_large comes first, even when other limits fail too.
	d, _ := reserve(t, m, "acme", Limits{TPM: 100, DailyTokens: 50, RPM: 1}, 101)
	assert.Equal(t, Decision{Reason: ReasonTooLarge, Hard: true, LimitRequests: 1, RemainingRequests: 1,
		LimitTokens: 100, RemainingTokens: 100}, d)
	require.Error(t, d.Err())
	var ee *ExceededError
	require.ErrorAs(t, d.Err(), &ee)
	assert.Equal(t, ReasonTooLarge, ee.Limit)
	assert.True(t, ee.Hard)

	d, _ = reserve(t, m, "acme", Limits{TPM: 100}, 100)
	assert.True(t, d.Allowed, "exactly TPM tokens fit")
	assert.NoError(t, d.Err())
}

func TestMemoryDailyBudget(t *testing.T) {
	clock := newFakeClock(t0) // 12:00 UTC
	m := newTestMemory(t, clock)
	lim := Limits{DailyTokens: 100}

	d, id := reserve(t, m, "acme", lim, 60)
	require.True(t, d.Allowed)
	d, _ = reserve(t, m, "acme", lim, 50)
	assert.Equal(t, Decision{Reason: ReasonDailyTokens, Hard: true, RetryAfter: 12 * time.Hour}, d)
	d, _ = reserve(t, m, "acme", lim, 101)
	assert.Equal(t, Decision{Reason: ReasonDailyTokens, Hard: true}, d, "more than a day's budget never passes")

	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 10))
	d, _ = reserve(t, m, "acme", lim, 90)
	assert.True(t, d.Allowed, "reconciling returned the unused 50")

	clock.Advance(12*time.Hour - time.Millisecond) // 23:59:59.999
	d, _ = reserve(t, m, "acme", lim, 1)
	assert.Equal(t, time.Millisecond, d.RetryAfter)
	clock.Advance(time.Millisecond) // midnight
	d, _ = reserve(t, m, "acme", lim, 100)
	assert.True(t, d.Allowed, "a new UTC day has a new budget")
	u, err := m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(100), u.DailyTokensUsed)
}

func TestMemoryDailyAcrossMidnight(t *testing.T) {
	clock := newFakeClock(time.Date(2026, 3, 14, 23, 59, 0, 0, time.UTC))
	m := newTestMemory(t, clock)
	lim := Limits{DailyTokens: 1000}
	_, id := reserve(t, m, "acme", lim, 60)
	clock.Advance(2 * time.Minute)
	_, id2 := reserve(t, m, "acme", lim, 5)
	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 500))
	u, err := m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(5), u.DailyTokensUsed, "yesterday's reservation leaves today's count alone")
	require.NoError(t, m.Reconcile(t.Context(), "acme", id2, 7))
	u, err = m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(7), u.DailyTokensUsed)
}

func TestMemoryConcurrency(t *testing.T) {
	clock := newFakeClock(t0)
	m := newTestMemory(t, clock)
	lim := Limits{Concurrency: 2, RPM: 3}
	_, id1 := reserve(t, m, "acme", lim, 0)
	d, _ := reserve(t, m, "acme", lim, 0)
	require.True(t, d.Allowed)
	d, _ = reserve(t, m, "acme", lim, 0)
	assert.Equal(t, ReasonConcurrency, d.Reason)
	assert.Equal(t, ConcurrencyRetryAfter, d.RetryAfter)
	require.NoError(t, m.Reconcile(t.Context(), "acme", id1, 0))
	d, _ = reserve(t, m, "acme", lim, 0)
	require.True(t, d.Allowed, "a reconciled reservation frees its slot")

	// Concurrency full and the request bucket empty: the reason is
	// concurrency (first in order), the wait is the bucket's (longer).
	d, _ = reserve(t, m, "acme", lim, 0)
	assert.Equal(t, ReasonConcurrency, d.Reason)
	assert.Equal(t, 20*time.Second, d.RetryAfter)
}

func TestMemoryReconcile(t *testing.T) {
	clock := newFakeClock(t0)
	m := newTestMemory(t, clock)
	lim := Limits{TPM: 100, DailyTokens: 1000}
	usage := func() Usage {
		u, err := m.Usage(t.Context(), "acme", lim)
		require.NoError(t, err)
		return u
	}

	_, id := reserve(t, m, "acme", lim, 60)
	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 20))
	assert.Equal(t, Usage{TokensAvailable: 80, DailyTokensUsed: 20}, usage(), "refund of the 40 unused")
	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 0))
	assert.Equal(t, Usage{TokensAvailable: 80, DailyTokensUsed: 20}, usage(), "settling twice does nothing")

	// Refunds stop at capacity.
	_, id = reserve(t, m, "acme", lim, 60) // 20 left
	clock.Advance(30 * time.Second)        // +50: 70
	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 0))
	assert.Equal(t, int64(100), usage().TokensAvailable)

	// A shortfall is charged, the bucket floored at 0; the day counts it
	// all.
	_, id = reserve(t, m, "acme", lim, 60) // 40 left
	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 200))
	assert.Equal(t, Usage{TokensAvailable: 0, DailyTokensUsed: 20 + 0 + 200}, usage())

	require.NoError(t, m.Reconcile(t.Context(), "acme", "never-reserved", 5))
	require.NoError(t, m.Reconcile(t.Context(), "nobody", "never-reserved", 5))
}

func TestMemoryExpiry(t *testing.T) {
	clock := newFakeClock(t0)
	m := NewMemory(MemoryConfig{Now: clock.Now, TTL: time.Minute})
	lim := Limits{Concurrency: 1, DailyTokens: 1000}
	_, id := reserve(t, m, "acme", lim, 60)
	d, _ := reserve(t, m, "acme", lim, 1)
	require.Equal(t, ReasonConcurrency, d.Reason)

	clock.Advance(time.Minute - time.Millisecond)
	d, _ = reserve(t, m, "acme", lim, 1)
	require.False(t, d.Allowed, "not expired before the TTL")
	clock.Advance(time.Millisecond)
	u, err := m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 0, DailyTokensUsed: 60}, u, "expired: slot freed, tokens charged as reserved")
	require.NoError(t, m.Reconcile(t.Context(), "acme", id, 0))
	u, err = m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(60), u.DailyTokensUsed, "reconciling an expired reservation does nothing")

	// Expired reservations leave the table: it does not grow.
	for range 1000 {
		d, id := reserve(t, m, "acme", Limits{}, 1)
		require.True(t, d.Allowed)
		_ = id
		clock.Advance(time.Minute)
	}
	tn := m.tenant("acme", false)
	tn.mu.Lock()
	defer tn.mu.Unlock()
	assert.LessOrEqual(t, len(tn.byID), 1)
	assert.LessOrEqual(t, len(tn.slots), 2)
}

func TestMemoryClockBackward(t *testing.T) {
	clock := newFakeClock(t0)
	m := newTestMemory(t, clock)
	lim := Limits{TPM: 60} // one token per second
	d, _ := reserve(t, m, "acme", lim, 60)
	require.True(t, d.Allowed)
	clock.Advance(10 * time.Second)
	d, _ = reserve(t, m, "acme", lim, 10)
	require.True(t, d.Allowed)
	clock.Advance(-20 * time.Second)
	d, _ = reserve(t, m, "acme", lim, 1)
	require.False(t, d.Allowed, "a clock step back must not refill")
	clock.Advance(20*time.Second + time.Second)
	d, _ = reserve(t, m, "acme", lim, 1)
	require.True(t, d.Allowed, "time counts again from the tenant's last instant")
	assert.Equal(t, int64(0), d.RemainingTokens)
}

func TestMemoryUnlimited(t *testing.T) {
	m := newTestMemory(t, newFakeClock(t0))
	for range 100 {
		d, _ := reserve(t, m, "acme", Limits{}, 1_000_000)
		require.Equal(t, Decision{Allowed: true}, d)
	}
	u, err := m.Usage(t.Context(), "acme", Limits{})
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 100, DailyTokensUsed: 100_000_000}, u)
	u, err = m.Usage(t.Context(), "new", Limits{RPM: 5, TPM: 9})
	require.NoError(t, err)
	assert.Equal(t, Usage{RequestsAvailable: 5, TokensAvailable: 9}, u, "a new tenant's buckets are full")
}

func TestMemoryDuplicateID(t *testing.T) {
	m := newTestMemory(t, newFakeClock(t0))
	ctx := t.Context()
	r := Request{ID: "r1", Tenant: "acme", Tokens: 1}
	_, err := m.Reserve(ctx, r)
	require.NoError(t, err)
	_, err = m.Reserve(ctx, r)
	require.ErrorIs(t, err, ErrDuplicateID)
	require.NoError(t, m.Reconcile(ctx, "acme", "r1", 1))
	_, err = m.Reserve(ctx, r)
	require.NoError(t, err, "a settled id may be reserved again")
}

func TestValidation(t *testing.T) {
	m := newTestMemory(t, newFakeClock(t0))
	ok := Request{ID: "r1", Tenant: "acme", Tokens: 1}
	for name, mut := range map[string]func(*Request){
		"empty tenant":    func(r *Request) { r.Tenant = "" },
		"empty id":        func(r *Request) { r.ID = "" },
		"brace in tenant": func(r *Request) { r.Tenant = "a{b" },
		"brace in id":     func(r *Request) { r.ID = "x}" },
		"newline":         func(r *Request) { r.ID = "a\nb" },
		"del":             func(r *Request) { r.Tenant = "a\x7f" },
		"long tenant":     func(r *Request) { r.Tenant = strings.Repeat("a", MaxTenantLen+1) },
		"long id":         func(r *Request) { r.ID = strings.Repeat("a", MaxIDLen+1) },
		"negative tokens": func(r *Request) { r.Tokens = -1 },
		"huge tokens":     func(r *Request) { r.Tokens = MaxRate + 1 },
		"negative limit":  func(r *Request) { r.Limits.RPM = -1 },
		"huge limit":      func(r *Request) { r.Limits.TPM = MaxRate + 1 },
		"huge daily":      func(r *Request) { r.Limits.DailyTokens = MaxDailyTokens + 1 },
	} {
		t.Run(name, func(t *testing.T) {
			r := ok
			mut(&r)
			_, err := m.Reserve(t.Context(), r)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	require.ErrorIs(t, m.Reconcile(t.Context(), "acme", "r1", -1), ErrInvalid)
	require.ErrorIs(t, m.Reconcile(t.Context(), "", "r1", 1), ErrInvalid)
	_, err := m.Usage(t.Context(), "a}", Limits{})
	require.ErrorIs(t, err, ErrInvalid)

	r := ok
	r.Tenant = strings.Repeat("a", MaxTenantLen)
	r.ID = "ünïcode ok:" + strings.Repeat("x", 100)
	_, err = m.Reserve(t.Context(), r)
	require.NoError(t, err)
}

func TestMemoryClosed(t *testing.T) {
	m := NewMemory(MemoryConfig{})
	require.NoError(t, m.Close())
	_, err := m.Reserve(context.Background(), Request{ID: "r", Tenant: "t"})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, m.Reconcile(context.Background(), "t", "r", 0), ErrClosed)
	_, err = m.Usage(context.Background(), "t", Limits{})
	require.ErrorIs(t, err, ErrClosed)
}

func TestMemoryCounters(t *testing.T) {
	m := newTestMemory(t, newFakeClock(t0))
	reserve(t, m, "acme", Limits{RPM: 1}, 0)
	reserve(t, m, "acme", Limits{RPM: 1}, 0)
	assert.Equal(t, Counters{Allow: 1, Deny: 1}, m.Counters())
}
