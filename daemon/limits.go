package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// tierPriority is each tier's class in the engine's scheduler.
var tierPriority = map[store.Tier]engine.Priority{
	store.TierEnterprise: engine.PriorityEnterprise,
	store.TierPaid:       engine.PriorityPaid,
	store.TierFree:       engine.PriorityFree,
	store.TierBatch:      engine.PriorityBatch,
}

// tenantQuota returns a tenant's tier and effective limits. Without a data
// directory there is only the local tenant: paid and unlimited.
func (s *Server) tenantQuota(ctx context.Context, tenant string) (store.Tier, quota.Limits, error) {
	if s.store == nil {
		return store.TierPaid, quota.Limits{}, nil
	}
	q, err := s.store.Quota(ctx, tenant)
	if err != nil {
		return "", quota.Limits{}, fmt.Errorf("daemon: quota of tenant %s: %w", tenant, err)
	}
	return q.Tier, limitsOf(q.Limits), nil
}

// requestQuota is tenantQuota for the request's tenant, looked up once per
// request (routing and admission both need it) and kept in rl.
func (s *Server) requestQuota(r *http.Request, rl *reqLog) (store.Tier, quota.Limits, error) {
	if rl.quotaKnown {
		return store.Tier(rl.tier), rl.limits, nil
	}
	if p := principalFrom(r.Context()); p.peer != "" {
		// The entry node looked the tenant up and holds the reservation.
		rl.tier, rl.limits, rl.quotaKnown = p.tier, quota.Limits{}, true
		return store.Tier(p.tier), rl.limits, nil
	}
	tier, limits, err := s.tenantQuota(r.Context(), principalFrom(r.Context()).tenant)
	if err != nil {
		return "", quota.Limits{}, err
	}
	rl.tier, rl.limits, rl.quotaKnown = string(tier), limits, true
	return tier, limits, nil
}

func limitsOf(l store.Limits) quota.Limits {
	return quota.Limits{RPM: l.RPM, TPM: l.TPM, Concurrency: l.Concurrency, DailyTokens: l.DailyTokens}
}

// rejections counts quota refusals per tenant since start, and keeps the
// times of the last minute's (at most 1,000 per tenant) for llmctl top.
type rejections struct {
	mu     sync.Mutex
	n      map[string]uint64
	recent map[string][]time.Time
}

const maxRecentRejections = 1000

func (r *rejections) add(tenant string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n, r.recent = make(map[string]uint64), make(map[string][]time.Time)
	}
	r.n[tenant]++
	rec := trimBefore(r.recent[tenant], now.Add(-time.Minute))
	if len(rec) >= maxRecentRejections {
		rec = rec[1:]
	}
	r.recent[tenant] = append(rec, now)
}

func (r *rejections) get(tenant string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[tenant]
}

// lastMinute counts tenant's refusals in the minute before now.
func (r *rejections) lastMinute(tenant string, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := trimBefore(r.recent[tenant], now.Add(-time.Minute))
	if r.recent != nil {
		r.recent[tenant] = rec
	}
	return len(rec)
}

// trimBefore drops the times before cutoff from the front of ts (ordered).
func trimBefore(ts []time.Time, cutoff time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(cutoff) {
		i++
	}
	return ts[i:]
}

// quotaError is a request refused by its tenant's quota (429).
type quotaError struct {
	tenant string
	d      quota.Decision
	tokens int64
}

func (e *quotaError) Error() string {
	switch e.d.Reason {
	case "requests":
		return fmt.Sprintf("Rate limit reached for tenant %s on requests per minute: limit %d; retry in %s",
			e.tenant, e.d.LimitRequests, roundUp(e.d.RetryAfter))
	case "tokens":
		return fmt.Sprintf("Rate limit reached for tenant %s on tokens per minute: limit %d, remaining %d, requested %d "+
			"(prompt plus max_tokens); retry in %s", e.tenant, e.d.LimitTokens, e.d.RemainingTokens, e.tokens, roundUp(e.d.RetryAfter))
	case "concurrency":
		return fmt.Sprintf("Rate limit reached for tenant %s on concurrent requests; retry when one of them finishes", e.tenant)
	case "daily_tokens":
		return fmt.Sprintf("Tenant %s has used its daily token budget; it renews at 00:00 UTC", e.tenant)
	case "too_large":
		return fmt.Sprintf("Request of %d tokens (prompt plus max_tokens) is larger than tenant %s's tokens-per-minute "+
			"limit of %d; lower max_tokens", e.tokens, e.tenant, e.d.LimitTokens)
	}
	return fmt.Sprintf("Rate limit reached for tenant %s (%s)", e.tenant, e.d.Reason)
}

func roundUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// overloadError sheds a free-tier request at the ladder's DegradeShedFree.
type overloadError struct {
	model string
	retry time.Duration
}

func (e *overloadError) Error() string {
	return fmt.Sprintf("model %s is overloaded and is not taking free-tier requests now; retry in %s", e.model, e.retry)
}

// shedRetryAfter is the Retry-After of a shed free-tier request: the time
// the ladder needs to descend a few levels.
func (s *Server) shedRetryAfter() time.Duration {
	return max(5*s.cfg.Engine.Ladder.Hold, time.Second)
}

// setRateHeaders writes the x-ratelimit-* headers OpenAI clients log.
func setRateHeaders(h http.Header, d quota.Decision) {
	if d.LimitRequests > 0 {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(d.LimitRequests, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(d.RemainingRequests, 10))
		h.Set("x-ratelimit-reset-requests", roundUp(d.ResetRequests).String())
	}
	if d.LimitTokens > 0 {
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(d.LimitTokens, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(d.RemainingTokens, 10))
		h.Set("x-ratelimit-reset-tokens", roundUp(d.ResetTokens).String())
	}
}

