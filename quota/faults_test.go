package quota

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/redistest"
)

// latencyMargin is what a decision may take beyond the Redis timeout: the
// fallback's work and scheduling on a loaded 2-core machine under -race.
const latencyMargin = 75 * time.Millisecond

// drain reserves tokens until denied and returns the tokens admitted.
func drain(t *testing.T, l Limiter, tenant string, lim Limits, tokens int64) int64 {
	t.Helper()
	var admitted int64
	for range 10_000 {
		d, _ := reserve(t, l, tenant, lim, tokens)
		if !d.Allowed {
			return admitted
		}
		admitted += tokens
	}
	t.Fatal("the bucket never ran dry")
	return 0
}

// RL-4: two nodes whose clocks are 60 s apart share one Redis. The scripts
// read Redis's TIME, so the skew cannot mint tokens: the total admitted
// stays within capacity + refill over the elapsed time + one reservation.
// The same scripts taking `now` from ARGV (the nodes' clocks) over-admit.
func TestClockSkewBetweenNodes(t *testing.T) {
	srv := redistest.Start(t)
	ahead := func() time.Time { return time.Now().Add(30 * time.Second) }
	behind := func() time.Time { return time.Now().Add(-30 * time.Second) }
	const capacity, tokens = 6000, 10 // 100 tokens per second
	lim := Limits{TPM: capacity}
	bound := func(elapsed time.Duration) int64 {
		return capacity + int64(elapsed.Seconds()*capacity/60) + 1 + tokens
	}

	t.Run("redis time", func(t *testing.T) {
		a := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second, Now: ahead})
		b := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second, Now: behind})
		tenant := tenantName(t)
		start := time.Now()
		// Both nodes drain the bucket in turns, then race each other.
		total := drain(t, b, tenant, lim, tokens) + drain(t, a, tenant, lim, tokens)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, node := range []*Redis{a, b, a, b} {
			wg.Go(func() {
				var mine int64
				deadline := time.Now().Add(300 * time.Millisecond)
				for time.Now().Before(deadline) {
					if d, _ := reserve(t, node, tenant, lim, tokens); d.Allowed {
						mine += tokens
					}
				}
				mu.Lock()
				total += mine
				mu.Unlock()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		t.Logf("admitted %d in %v, bound %d", total, elapsed, bound(elapsed))
		assert.LessOrEqual(t, total, bound(elapsed))
		assert.GreaterOrEqual(t, total, int64(capacity-tokens), "the bucket was used")
		assert.Zero(t, a.Counters().ErrorAllowed+b.Counters().ErrorAllowed)
	})

	t.Run("node time from ARGV over-admits", func(t *testing.T) {
		client := directClient(t, srv.URL())
		a := newArgvRedis(t, client, ahead, DefaultTTL)
		b := newArgvRedis(t, client, behind, DefaultTTL)
		tenant := tenantName(t)
		start := time.Now()
		// The node behind drains the bucket; to the node ahead the bucket
		// looks 60 s older, so it refills completely.
		total := drain(t, b, tenant, lim, tokens) + drain(t, a, tenant, lim, tokens)
		elapsed := time.Since(start)
		t.Logf("admitted %d in %v, bound %d", total, elapsed, bound(elapsed))
		assert.Greater(t, total, bound(elapsed), "trusting the nodes' clocks must break the bound")
	})
}

