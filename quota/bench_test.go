package quota

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmd/llmd/internal/redistest"
)

// latencies is a fixed-size log-linear histogram of nanoseconds (32
// buckets per power of two, so a percentile is within 3 %): recording does
// not allocate, so it can sit inside an allocation benchmark.
type latencies struct {
	counts [64 * 32]uint64
	n      uint64
}

func (h *latencies) record(d time.Duration) {
	v := uint64(max(d, 0))
	var i int
	if v < 32 {
		i = int(v)
	} else {
		shift := bits.Len64(v) - 6 // v>>shift is in [32, 64)
		i = (shift+1)*32 + int(v>>shift) - 32
	}
	h.counts[i]++
	h.n++
}

// upper is the largest value bucket i holds.
func upper(i int) uint64 {
	if i < 32 {
		return uint64(i)
	}
	shift := i/32 - 1
	return (uint64(i%32+32)+1)<<shift - 1
}

func (h *latencies) merge(o *latencies) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile is the value at or below which a fraction q of the records fall.
func (h *latencies) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(upper(i))
		}
	}
	return 0
}

func TestLatencies(t *testing.T) {
	var h latencies
	for v := range 1000 {
		h.record(time.Duration(v * 1000)) // 0 .. 999 us
	}
	p99 := h.quantile(0.99)
	if p99 < 989*time.Microsecond || p99 > 1021*time.Microsecond {
		t.Fatalf("p99 %v, want about 990us", p99)
	}
	if p50 := h.quantile(0.5); p50 < 499*time.Microsecond || p50 > 516*time.Microsecond {
		t.Fatalf("p50 %v, want about 500us", p50)
	}
	for _, v := range []uint64{0, 31, 32, 63, 64, 1000, 1 << 40} {
		var one latencies
		one.record(time.Duration(v))
		if got := uint64(one.quantile(1)); got < v || float64(got) > float64(v)*1.04+1 {
			t.Fatalf("%d lands in a bucket up to %d", v, got)
		}
	}
}

// opLatencies are one benchmark goroutine's latencies: of Reserve alone
// (the decision the request waits for) and of Reserve plus Reconcile.
type opLatencies struct{ reserve, pair latencies }

func (l *opLatencies) merge(o *opLatencies) {
	l.reserve.merge(&o.reserve)
	l.pair.merge(&o.pair)
}

// report adds the p99s and the decisions per second (one decision is a
// Reserve and its Reconcile).
func (l *opLatencies) report(b *testing.B) {
	b.ReportMetric(float64(l.reserve.quantile(0.99).Nanoseconds()), "reserve-p99-ns")
	b.ReportMetric(float64(l.pair.quantile(0.99).Nanoseconds()), "pair-p99-ns")
	b.ReportMetric(float64(l.pair.n)/b.Elapsed().Seconds(), "decisions/s")
}

// RL-9: one reserve and its reconcile per op; steady state (the tenant and
// its tables exist), so 0 allocs/op.
func BenchmarkMemoryReserveReconcile(b *testing.B) {
	lim := Limits{RPM: MaxRate, TPM: MaxRate, Concurrency: 1000, DailyTokens: MaxDailyTokens}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "req-" + strconv.Itoa(i)
	}

	b.Run("serial", func(b *testing.B) {
		m := NewMemory(MemoryConfig{})
		defer m.Close()
		ctx := context.Background()
		var h opLatencies
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			id := ids[i%len(ids)]
			i++
			start := time.Now()
			d, err := m.Reserve(ctx, Request{ID: id, Tenant: "acme", Limits: lim, Tokens: 100})
			h.reserve.record(time.Since(start))
			if err != nil || !d.Allowed {
				b.Fatalf("reserve: %+v, %v", d, err)
			}
			if err := m.Reconcile(ctx, "acme", id, 90); err != nil {
				b.Fatal(err)
			}
			h.pair.record(time.Since(start))
		}
		h.report(b)
	})

	b.Run("parallel", func(b *testing.B) {
		// One tenant per goroutine: the common case of many tenants.
		m := NewMemory(MemoryConfig{})
		defer m.Close()
		var mu sync.Mutex
		var all opLatencies
		var next int
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			tenant := fmt.Sprintf("tenant-%d", next)
			next++
			mu.Unlock()
			ctx := context.Background()
			h := new(opLatencies)
			i := 0
			for pb.Next() {
				id := ids[i%len(ids)]
				i++
				start := time.Now()
				d, err := m.Reserve(ctx, Request{ID: id, Tenant: tenant, Limits: lim, Tokens: 100})
				h.reserve.record(time.Since(start))
				if err != nil || !d.Allowed {
					b.Errorf("reserve: %+v, %v", d, err)
					return
				}
				if err := m.Reconcile(ctx, tenant, id, 90); err != nil {
					b.Error(err)
					return
				}
				h.pair.record(time.Since(start))
			}
			mu.Lock()
			all.merge(h)
			mu.Unlock()
		})
		all.report(b)
	})
}

