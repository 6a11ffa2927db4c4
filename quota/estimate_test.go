package quota

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// estimateLimiter is a limiter on a fake clock, for the scenarios of
// estimated reservations.
type estimateLimiter struct {
	Limiter
	tenant string
	clock  *fakeClock
}

// eachBackend runs test on Memory and on the production Redis scripts with
// the clock taken from ARGV, both on one fake clock starting at t0, so that
// both are checked to the millisecond.
func eachBackend(t *testing.T, ttl time.Duration, test func(t *testing.T, l estimateLimiter)) {
	_, r := startRedis(t)
	t.Run("memory", func(t *testing.T) {
		clock := newFakeClock(t0)
		test(t, estimateLimiter{Limiter: NewMemory(MemoryConfig{Now: clock.Now, TTL: ttl}), tenant: "acme", clock: clock})
	})
	t.Run("redis", func(t *testing.T) {
		clock := newFakeClock(t0)
		test(t, estimateLimiter{Limiter: newArgvRedis(t, r.client, clock.Now, ttl), tenant: tenantName(t), clock: clock})
	})
}

// reserve reserves tokens that may use most (0: exactly tokens).
func (l estimateLimiter) reserve(t *testing.T, lim Limits, tokens, most int64) (Decision, string) {
	t.Helper()
	id := newID()
	d, err := l.Reserve(t.Context(), Request{ID: id, Tenant: l.tenant, Limits: lim, Tokens: tokens, MaxTokens: most})
	require.NoError(t, err)
	return d, id
}

func (l estimateLimiter) settle(t *testing.T, id string, actual int64) {
	t.Helper()
	require.NoError(t, l.Reconcile(t.Context(), l.tenant, id, actual))
}

func (l estimateLimiter) usage(t *testing.T, lim Limits) Usage {
	t.Helper()
	u, err := l.Usage(t.Context(), l.tenant, lim)
	require.NoError(t, err)
	return u
}

// An estimated reservation settled above what it reserved leaves a debt,
// and the next request waits until the bucket refills past the debt and
// its own tokens.
func TestEstimatedDebt(t *testing.T) {
	eachBackend(t, DefaultTTL, func(t *testing.T, l estimateLimiter) {
		lim := Limits{TPM: 60} // one token per second
		d, id := l.reserve(t, lim, 10, 100)
		require.True(t, d.Allowed)
		assert.Equal(t, int64(50), d.RemainingTokens)
		l.settle(t, id, 100)
		assert.Equal(t, Usage{TokensAvailable: 0, TokensOwed: 40, DailyTokensUsed: 100}, l.usage(t, lim),
			"charged the 90 above the reservation: 50 - 90")

		d, _ = l.reserve(t, lim, 5, 0)
		assert.Equal(t, Decision{Reason: ReasonTokens, RetryAfter: 45 * time.Second,
			LimitTokens: 60, RemainingTokens: 0, ResetTokens: 100 * time.Second}, d,
			"the debt of 40 and 5 tokens, at one a second; full after 100 s")
		l.clock.Advance(45*time.Second - time.Millisecond)
		d, _ = l.reserve(t, lim, 5, 0)
		require.False(t, d.Allowed)
		assert.Equal(t, time.Millisecond, d.RetryAfter)
		l.clock.Advance(time.Millisecond)
		d, _ = l.reserve(t, lim, 5, 0)
		require.True(t, d.Allowed, "passes at RetryAfter")
		assert.Equal(t, Usage{InFlight: 1, DailyTokensUsed: 105}, l.usage(t, lim))
	})
}

// A settlement above the reservation's MaxTokens charges the rest only down
// to zero, and never raises a balance already in debt: the default mode's
// rule, kept for what no reservation allowed.
func TestEstimatedBeyondMaxTokens(t *testing.T) {
	eachBackend(t, DefaultTTL, func(t *testing.T, l estimateLimiter) {
		lim := Limits{TPM: 100}
		_, id := l.reserve(t, lim, 50, 0) // exact
		l.settle(t, id, 200)
		assert.Equal(t, Usage{DailyTokensUsed: 200}, l.usage(t, lim), "exact: floored at 0, no debt")

		l.clock.Advance(time.Minute) // full
		_, id = l.reserve(t, lim, 10, 20)
		l.settle(t, id, 150)
		assert.Equal(t, Usage{DailyTokensUsed: 350}, l.usage(t, lim), "10 charged up to MaxTokens, the rest floored at 0")

		l.clock.Advance(time.Minute)
		d, exact := l.reserve(t, lim, 10, 0)
		require.True(t, d.Allowed)
		d, est := l.reserve(t, lim, 10, 200)
		require.True(t, d.Allowed) // 80 left, 190 held overage
		l.settle(t, est, 200)
		require.Equal(t, int64(110), l.usage(t, lim).TokensOwed, "80 - 190")
		l.settle(t, exact, 50)
		assert.Equal(t, Usage{TokensOwed: 110, DailyTokensUsed: 600}, l.usage(t, lim),
			"an exact reservation settled above it neither pays nor adds to the debt")
	})
}

