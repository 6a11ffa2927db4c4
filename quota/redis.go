package quota

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed reserve.lua
	reserveLua string
	//go:embed reconcile.lua
	reconcileLua string
	//go:embed usage.lua
	usageLua string
)

// Scripts are loaded by EVALSHA, falling back to EVAL when Redis does not
// know them (first use, or a restarted Redis).
var (
	reserveScript   = redis.NewScript(commonLua + reserveLua)
	reconcileScript = redis.NewScript(commonLua + reconcileLua)
	usageScript     = redis.NewScript(commonLua + usageLua)
)

// ErrUnavailable is returned by [Redis.Usage] when Redis fails or the
// circuit breaker is open.
var ErrUnavailable = errors.New("quota: redis unavailable")

// Defaults for a RedisConfig's zero fields.
const (
	DefaultRedisTimeout    = 25 * time.Millisecond
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = time.Second
)

// stateTTL is how long a tenant's state hash lives after its last reserve:
// longer than a day, so the day's budget and the reset detection outlive
// any idle gap within a day; seenFor is how long the limiter trusts that
// it saw a tenant's state, well inside stateTTL.
const (
	stateTTL = 48 * time.Hour
	seenFor  = 24 * time.Hour
	seenMax  = 100_000 // tenants remembered for reset detection
)

// RedisConfig configures [NewRedis].
type RedisConfig struct {
	// URL is the Redis URL, e.g. redis://host:6379/0 (see redis.ParseURL).
	URL string
	// Timeout bounds each Redis call, dial included; 0 means 25 ms.
	Timeout time.Duration
	// BreakerFailures is the consecutive Redis failures that open the
	// circuit breaker; 0 means 5.
	BreakerFailures int
	// BreakerCooldown is how long the open breaker skips Redis before one
	// half-open probe; 0 means 1 s.
	BreakerCooldown time.Duration
	// TTL is the reservation TTL; 0 means DefaultTTL.
	TTL time.Duration
	// LiveNodes returns the number of live llmd nodes sharing the limits;
	// the fallback divides every limit by it. nil means 1.
	LiveNodes func() int
	// Now is the clock of the breaker and the fallback limiter only: the
	// limits in Redis use Redis's own clock. nil means time.Now.
	Now func() time.Time
	// Logger receives breaker and reset warnings; nil discards them.
	Logger *slog.Logger
	// HotRPS, when above 0, detects hot tenants by their request rate: a
	// tenant with one bucket (Limits.Shards 0 or 1) that gets more than
	// HotRPS requests within one second of Redis's clock is split by the
	// reserve script itself into HotShards sub-buckets (lowered, like
	// Limits.Shards, to the smallest limit set). 0 turns detection off; a
	// node with it off still follows a split that another node's script
	// made. See "Hot tenants" in the package doc.
	HotRPS int64
	// HotShards is the number of sub-buckets of a detected split, 2 to
	// MaxShards; 0 means DefaultHotShards.
	HotShards int
}

// DefaultHotShards is the sub-buckets of a tenant detected hot when
// RedisConfig.HotShards is 0.
const DefaultHotShards = 8

// Redis is the [Limiter] shared by the nodes of a cluster through one
// Redis. Each Reserve and each Reconcile is one atomic Lua script, which
// takes the time from Redis's TIME. A tenant's keys share the hash tag
// {tenant}: llmd:q:{tenant}:s (state), :r (reservations), :e (expiries).
//
// When Redis fails (an error, or no answer within Timeout) the decision
// comes from a local [Memory] with every limit divided by LiveNodes, and is
// counted as ErrorAllowed or ErrorDenied. After BreakerFailures consecutive
// failures the breaker skips Redis for BreakerCooldown, then probes it with
// one call. Reservations made by the fallback are reconciled by it, never
// against Redis. A Reconcile that cannot reach Redis is dropped: the
// reservation expires in Redis after the TTL, charged as reserved; so does
// a reservation that Redis made but whose answer timed out.
//
// When Redis has lost a tenant's state (restarted empty, failed over to a
// replica without it) the buckets start full, the reservations held there
// are gone (their Reconcile does nothing) and the day's count restarts:
// up to one window of each limit can be admitted again. The limiter counts
// it in Counters.Resets and logs a warning, when it had seen the tenant's
// state within the last day.
type Redis struct {
	client    *redis.Client
	timeout   time.Duration
	ttlMs     int64
	liveNodes func() int
	now       func() time.Time
	log       *slog.Logger

	breaker *breaker
	local   *Memory
	seen    *seenSet
	// book and rr serve hot tenants' sub-buckets (shards.go); hot keeps
	// the splits read from Redis, hotRPS and hotN the detection (hot.go).
	book   *shardBook
	rr     atomic.Uint64
	hot    *hotCache
	hotRPS int64
	hotN   int

	allow, deny, errAllowed, errDenied, resets, borrowed, detected atomic.Uint64
	closed                                                         atomic.Bool
}

