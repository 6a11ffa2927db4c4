package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/catalog"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/safety"
	"github.com/llmd/llmd/store"
)

// Config holds the pipeline's settings. The daemon fills it from its own.
type Config struct {
	// NodeID names this node in usage rows and logs.
	NodeID string
	// MaxN is the most choices one request may ask for.
	MaxN int
	// QuotaEstimate reserves the tenant's learned answer length instead of
	// max_tokens; QuotaShadow admits every request and logs refusals.
	QuotaEstimate bool
	QuotaShadow   bool
	// DegradeRoutes maps a model to the smaller one that serves its
	// free-tier requests from the ladder's limit_free up;
	// DegradeFreeMaxTokens caps their max_tokens there (0: no cap).
	DegradeRoutes        map[string]string
	DegradeFreeMaxTokens int
	// ShedRetryAfter is the Retry-After of a shed free-tier request.
	ShedRetryAfter time.Duration
	// StallTimeout ends a local request that produced no new token for
	// this long after its first.
	StallTimeout time.Duration
	// UsageCheckpoint is the most time between two checkpoints of a
	// streaming request's in-flight usage row (the output tokens sent so
	// far), which bounds what a crash leaves unbilled: the tokens of one
	// interval, plus the usage writer's commit delay. 0 is
	// DefaultUsageCheckpoint; negative turns checkpoints off.
	UsageCheckpoint time.Duration
	// Fallback maps a model to the one that serves its requests when no
	// alive node serves it (a cluster).
	Fallback map[string]string
	// RoutePolicy, LoadBound and LoadSlack are the cluster router's (see
	// cluster.RouteRequest).
	RoutePolicy cluster.Policy
	LoadBound   float64
	LoadSlack   int
	// Zone is this node's zone: the router prefers nodes of it.
	Zone string
	// Role is this node's part in disaggregated prefill and decode;
	// Disagg decides which requests a decode node's engine runs after
	// pulling their prompt's KV from a prefill node, and DisaggTimeout
	// bounds a pull (0: DefaultDisaggTimeout). See disagg.go.
	Role          cluster.Role
	Disagg        cluster.DisaggPolicy
	DisaggTimeout time.Duration
}

// Accounts looks tenants up; *store.Store implements it.
type Accounts interface {
	Quota(ctx context.Context, tenant string) (store.Quota, error)
}

// Ledger writes usage rows; *store.UsageWriter implements it.
type Ledger interface {
	Begin(ctx context.Context, ev store.UsageEvent) error
	// Progress checkpoints an in-flight row; it never blocks.
	Progress(ev store.UsageEvent) error
	Record(ctx context.Context, ev store.UsageEvent) error
	RecordAsync(ctx context.Context, ev store.UsageEvent) error
}

// Router orders the cluster's members for a request; *cluster.Cluster
// implements it.
type Router interface {
	Route(req cluster.RouteRequest, localPrefix func([]kvcache.Hash) int) []cluster.Candidate
	// MarkFailed takes a member out of routing after a failed forward.
	MarkFailed(id string)
	// Models are the models the alive peers serve (for the 404 of an
	// unknown model).
	Models() []string
}

// Deps are the pipeline's collaborators. Models and Limiter are required;
// the others may be nil (no data directory: one local tenant, no ledger;
// no cluster: every request served here).
type Deps struct {
	Models   *Models
	Limiter  quota.Limiter
	Accounts Accounts
	Ledger   Ledger
	Metrics  *metrics.Metrics
	// Router and Peer route requests between nodes: Peer makes the Target
	// of a member.
	Router Router
	Peer   func(cluster.Candidate) Target
	// PullKV asks a prefill node for a prompt's KV blocks; nil
	// disaggregates nothing.
	PullKV KVPuller
	// StatusOf is the HTTP status an error maps to (the server's one
	// mapping), for the level of a failed request's log line.
	StatusOf func(error) int
	Logger   *slog.Logger
	// Catalog is the models config (aliases, versions, canaries, routers);
	// nil serves model ids alone. Loader loads the models it names that
	// are not resident; nil for none.
	Catalog *catalog.Catalog
	Loader  Loader
	// Shadows stores shadow comparisons; nil runs no shadow traffic.
	Shadows ShadowLedger
	// Safety checks requests' input with the operator's classifier; nil
	// checks nothing.
	Safety *safety.Checker
	// SafetyFor returns a model's own safety checker (nil: no check) when
	// the models config overrides Safety for it; nil for no overrides.
	SafetyFor func(model string) (*safety.Checker, bool)
}

