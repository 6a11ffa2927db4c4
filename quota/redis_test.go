package quota

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/redistest"
)

func TestRedisBasics(t *testing.T) {
	_, r := startRedis(t)
	tenant := tenantName(t)
	lim := Limits{RPM: 2, TPM: 100, Concurrency: 5, DailyTokens: 1000}

	d, id := reserve(t, r, tenant, lim, 60)
	require.True(t, d.Allowed)
	assert.False(t, d.Fallback)
	assert.Equal(t, int64(1), d.RemainingRequests)
	assert.Equal(t, int64(40), d.RemainingTokens)
	assert.InDelta(t, float64(36000), float64(d.ResetTokens.Milliseconds()), 50)

	d, _ = reserve(t, r, tenant, lim, 50)
	assert.Equal(t, ReasonTokens, d.Reason)
	assert.InDelta(t, float64(6000), float64(d.RetryAfter.Milliseconds()), 50)

	u, err := r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 1, RequestsAvailable: 1, TokensAvailable: 40, DailyTokensUsed: 60}, u)

	require.NoError(t, r.Reconcile(t.Context(), tenant, id, 10))
	require.NoError(t, r.Reconcile(t.Context(), tenant, id, 0), "settling twice is a no-op")
	u, err = r.Usage(t.Context(), tenant, lim)
	require.NoError(t, err)
	assert.Equal(t, Usage{InFlight: 0, RequestsAvailable: 1, TokensAvailable: 90, DailyTokensUsed: 10}, u)

	d, _ = reserve(t, r, tenant, lim, 101)
	assert.Equal(t, ReasonTooLarge, d.Reason)
	assert.True(t, d.Hard)
	assert.Equal(t, Counters{Allow: 1, Deny: 2}, r.Counters())
}

func TestRedisKeysAndExpiry(t *testing.T) {
	srv := redistest.Start(t)
	direct := directClient(t, srv.URL())
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second, TTL: 200 * time.Millisecond})
	lim := Limits{RPM: 10, TPM: 100, Concurrency: 1, DailyTokens: 1000}
	d, id := reserve(t, r, "acme", lim, 60)
	require.True(t, d.Allowed)

	got, err := direct.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"llmd:q:{acme}:s", "llmd:q:{acme}:r", "llmd:q:{acme}:e"}, got,
		"every key of a tenant carries its hash tag")
	for _, k := range got {
		ttl, err := direct.PTTL(t.Context(), k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "%s must expire", k)
	}
	state, err := direct.PTTL(t.Context(), "llmd:q:{acme}:s").Result()
	require.NoError(t, err)
	assert.Greater(t, state, 24*time.Hour, "the state outlives a day")
	res, err := direct.HGet(t.Context(), "llmd:q:{acme}:r", id).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^60:100:\d+$`, res)

	d, _ = reserve(t, r, "acme", lim, 1)
	require.Equal(t, ReasonConcurrency, d.Reason)
	time.Sleep(250 * time.Millisecond) // past the TTL: the reservation expires
	d, _ = reserve(t, r, "acme", lim, 1)
	require.True(t, d.Allowed, "an expired reservation frees its slot")
	u, err := r.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, int64(61), u.DailyTokensUsed, "an expired reservation stays charged as reserved")
	exists, err := direct.HExists(t.Context(), "llmd:q:{acme}:r", id).Result()
	require.NoError(t, err)
	assert.False(t, exists, "purged by the script")
	require.NoError(t, r.Reconcile(t.Context(), "acme", id, 0))
	u2, err := r.Usage(t.Context(), "acme", lim)
	require.NoError(t, err)
	assert.Equal(t, u.DailyTokensUsed, u2.DailyTokensUsed, "reconciling an expired reservation does nothing")
}

func TestRedisErrors(t *testing.T) {
	srv, r := startRedis(t)
	ctx := t.Context()
	req := Request{ID: "r1", Tenant: "acme", Tokens: 1}
	_, err := r.Reserve(ctx, req)
	require.NoError(t, err)
	_, err = r.Reserve(ctx, req)
	require.ErrorIs(t, err, ErrDuplicateID)
	assert.False(t, r.Counters().FallbackActive, "a duplicate id is not a Redis failure")

	bad := req
	bad.Tenant = "ac{me}"
	_, err = r.Reserve(ctx, bad)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, r.Reconcile(ctx, "acme", "r\x00", 0), ErrInvalid)
	_, err = r.Usage(ctx, "", Limits{})
	require.ErrorIs(t, err, ErrInvalid)

	// A cancelled context still settles: a cancelled request must be.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, r.Reconcile(cancelled, "acme", "r1", 1))
	u, err := r.Usage(ctx, "acme", Limits{})
	require.NoError(t, err)
	assert.Zero(t, u.InFlight)

	srv.Kill()
	_, err = r.Usage(ctx, "acme", Limits{})
	require.ErrorIs(t, err, ErrUnavailable)

	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "closing twice is fine")
	_, err = r.Reserve(ctx, Request{ID: "r2", Tenant: "acme"})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, r.Reconcile(ctx, "acme", "r2", 0), ErrClosed)

	_, err = NewRedis(RedisConfig{URL: "http://nope"})
	require.Error(t, err)
	_, err = NewRedis(RedisConfig{URL: "redis://user:s3cret@127.0.0.1:bad/0"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret", "the error must not repeat the password")
	_, err = NewRedis(RedisConfig{URL: "redis://127.0.0.1:1/0", Timeout: -time.Second})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestRedisDownAtStart(t *testing.T) {
	// Nothing listens on the port: NewRedis works, the fallback decides.
	r := newTestRedis(t, RedisConfig{URL: "redis://127.0.0.1:1/0"})
	d, id := reserve(t, r, "acme", Limits{RPM: 1}, 1)
	require.True(t, d.Allowed)
	require.True(t, d.Fallback)
	d, _ = reserve(t, r, "acme", Limits{RPM: 1}, 1)
	require.False(t, d.Allowed)
	require.NoError(t, r.Reconcile(t.Context(), "acme", id, 1))
	c := r.Counters()
	assert.Equal(t, Counters{ErrorAllowed: 1, ErrorDenied: 1, FallbackActive: true}, c)
}