// setRetryHeaders writes Retry-After (whole seconds, rounded up),
// retry-after-ms, and x-should-retry.
func setRetryHeaders(h http.Header, retry time.Duration, shouldRetry bool) {
	if retry > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
		h.Set("retry-after-ms", strconv.FormatInt(max(retry.Milliseconds(), 1), 10))
	}
	h.Set("x-should-retry", strconv.FormatBool(shouldRetry))
}

// admit applies the tenant's tier and quota to j before it reaches the
// engine: the priority, the degradation ladder's free-tier steps, and the
// reservation of prompt plus output tokens. It writes the rate-limit
// headers. On success it returns the function that settles the reservation
// with the tokens actually used; the caller must call it exactly once.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, rl *reqLog, j *job) (settle func(engine.Usage), err error) {
	p := principalFrom(r.Context())
	tier, limits, err := s.requestQuota(r, rl)
	if err != nil {
		return nil, err
	}
	prio := tierPriority[tier]
	if j.requested != nil {
		if *j.requested > prio && !p.admin {
			return nil, &requestError{Status: http.StatusForbidden, Type: typeInvalidRequest, Param: "priority",
				Code: "permission_denied", Message: fmt.Sprintf("tenant %s is in the %s tier; it may not ask for a higher priority",
					p.tenant, tier)}
		}
		prio = *j.requested
	}
	j.priority = prio

	if prio == engine.PriorityFree {
		switch level := max(j.degrade, j.model.eng.Stats().Degrade); {
		case level >= engine.DegradeShedFree:
			rl.degraded = "shed"
			s.log.Warn("shedding free-tier request", "request_id", rl.id, "tenant", p.tenant, "model", j.model.id,
				"level", level.String())
			return nil, &overloadError{model: j.model.id, retry: s.shedRetryAfter()}
		case level >= engine.DegradeLimitFree:
			if c := s.cfg.DegradeFreeMaxTokens; c > 0 && j.maxTokens > c {
				j.maxTokens = c
				rl.degraded = appendNote(rl.degraded, "max_tokens capped to "+strconv.Itoa(c))
			}
		}
	}

	if p.peer != "" {
		return func(engine.Usage) {}, nil // reserved and settled by the entry node
	}
	expect := j.maxTokens
	if s.cfg.QuotaEstimate {
		expect = s.outputs.Expected(p.tenant, j.maxTokens)
	}
	tokens := int64(len(j.prompt)) + int64(expect)*int64(j.n)
	return s.reserve(w, r, rl, j, limits, tokens)
}

// reserve reserves tokens of rl's tenant's quota and returns the function
// that settles the reservation with the request's real usage (idempotent),
// or a quotaError (a 429) when the quota refuses. The rate headers go on w.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request, rl *reqLog, j *job, limits quota.Limits, tokens int64) (
	settle func(engine.Usage), err error) {
	p := principalFrom(r.Context())
	d, err := s.quota.Reserve(r.Context(), quota.Request{ID: rl.id, Tenant: p.tenant, Limits: limits, Tokens: tokens})
	if err != nil {
		return nil, fmt.Errorf("daemon: quota reserve: %w", err)
	}
	setRateHeaders(w.Header(), d)
	if !d.Allowed {
		s.rejected.add(p.tenant, time.Now())
		if !s.cfg.QuotaShadow {
			return nil, &quotaError{tenant: p.tenant, d: d, tokens: tokens}
		}
		s.log.Info("quota would refuse (shadow mode)", "request_id", rl.id, "tenant", p.tenant, "reason", d.Reason)
		return func(engine.Usage) {}, nil
	}
	var once sync.Once
	return func(u engine.Usage) {
		once.Do(func() {
			if u.OutputTokens > 0 {
				s.outputs.Observe(p.tenant, u.OutputTokens/max(j.n, 1))
			}
			actual := int64(u.InputTokens) + int64(u.OutputTokens)
			s.settled.Add(actual)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.quota.Reconcile(ctx, p.tenant, rl.id, actual); err != nil {
				s.log.Error("quota reconcile failed", "request_id", rl.id, "tenant", p.tenant, "err", err)
			}
		})
	}, nil
}

func appendNote(notes, n string) string {
	if n == "" {
		return notes
	}
	if notes == "" {
		return n
	}
	return notes + "; " + n
}

// degradedLookup returns the model that serves a request for m, and m's
// degradation level: a free-tier tenant's request goes to m's configured
// smaller model while m's ladder is at DegradeLimitFree.
func (s *Server) degradedLookup(r *http.Request, rl *reqLog, m *model) (*model, engine.DegradeLevel) {
	level := m.eng.Stats().Degrade
	to, ok := s.cfg.DegradeRoutes[m.id]
	small := s.byID[to]
	// From shed_free on, the request is shed (admit), not routed.
	if !ok || small == nil || level < engine.DegradeLimitFree || level >= engine.DegradeShedFree {
		return m, level
	}
	tier, _, err := s.requestQuota(r, rl)
	if err != nil || tier != store.TierFree {
		return m, level
	}
	rl.degraded = appendNote(rl.degraded, "routed from "+m.id)
	return small, level
}

// isQuotaDenial reports whether err is a refusal by quota or by load
// shedding (a 429).
func isQuotaDenial(err error) bool {
	var qe *quotaError
	var oe *overloadError
	return errors.As(err, &qe) || errors.As(err, &oe)
}

// quotaBackend names the quota backend for the statistics.
func (s *Server) quotaBackend() string {
	if s.cfg.RedisURL != "" {
		return "redis"
	}
	return "memory"
}
