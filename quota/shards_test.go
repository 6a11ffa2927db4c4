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

// The parts of a limit add up to it exactly and differ by at most one, and
// no set limit gets a part of 0 (unlimited).
func TestShareAddsUp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := Limits{
			RPM:         rapid.Int64Range(0, MaxRate).Draw(t, "rpm"),
			TPM:         rapid.Int64Range(0, MaxRate).Draw(t, "tpm"),
			Concurrency: rapid.Int64Range(0, 100).Draw(t, "concurrency"),
			DailyTokens: rapid.Int64Range(0, MaxDailyTokens).Draw(t, "daily"),
			Shards:      rapid.IntRange(0, MaxShards).Draw(t, "shards"),
		}
		n := l.shards()
		require.GreaterOrEqual(t, n, 1)
		require.LessOrEqual(t, n, max(1, l.Shards))
		var sum Limits
		for i := range n {
			s := l.shard(n, i)
			for _, p := range [][2]int64{{s.RPM, l.RPM}, {s.TPM, l.TPM}, {s.Concurrency, l.Concurrency}, {s.DailyTokens, l.DailyTokens}} {
				if p[1] > 0 {
					require.Positive(t, p[0], "a set limit's part is never 0 (unlimited)")
					require.LessOrEqual(t, p[0], p[1]/int64(n)+1)
					require.GreaterOrEqual(t, p[0], p[1]/int64(n))
				} else {
					require.Zero(t, p[0])
				}
			}
			sum.RPM += s.RPM
			sum.TPM += s.TPM
			sum.Concurrency += s.Concurrency
			sum.DailyTokens += s.DailyTokens
		}
		sum.Shards = l.Shards
		require.Equal(t, l, sum)
	})
}

func TestRedisShardKeysAndRebalance(t *testing.T) {
	srv := redistest.Start(t)
	direct := directClient(t, srv.URL())
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second})
	tenant := "hot"
	lim := Limits{TPM: 100, Concurrency: 8, Shards: 4} // 25 tokens, 2 slots a sub-bucket

	var ids []string
	for i := range 4 {
		d, id := reserve(t, r, tenant, lim, 25)
		require.True(t, d.Allowed, "reservation %d", i)
		assert.Equal(t, int64(100), d.LimitTokens, "the headers show the tenant's limit")
		ids = append(ids, id)
	}
	// Every sub-bucket is empty now, whichever the round robin chose first:
	// a full one was found by trying the others.
	d, _ := reserve(t, r, tenant, lim, 1)
	require.False(t, d.Allowed)
	assert.Equal(t, ReasonTokens, d.Reason)
	assert.Positive(t, d.RetryAfter)

	got, err := direct.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	var tags []string
	for _, k := range got {
		require.True(t, strings.HasPrefix(k, "llmd:qs:{hot/"), "%s: only sub-bucket keys", k)
		tags = append(tags, k[strings.Index(k, "{"):strings.Index(k, "}")+1])
	}
	assert.ElementsMatch(t, []string{"{hot/0}", "{hot/1}", "{hot/2}", "{hot/3}"}, dedupe(tags),
		"each sub-bucket has its own hash tag: its own Redis Cluster slot")

	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Equal(t, int64(4), u.InFlight)
	assert.LessOrEqual(t, u.TokensAvailable, int64(4), "at most the refill of the last moments")

	// Each reservation is settled in the sub-bucket that holds it.
	for _, id := range ids {
		require.NoError(t, r.Reconcile(t.Context(), tenant, id, 5))
	}
	u, err = r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Zero(t, u.InFlight)
	assert.InDelta(t, 80, u.TokensAvailable, 4, "20 tokens used of 100")
	assert.Equal(t, int64(20), u.DailyTokensUsed)
}

