package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// diffOps drives the same random operations against two limiters and fails
// on the first difference. advance moves both clocks; nil means no clock
// moves. sameDecision compares two decisions.
type diffOps struct {
	a, b         Limiter
	tenant       string
	lim          Limits
	advance      func(time.Duration)
	ttl          time.Duration
	sameDecision func(x, y Decision) bool
	// check, when set, compares state the Limiter interface does not show,
	// after every action.
	check func(rt *rapid.T)
}

func (o *diffOps) run(rt *rapid.T) {
	ctx := context.Background()
	var ids []string
	settle := func(rt *rapid.T, actual int64) {
		id := "never-reserved"
		if len(ids) > 0 {
			id = rapid.SampledFrom(ids).Draw(rt, "id")
		}
		ea := o.a.Reconcile(ctx, o.tenant, id, actual)
		eb := o.b.Reconcile(ctx, o.tenant, id, actual)
		if ea != nil || eb != nil {
			rt.Fatalf("reconcile: %v, %v", ea, eb)
		}
	}
	actions := map[string]func(*rapid.T){
		"reserve": func(rt *rapid.T) {
			id := fmt.Sprintf("%s-r%d", o.tenant, len(ids))
			req := Request{ID: id, Tenant: o.tenant, Limits: o.lim, Tokens: rapid.Int64Range(0, 150).Draw(rt, "tokens")}
			if rapid.Bool().Draw(rt, "estimated") {
				// It may use more than it reserves: debt and held overage.
				req.MaxTokens = req.Tokens + rapid.Int64Range(0, 300).Draw(rt, "over")
			}
			da, ea := o.a.Reserve(ctx, req)
			db, eb := o.b.Reserve(ctx, req)
			if ea != nil || eb != nil {
				rt.Fatalf("reserve: %v, %v", ea, eb)
			}
			if !o.sameDecision(da, db) {
				rt.Fatalf("reserve %d tokens (max %d):\n memory %+v\n redis  %+v", req.Tokens, req.MaxTokens, da, db)
			}
			ids = append(ids, id)
		},
		"reconcile": func(rt *rapid.T) { settle(rt, rapid.Int64Range(0, 500).Draw(rt, "actual")) },
		"cancel":    func(rt *rapid.T) { settle(rt, 0) },
		"": func(rt *rapid.T) {
			ua, ea := o.a.Usage(ctx, o.tenant, o.lim)
			ub, eb := o.b.Usage(ctx, o.tenant, o.lim)
			if ea != nil || eb != nil {
				rt.Fatalf("usage: %v, %v", ea, eb)
			}
			if ua != ub {
				rt.Fatalf("usage:\n memory %+v\n redis  %+v", ua, ub)
			}
		},
	}
	if o.advance != nil {
		actions["refill"] = func(rt *rapid.T) {
			o.advance(time.Duration(rapid.Int64Range(0, 70_000).Draw(rt, "ms")) * time.Millisecond)
		}
		actions["crash-expire"] = func(rt *rapid.T) { o.advance(o.ttl) }
	}
	if o.check != nil {
		for name, act := range actions {
			actions[name] = func(rt *rapid.T) {
				act(rt)
				o.check(rt)
			}
		}
	}
	rt.Repeat(actions)
}

// sameHeldOverage returns a check that the held overage of m and of the
// Redis state (its ov field) agree.
func sameHeldOverage(t *testing.T, m *Memory, client *redis.Client, tenant string) func(rt *rapid.T) {
	return func(rt *rapid.T) {
		var mem int64
		if tn := m.tenant(tenant, false); tn != nil {
			tn.mu.Lock()
			mem = tn.over
			tn.mu.Unlock()
		}
		red, err := client.HGet(context.Background(), keys(tenant)[0], "ov").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			rt.Fatalf("hget ov: %v", err)
		}
		if mem != red {
			rt.Fatalf("held overage: memory %d, redis %d", mem, red)
		}
	}
}

func drawLimits(rt *rapid.T, maxRPM, maxTPM int64) Limits {
	return Limits{
		RPM:         rapid.Int64Range(0, maxRPM).Draw(rt, "rpm"),
		TPM:         rapid.Int64Range(0, maxTPM).Draw(rt, "tpm"),
		Concurrency: rapid.Int64Range(0, 4).Draw(rt, "concurrency"),
		DailyTokens: rapid.Int64Range(0, 2000).Draw(rt, "daily"),
	}
}