// NewRedis returns a Redis limiter. It does not connect: Redis may be down
// at start, and then the fallback decides. It fails only on a bad config.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		// A *url.Error repeats the URL, password included: keep its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("quota: parse redis url: %w", err)
	}
	if cfg.Timeout < 0 || cfg.BreakerFailures < 0 || cfg.BreakerCooldown < 0 || cfg.TTL < 0 {
		return nil, fmt.Errorf("%w: negative redis config value", ErrInvalid)
	}
	hotN := cmp.Or(cfg.HotShards, DefaultHotShards)
	switch {
	case cfg.HotRPS < 0 || cfg.HotRPS > MaxRate:
		return nil, fmt.Errorf("%w: hot tenant rate %d outside [0, %d]", ErrInvalid, cfg.HotRPS, MaxRate)
	case hotN < 2 || hotN > MaxShards:
		return nil, fmt.Errorf("%w: hot tenant shards %d outside [2, %d]", ErrInvalid, cfg.HotShards, MaxShards)
	}
	timeout := cmp.Or(cfg.Timeout, DefaultRedisTimeout)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	live := cfg.LiveNodes
	if live == nil {
		live = func() int { return 1 }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	// Every call is bounded by its context (ContextTimeoutEnabled) and by
	// the same socket timeouts; no retries, which would multiply the wait.
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

	ttl := time.Duration(ttlMillis(cfg.TTL)) * time.Millisecond
	r := &Redis{
		client:    redis.NewClient(opt),
		timeout:   timeout,
		ttlMs:     ttl.Milliseconds(),
		liveNodes: live,
		now:       now,
		log:       log.With("component", "quota"),
		breaker:   newBreaker(now, cmp.Or(cfg.BreakerFailures, DefaultBreakerFailures), cmp.Or(cfg.BreakerCooldown, DefaultBreakerCooldown)),
		local:     NewMemory(MemoryConfig{Now: now, TTL: ttl}),
		seen:      newSeenSet(seenMax),
		book:      newShardBook(ttl),
		hot:       newHotCache(),
		hotRPS:    cfg.HotRPS,
		hotN:      hotN,
	}
	r.rr.Store(newRoundRobin())
	return r, nil
}

func keys(tenant string) []string {
	p := "llmd:q:{" + tenant + "}:"
	return []string{p + "s", p + "r", p + "e"}
}

// Reserve implements [Limiter.Reserve]. It returns an error only for an
// invalid request, a reused id or a closed limiter, never because Redis
// failed. The caller's cancellation does not cut a Redis call short (it is
// bounded by Timeout), so a decision is never left half known.
func (r *Redis) Reserve(ctx context.Context, req Request) (Decision, error) {
	if err := req.validate(); err != nil {
		return Decision{}, err
	}
	if r.closed.Load() {
		return Decision{}, ErrClosed
	}
	if r.breaker.allow() {
		d, err := r.reserve(ctx, &req)
		if err == nil {
			r.succeeded()
			if d.Allowed {
				r.allow.Add(1)
			} else {
				r.deny.Add(1)
			}
			return d, nil
		}
		if errors.Is(err, ErrDuplicateID) {
			r.succeeded()
			return Decision{}, err
		}
		r.failed("reserve", err)
	}
	return r.fallbackReserve(ctx, req)
}

// reserve decides req in Redis: in the tenant's bucket, or in its
// sub-buckets when it is split (marked by Limits.Shards, or detected). An
// error other than ErrDuplicateID means Redis failed.
func (r *Redis) reserve(ctx context.Context, req *Request) (Decision, error) {
	if n := req.Limits.shards(); n > 1 {
		return r.reserveSharded(ctx, req, layout{n: n})
	}
	if s := r.hot.get(req.Tenant, r.now()); s != nil {
		return r.reserveSharded(ctx, req, layout{n: s.n, hot: s})
	}
	var detect hotArgs
	if r.hotRPS > 0 {
		l := req.Limits
		l.Shards = r.hotN
		detect = hotArgs{rps: r.hotRPS, n: l.shards()}
	}
	o, err := r.runReserve(ctx, keys(req.Tenant), req, initState{}, detect)
	if err != nil {
		return Decision{}, err
	}
	if o.code == codeDuplicate {
		return Decision{}, ErrDuplicateID
	}
	r.observeState(req.Tenant, o.created)
	if o.code != codeSplit {
		r.hot.drop(req.Tenant)
		return o.decision(req), nil
	}
	s := r.followSplit(req.Tenant, o.split, o.switched)
	return r.reserveSharded(ctx, req, layout{n: s.n, hot: s})
}