// Pipeline runs generation requests. Its methods are safe for concurrent
// use.
type Pipeline struct {
	cfg      Config
	models   *Models
	limiter  quota.Limiter
	accounts Accounts
	ledger   Ledger
	metrics  *metrics.Metrics
	router   Router
	peer     func(cluster.Candidate) Target
	pullKV   KVPuller
	statusOf func(error) int
	log      *slog.Logger
	local    Target
	catalog  *catalog.Catalog
	loader   Loader
	// httpc calls the routers' classifiers.
	httpc *http.Client
	// shadowLedger stores shadow comparisons; the shadow runs live under
	// shadowCtx (CloseShadows cancels it) and are counted by shadows.
	shadowLedger ShadowLedger
	shadowCtx    context.Context
	stopShadows  context.CancelFunc
	shadows      sync.WaitGroup
	safety       *safety.Checker
	safetyFor    func(model string) (*safety.Checker, bool)

	draining atomic.Bool
	// settled counts the tokens of every settled reservation (they must
	// equal the usage ledger's).
	settled atomic.Int64
	// outputs learns each tenant's answer lengths (Config.QuotaEstimate).
	outputs  *engine.OutputEstimator
	rejected rejections
}

// New returns a pipeline over deps.
func New(cfg Config, deps Deps) *Pipeline {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{cfg: cfg, models: deps.Models, limiter: deps.Limiter, accounts: deps.Accounts, ledger: deps.Ledger,
		metrics: deps.Metrics, router: deps.Router, peer: deps.Peer, pullKV: deps.PullKV, statusOf: deps.StatusOf, log: log.With("component", "pipeline"),
		outputs: engine.NewOutputEstimator(), catalog: deps.Catalog, loader: deps.Loader, safety: deps.Safety,
		safetyFor: deps.SafetyFor,
		httpc:     &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}}
	p.local = LocalTarget{Stall: cfg.StallTimeout}
	if deps.Shadows != nil && deps.Catalog != nil {
		p.shadowLedger = deps.Shadows
		p.shadowCtx, p.stopShadows = context.WithCancel(context.Background())
	}
	return p
}

// Models returns the served models.
func (p *Pipeline) Models() *Models { return p.models }

// Safety returns the safety checker, nil without one.
func (p *Pipeline) Safety() *safety.Checker { return p.safety }

// Catalog returns the models config, nil without one.
func (p *Pipeline) Catalog() *catalog.Catalog { return p.catalog }

// Drain makes the pipeline refuse new requests (ErrDraining); those already
// admitted go on.
func (p *Pipeline) Drain() { p.draining.Store(true) }

// Settled is the tokens of every settled reservation since start.
func (p *Pipeline) Settled() int64 { return p.settled.Load() }

// Rejected is how many requests of tenant quota refused since start, and
// in the minute before now.
func (p *Pipeline) Rejected(tenant string, now time.Time) (total uint64, lastMinute int) {
	return p.rejected.get(tenant), p.rejected.lastMinute(tenant, now)
}

// Plan is a prepared request: what Prepare's stages decided. Start and
// Finish run it; Record records it when it is refused.
type Plan struct {
	Req    *Request
	Tenant Tenant
	// Job is nil when the request was refused before it was prepared.
	Job *Job
	// Model is the model the request asked for, or, once chosen, the one
	// that serves it.
	Model string
	// Decision is the quota's decision, nil when none was asked (its
	// x-ratelimit-* headers go on the answer).
	Decision *quota.Decision
	// route and degraded are the routing and degradation notes of the log
	// line and the usage row.
	route, degraded string
	targets         []Target
	settle          func(Usage)
	// metered says the request was admitted: it has an in-flight usage row
	// and gets a final one.
	metered bool
	// held is the local model the plan counts as active until it ends.
	held *Model
	// Choice is how the models config resolved the model asked for, nil
	// when it did not (a model id served as named).
	Choice *ModelChoice
	// safety is the safety check's verdict for the usage row and the log
	// ("" for allow); checker the checker of the model chosen.
	safety  string
	checker *safety.Checker
	// shadow is the request's shadow run, nil for none.
	shadow *shadowRun
}

// Deprecation returns the deprecation of the model chosen (zero times
// when it is not deprecated), for the Deprecation and Sunset headers.
func (plan *Plan) Deprecation() (deprecated, sunset time.Time, replacement string) {
	if plan.Choice == nil {
		return
	}
	return plan.Choice.Deprecated, plan.Choice.Sunset, plan.Choice.Replacement
}

