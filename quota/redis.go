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
}

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
	// book and rr serve hot tenants' sub-buckets (shards.go).
	book *shardBook
	rr   atomic.Uint64

	allow, deny, errAllowed, errDenied, resets, borrowed atomic.Uint64
	closed                                               atomic.Bool
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
// sub-buckets when it is split. An error other than ErrDuplicateID means
// Redis failed.
func (r *Redis) reserve(ctx context.Context, req *Request) (Decision, error) {
	if n := req.Limits.shards(); n > 1 {
		return r.reserveSharded(ctx, req, n)
	}
	o, err := r.runReserve(ctx, keys(req.Tenant), req)
	if err != nil {
		return Decision{}, err
	}
	if o.code == codeDuplicate {
		return Decision{}, ErrDuplicateID
	}
	r.observeState(req.Tenant, o.created)
	return o.decision(req), nil
}

// runReserve runs the reserve script on one bucket's keys.
func (r *Redis) runReserve(ctx context.Context, keys []string, req *Request) (outcome, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	res, err := reserveScript.Run(ctx, r.client, keys, reserveArgs(req, r.ttlMs)...).Int64Slice()
	if err != nil {
		return outcome{}, err
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

// reserveArgs are reserve.lua's ARGV.
func reserveArgs(req *Request, ttlMs int64) []any {
	l := req.Limits
	return []any{req.ID, req.Tokens, l.RPM, l.TPM, l.Concurrency, l.DailyTokens, ttlMs, max(stateTTL.Milliseconds(), 2*ttlMs),
		req.most() - req.Tokens}
}

func parseReserve(res []int64) (outcome, error) {
	if len(res) != 7 || res[0] < codeAllowed || res[0] > codeDuplicate {
		return outcome{}, fmt.Errorf("quota: reserve script returned %v", res)
	}
	return outcome{
		code: res[0], retryMs: res[1],
		remRequests: res[2], resetRequestsMs: res[3],
		remTokens: res[4], resetTokensMs: res[5],
		created: res[6] == 1,
	}, nil
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
		u, err = r.usageSharded(ctx, tenant, l, n)
	} else {
		u, err = r.runUsage(ctx, keys(tenant), l)
	}
	if err != nil {
		r.failed("usage", err)
		return Usage{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r.succeeded()
	return u, nil
}

// runUsage runs the usage script on one bucket's keys.
func (r *Redis) runUsage(ctx context.Context, keys []string, l Limits) (Usage, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	res, err := usageScript.Run(ctx, r.client, keys, l.RPM, l.TPM).Int64Slice()
	if err != nil {
		return Usage{}, err
	}
	return parseUsage(res)
}

func parseUsage(res []int64) (Usage, error) {
	if len(res) != 5 {
		return Usage{}, fmt.Errorf("quota: usage script returned %v", res)
	}
	return Usage{InFlight: res[0], RequestsAvailable: res[1], TokensAvailable: res[2], DailyTokensUsed: res[3],
		TokensOwed: res[4]}, nil
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
