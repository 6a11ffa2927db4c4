package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// TierPriority is each tier's class in the engine's scheduler.
var TierPriority = map[store.Tier]engine.Priority{
	store.TierEnterprise: engine.PriorityEnterprise,
	store.TierPaid:       engine.PriorityPaid,
	store.TierFree:       engine.PriorityFree,
	store.TierBatch:      engine.PriorityBatch,
}

// admission is the admit stage's decision: the job as admitted (its
// priority set, its max_tokens perhaps capped) and its reservation.
type admission struct {
	job *Job
	// settle settles the reservation with the tokens used; idempotent.
	settle   func(Usage)
	decision *quota.Decision
	// degraded notes what the ladder changed.
	degraded string
}

// admit applies the tenant's tier and quota to job before it runs: the
// priority, the degradation ladder's free-tier steps, and the reservation
// of prompt plus output tokens. A forwarded request is admitted by its
// entry node, which holds its reservation.
func (p *Pipeline) admit(ctx context.Context, req *Request, t Tenant, c choice, j *Job) (admission, error) {
	if p.draining.Load() {
		return admission{}, ErrDraining
	}
	adm := admission{settle: func(Usage) {}}
	job := *j
	adm.job = &job
	prio := TierPriority[t.Tier]
	if req.Priority != nil {
		// The entry node checked a forwarded request's priority.
		if *req.Priority > prio && !req.Principal.Admin && !req.Forwarded() {
			return adm, &Error{Status: http.StatusForbidden, Type: TypeInvalidRequest, Param: "priority",
				Code: "permission_denied", Message: fmt.Sprintf("tenant %s is in the %s tier; it may not ask for a higher priority",
					t.ID, t.Tier)}
		}
		prio = *req.Priority
	}
	job.Priority = prio

	if prio == engine.PriorityFree && job.Model != nil {
		switch level := max(c.level, job.Model.Replica.Stats().Degrade); {
		case level >= engine.DegradeShedFree:
			adm.degraded = "shed"
			p.log.Warn("shedding free-tier request", "request_id", req.ID, "tenant", t.ID, "model", job.ModelID,
				"level", level.String())
			return adm, &OverloadError{Model: job.ModelID, RetryAfter: p.cfg.ShedRetryAfter}
		case level >= engine.DegradeLimitFree:
			if cap := p.cfg.DegradeFreeMaxTokens; cap > 0 && job.MaxTokens > cap {
				job.MaxTokens = cap
				adm.degraded = "max_tokens capped to " + strconv.Itoa(cap)
			}
		}
	}
	job.ReservedTPS = t.Capacity.ReservedFor(job.ModelID)
	if req.Forwarded() {
		return adm, nil
	}
	var tokens, most int64 // reserved, and the most the request may use
	if job.Model == nil {
		// Only peers serve it: about 4 bytes a token of the body stand for
		// the prompt.
		tokens = int64(len(job.Forward.Body)/4) + int64(job.MaxTokens)*int64(job.N)
		most = tokens
	} else {
		tokens, most = reservation(len(job.Prompt), job.MaxTokens, job.N, p.cfg.QuotaEstimate, req.MaxTokens != nil,
			p.outputs.Expected(t.ID, math.MaxInt))
	}
	// The end user's own limits first: a user over them takes nothing of
	// the tenant's.
	userKey, userHeld := "", false
	if c := t.Capacity; req.User != "" && (c.UserRPM > 0 || c.UserTPM > 0) {
		userKey = UserQuotaKey(t.ID, req.User)
		d, err := p.limiter.Reserve(ctx, quota.Request{ID: req.ID, Tenant: userKey,
			Limits: quota.Limits{RPM: c.UserRPM, TPM: c.UserTPM}, Tokens: tokens, MaxTokens: most})
		if err != nil {
			return adm, fmt.Errorf("pipeline: per-user quota reserve: %w", err)
		}
		if !d.Allowed {
			adm.decision = &d
			p.rejected.add(t.ID, time.Now())
			if !p.cfg.QuotaShadow {
				return adm, &QuotaError{Tenant: t.ID, User: req.User, Decision: d, Tokens: tokens}
			}
			p.log.Info("per-user quota would refuse (shadow mode)", "request_id", req.ID, "tenant", t.ID,
				"reason", d.Reason)
		}
		userHeld = d.Allowed
	}
	d, err := p.limiter.Reserve(ctx, quota.Request{ID: req.ID, Tenant: t.ID, Limits: t.Limits, Tokens: tokens, MaxTokens: most})
	if err != nil {
		p.releaseUser(userHeld, userKey, req.ID)
		return adm, fmt.Errorf("pipeline: quota reserve: %w", err)
	}
	adm.decision = &d
	if !d.Allowed {
		p.rejected.add(t.ID, time.Now())
		if !p.cfg.QuotaShadow {
			p.releaseUser(userHeld, userKey, req.ID)
			return adm, &QuotaError{Tenant: t.ID, Decision: d, Tokens: tokens}
		}
		p.log.Info("quota would refuse (shadow mode)", "request_id", req.ID, "tenant", t.ID, "reason", d.Reason)
		if !userHeld {
			return adm, nil
		}
	}
	n := job.N
	var once sync.Once
	adm.settle = func(u Usage) {
		once.Do(func() {
			if u.OutputTokens > 0 {
				p.outputs.Observe(t.ID, u.OutputTokens/max(n, 1))
			}
			actual := int64(u.InputTokens) + int64(u.OutputTokens)
			p.settled.Add(actual)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if d.Allowed {
				if err := p.limiter.Reconcile(ctx, t.ID, req.ID, actual); err != nil {
					p.log.Error("quota reconcile failed", "request_id", req.ID, "tenant", t.ID, "err", err)
				}
			}
			if userHeld {
				if err := p.limiter.Reconcile(ctx, userKey, req.ID, actual); err != nil {
					p.log.Error("per-user quota reconcile failed", "request_id", req.ID, "tenant", t.ID, "err", err)
				}
			}
		})
	}
	return adm, nil
}