// release ends the plan's hold on its model (once).
func (plan *Plan) release() {
	if plan.held != nil {
		plan.held.release()
		plan.held = nil
	}
}

// Prepare runs the stages that may refuse a request, in order: the
// tenant, the checks that need no model, the model, the Job, admission
// and the route. On error the Plan holds what was decided so far (for
// Record); an *Error, *QuotaError or *OverloadError is the client's to
// see.
func (p *Pipeline) Prepare(ctx context.Context, req *Request) (*Plan, error) {
	plan := &Plan{Req: req, Model: capText(req.Model, maxLoggedModelLen)}
	tenant, err := p.tenant(ctx, req.Principal)
	if err != nil {
		return plan, err
	}
	plan.Tenant = tenant
	if err := p.validate(req); err != nil {
		return plan, err
	}
	var check *safety.Pending
	if req.PromptIDs == nil {
		// A token-id prompt is checked once its model can decode it
		// (prepareAndAdmit).
		check = p.startSafety(ctx, plan, req.Model, promptText(req))
	}
	choice, err := p.choose(ctx, req, tenant)
	plan.route, plan.degraded, plan.Choice = choice.route, choice.degraded, choice.decision
	if err != nil {
		return plan, err
	}
	adm, err := p.prepareAndAdmit(ctx, plan, choice, check)
	for err != nil && plan.Choice != nil && len(plan.Choice.Fallbacks) > 0 && errors.As(err, new(*OverloadError)) {
		// The model chosen sheds load: its configured fallbacks, in order.
		p.catalog.ReportFailure(choice.id, time.Now())
		next, ok := fallback(p, plan.Choice, req)
		if !ok {
			break
		}
		plan.route = appendNote(plan.route, fmt.Sprintf("%s overloaded; fallback %s", choice.id, next.id))
		choice = next
		adm, err = p.prepareAndAdmit(ctx, plan, choice, nil)
	}
	if err != nil {
		if reason := RejectReason(err); reason != "" {
			p.rejectedRow(plan, reason)
		}
		return plan, err
	}
	plan.Job, plan.settle, plan.metered = adm.job, adm.settle, true
	var note string
	plan.targets, note = p.route(adm.job, choice.peers)
	plan.route = appendNote(plan.route, note)
	p.beginRow(ctx, plan)
	p.startShadow(plan)
	return plan, nil
}

// prepareAndAdmit holds the chosen model, prepares the job for it and
// admits it; a refusal releases the model again.
//
// check is the safety check of the request's input, awaited once the job
// is prepared and before admission; nil for none.
func (p *Pipeline) prepareAndAdmit(ctx context.Context, plan *Plan, c choice, check *safety.Pending) (admission, error) {
	plan.release()
	plan.Model, plan.Job = c.id, nil
	if m := c.model; m != nil {
		if !m.tryAcquire() {
			return admission{}, errModelUnloading(m.ID)
		}
		plan.held = m
	}
	job, err := p.prepare(plan.Req, plan.Tenant, c)
	if err != nil {
		return admission{}, err
	}
	plan.Job = job
	switch sc := p.checkerFor(c.id); {
	case plan.Req.PromptIDs != nil && sc != nil && !plan.Req.Forwarded():
		// A token-id prompt is checked as the text it decodes to.
		abandon(ctx, check)
		if c.model == nil {
			return admission{}, InvalidParam("prompt", "a token-id prompt is checked for safety as text, which needs model %s on the node the request enters", c.id)
		}
		check = p.startSafety(ctx, plan, c.id, c.model.Text.Decode(job.Prompt))
	case sc != plan.checker:
		// The model chosen has a safety check of its own.
		abandon(ctx, check)
		check = p.startSafety(ctx, plan, c.id, promptText(plan.Req))
	}
	if err := p.safetyVerdict(ctx, plan, check); err != nil {
		return admission{}, err
	}
	adm, err := p.admit(ctx, plan.Req, plan.Tenant, c, job)
	plan.Decision, plan.degraded = adm.decision, appendNote(plan.degraded, adm.degraded)
	return adm, err
}

// fallback takes the next of the decision's fallbacks that is served:
// here, else (in a cluster) by a peer.
func fallback(p *Pipeline, d *ModelChoice, req *Request) (choice, bool) {
	for len(d.Fallbacks) > 0 {
		id := d.Fallbacks[0]
		d.Fallbacks = d.Fallbacks[1:]
		c := choice{id: id, forward: req.Forward, decision: d}
		if body, err := withModel(req.Forward.Body, id); err == nil {
			c.forward.Body = body
		}
		if m := p.models.Get(id); m != nil && !m.Draining() {
			c.model, c.level = m, m.Replica.Stats().Degrade
		} else if p.router == nil || len(c.forward.Body) == 0 {
			continue
		} else if c.peers = p.peersServing(req, id); len(c.peers) == 0 {
			continue
		}
		d.Model, d.Role = id, catalog.RoleFallback
		return c, true
	}
	return choice{}, false
}