// RL-3, exact: the production scripts with the clock taken from ARGV, so
// that Redis and Memory see the same instants, clock moves, expiry and UTC
// midnight included. Every decision and every Usage must be identical.
func TestDifferentialSameInstants(t *testing.T) {
	srv, r := startRedis(t)
	_ = srv
	setRapidChecks(t, 60, 1000)
	const ttl = 2 * time.Minute
	rapid.Check(t, func(rt *rapid.T) {
		// Start ten minutes before a UTC midnight: some cases cross it.
		clock := newFakeClock(time.Date(2026, 3, 14, 23, 50, 0, 0, time.UTC))
		m := NewMemory(MemoryConfig{Now: clock.Now, TTL: ttl})
		tenant := tenantName(t)
		o := &diffOps{
			a: m, b: newArgvRedis(t, r.client, clock.Now, ttl),
			tenant: tenant, lim: drawLimits(rt, 30, 600),
			advance: clock.Advance, ttl: ttl,
			sameDecision: func(x, y Decision) bool { return x == y },
			check:        sameHeldOverage(t, m, r.client, tenant),
		}
		o.run(rt)
	})
}

// RL-3 on the production scripts, which read Redis's TIME: no clock moves,
// and rates so small that the time a case takes refills less than one
// token. Counts, reasons and Usage must be identical; RetryAfter and the
// reset times may differ by the time the case took.
func TestDifferentialRedisTime(t *testing.T) {
	_, r := startRedis(t)
	setRapidChecks(t, 40, 500)
	rapid.Check(t, func(rt *rapid.T) {
		// Memory's frozen clock starts at Redis's time.
		now, err := r.client.Time(context.Background()).Result()
		if err != nil {
			rt.Fatalf("redis TIME: %v", err)
		}
		clock := newFakeClock(now)
		start := time.Now()
		// At 60 tokens per minute one token takes a second to refill: a
		// case runs in milliseconds.
		lim := drawLimits(rt, 20, 60)
		o := &diffOps{
			a: NewMemory(MemoryConfig{Now: clock.Now}), b: r,
			tenant: tenantName(t), lim: lim,
			sameDecision: func(x, y Decision) bool {
				slack := time.Since(start) + time.Millisecond
				near := func(m, r time.Duration) bool { return r <= m && m-r <= slack }
				ok := near(x.RetryAfter, y.RetryAfter) && near(x.ResetRequests, y.ResetRequests) && near(x.ResetTokens, y.ResetTokens)
				x.RetryAfter, y.RetryAfter = 0, 0
				x.ResetRequests, y.ResetRequests = 0, 0
				x.ResetTokens, y.ResetTokens = 0, 0
				return ok && x == y
			},
		}
		o.run(rt)
		if el := time.Since(start); el > 900*time.Millisecond {
			rt.Fatalf("the case took %v: refill may have reached a token, the comparison is not valid", el)
		}
	})
}

// RL-3 for estimated reservations: the exact comparison of
// TestDifferentialSameInstants with limits that let many reservations be
// held at once (no daily budget, a small TPM), so that held overage, debt
// and the expiry of estimated reservations decide often.
func TestDifferentialEstimated(t *testing.T) {
	_, r := startRedis(t)
	setRapidChecks(t, 60, 1000)
	const ttl = 2 * time.Minute
	rapid.Check(t, func(rt *rapid.T) {
		clock := newFakeClock(time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC))
		m := NewMemory(MemoryConfig{Now: clock.Now, TTL: ttl})
		tenant := tenantName(t)
		o := &diffOps{
			a: m, b: newArgvRedis(t, r.client, clock.Now, ttl),
			tenant: tenant, check: sameHeldOverage(t, m, r.client, tenant),
			lim: Limits{
				TPM:         rapid.Int64Range(50, 400).Draw(rt, "tpm"),
				Concurrency: rapid.Int64Range(0, 8).Draw(rt, "concurrency"),
			},
			advance: clock.Advance, ttl: ttl,
			sameDecision: func(x, y Decision) bool { return x == y },
		}
		o.run(rt)
	})
}
