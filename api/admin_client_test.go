package api_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

const testKey = "llmd-Ab3xYz9.s3cr3t-t0k3n"

// adminCall is what the fake admin server saw of one request.
type adminCall struct {
	method, path, auth string
	id                 string // the {id} or {tenant} path value
	body               map[string]any
}

// newAdminServer serves the /v1/admin routes with canned answers, records
// each request on the returned channel, and answers 401 to any request
// without "Bearer <testKey>".
func newAdminServer(t *testing.T) (*api.Client, <-chan adminCall) {
	t.Helper()
	calls := make(chan adminCall, 16)
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mux := http.NewServeMux()
	reply := func(status int, v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			c := adminCall{method: r.Method, path: r.URL.EscapedPath(), auth: r.Header.Get("Authorization")}
			c.id = r.PathValue("id")
			if r.Body != nil {
				b, _ := io.ReadAll(r.Body)
				if len(b) > 0 {
					assert.NoError(t, json.Unmarshal(b, &c.body))
				}
			}
			calls <- c
			if c.auth != "Bearer "+testKey {
				writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "invalid API key")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	info := api.KeyInfo{ID: "llmd-Ab3xYz9", Tenant: "acme", Name: "ci", Created: created}
	quota := api.QuotaInfo{Tenant: "acme", Tier: api.TierPaid,
		Limits:     api.QuotaLimits{RequestsPerMinute: 600, TokensPerMinute: 100000, Concurrency: 8},
		Overridden: []string{"concurrency"},
		Usage:      &api.QuotaUsage{InFlight: 2, RequestsAvailable: 598, TokensAvailable: 99000, DailyTokensUsed: 1234, Rejected: 5}}
	mux.Handle("POST /v1/admin/keys", reply(http.StatusCreated, api.KeyCreated{Key: testKey, KeyInfo: info}))
	mux.Handle("GET /v1/admin/keys", reply(http.StatusOK, api.KeyList{Keys: []api.KeyInfo{info}}))
	mux.Handle("DELETE /v1/admin/keys/{id}", reply(http.StatusOK, api.KeyInfo{ID: "llmd-Ab3xYz9", Tenant: "acme", Created: created, Revoked: &created}))
	mux.Handle("GET /v1/admin/tenants", reply(http.StatusOK, api.TenantList{Tenants: []api.TenantInfo{{ID: "acme", Tier: api.TierPaid, Created: created, Keys: 2}}}))
	mux.Handle("GET /v1/admin/quotas", reply(http.StatusOK, api.QuotaList{Quotas: []api.QuotaInfo{quota}}))
	mux.Handle("GET /v1/admin/quotas/{id}", reply(http.StatusOK, quota))
	mux.Handle("PUT /v1/admin/quotas/{id}", reply(http.StatusOK, quota))
	c := newClient(t, mux)
	c.SetAPIKey(testKey)
	return c, calls
}

func TestAdminMethods(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rpm, reset, tier := int64(0), int64(-1), api.TierEnterprise
	tests := map[string]struct {
		call     func(c *api.Client) (any, error)
		want     any
		wantCall adminCall
	}{
		"CreateKey": {
			call: func(c *api.Client) (any, error) {
				return c.CreateKey(t.Context(), api.KeyCreateRequest{Tenant: "acme", Tier: api.TierFree, Admin: true, Name: "ci"})
			},
			want: &api.KeyCreated{Key: testKey, KeyInfo: api.KeyInfo{ID: "llmd-Ab3xYz9", Tenant: "acme", Name: "ci", Created: created}},
			wantCall: adminCall{method: "POST", path: "/v1/admin/keys",
				body: map[string]any{"tenant": "acme", "tier": "free", "admin": true, "name": "ci"}},
		},
		"Keys": {
			call:     func(c *api.Client) (any, error) { return c.Keys(t.Context()) },
			want:     []api.KeyInfo{{ID: "llmd-Ab3xYz9", Tenant: "acme", Name: "ci", Created: created}},
			wantCall: adminCall{method: "GET", path: "/v1/admin/keys"},
		},
		"RevokeKey": {
			call:     func(c *api.Client) (any, error) { return c.RevokeKey(t.Context(), "llmd-Ab3xYz9") },
			want:     &api.KeyInfo{ID: "llmd-Ab3xYz9", Tenant: "acme", Created: created, Revoked: &created},
			wantCall: adminCall{method: "DELETE", path: "/v1/admin/keys/llmd-Ab3xYz9", id: "llmd-Ab3xYz9"},
		},
		"Tenants": {
			call:     func(c *api.Client) (any, error) { return c.Tenants(t.Context()) },
			want:     []api.TenantInfo{{ID: "acme", Tier: "paid", Created: created, Keys: 2}},
			wantCall: adminCall{method: "GET", path: "/v1/admin/tenants"},
		},
		"Quotas": {
			call:     func(c *api.Client) (any, error) { return c.Quotas(t.Context()) },
			wantCall: adminCall{method: "GET", path: "/v1/admin/quotas"},
		},
		"Quota": {
			call:     func(c *api.Client) (any, error) { return c.Quota(t.Context(), "acme") },
			wantCall: adminCall{method: "GET", path: "/v1/admin/quotas/acme", id: "acme"},
		},
		"SetQuota sends only set fields": {
			call: func(c *api.Client) (any, error) {
				return c.SetQuota(t.Context(), "acme", api.QuotaUpdate{Tier: &tier, RequestsPerMinute: &rpm, DailyTokens: &reset})
			},
			wantCall: adminCall{method: "PUT", path: "/v1/admin/quotas/acme", id: "acme",
				body: map[string]any{"tier": "enterprise", "rpm": 0.0, "daily_tokens": -1.0}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, calls := newAdminServer(t)
			got, err := tc.call(c)
			require.NoError(t, err)
			if tc.want != nil {
				require.Equal(t, tc.want, got)
			}
			call := <-calls
			tc.wantCall.auth = "Bearer " + testKey
			require.Equal(t, tc.wantCall, call)
		})
	}
}

func TestQuotaDecodes(t *testing.T) {
	c, _ := newAdminServer(t)
	q, err := c.Quota(t.Context(), "acme")
	require.NoError(t, err)
	require.Equal(t, &api.QuotaInfo{Tenant: "acme", Tier: "paid",
		Limits:     api.QuotaLimits{RequestsPerMinute: 600, TokensPerMinute: 100000, Concurrency: 8},
		Overridden: []string{"concurrency"},
		Usage:      &api.QuotaUsage{InFlight: 2, RequestsAvailable: 598, TokensAvailable: 99000, DailyTokensUsed: 1234, Rejected: 5}}, q)
	list, err := c.Quotas(t.Context())
	require.NoError(t, err)
	require.Equal(t, []api.QuotaInfo{*q}, list)
}

func TestAdminPathEscaping(t *testing.T) {
	for _, id := range []string{"a/b", "x y", "100%", "ü", "..a", "?q=1#f"} {
		t.Run(id, func(t *testing.T) {
			c, calls := newAdminServer(t)
			_, err := c.RevokeKey(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, id, (<-calls).id)
			_, err = c.Quota(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, id, (<-calls).id)
		})
	}
	c, calls := newAdminServer(t)
	for _, id := range []string{"", ".", ".."} {
		_, err := c.RevokeKey(t.Context(), id)
		require.Error(t, err)
		_, err = c.Quota(t.Context(), id)
		require.Error(t, err)
		_, err = c.SetQuota(t.Context(), id, api.QuotaUpdate{})
		require.Error(t, err)
	}
	require.Empty(t, calls, "an invalid id must not reach the server")
}

func TestAdminStatusErrors(t *testing.T) {
	calls := map[string]func(c *api.Client) error{
		"CreateKey": func(c *api.Client) error { _, err := c.CreateKey(t.Context(), api.KeyCreateRequest{}); return err },
		"Keys":      func(c *api.Client) error { _, err := c.Keys(t.Context()); return err },
		"RevokeKey": func(c *api.Client) error { _, err := c.RevokeKey(t.Context(), "k"); return err },
		"Tenants":   func(c *api.Client) error { _, err := c.Tenants(t.Context()); return err },
		"Quotas":    func(c *api.Client) error { _, err := c.Quotas(t.Context()); return err },
		"Quota":     func(c *api.Client) error { _, err := c.Quota(t.Context(), "t"); return err },
		"SetQuota":  func(c *api.Client) error { _, err := c.SetQuota(t.Context(), "t", api.QuotaUpdate{}); return err },
	}
	statuses := map[int]string{
		http.StatusUnauthorized: "invalid_api_key",
		http.StatusForbidden:    "admin_key_required",
		http.StatusNotFound:     "not_found",
	}
	for status, code := range statuses {
		c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, status, "invalid_request_error", code, http.StatusText(status))
		}))
		c.SetAPIKey(testKey)
		for name, call := range calls {
			t.Run(name+"/"+code, func(t *testing.T) {
				err := call(c)
				var se *api.StatusError
				require.ErrorAs(t, err, &se)
				require.Equal(t, status, se.StatusCode)
				require.Equal(t, code, se.Code)
			})
		}
	}
}