// Run is a plan started on a target.
type Run struct {
	plan *Plan
	exec Execution
	// next is the index of the target after the one running.
	next int
}

// Start hands the plan's job to its targets in order until one accepts it.
// A peer that fails is taken out of routing and the next target tried; an
// *Error from a target (a peer refusing the request as the client sent it)
// or an error of the local engine ends the request: the caller answers
// with it and calls Record.
func (p *Pipeline) Start(ctx context.Context, plan *Plan) (*Run, error) {
	r := &Run{plan: plan}
	if err := p.startNext(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// startNext starts r on the first of its remaining targets that accepts.
func (p *Pipeline) startNext(ctx context.Context, r *Run) error {
	plan := r.plan
	for r.next < len(plan.targets) {
		t := plan.targets[r.next]
		r.next++
		here := t == p.local || (plan.Job.Model != nil && t == plan.Job.Model.Target)
		if here && r.next > 1 {
			plan.route = appendNote(plan.route, "served locally")
		}
		exec, err := t.Start(ctx, plan.Job)
		if err == nil {
			r.exec = exec
			return nil
		}
		var final *Error
		if here || errors.As(err, &final) || ctx.Err() != nil {
			return err
		}
		p.targetFailed(plan, t, err)
	}
	return ErrNoNodeAnswered
}

// targetFailed takes a peer out of routing after it failed before the
// first token (gossip confirms or clears it later) and notes it.
func (p *Pipeline) targetFailed(plan *Plan, t Target, err error) {
	if p.router != nil {
		p.router.MarkFailed(t.Name())
	}
	p.log.Warn("forward failed before the first token; trying the next node", "request_id", plan.Req.ID,
		"peer", t.Name(), "err", err)
	plan.route = appendNote(plan.route, t.Name()+" failed")
}

// tenant looks the principal's tier and limits up. Without a store there
// is only the local tenant: paid and unlimited. A forwarded request comes
// with the tier its entry node found, which holds its quota reservation;
// its capacity settings (a reserved output rate) are read from this node's
// copy of the replicated control state.
func (p *Pipeline) tenant(ctx context.Context, pr Principal) (Tenant, error) {
	switch {
	case pr.Peer != "":
		t := Tenant{ID: pr.Tenant, Tier: store.Tier(pr.Tier)}
		if p.accounts != nil {
			if q, err := p.accounts.Quota(ctx, pr.Tenant); err == nil {
				t.Capacity = q.Capacity
			}
		}
		return t, nil
	case p.accounts == nil:
		return Tenant{ID: pr.Tenant, Tier: store.TierPaid}, nil
	}
	q, err := p.accounts.Quota(ctx, pr.Tenant)
	if err != nil {
		return Tenant{ID: pr.Tenant}, fmt.Errorf("pipeline: quota of tenant %s: %w", pr.Tenant, err)
	}
	return Tenant{ID: pr.Tenant, Tier: q.Tier, Limits: QuotaLimitsOf(q), Capacity: q.Capacity}, nil
}

// LimitsOf converts stored limits to the quota's.
func LimitsOf(l store.Limits) quota.Limits {
	return quota.Limits{RPM: l.RPM, TPM: l.TPM, Concurrency: l.Concurrency, DailyTokens: l.DailyTokens}
}

// QuotaLimitsOf is a tenant's quota limits: its limits, split into its
// hot-tenant sub-buckets.
func QuotaLimitsOf(q store.Quota) quota.Limits {
	l := LimitsOf(q.Limits)
	l.Shards = int(min(q.Capacity.HotShards, quota.MaxShards))
	return l
}

// appendNote joins routing and degradation notes with "; ".
func appendNote(notes, n string) string {
	if n == "" {
		return notes
	}
	if notes == "" {
		return n
	}
	return notes + "; " + n
}

// maxLoggedModelLen bounds a client-supplied model name in logs.
const maxLoggedModelLen = 256

// capText trims a client-supplied value for logging.
func capText(v string, n int) string {
	v = strings.TrimSpace(v)
	if len(v) > n {
		v = v[:n]
	}
	return v
}