// RL-9: one reserve script and one reconcile script per op, on loopback.
func BenchmarkRedisReserveReconcile(b *testing.B) {
	srv := redistest.Start(b)
	r, err := NewRedis(RedisConfig{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	lim := Limits{RPM: MaxRate, TPM: MaxRate, Concurrency: 1000, DailyTokens: MaxDailyTokens}
	ctx := context.Background()

	b.Run("serial", func(b *testing.B) {
		var h opLatencies
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			id := "req-" + strconv.Itoa(i)
			i++
			start := time.Now()
			d, err := r.Reserve(ctx, Request{ID: id, Tenant: "acme", Limits: lim, Tokens: 100})
			h.reserve.record(time.Since(start))
			if err != nil || !d.Allowed || d.Fallback {
				b.Fatalf("reserve: %+v, %v", d, err)
			}
			if err := r.Reconcile(ctx, "acme", id, 90); err != nil {
				b.Fatal(err)
			}
			h.pair.record(time.Since(start))
		}
		h.report(b)
	})

	b.Run("parallel", func(b *testing.B) {
		var mu sync.Mutex
		var all opLatencies
		var next int
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			tenant := fmt.Sprintf("tenant-%d", next)
			next++
			mu.Unlock()
			h := new(opLatencies)
			i := 0
			for pb.Next() {
				id := "req-" + strconv.Itoa(i)
				i++
				start := time.Now()
				d, err := r.Reserve(ctx, Request{ID: id, Tenant: tenant, Limits: lim, Tokens: 100})
				h.reserve.record(time.Since(start))
				if err != nil || !d.Allowed || d.Fallback {
					b.Errorf("reserve: %+v, %v", d, err)
					return
				}
				if err := r.Reconcile(ctx, tenant, id, 90); err != nil {
					b.Error(err)
					return
				}
				h.pair.record(time.Since(start))
			}
			mu.Lock()
			all.merge(h)
			mu.Unlock()
		})
		all.report(b)
	})
	// One hot tenant from every goroutine: its whole bucket, or 8
	// sub-buckets (on one Redis the cost per op; in a Redis Cluster the
	// sub-buckets' keys sit on different slots); detected=8 is a limiter
	// that detects the tenant at 100 requests/s and splits it into 8.
	detecting, err := NewRedis(RedisConfig{URL: srv.URL(), Timeout: time.Second, HotRPS: 100, HotShards: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer detecting.Close()
	for _, shards := range []int{1, 8, -8} {
		name, r, tenant := fmt.Sprintf("hot/shards=%d", shards), r, "hot"
		if shards < 0 {
			name, r, tenant, shards = "hot/detected=8", detecting, "hot-detected", 0
		}
		b.Run(name, func(b *testing.B) {
			hot := lim
			hot.Shards = shards
			var seq atomic.Int64
			var mu sync.Mutex
			var all opLatencies
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				h := new(opLatencies)
				for pb.Next() {
					id := fmt.Sprintf("hot%d-%d", shards, seq.Add(1))
					start := time.Now()
					d, err := r.Reserve(ctx, Request{ID: id, Tenant: tenant, Limits: hot, Tokens: 100})
					h.reserve.record(time.Since(start))
					if err != nil || !d.Allowed || d.Fallback {
						b.Errorf("reserve: %+v, %v", d, err)
						return
					}
					if err := r.Reconcile(ctx, tenant, id, 90); err != nil {
						b.Error(err)
						return
					}
					h.pair.record(time.Since(start))
				}
				mu.Lock()
				all.merge(h)
				mu.Unlock()
			})
			all.report(b)
		})
	}
}