func TestAPIKeyHeader(t *testing.T) {
	auth := make(chan string, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Get("Authorization")
		_ = json.NewEncoder(w).Encode(api.ModelList{Object: "list"})
	})
	mux.HandleFunc("POST /v1/chat", func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Get("Authorization")
		startSSE(w)
		sse(w, nativeToken(1, "hi"))
		sse(w, nativeDone(api.NativeDone{FinishReason: "stop"}))
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Get("Authorization")
		startSSE(w)
		sse(w, "data: [DONE]\n\n")
	})
	c := newClient(t, mux)

	_, err := c.Models(t.Context())
	require.NoError(t, err)
	require.Empty(t, <-auth, "no key set: no header")

	c.SetAPIKey(testKey)
	_, err = c.Models(t.Context())
	require.NoError(t, err)
	require.Equal(t, "Bearer "+testKey, <-auth)
	_, err = c.Chat(t.Context(), api.NativeChatRequest{Model: "x"}, func(api.NativeDelta) error { return nil })
	require.NoError(t, err)
	require.Equal(t, "Bearer "+testKey, <-auth, "streamed native chat")
	err = c.ChatCompletionStream(t.Context(), api.ChatCompletionRequest{Model: "x"}, func(api.ChatCompletionChunk) error { return nil })
	require.NoError(t, err)
	require.Equal(t, "Bearer "+testKey, <-auth, "streamed OpenAI chat")

	c.SetAPIKey("")
	_, err = c.Models(t.Context())
	require.NoError(t, err)
	require.Empty(t, <-auth, "key cleared: no header")
}