// A request larger than one sub-bucket, but within the tenant's limit, is
// admitted in pieces borrowed from several; its settlement gives each piece
// back; and it is refused only when the sub-buckets together do not hold it.
func TestRedisShardBorrow(t *testing.T) {
	_, r := startRedis(t)
	tenant := tenantName(t)
	lim := Limits{TPM: 100, RPM: 100, Concurrency: 4, Shards: 4}

	d, id := reserve(t, r, tenant, lim, 70)
	require.True(t, d.Allowed, "70 tokens over 25-token sub-buckets: borrowed")
	assert.Equal(t, uint64(1), r.Counters().Borrowed)
	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Equal(t, int64(3), u.InFlight, "25 + 25 + 20: a piece in each of three sub-buckets, each holding a slot")
	assert.Equal(t, int64(99), u.RequestsAvailable, "one request taken")
	assert.LessOrEqual(t, u.TokensAvailable, int64(31))

	d, _ = reserve(t, r, tenant, lim, 40)
	require.False(t, d.Allowed, "30 tokens left in all: 40 do not fit")
	assert.Equal(t, ReasonTokens, d.Reason)
	d, _ = reserve(t, r, tenant, lim, 101)
	require.False(t, d.Allowed)
	assert.Equal(t, ReasonTooLarge, d.Reason, "larger than the tenant's limit: hard")

	require.NoError(t, r.Reconcile(t.Context(), tenant, id, 10))
	u, err = r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Zero(t, u.InFlight)
	assert.InDelta(t, 90, u.TokensAvailable, 4, "the pieces were refunded to 10 tokens used")
	assert.Equal(t, int64(10), u.DailyTokensUsed)
}

// A day's budget split in sub-buckets still admits a request larger than
// one sub-bucket's part of it, and refuses what the day has no room for.
func TestRedisShardDailyBorrow(t *testing.T) {
	_, r := startRedis(t)
	tenant := tenantName(t)
	lim := Limits{DailyTokens: 1000, Shards: 8} // 125 a sub-bucket, no TPM

	d, id := reserve(t, r, tenant, lim, 300)
	require.True(t, d.Allowed, "%+v", d)
	require.NoError(t, r.Reconcile(t.Context(), tenant, id, 300))
	d, _ = reserve(t, r, tenant, lim, 600)
	require.True(t, d.Allowed, "%+v", d)
	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Equal(t, int64(900), u.DailyTokensUsed)
	d, _ = reserve(t, r, tenant, lim, 101)
	require.False(t, d.Allowed, "900 of 1,000 used: 101 more do not fit")
	assert.Equal(t, ReasonDailyTokens, d.Reason)
	d, _ = reserve(t, r, tenant, lim, 100)
	require.True(t, d.Allowed, "100 more fit exactly")
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// TestRedisShardTotalsUnderConcurrency: three limiters (three llmd nodes)
// share one Redis; 48 goroutines reserve random requests of 1 to 50 tokens
// for a hot tenant split into 8 sub-buckets, for 1.5 s, settling some. The
// tokens admitted stay within the stated bound ("Hot tenants" in the
// package doc): at most TPM*(1 + t/60) as for one bucket, and at least that
// less Shards times the largest request.
func TestRedisShardTotalsUnderConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	const nodes, workers, maxTokens = 3, 48, 50
	lim := Limits{TPM: 60_000, Shards: 8} // 1,000 tokens/s refill
	tenant := tenantName(t)
	var limiters []*Redis
	for range nodes {
		limiters = append(limiters, newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second}))
	}
	var admitted, borrowed atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			l := limiters[w%nodes]
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
				require.False(t, d.Fallback)
				if d.Allowed {
					admitted.Add(tokens)
					if rng.IntN(4) == 0 { // settled as used in full: the bucket is not refunded
						_ = l.Reconcile(context.Background(), tenant, id, tokens)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, l := range limiters {
		borrowed.Add(int64(l.Counters().Borrowed))
	}
	upper := float64(lim.TPM) * (1 + (elapsed+50*time.Millisecond).Seconds()/60)
	lower := float64(lim.TPM) - float64(lim.Shards*maxTokens)
	t.Logf("admitted %d tokens in %v (bound [%.0f, %.0f]), %d borrowed", admitted.Load(), elapsed, lower, upper,
		borrowed.Load())
	require.LessOrEqual(t, float64(admitted.Load()), upper, "never more than one bucket of the whole limit admits")
	require.GreaterOrEqual(t, float64(admitted.Load()), lower, "the sub-buckets strand at most one request each")
}