// followSplit remembers the split a script returned for tenant; when this
// call made it, it counts and logs the detection.
func (r *Redis) followSplit(tenant string, s *split, switched bool) *split {
	if switched {
		r.detected.Add(1)
		r.log.Info("quota: tenant detected hot by its request rate; its buckets are split in redis",
			"tenant", tenant, "hot_tenant_rps", r.hotRPS, "shards", s.n, "split_epoch", s.at)
	}
	return r.hot.put(tenant, s, r.now())
}

// initState is a detected sub-bucket's starting state for the scripts
// (reserve.lua's ARGV 10-14, usage.lua's 3-7); the zero value is none.
type initState struct {
	at        int64
	rb, tb    string
	day, used int64
}

func (s initState) args() []any { return []any{s.at, s.rb, s.tb, s.day, s.used} }

// hotArgs are reserve.lua's ARGV 15-16: the detection rate and split size
// (zero: no detection).
type hotArgs struct {
	rps int64
	n   int
}

// runReserve runs the reserve script on one bucket's keys.
func (r *Redis) runReserve(ctx context.Context, keys []string, req *Request, init initState, hot hotArgs) (reserved, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	args := reserveArgs(req, r.ttlMs)
	copy(args[9:], init.args())
	args[14], args[15] = hot.rps, hot.n
	res, err := reserveScript.Run(ctx, r.client, keys, args...).Int64Slice()
	if err != nil {
		return reserved{}, err
	}
	return parseReserve(res)
}

// observeState counts and logs a bucket whose state Redis lost (name: the
// tenant, or its sub-bucket).
func (r *Redis) observeState(name string, created bool) {
	if r.seen.observe(name, created, r.now()) {
		r.resets.Add(1)
		r.log.Warn("quota: redis lost the tenant's quota state (restart or failover); its buckets start full",
			"tenant", name)
	}
}

// reserveArgs are reserve.lua's ARGV: all 16, with no starting state and
// no detection.
func reserveArgs(req *Request, ttlMs int64) []any {
	l := req.Limits
	return append([]any{req.ID, req.Tokens, l.RPM, l.TPM, l.Concurrency, l.DailyTokens, ttlMs,
		max(stateTTL.Milliseconds(), 2*ttlMs), req.most() - req.Tokens}, append(initState{}.args(), 0, 0)...)
}

// reserved is the reserve script's reply: an outcome, or (code 7) a split.
type reserved struct {
	outcome
	switched bool // this call made the split
	split    *split
}

func parseReserve(res []int64) (reserved, error) {
	ok := len(res) == 7 && res[0] >= codeAllowed && res[0] <= codeDuplicate ||
		len(res) == 17 && res[0] == codeSplit
	if !ok {
		return reserved{}, fmt.Errorf("quota: reserve script returned %v", res)
	}
	o := reserved{outcome: outcome{
		code: res[0], retryMs: res[1],
		remRequests: res[2], resetRequestsMs: res[3],
		remTokens: res[4], resetTokensMs: res[5],
		created: res[6] == 1,
	}}
	if o.code == codeSplit {
		s, err := parseSplit(res[8:])
		if err != nil {
			return reserved{}, err
		}
		o.switched, o.split = res[7] == 1, s
	}
	return o, nil
}

// fallbackReserve decides locally with the limits divided by the live nodes.
func (r *Redis) fallbackReserve(ctx context.Context, req Request) (Decision, error) {
	req.Limits = req.Limits.perNode(r.liveNodes())
	d, err := r.local.Reserve(ctx, req)
	if err != nil {
		return Decision{}, err
	}
	d.Fallback = true
	if d.Allowed {
		r.errAllowed.Add(1)
	} else {
		r.errDenied.Add(1)
	}
	return d, nil
}

// Reconcile implements [Limiter.Reconcile]. A reservation made by the
// fallback is settled locally. Otherwise it is settled in Redis; when Redis
// fails the settlement is dropped and the reservation expires there after
// the TTL, charged as reserved. It does not return Redis's errors, and the
// caller's cancellation does not stop it (a cancelled request must still
// be settled).
func (r *Redis) Reconcile(ctx context.Context, tenant, id string, actual int64) error {
	if err := validateReconcile(tenant, id, actual); err != nil {
		return err
	}
	if r.closed.Load() {
		return ErrClosed
	}
	if r.local.settle(tenant, id, actual) {
		return nil
	}
	e, sharded := r.book.take(tenant, id)
	if !r.breaker.allow() {
		r.log.Debug("quota: redis unavailable, reconcile dropped", "tenant", tenant, "request_id", id)
		return nil
	}
	if sharded {
		r.reconcileBooked(ctx, tenant, id, e, actual)
		return nil
	}
	r.reconcileKeys(ctx, keys(tenant), id, actual)
	return nil
}