// While estimated reservations are held, what they may still use counts
// against new requests beyond an allowance of one TPM less the new
// request's own potential overage.
func TestEstimatedHeldOverage(t *testing.T) {
	eachBackend(t, DefaultTTL, func(t *testing.T, l estimateLimiter) {
		lim := Limits{TPM: 100}
		var ids []string
		for i := range 3 {
			d, id := l.reserve(t, lim, 10, 60) // overage 50: an allowance of 50 for the others'
			require.True(t, d.Allowed, "request %d", i)
			ids = append(ids, id)
		}
		// 70 in the bucket, 150 held: the need is 10 + (150 - 50) = 110,
		// more than the bucket holds: only a settlement can help.
		d, _ := l.reserve(t, lim, 10, 60)
		assert.Equal(t, Decision{Reason: ReasonTokens, RetryAfter: 24 * time.Second,
			LimitTokens: 100, RemainingTokens: 70, ResetTokens: 18 * time.Second}, d,
			"40 tokens short at 100 a minute, if the held ones settle by then")

		l.settle(t, ids[0], 10) // an answer as long as the estimate
		d, id := l.reserve(t, lim, 10, 60)
		require.True(t, d.Allowed, "need 10 + (100 - 50) = 60 of 70")
		ids = append(ids[1:], id)
		assert.Equal(t, int64(60), d.RemainingTokens)

		// Every held one uses its max_tokens: the bucket goes down to
		// -max(TPM, overage) at worst.
		for _, id := range ids {
			l.settle(t, id, 60)
		}
		assert.Equal(t, Usage{TokensOwed: 90, DailyTokensUsed: 10 + 3*60}, l.usage(t, lim), "60 - 3*50")
	})
}

// An estimated reservation that expires is charged as reserved, and its
// potential overage stops counting.
func TestEstimatedExpiry(t *testing.T) {
	eachBackend(t, time.Minute, func(t *testing.T, l estimateLimiter) {
		lim := Limits{TPM: 100}
		for range 2 {
			d, _ := l.reserve(t, lim, 10, 100)
			require.True(t, d.Allowed)
		}
		d, _ := l.reserve(t, lim, 10, 100)
		require.Equal(t, ReasonTokens, d.Reason, "need 10 + (180 - 10) = 180")
		assert.Equal(t, time.Minute, d.RetryAfter)
		l.clock.Advance(time.Minute) // both expire
		d, _ = l.reserve(t, lim, 10, 100)
		require.True(t, d.Allowed)
		assert.Equal(t, Usage{InFlight: 1, TokensAvailable: 90, DailyTokensUsed: 30}, l.usage(t, lim))
	})
}

// burstResult is what a burst of estimated requests got.
type burstResult struct {
	admitted  int64
	retryNext time.Duration // the next request's RetryAfter, after every admitted one settled
	owed      int64         // the debt then
}

// estimateBurst runs RL-10's scenario on l: the tenant's first ten answers
// were short (each reserved mostTokens, exact, and used shortTokens), then
// requests concurrent requests reserve the estimate (tokens) and may use
// mostTokens; every admitted one is held until all have been decided, then
// settled with used tokens.
func estimateBurst(t *testing.T, l Limiter, tenant string, lim Limits, requests int, tokens, mostTokens, shortTokens, used int64) burstResult {
	t.Helper()
	ctx := t.Context()
	for i := range 10 {
		id := tenant + "-learn-" + strconv.Itoa(i)
		d, err := l.Reserve(ctx, Request{ID: id, Tenant: tenant, Limits: lim, Tokens: mostTokens})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, l.Reconcile(ctx, tenant, id, shortTokens))
	}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	decided := make(chan string, requests)
	start := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-start
			id := tenant + "-burst-" + strconv.Itoa(i)
			d, err := l.Reserve(ctx, Request{ID: id, Tenant: tenant, Limits: lim, Tokens: tokens, MaxTokens: mostTokens})
			if err != nil {
				t.Errorf("reserve: %v", err)
				return
			}
			if d.Fallback {
				t.Errorf("fallback decision %+v", d)
			}
			if d.Allowed {
				admitted.Add(1)
				decided <- id
			} else if d.Reason != ReasonTokens || d.RetryAfter <= 0 {
				t.Errorf("denied %+v, want tokens with a wait", d)
			}
		})
	}
	close(start)
	wg.Wait()
	close(decided)
	for id := range decided {
		require.NoError(t, l.Reconcile(ctx, tenant, id, used))
	}
	d, err := l.Reserve(ctx, Request{ID: tenant + "-next", Tenant: tenant, Limits: lim, Tokens: tokens, MaxTokens: mostTokens})
	require.NoError(t, err)
	u, err := l.Usage(ctx, tenant, lim)
	require.NoError(t, err)
	res := burstResult{admitted: admitted.Load(), owed: u.TokensOwed}
	if !d.Allowed {
		res.retryNext = d.RetryAfter
	}
	return res
}

