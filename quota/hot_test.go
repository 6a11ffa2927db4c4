package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/llmd/llmd/internal/redistest"
)

// divide's parts add up to the value exactly, each within one of its
// exact proportional share, and a value within the capacity never puts a
// part over its own.
func TestDivide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, MaxShards).Draw(t, "n")
		limit := rapid.Int64Range(int64(n), MaxRate).Draw(t, "limit")
		w := make([]int64, n)
		for i := range w {
			w[i] = share(limit, n, i)
		}
		const unit = 60_000
		v := rapid.Int64Range(-limit*unit, limit*unit).Draw(t, "v")
		parts := divide(v, w)
		var sum int64
		for i, p := range parts {
			sum += p
			exact := float64(v) * float64(w[i]) / float64(limit)
			require.InDelta(t, exact, float64(p), 1.001, "part %d", i)
			require.LessOrEqual(t, p, w[i]*unit, "part %d over its capacity", i)
		}
		require.Equal(t, v, sum)
	})
}

// The parts of a split record add up to the balance moved out of the
// whole bucket: request units, token units and the day's budget left.
func TestParseSplitAddsUp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, MaxShards).Draw(t, "n")
		rpm := rapid.Int64Range(int64(n), 1_000_000).Draw(t, "rpm")
		tpm := rapid.Int64Range(int64(n), MaxRate).Draw(t, "tpm")
		daily := rapid.Int64Range(0, 1_000_000_000).Draw(t, "daily")
		rb := rapid.Int64Range(0, rpm*60_000).Draw(t, "rb")
		tb := rapid.Int64Range(-tpm*60_000, tpm*60_000).Draw(t, "tb")
		used := rapid.Int64Range(0, 2*daily+1000).Draw(t, "used")
		s, err := parseSplit([]int64{1_700_000_000_000, int64(n), rpm, tpm, daily, rb, tb, 20_000, used})
		require.NoError(t, err)
		require.Len(t, s.parts, n)
		var sumRB, sumTB, sumLeft, sumUsed int64
		for i, p := range s.parts {
			var v int64
			_, err := fmt.Sscan(p.rb, &v)
			require.NoError(t, err)
			sumRB += v
			_, err = fmt.Sscan(p.tb, &v)
			require.NoError(t, err)
			sumTB += v
			sumLeft += share(daily, n, i) - p.used
			sumUsed += p.used
			require.Equal(t, int64(20_000), p.day)
		}
		require.Equal(t, rb, sumRB)
		require.Equal(t, tb, sumTB)
		if daily > 0 {
			require.Equal(t, daily-used, sumLeft, "the day's budget left is divided exactly")
		} else {
			require.Equal(t, used, sumUsed)
		}
	})
}

func TestParseSplitRejectsBadRecords(t *testing.T) {
	for name, f := range map[string][]int64{
		"short":     {1, 2, 3},
		"n of 1":    {1_700_000_000_000, 1, 10, 10, 0, 0, 0, 1, 0},
		"n too big": {1_700_000_000_000, MaxShards + 1, 100, 100, 0, 0, 0, 1, 0},
		"no epoch":  {0, 4, 10, 10, 0, 0, 0, 1, 0},
		"bad limit": {1_700_000_000_000, 4, -10, 10, 0, 0, 0, 1, 0},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseSplit(f)
			require.Error(t, err)
		})
	}
}

