package quota

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmd/llmd/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial through a package-global logger; the
	// fault tests fail dials on purpose.
	redis.SetLogger(quietRedisLog{})
	goleak.VerifyTestMain(m)
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// fakeClock is a clock tests move by hand. It is safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// t0 is a fixed instant in the middle of a UTC day.
var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

func newTestMemory(t testing.TB, clock *fakeClock) *Memory {
	m := NewMemory(MemoryConfig{Now: clock.Now})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newTestRedis(t testing.TB, cfg RedisConfig) *Redis {
	t.Helper()
	r, err := NewRedis(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// startRedis starts a redis-server (or skips) and returns a limiter on it.
func startRedis(t testing.TB) (*redistest.Server, *Redis) {
	t.Helper()
	srv := redistest.Start(t)
	return srv, newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second})
}

var idSeq atomic.Uint64

// newID returns a unique reservation id.
func newID() string { return fmt.Sprintf("req-%d", idSeq.Add(1)) }

// tenantName returns a tenant unique to the test, so tests can share a Redis.
func tenantName(t testing.TB) string { return fmt.Sprintf("t%d-%s", idSeq.Add(1), t.Name()) }

func reserve(t testing.TB, l Limiter, tenant string, lim Limits, tokens int64) (Decision, string) {
	t.Helper()
	id := newID()
	d, err := l.Reserve(context.Background(), Request{ID: id, Tenant: tenant, Limits: lim, Tokens: tokens})
	require.NoError(t, err)
	return d, id
}

// logBuffer collects a logger's output for assertions. It is safe for
// concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// directClient is a plain Redis client for inspecting the limiter's keys.
func directClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// argvClock returns a script source whose clock is the last ARGV (ms)
// instead of Redis's TIME: test-only, to freeze Redis's time (RL-3) and to
// show what trusting the nodes' clocks does (RL-4).
func argvClock(t testing.TB, src string) string {
	t.Helper()
	const body = "local t = redis.call('TIME')\n  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"
	require.Equal(t, 1, strings.Count(src, body), "common.lua's server_ms changed: update argvClock")
	return strings.Replace(src, body, "return tonumber(ARGV[#ARGV])", 1)
}

// argvRedis runs the production scripts with the clock taken from ARGV: a
// Redis limiter whose time a test controls. It has no breaker or fallback.
type argvRedis struct {
	client                    *redis.Client
	now                       func() time.Time
	ttlMs                     int64
	reserve, reconcile, usage *redis.Script
}

func newArgvRedis(t testing.TB, client *redis.Client, now func() time.Time, ttl time.Duration) *argvRedis {
	return &argvRedis{
		client: client, now: now, ttlMs: ttl.Milliseconds(),
		reserve:   redis.NewScript(argvClock(t, commonLua+reserveLua)),
		reconcile: redis.NewScript(argvClock(t, commonLua+reconcileLua)),
		usage:     redis.NewScript(argvClock(t, commonLua+usageLua)),
	}
}

func (a *argvRedis) Reserve(ctx context.Context, req Request) (Decision, error) {
	args := append(reserveArgs(&req, a.ttlMs), a.now().UnixMilli())
	res, err := a.reserve.Run(ctx, a.client, keys(req.Tenant), args...).Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	o, err := parseReserve(res)
	if err != nil {
		return Decision{}, err
	}
	if o.code == codeSplit {
		return Decision{}, fmt.Errorf("argvRedis does not follow splits")
	}
	if o.code == codeDuplicate {
		return Decision{}, ErrDuplicateID
	}
	return o.decision(&req), nil
}

func (a *argvRedis) Reconcile(ctx context.Context, tenant, id string, actual int64) error {
	return a.reconcile.Run(ctx, a.client, keys(tenant), id, actual, a.now().UnixMilli()).Err()
}

func (a *argvRedis) Usage(ctx context.Context, tenant string, l Limits) (Usage, error) {
	res, err := a.usage.Run(ctx, a.client, keys(tenant), append(usageArgs(l, initState{}), a.now().UnixMilli())...).Int64Slice()
	if err != nil {
		return Usage{}, err
	}
	u, _, err := parseUsage(res)
	return u, err
}

func (a *argvRedis) Counters() Counters { return Counters{} }
func (a *argvRedis) Close() error       { return nil }