func TestAPIKeyNotInErrors(t *testing.T) {
	t.Run("echoed by the server", func(t *testing.T) {
		c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": "unknown key " + key, "type": "invalid_request_error", "param": key, "code": "invalid_api_key"}})
		}))
		c.SetAPIKey(testKey)
		_, err := c.Keys(t.Context())
		var se *api.StatusError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "unknown key [redacted]", se.Message)
		require.NotContains(t, err.Error(), testKey)
		require.NotContains(t, se.Param, testKey)
	})
	t.Run("not a valid header value", func(t *testing.T) {
		c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Error("request sent with an invalid header")
		}))
		c.SetAPIKey(testKey + "\n")
		_, err := c.Keys(t.Context())
		require.Error(t, err)
		require.NotContains(t, err.Error(), testKey)
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		c, err := api.NewClient("http://"+addr, nil)
		require.NoError(t, err)
		c.SetAPIKey(testKey)
		_, err = c.Keys(t.Context())
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.NotContains(t, err.Error(), testKey)
	})
}

func TestUsage(t *testing.T) {
	cost, perM := 12.5, 0.75
	report := api.UsageReport{
		Since: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		By: "tenant", Tenant: "a&b c", Currency: "USD",
		Rows: []api.UsageRow{{Key: "a&b c", Requests: 10, Cancelled: 1, Errors: 2, Rejected: 3,
			InputTokens: 1000, CachedTokens: 400, OutputTokens: 500, Cost: &cost}},
		Total:        api.UsageRow{Requests: 10, Cancelled: 1, Errors: 2, Rejected: 3, InputTokens: 1000, CachedTokens: 400, OutputTokens: 500, Cost: &cost},
		GPUHourPrice: 2.5,
		OutputCosts:  []api.OutputCost{{Model: "sim/small", Tier: "paid", GPUs: 1, GPUHours: 24, OutputTokens: 500, CostPerMillion: &perM}},
	}
	tests := map[string]struct {
		q         api.UsageQuery
		wantQuery string // the raw query sent
	}{
		"no parameters": {},
		"every parameter": {
			q: api.UsageQuery{Tenant: "a&b c", Model: "org/m?x=1", Since: "7d",
				Until: "2026-03-02T00:00:00+01:00", By: "tenant"},
			wantQuery: "by=tenant&model=org%2Fm%3Fx%3D1&since=7d&tenant=a%26b+c&until=2026-03-02T00%3A00%3A00%2B01%3A00",
		},
		"some parameters": {
			q:         api.UsageQuery{Since: "24h", By: "day"},
			wantQuery: "by=day&since=24h",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			type request struct{ method, path, query, auth string }
			got := make(chan request, 1)
			mux := http.NewServeMux()
			mux.HandleFunc("/llmd/v1/admin/usage", func(w http.ResponseWriter, r *http.Request) {
				got <- request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization")}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(report)
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			// A base URL with a path: the query must not end up in it.
			c, err := api.NewClient(srv.URL+"/llmd/", srv.Client())
			require.NoError(t, err)
			c.SetAPIKey(testKey)

			r, err := c.Usage(t.Context(), tc.q)
			require.NoError(t, err)
			require.Equal(t, &report, r)
			require.Equal(t, request{"GET", "/llmd/v1/admin/usage", tc.wantQuery, "Bearer " + testKey}, <-got)
			require.Equal(t, srv.URL+"/llmd", c.BaseURL(), "the client's own base URL is unchanged")
		})
	}
}

func TestUsageStatusErrors(t *testing.T) {
	statuses := map[int]string{
		http.StatusBadRequest:   "invalid_parameter",
		http.StatusUnauthorized: "invalid_api_key",
		http.StatusForbidden:    "admin_key_required",
	}
	for status, code := range statuses {
		t.Run(code, func(t *testing.T) {
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeError(w, status, "invalid_request_error", code, "bad since "+r.URL.Query().Get("since"))
			}))
			c.SetAPIKey(testKey)
			r, err := c.Usage(t.Context(), api.UsageQuery{Since: "yesterday"})
			require.Nil(t, r)
			var se *api.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, status, se.StatusCode)
			require.Equal(t, code, se.Code)
			require.Equal(t, "bad since yesterday", se.Message)
		})
	}
}