func TestNewRedisHotConfig(t *testing.T) {
	for name, cfg := range map[string]RedisConfig{
		"negative rate": {HotRPS: -1},
		"one shard":     {HotRPS: 10, HotShards: 1},
		"many shards":   {HotRPS: 10, HotShards: MaxShards + 1},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.URL = "redis://127.0.0.1:1/0"
			_, err := NewRedis(cfg)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
}

// hotLimiters are three limiters sharing one Redis (three llmd nodes):
// the first two detect at rps requests a second into shards sub-buckets,
// the third does not detect but must follow.
func hotLimiters(t *testing.T, srv *redistest.Server, rps int64, shards int, log *logBuffer) []*Redis {
	t.Helper()
	var out []*Redis
	for i := range 3 {
		cfg := RedisConfig{URL: srv.URL(), Timeout: time.Second, HotShards: shards, Logger: log.logger()}
		if i < 2 {
			cfg.HotRPS = rps
		}
		out = append(out, newTestRedis(t, cfg))
	}
	return out
}

// partKeys lists the Redis keys of tenant's detected sub-buckets.
func partKeys(t *testing.T, srv *redistest.Server, tenant string) []string {
	t.Helper()
	got, err := directClient(t, srv.URL()).Keys(t.Context(), "llmd:qd:{"+tenant+"/*").Result()
	require.NoError(t, err)
	return got
}

// A tenant whose requests cross the rate is split by the script; the three
// nodes all follow the split (the one with detection off too), the
// sub-buckets start with the balance left, not full, and the tokens
// admitted across the switch stay within one bucket's bound.
func TestRedisHotDetection(t *testing.T) {
	srv := redistest.Start(t)
	var log logBuffer
	const rps, shards = 5, 3
	lims := hotLimiters(t, srv, rps, shards, &log)
	tenant := tenantName(t)
	lim := Limits{TPM: 600} // 10 tokens/s: the refill during the test is a few tokens
	start := time.Now()

	// Requests of 10 tokens from the first node until the split: within
	// one second the sixth crosses the rate.
	var admitted int64
	for i := 0; lims[0].Counters().HotDetected == 0; i++ {
		require.Less(t, i, 40, "no split after %d requests at full speed", i)
		d, _ := reserve(t, lims[0], tenant, lim, 10)
		require.True(t, d.Allowed, "request %d: %+v", i, d)
		admitted += 10
	}
	assert.Contains(t, log.String(), "detected hot by its request rate")
	assert.Contains(t, log.String(), "tenant="+tenant)
	assert.NotEmpty(t, partKeys(t, srv, tenant), "the request that split it went to a sub-bucket")

	// The sub-buckets together hold what the whole bucket had left.
	for i, l := range lims {
		u, err := l.Usage(t.Context(), tenant, lim)
		require.NoError(t, err)
		// Each part rounds its balance down to whole tokens.
		refill := 10*time.Since(start).Seconds() + shards
		assert.InDelta(t, float64(600-admitted), float64(u.TokensAvailable), refill, "node %d", i)
		assert.Equal(t, admitted/10, u.InFlight, "node %d: the whole bucket's reservations and the parts'", i)
	}

	// The node without detection follows the split: its reservation is held
	// in a sub-bucket, not in the whole bucket, which admits nothing more.
	d, id := reserve(t, lims[2], tenant, lim, 10)
	require.True(t, d.Allowed)
	admitted += 10
	direct := directClient(t, srv.URL())
	held, err := direct.HExists(t.Context(), keys(tenant)[1], id).Result()
	require.NoError(t, err)
	assert.False(t, held, "not reserved in the whole bucket")
	var inPart bool
	for _, k := range partKeys(t, srv, tenant) {
		if strings.HasSuffix(k, ":r") {
			ok, err := direct.HExists(t.Context(), k, id).Result()
			require.NoError(t, err)
			inPart = inPart || ok
		}
	}
	assert.True(t, inPart, "reserved in a detected sub-bucket")
	require.NoError(t, lims[2].Reconcile(t.Context(), tenant, id, 10))

	// Drain from every node: the total admitted stays within one bucket.
	for i := 0; ; i++ {
		d, _ := reserve(t, lims[i%3], tenant, lim, 5)
		if !d.Allowed {
			break
		}
		admitted += 5
	}
	refill := 10 * (time.Since(start).Seconds() + 0.05)
	t.Logf("admitted %d tokens of 600 in %v", admitted, time.Since(start))
	require.LessOrEqual(t, float64(admitted), 600+refill, "never more than the one bucket")
	require.GreaterOrEqual(t, admitted, int64(600-shards*5), "each sub-bucket strands less than one request")

	var detected uint64
	for _, l := range lims {
		detected += l.Counters().HotDetected
	}
	assert.Equal(t, uint64(1), detected, "one split, made by one script")
}

// An estimated reservation held in the whole bucket at the split has its
// worst case charged there: its settlement in the whole bucket changes no
// sub-bucket, and the total stays within one bucket even when it uses its
// MaxTokens.
func TestRedisHotSplitChargesHeldOverage(t *testing.T) {
	srv := redistest.Start(t)
	var log logBuffer
	lims := hotLimiters(t, srv, 3, 4, &log)
	r := lims[0]
	tenant := tenantName(t)
	lim := Limits{TPM: 600}
	start := time.Now()
	d, err := r.Reserve(t.Context(), Request{ID: "est", Tenant: tenant, Limits: lim, Tokens: 100, MaxTokens: 300})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	small := int64(0)
	for i := 0; r.Counters().HotDetected == 0; i++ {
		require.Less(t, i, 40)
		d, _ := reserve(t, r, tenant, lim, 1)
		require.True(t, d.Allowed)
		small++
	}
	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	refill := 10*time.Since(start).Seconds() + 4 // 4 parts, each rounded down
	assert.InDelta(t, float64(600-300-small), float64(u.TokensAvailable), refill,
		"the held reservation's MaxTokens are taken from the parts")

	require.NoError(t, r.Reconcile(t.Context(), tenant, "est", 300))
	u2, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.InDelta(t, float64(u.TokensAvailable), float64(u2.TokensAvailable), 5, "settled where it was taken")
	assert.Equal(t, u.InFlight-1, u2.InFlight)

	used := 300 + small
	for i := 0; ; i++ {
		d, _ := reserve(t, lims[i%3], tenant, lim, 5)
		if !d.Allowed {
			break
		}
		used += 5
	}
	require.LessOrEqual(t, float64(used), 600+10*(time.Since(start).Seconds()+0.05))
}

// A limiter that read the split keeps using it without touching the whole
// bucket until hotRecheck passes; when the record is gone (Redis lost the
// tenant's state), it goes back to the whole bucket.
func TestRedisHotSplitCacheAndLoss(t *testing.T) {
	srv := redistest.Start(t)
	clock := newFakeClock(t0)
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second, HotRPS: 2, HotShards: 2, Now: clock.Now})
	tenant := tenantName(t)
	lim := Limits{RPM: 1000}
	for i := 0; r.Counters().HotDetected == 0; i++ {
		require.Less(t, i, 40)
		reserve(t, r, tenant, lim, 1)
	}
	direct := directClient(t, srv.URL())
	require.NoError(t, direct.Del(t.Context(), keys(tenant)...).Err())
	d, _ := reserve(t, r, tenant, lim, 1)
	require.True(t, d.Allowed)
	n, err := direct.Exists(t.Context(), keys(tenant)[0]).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "within hotRecheck the split is used as read")

	clock.Advance(hotRecheck)
	d, _ = reserve(t, r, tenant, lim, 1)
	require.True(t, d.Allowed)
	n, err = direct.Exists(t.Context(), keys(tenant)[0]).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "read again: no split, the whole bucket decides")
}