// reconcileKeys runs the reconcile script on one bucket's keys; a failure
// is counted by the breaker and otherwise dropped.
func (r *Redis) reconcileKeys(ctx context.Context, keys []string, id string, actual int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	if err := reconcileScript.Run(ctx, r.client, keys, id, actual).Err(); err != nil {
		r.failed("reconcile", err)
		return
	}
	r.succeeded()
}

// Usage implements [Limiter.Usage] from Redis. Unlike Reserve it returns
// Redis's errors: a fallback's view of one node would mislead.
func (r *Redis) Usage(ctx context.Context, tenant string, l Limits) (Usage, error) {
	if err := validKey("tenant", tenant, MaxTenantLen); err != nil {
		return Usage{}, err
	}
	if err := l.validate(); err != nil {
		return Usage{}, err
	}
	if r.closed.Load() {
		return Usage{}, ErrClosed
	}
	if !r.breaker.allow() {
		return Usage{}, ErrUnavailable
	}
	var u Usage
	var err error
	if n := l.shards(); n > 1 {
		u, err = r.usageSharded(ctx, tenant, l, layout{n: n})
	} else {
		u, err = r.usageWhole(ctx, tenant, l)
	}
	if err != nil {
		r.failed("usage", err)
		return Usage{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r.succeeded()
	return u, nil
}

// usageWhole is the usage of a tenant with one bucket, or, when a split
// was detected, of its sub-buckets plus the reservations still held in the
// whole bucket.
func (r *Redis) usageWhole(ctx context.Context, tenant string, l Limits) (Usage, error) {
	u, s, err := r.runUsageSplit(ctx, keys(tenant), l, initState{})
	if err != nil || s == nil {
		return u, err
	}
	s = r.hot.put(tenant, s, r.now())
	parts, err := r.usageSharded(ctx, tenant, l, layout{n: s.n, hot: s})
	if err != nil {
		return Usage{}, err
	}
	parts.InFlight += u.InFlight
	return parts, nil
}

// runUsage runs the usage script on one sub-bucket's keys.
func (r *Redis) runUsage(ctx context.Context, keys []string, l Limits, init initState) (Usage, error) {
	u, _, err := r.runUsageSplit(ctx, keys, l, init)
	return u, err
}

// runUsageSplit runs the usage script on one bucket's keys: its usage, and
// the split record when the bucket holds one.
func (r *Redis) runUsageSplit(ctx context.Context, keys []string, l Limits, init initState) (Usage, *split, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	res, err := usageScript.Run(ctx, r.client, keys, usageArgs(l, init)...).Int64Slice()
	if err != nil {
		return Usage{}, nil, err
	}
	return parseUsage(res)
}

// usageArgs are usage.lua's ARGV.
func usageArgs(l Limits, init initState) []any { return append([]any{l.RPM, l.TPM}, init.args()...) }

func parseUsage(res []int64) (Usage, *split, error) {
	if len(res) != 5 && len(res) != 14 {
		return Usage{}, nil, fmt.Errorf("quota: usage script returned %v", res)
	}
	u := Usage{InFlight: res[0], RequestsAvailable: res[1], TokensAvailable: res[2], DailyTokensUsed: res[3],
		TokensOwed: res[4]}
	if len(res) == 5 {
		return u, nil, nil
	}
	s, err := parseSplit(res[5:])
	if err != nil {
		return Usage{}, nil, err
	}
	return u, s, nil
}

// Counters implements [Limiter.Counters].
func (r *Redis) Counters() Counters {
	state, failures := r.breaker.status()
	return Counters{
		Allow:          r.allow.Load(),
		Deny:           r.deny.Load(),
		ErrorAllowed:   r.errAllowed.Load(),
		ErrorDenied:    r.errDenied.Load(),
		Resets:         r.resets.Load(),
		Borrowed:       r.borrowed.Load(),
		HotDetected:    r.detected.Load(),
		FallbackActive: state != breakerClosed || failures > 0,
	}
}

// Close implements [Limiter.Close]: it closes the Redis client.
func (r *Redis) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	_ = r.local.Close()
	if err := r.client.Close(); err != nil {
		return fmt.Errorf("quota: close redis client: %w", err)
	}
	return nil
}

func (r *Redis) succeeded() {
	if r.breaker.success() {
		r.log.Info("quota: redis answers again, deciding in redis")
	}
}

func (r *Redis) failed(op string, err error) {
	if r.breaker.failure() {
		r.log.Warn("quota: redis failing, deciding locally with limits divided by the live nodes",
			"op", op, "error", err, "live_nodes", r.liveNodes())
		return
	}
	r.log.Debug("quota: redis call failed", "op", op, "error", err)
}