// RL-5: Redis killed under load. Every decision returns within the
// timeout plus a margin, the breaker opens, the fallback decides with the
// limits divided by the live nodes and is counted.
func TestRedisKilledUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	clock := newFakeClock(t0) // the breaker's clock: frozen, the breaker stays open
	logs := &logBuffer{}
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), LiveNodes: func() int { return 3 }, Now: clock.Now, Logger: logs.logger()})
	tenant := tenantName(t)
	lim := Limits{RPM: 1_000_000, Concurrency: 10} // per node in fallback: 333,334 and 4

	var mu sync.Mutex
	var slowest time.Duration
	var fallback, onRedis int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				d, id := reserve(t, r, tenant, lim, 1)
				el := time.Since(start)
				if d.Allowed {
					require.NoError(t, r.Reconcile(context.Background(), tenant, id, 1))
				}
				mu.Lock()
				slowest = max(slowest, el)
				if d.Fallback {
					fallback++
				} else {
					onRedis++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	t.Logf("%d decisions on redis, %d by the fallback, slowest %v", onRedis, fallback, slowest)
	assert.Positive(t, onRedis)
	assert.Positive(t, fallback)
	assert.LessOrEqual(t, slowest, DefaultRedisTimeout+latencyMargin)
	state, _ := r.breaker.status()
	assert.Equal(t, breakerOpen, state)
	c := r.Counters()
	assert.True(t, c.FallbackActive)
	assert.Positive(t, c.ErrorAllowed)
	assert.Contains(t, logs.String(), "redis failing")

	// Reservations made by the fallback were reconciled locally: hold 4,
	// the fallback's share of Concurrency 10 over 3 nodes, and the fifth
	// is denied by the fallback.
	for i := range 5 {
		d, _ := reserve(t, r, tenant, lim, 1)
		require.True(t, d.Fallback)
		require.Equal(t, i < 4, d.Allowed, "reserve %d: %+v", i, d)
		if !d.Allowed {
			assert.Equal(t, ReasonConcurrency, d.Reason)
			assert.Equal(t, int64(333_334), d.LimitRequests, "RPM 1,000,000 over 3 nodes, rounded up")
		}
	}
	assert.Positive(t, r.Counters().ErrorDenied)
}

// RL-5: the breaker opens after exactly BreakerFailures consecutive
// failures, skips Redis while open, probes once after the cooldown, and
// closes when Redis answers again.
func TestRedisBreaker(t *testing.T) {
	srv := redistest.Start(t)
	clock := newFakeClock(t0)
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), Now: clock.Now, BreakerCooldown: 10 * time.Second})
	tenant := tenantName(t)
	lim := Limits{RPM: 100}

	d, _ := reserve(t, r, tenant, lim, 1)
	require.False(t, d.Fallback)
	require.False(t, r.Counters().FallbackActive)
	srv.Kill()
	for i := 1; i <= DefaultBreakerFailures; i++ {
		start := time.Now()
		d, _ := reserve(t, r, tenant, lim, 1)
		require.True(t, d.Fallback)
		require.True(t, d.Allowed)
		assert.LessOrEqual(t, time.Since(start), DefaultRedisTimeout+latencyMargin)
		state, failures := r.breaker.status()
		require.Equal(t, i, failures)
		if i < DefaultBreakerFailures {
			require.Equal(t, breakerClosed, state, "failure %d", i)
		} else {
			require.Equal(t, breakerOpen, state, "failure %d", i)
		}
	}
	// Open: Redis is not called, so the failures do not grow.
	reserve(t, r, tenant, lim, 1)
	_, failures := r.breaker.status()
	require.Equal(t, DefaultBreakerFailures, failures)

	// After the cooldown one probe goes to Redis; it fails: open again.
	clock.Advance(10 * time.Second)
	reserve(t, r, tenant, lim, 1)
	state, failures := r.breaker.status()
	require.Equal(t, breakerOpen, state)
	require.Equal(t, DefaultBreakerFailures+1, failures)

	// Redis is back: the next probe closes the breaker.
	srv.Restart()
	clock.Advance(10 * time.Second)
	d, _ = reserve(t, r, tenant, lim, 1)
	require.False(t, d.Fallback)
	state, failures = r.breaker.status()
	require.Equal(t, breakerClosed, state)
	require.Zero(t, failures)
	c := r.Counters()
	require.False(t, c.FallbackActive)
	require.Equal(t, uint64(DefaultBreakerFailures+2), c.ErrorAllowed)
}

