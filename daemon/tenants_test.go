package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/redistest"
	"github.com/llmd/llmd/store"
)

func userChatBody(user string) string {
	return `{"model":"sim/small","messages":[{"role":"user","content":"hello"}],"max_tokens":2,"user":"` + user + `"}`
}

// TestPerUserLimits: a tenant's per-user limit refuses one end user with a
// 429 that names the per-user limit, with Retry-After, while another user
// of the same tenant (and the same user named by the X-LLMD-User header on
// another tenant) is still served; the usage rows carry the user. Both
// quota backends enforce it; the Redis case skips without redis-server.
func TestPerUserLimits(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			mutate := func(*Config) {}
			if backend == "redis" {
				rs := redistest.Start(t)
				mutate = func(c *Config) { c.RedisURL = rs.URL(); c.QuotaTimeout = time.Second }
			}
			s := newStoreServer(t, mutate)
			key := makeKey(t, s, "acme", store.TierPaid, false)
			other := makeKey(t, s, "beta", store.TierPaid, false)
			setQuota(t, s, "acme", store.QuotaUpdate{RPM: i64(100), Capacity: store.CapacityUpdate{UserRPM: i64(2)}})
			base := startServer(t, s)
			c := testClient(t)

			for i := range 2 {
				resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, userChatBody("alice"))
				require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, b)
			}
			resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, userChatBody("alice"))
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
			e := errorOf(t, b)
			require.Equal(t, "requests", e["type"])
			require.Equal(t, "rate_limit_exceeded", e["code"])
			require.Contains(t, e["message"], `Per-user rate limit reached for user "alice" of tenant acme`)
			require.Contains(t, e["message"], "limit 2 per user")
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.Positive(t, ra)
			require.Equal(t, "2", resp.Header.Get("x-ratelimit-limit-requests"), "the headers are the per-user limit's")
			deniedID := resp.Header.Get("X-Request-Id")

			// Another user of acme is not limited by alice's use.
			resp, b = call(t, c, http.MethodPost, base+"/v1/chat/completions", key, userChatBody("bob"))
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			bobID := resp.Header.Get("X-Request-Id")

			// The header names the user when the body does not.
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions",
				strings.NewReader(chatBody("sim/small", 2)))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("X-LLMD-User", "alice")
			hresp, err := c.Do(req)
			require.NoError(t, err)
			_ = hresp.Body.Close()
			require.Equal(t, http.StatusTooManyRequests, hresp.StatusCode, "alice by header is still over her limit")

			// A user without a per-user limit (tenant beta sets none) is served.
			for range 3 {
				resp, b = call(t, c, http.MethodPost, base+"/v1/chat/completions", other, userChatBody("alice"))
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			}

			st := s.deps.Store
			require.Eventually(t, func() bool {
				ev, err := st.UsageEvent(context.Background(), bobID)
				return err == nil && ev.Status == store.UsageFinished
			}, 5*time.Second, 10*time.Millisecond)
			ev, err := st.UsageEvent(context.Background(), bobID)
			require.NoError(t, err)
			require.Equal(t, "bob", ev.User)
			require.Eventually(t, func() bool {
				ev, err := st.UsageEvent(context.Background(), deniedID)
				return err == nil && ev.User == "alice" && ev.Status == store.UsageRejected && ev.Reason == "quota_user_requests"
			}, 5*time.Second, 10*time.Millisecond, "the refused request's row names the user and the per-user limit")
		})
	}
}

// TestCapacityAdminRoute: PUT /v1/admin/quotas/{tenant} sets the capacity
// settings (as llmctl quota set --hot-shards, --user-rpm, --user-tpm,
// --reserved-tps -m sends them), GET shows them, a bad value is a 400, and
// 0 clears them.
func TestCapacityAdminRoute(t *testing.T) {
	s := newStoreServer(t, nil)
	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	base := startServer(t, s)
	c := testClient(t)

	resp, b := call(t, c, http.MethodPut, base+"/v1/admin/quotas/acme", admin,
		`{"hot_shards":8,"user_rpm":20,"user_tpm":40000,"reserved_tps":200,"reserved_model":"sim/small"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = call(t, c, http.MethodGet, base+"/v1/admin/quotas/acme", admin, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var q struct {
		Capacity map[string]any `json:"capacity"`
	}
	require.NoError(t, json.Unmarshal(b, &q))
	require.Equal(t, map[string]any{"hot_shards": 8.0, "user_rpm": 20.0, "user_tpm": 40000.0, "reserved_tps": 200.0,
		"reserved_model": "sim/small"}, q.Capacity)

	resp, b = call(t, c, http.MethodPut, base+"/v1/admin/quotas/acme", admin, `{"hot_shards":65}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	require.Contains(t, errorOf(t, b)["message"], "hot_shards 65")

	resp, b = call(t, c, http.MethodPut, base+"/v1/admin/quotas/acme", admin,
		`{"hot_shards":0,"user_rpm":0,"user_tpm":0,"reserved_tps":0,"reserved_model":""}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	q.Capacity = nil
	require.NoError(t, json.Unmarshal(b, &q))
	require.Nil(t, q.Capacity, "cleared: %s", b)
}