// TestRedisHotDetectionTotalsUnderConcurrency: three limiters share one
// Redis, 48 goroutines reserve random requests of 1 to 50 tokens for one
// tenant with one bucket for 1.5 s, settling some; the rate splits it
// under way. The tokens admitted across the switch stay within one
// bucket's bound, and exactly one split is made.
func TestRedisHotDetectionTotalsUnderConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	const workers, maxTokens, shards = 48, 50, 8
	var log logBuffer
	limiters := hotLimiters(t, srv, 200, shards, &log)
	lim := Limits{TPM: 60_000} // 1,000 tokens/s refill
	tenant := tenantName(t)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			l := limiters[w%3]
			for i := 0; ctx.Err() == nil; i++ {
				tokens := 1 + rng.Int64N(maxTokens)
				if rng.IntN(50) == 0 {
					tokens = 5_000 + rng.Int64N(5_000) // larger than one sub-bucket holds: borrowed
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				d, err := l.Reserve(context.Background(), Request{ID: id, Tenant: tenant, Limits: lim, Tokens: tokens})
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if d.Fallback {
					t.Errorf("decided by the fallback")
					return
				}
				if d.Allowed {
					admitted.Add(tokens)
					if rng.IntN(4) == 0 {
						_ = l.Reconcile(context.Background(), tenant, id, tokens)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var detected uint64
	for _, l := range limiters {
		detected += l.Counters().HotDetected
	}
	require.Equal(t, uint64(1), detected, "one split, whatever the nodes and the concurrency")
	require.NotEmpty(t, partKeys(t, srv, tenant))
	upper := float64(lim.TPM) * (1 + (elapsed+50*time.Millisecond).Seconds()/60)
	lower := float64(lim.TPM) - float64(shards*maxTokens)
	t.Logf("admitted %d tokens in %v (bound [%.0f, %.0f])", admitted.Load(), elapsed, lower, upper)
	require.LessOrEqual(t, float64(admitted.Load()), upper, "never more than one bucket of the whole limit admits")
	require.GreaterOrEqual(t, float64(admitted.Load()), lower, "the sub-buckets strand at most one request each")
}
