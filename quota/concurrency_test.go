package quota

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// burst runs workers goroutines that each call Reserve n times with random
// tokens in [1, maxTokens], and returns the tokens and requests admitted.
func burst(t *testing.T, l Limiter, tenant string, lim Limits, workers, n int, maxTokens int64) (tokens, admitted int64) {
	t.Helper()
	var wg sync.WaitGroup
	var tok, adm atomic.Int64
	var fallback atomic.Int64
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			<-start
			for i := range n {
				req := Request{ID: tenant + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(i), Tenant: tenant, Limits: lim,
					Tokens: 1 + rng.Int64N(maxTokens)}
				d, err := l.Reserve(context.Background(), req)
				if err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if d.Fallback {
					fallback.Add(1)
				}
				if d.Allowed {
					tok.Add(req.Tokens)
					adm.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.Zero(t, fallback.Load(), "no decision may come from the fallback here")
	return tok.Load(), adm.Load()
}

// RL-1, Memory: 64 goroutines x 1,000 random reserves against one bucket
// on a frozen clock admit exactly what the bucket held.
func TestMemoryConcurrentReserveNeverOverAdmits(t *testing.T) {
	clock := newFakeClock(t0)
	m := newTestMemory(t, clock)
	const capacity = 100_000
	lim := Limits{TPM: capacity}

	// A watcher checks the balance while the burst runs.
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if tn := m.tenant("acme", false); tn != nil {
				tn.mu.Lock()
				units := tn.tpm.units
				tn.mu.Unlock()
				if units < 0 || units > capacity*unitsPerToken {
					t.Errorf("balance %d units outside [0, capacity]", units)
					return
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	tokens, _ := burst(t, m, "acme", lim, 64, 1000, 100)
	close(stop)
	watch.Wait()

	u, err := m.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.LessOrEqual(t, tokens, int64(capacity))
	assert.Equal(t, int64(capacity), tokens+u.TokensAvailable, "admitted + left == capacity, exactly")
	assert.Less(t, u.TokensAvailable, int64(100), "the bucket was drained down to less than one request")
}

// RL-1, Redis: the same burst through the reserve script. Redis's clock
// cannot be frozen: the bound adds what the bucket refilled meanwhile.
func TestRedisConcurrentReserveNeverOverAdmits(t *testing.T) {
	srv, r := startRedis(t)
	direct := directClient(t, srv.URL())
	tenant := tenantName(t)
	const capacity = 100_000
	lim := Limits{TPM: capacity}

	stop := make(chan struct{})
	var watch sync.WaitGroup
	var minUnits atomic.Int64
	minUnits.Store(capacity * unitsPerToken)
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v, err := direct.HGet(context.Background(), keys(tenant)[0], "tb").Int64(); err == nil && v < minUnits.Load() {
				minUnits.Store(v)
			}
			time.Sleep(time.Millisecond)
		}
	})
	start := time.Now()
	workers, n := 64, 1000
	if testing.Short() {
		n = 200
	}
	tokens, _ := burst(t, r, tenant, lim, workers, n, 100)
	elapsed := time.Since(start)
	close(stop)
	watch.Wait()

	refill := int64(elapsed.Seconds()*capacity/60) + 1
	t.Logf("%d reserves in %v: admitted %d tokens, capacity %d + refill bound %d", workers*n, elapsed, tokens, capacity, refill)
	assert.LessOrEqual(t, tokens, int64(capacity)+refill)
	assert.GreaterOrEqual(t, minUnits.Load(), int64(0), "never a negative balance")
	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, u.TokensAvailable, int64(0))
	assert.LessOrEqual(t, u.TokensAvailable, int64(capacity))
}

// RL-8: 1,000 concurrent reserves for a tenant with 10 concurrent slots
// admit exactly 10, until one is reconciled.
func TestConcurrencyLimitIsExact(t *testing.T) {
	backends := map[string]func(t *testing.T) Limiter{
		"memory": func(t *testing.T) Limiter { return newTestMemory(t, newFakeClock(t0)) },
		"redis": func(t *testing.T) Limiter {
			_, r := startRedis(t)
			return r
		},
	}
	for name, newLimiter := range backends {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t)
			tenant := tenantName(t)
			lim := Limits{Concurrency: 10}
			reserveAll := func(n int) []string {
				var mu sync.Mutex
				var allowed []string
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						id := newID()
						d, err := l.Reserve(context.Background(), Request{ID: id, Tenant: tenant, Limits: lim, Tokens: 1})
						if err != nil {
							t.Errorf("reserve: %v", err)
							return
						}
						if d.Fallback {
							t.Errorf("fallback decision: %+v", d)
						}
						if d.Allowed {
							mu.Lock()
							allowed = append(allowed, id)
							mu.Unlock()
						} else if d.Reason != ReasonConcurrency || d.RetryAfter != ConcurrencyRetryAfter {
							t.Errorf("denied for %q after %v, want concurrency", d.Reason, d.RetryAfter)
						}
					})
				}
				wg.Wait()
				return allowed
			}
			allowed := reserveAll(1000)
			require.Len(t, allowed, 10)
			require.Empty(t, reserveAll(100), "no slot until one is reconciled")
			require.NoError(t, l.Reconcile(t.Context(), tenant, allowed[0], 1))
			require.Len(t, reserveAll(100), 1, "one reconciled, one admitted")
			u, err := l.Usage(t.Context(), tenant, lim)
			require.NoError(t, err)
			assert.Equal(t, int64(10), u.InFlight)
		})
	}
}