// RL-10, estimate-mode burst: after ten short answers, 50 concurrent
// requests each reserve a small estimate and use their full max_tokens.
// The tokens used in the first minute stay within TPM + max(TPM, one
// request's overage), and the tenant is then refused until the debt is
// paid. A tenant whose answers match the estimate runs twice as many at
// once as by reserving max_tokens.
func TestEstimateBurstRL10(t *testing.T) {
	const (
		tpm     = 2000
		prompt  = 20
		maxOut  = 180
		est     = 10
		tokens  = prompt + est    // 30 reserved
		most    = prompt + maxOut // 200 at most
		over    = most - tokens   // 170
		short   = prompt + est
		bound   = tpm + max(tpm, over) // TPM + D
		learned = 10 * short
	)
	lim := Limits{TPM: tpm}

	t.Run("memory", func(t *testing.T) {
		clock := newFakeClock(t0) // frozen: no refill during the burst
		m := newTestMemory(t, clock)
		res := estimateBurst(t, m, "acme", lim, 50, tokens, most, short, most)
		used := learned + res.admitted*most
		t.Logf("admitted %d of 50, %d tokens used in the first minute (TPM %d, bound %d), debt %d, next waits %v",
			res.admitted, used, tpm, bound, res.owed, res.retryNext)
		// 1700 left after learning: admitted while 1700 - 30k >= 30 +
		// max(0, 170k - 1830), k <= 17: 18 requests.
		assert.Equal(t, int64(18), res.admitted)
		assert.LessOrEqual(t, used, int64(bound))
		assert.Equal(t, used-tpm, res.owed, "every token beyond the bucket is owed")
		assert.Equal(t, 57900*time.Millisecond, res.retryNext, "(1900 owed + 30) at 2000 a minute")

		clock.Advance(res.retryNext - time.Millisecond)
		d, _ := reserve(t, m, "acme", lim, tokens)
		require.False(t, d.Allowed, "refused until the debt is paid")
		clock.Advance(time.Millisecond)
		d, _ = reserve(t, m, "acme", lim, tokens)
		require.True(t, d.Allowed)
	})

	t.Run("answers match the estimate", func(t *testing.T) {
		estimated := estimateBurst(t, newTestMemory(t, newFakeClock(t0)), "acme", lim, 50, tokens, most, short, short)
		exact := estimateBurst(t, newTestMemory(t, newFakeClock(t0)), "acme", lim, 50, most, most, short, short)
		t.Logf("at once: %d estimated, %d reserving max_tokens", estimated.admitted, exact.admitted)
		assert.Equal(t, int64(8), exact.admitted, "1700 / 200")
		assert.GreaterOrEqual(t, estimated.admitted, 2*exact.admitted)
		assert.Zero(t, estimated.owed)
		assert.Zero(t, estimated.retryNext, "no debt: the next one passes")
	})

	t.Run("redis", func(t *testing.T) {
		_, r := startRedis(t)
		tenant := tenantName(t)
		start := time.Now()
		res := estimateBurst(t, r, tenant, lim, 50, tokens, most, short, most)
		refill := int64(time.Since(start).Seconds()*tpm/60) + 1 // Redis's clock runs
		used := learned + res.admitted*most
		t.Logf("admitted %d of 50, %d tokens used (bound %d + refill %d), debt %d, next waits %v",
			res.admitted, used, bound, refill, res.owed, res.retryNext)
		assert.LessOrEqual(t, used, int64(bound)+refill)
		assert.GreaterOrEqual(t, res.owed, used-tpm-refill)
		assert.InDelta(t, float64((res.owed+tokens)*60_000/tpm), float64(res.retryNext.Milliseconds()), 50,
			"refused until the debt and the next request refill")
	})
}