// RL-6: Redis slowed to 2 s per reply is treated as down: decisions within
// the timeout, the breaker opens, the fallback's reservations are settled
// locally and never reach Redis; once Redis is fast again decisions are
// back on it within 5 s.
func TestRedisSlow(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewDelayProxy(t, srv.Addr())
	direct := directClient(t, srv.URL())
	r := newTestRedis(t, RedisConfig{URL: proxy.URL(), LiveNodes: func() int { return 2 }, BreakerCooldown: 2 * time.Second})
	tenant, quiet := tenantName(t), tenantName(t)
	lim := Limits{RPM: 6, TPM: 1000}

	d, id := reserve(t, r, tenant, lim, 100)
	require.False(t, d.Fallback)
	require.NoError(t, r.Reconcile(t.Context(), tenant, id, 50))

	proxy.SetDelay(2 * time.Second)
	for i := range DefaultBreakerFailures {
		start := time.Now()
		d, _ := reserve(t, r, tenant, lim, 1)
		el := time.Since(start)
		require.True(t, d.Fallback, "call %d", i)
		require.LessOrEqual(t, el, DefaultRedisTimeout+latencyMargin, "call %d", i)
	}
	state, _ := r.breaker.status()
	require.Equal(t, breakerOpen, state)

	// The fallback decides for a tenant Redis has never seen: RPM 6 over
	// 2 nodes is 3. Its reservations settle locally: Redis has no key of it.
	var ids []string
	for i := range 4 {
		d, id := reserve(t, r, quiet, lim, 10)
		require.True(t, d.Fallback)
		require.Equal(t, i < 3, d.Allowed, "reserve %d: %+v", i, d)
		if d.Allowed {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		require.NoError(t, r.Reconcile(t.Context(), quiet, id, 10))
	}
	n, err := direct.Exists(t.Context(), keys(quiet)...).Result()
	require.NoError(t, err)
	require.Zero(t, n, "fallback reservations must never reach Redis")
	u, err := r.local.Usage(t.Context(), quiet, lim.perNode(2))
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 0, RequestsAvailable: 0, TokensAvailable: 500 - 30, DailyTokensUsed: 30}, u,
		"settled locally, once")
	// The five calls that met the slow Redis: 3 allowed by the local RPM of
	// 3, 2 denied; then 3 allowed and 1 denied for the quiet tenant.
	c := r.Counters()
	assert.Equal(t, uint64(6), c.ErrorAllowed)
	assert.Equal(t, uint64(3), c.ErrorDenied)

	proxy.SetDelay(0)
	recovered := time.Now()
	require.Eventually(t, func() bool {
		d, id := reserve(t, r, tenant, lim, 1)
		if d.Allowed {
			require.NoError(t, r.Reconcile(t.Context(), tenant, id, 1))
		}
		return !d.Fallback
	}, 5*time.Second, 20*time.Millisecond, "decisions must be back on Redis within 5 s")
	t.Logf("back on redis %v after the delay was removed", time.Since(recovered))
	assert.False(t, r.Counters().FallbackActive)
}

// RL-7: Redis restarted empty. The tenant's buckets start full (never
// negative), the reservations held there are gone, and the limiter counts
// and logs the reset once.
func TestRedisLostState(t *testing.T) {
	srv := redistest.Start(t)
	logs := &logBuffer{}
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second, Logger: logs.logger()})
	tenant := tenantName(t)
	lim := Limits{TPM: 100, Concurrency: 5}

	d, held := reserve(t, r, tenant, lim, 90)
	require.True(t, d.Allowed)
	require.Equal(t, int64(10), d.RemainingTokens)
	d, _ = reserve(t, r, tenantName(t), lim, 1)
	require.True(t, d.Allowed)
	require.Zero(t, r.Counters().Resets, "a new tenant is not a reset")

	srv.Restart()
	// The first call may meet a connection to the old server and fail
	// over to the fallback; decisions return to Redis at once.
	require.Eventually(t, func() bool {
		d, _ = reserve(t, r, tenant, lim, 5)
		return !d.Fallback
	}, 5*time.Second, 10*time.Millisecond)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(95), d.RemainingTokens, "the bucket started full")
	assert.Equal(t, uint64(1), r.Counters().Resets)
	assert.Contains(t, logs.String(), "redis lost the tenant's quota state")

	// Settling a reservation Redis lost does nothing: no refund above
	// capacity, no negative balance.
	require.NoError(t, r.Reconcile(t.Context(), tenant, held, 0))
	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 1, TokensAvailable: 95, DailyTokensUsed: 5}, u)

	d, _ = reserve(t, r, tenant, lim, 5)
	require.False(t, d.Fallback)
	assert.Equal(t, uint64(1), r.Counters().Resets, "counted once")
}