// UserQuotaKey is the quota key of an end user of tenant: "user:" and 32
// hex digits of a SHA-256 of the two, so that any user string (up to 256
// bytes, any characters) makes a valid key of fixed size that no tenant id
// can take (tenant ids have no ':'), and users spread over Redis Cluster
// slots.
func UserQuotaKey(tenant, user string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + user))
	return "user:" + hex.EncodeToString(h[:16])
}

// releaseUser gives back a per-user reservation of a request that the
// tenant's own quota refused: its tokens are refunded (its request stays
// counted in the user's requests per minute).
func (p *Pipeline) releaseUser(held bool, key, id string) {
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.limiter.Reconcile(ctx, key, id, 0); err != nil {
		p.log.Error("per-user quota release failed", "request_id", id, "err", err)
	}
}

// DefaultOutputEstimate is the answer length, per choice, reserved for a
// request that does not set max_tokens while its tenant has no history of
// answers (the engine's default projection, engine.Config's
// ExpectedOutputTokens, is the same 256).
const DefaultOutputEstimate = 256

// reservation returns the tokens to reserve for a request of prompt tokens
// and n choices of at most maxTokens each, and the most it may use.
// learned is the tenant's usual answer length (math.MaxInt without enough
// history). A request that gave max_tokens reserves all of it, unless
// estimate (--quota-estimate) reserves the learned length; one that did not
// reserves the learned length, else DefaultOutputEstimate, rather than the
// whole room left in the context, and is charged what it used when it ends
// (an estimated reservation: see package quota).
func reservation(prompt, maxTokens, n int, estimate, given bool, learned int) (tokens, most int64) {
	expect := maxTokens
	switch {
	case estimate && learned != math.MaxInt:
		expect = min(maxTokens, learned)
	case given:
	case learned != math.MaxInt:
		expect = min(maxTokens, learned)
	default:
		expect = min(maxTokens, DefaultOutputEstimate)
	}
	if maxTokens > 0 {
		expect = max(expect, 1)
	}
	// An embedding request has no answer: it reserves its input alone.
	return int64(prompt) + int64(expect)*int64(n), int64(prompt) + int64(maxTokens)*int64(n)
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
