package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// newStoreServer builds a sim server with a data directory and returns it
// unstarted.
func newStoreServer(t *testing.T, mutate func(*Config)) *Daemon {
	t.Helper()
	return newStoreServerLogged(t, testLogger(t), mutate)
}

// newStoreServerLogged is newStoreServer logging to logger.
func newStoreServerLogged(t *testing.T, logger *slog.Logger, mutate func(*Config)) *Daemon {
	t.Helper()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = 0.01
	cfg.DataDir = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := Open(cfg, logger)
	require.NoError(t, err)
	return s
}

// makeKey creates a key directly in the server's store.
func makeKey(t *testing.T, s *Daemon, tenant string, tier store.Tier, admin bool) string {
	t.Helper()
	ctx := context.Background()
	_, err := s.deps.Store.EnsureTenant(ctx, tenant, tier)
	require.NoError(t, err)
	secret, _, err := s.deps.Store.CreateKey(ctx, tenant, admin, "test")
	require.NoError(t, err)
	return secret
}

// call sends one request with an optional bearer key and returns the status
// and body.
func call(t *testing.T, c *http.Client, method, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp, buf.Bytes()
}

// routePath turns a route pattern into a concrete path and method.
func routePath(rt server.RouteInfo) (method, path string) {
	pattern := rt.Pattern
	if m, p, ok := strings.Cut(pattern, " "); ok {
		method, pattern = m, p
	}
	if method == "" {
		method = rt.Method
	}
	if method == "" {
		method = http.MethodGet
	}
	path = strings.NewReplacer("{id...}", "sim/small", "{id}", "llmd-nothing", "{tenant}", "local").Replace(pattern)
	if path == "/" {
		path = "/no/such/route"
	}
	return method, path
}

// TestRouteTablePolicies is SE-1: every route has a policy; without a key
// every route but the public ones answers 401; a user key gets 403 on the
// admin routes; an admin key passes everywhere. A route added without a
// policy fails here.
func TestRouteTablePolicies(t *testing.T) {
	s := newStoreServer(t, nil)
	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	user := makeKey(t, s, "acme", store.TierPaid, false)
	base := startServer(t, s)
	c := testClient(t)

	public := map[string]bool{"/healthz": true, "/readyz": true}
	for _, rt := range s.srv.Routes() {
		require.NotEqual(t, "unset", rt.Policy, "route %s has no access policy", rt.Pattern)
		method, path := routePath(rt)
		body := ""
		if method == http.MethodPost || method == http.MethodPut {
			body = "{}"
		}
		t.Run(method+" "+path, func(t *testing.T) {
			resp, b := call(t, c, method, base+path, "", body)
			if public[path] {
				require.Equal(t, "public", rt.Policy)
				require.NotEqual(t, http.StatusUnauthorized, resp.StatusCode)
				return
			}
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", b)
			switch {
			case strings.HasPrefix(path, "/api/"): // Ollama's error shape
				require.Contains(t, jsonMap(t, string(b))["error"], "API key", "%s", b)
			case strings.HasPrefix(path, "/v1/messages"): // Anthropic's
				require.Equal(t, "authentication_error", jsonMap(t, string(b))["error"].(map[string]any)["type"], "%s", b)
			default:
				require.Equal(t, "invalid_api_key", errorOf(t, b)["code"])
			}

			resp, b = call(t, c, method, base+path, "llmd-not-a-real-key", body)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", b)

			resp, b = call(t, c, method, base+path, user, body)
			if rt.Policy == "admin" {
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
			} else {
				require.NotContains(t, []int{401, 403}, resp.StatusCode, "%s", b)
			}
			resp, b = call(t, c, method, base+path, admin, body)
			require.NotContains(t, []int{401, 403}, resp.StatusCode, "%s", b)
		})
	}
}

// TestAnonymousUntilFirstKey: with no key, a loopback client is the local
// tenant (and may create the first admin key); from then on every request
// needs a key, including one created offline in the same data directory.
func TestAnonymousUntilFirstKey(t *testing.T) {
	s := newStoreServer(t, nil)
	base := startServer(t, s)
	c := testClient(t)

	resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", "",
		`{"model":"sim/small","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	resp, b = call(t, c, http.MethodPost, base+"/v1/admin/keys", "", `{"admin":true}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	key := jsonMap(t, string(b))["key"].(string)
	require.True(t, strings.HasPrefix(key, "llmd-"))

	resp, _ = call(t, c, http.MethodGet, base+"/v1/models", "", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the door closes once a key exists")
	resp, b = call(t, c, http.MethodGet, base+"/v1/models", key, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	// Revoked: refused like an unknown key.
	resp, b = call(t, c, http.MethodGet, base+"/v1/admin/keys", key, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	id := jsonMap(t, string(b))["keys"].([]any)[0].(map[string]any)["id"].(string)
	require.NotContains(t, string(b), key, "a listing never holds the key")
	second := makeKey(t, s, "ops", store.TierPaid, true)
	resp, b = call(t, c, http.MethodDelete, base+"/v1/admin/keys/"+id, second, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, _ = call(t, c, http.MethodGet, base+"/v1/models", key, "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestOfflineKeyClosesAnonymousAccess(t *testing.T) {
	s := newStoreServer(t, nil)
	base := startServer(t, s)
	c := testClient(t)
	resp, _ := call(t, c, http.MethodGet, base+"/v1/models", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// Another process (llmctl keys create --data-dir) writes a key.
	other, err := store.Open(context.Background(), s.cfg.DataDir)
	require.NoError(t, err)
	_, err = other.EnsureTenant(context.Background(), "ops", store.TierPaid)
	require.NoError(t, err)
	_, _, err = other.CreateKey(context.Background(), "ops", true, "")
	require.NoError(t, err)
	require.NoError(t, other.Close())

	resp, _ = call(t, c, http.MethodGet, base+"/v1/models", "", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestNonLoopbackNeedsAKey: llmd refuses a non-loopback listener while no
// key exists, unless insecure.
func TestNonLoopbackNeedsAKey(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.Listen = "0.0.0.0:0"
	cfg.DataDir = dir
	_, err := Open(cfg, nil)
	require.ErrorContains(t, err, "no API key exists yet")

	cfg.DataDir = ""
	require.ErrorContains(t, cfg.Validate(), "not a loopback address")

	cfg.DataDir, cfg.Insecure = dir, true
	s, err := Open(cfg, nil)
	require.NoError(t, err)
	closeServer(s)

	st, err := store.Open(context.Background(), dir)
	require.NoError(t, err)
	_, err = st.EnsureTenant(context.Background(), "ops", store.TierPaid)
	require.NoError(t, err)
	_, _, err = st.CreateKey(context.Background(), "ops", true, "")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	cfg.Insecure = false
	s, err = Open(cfg, nil)
	require.NoError(t, err, "with a key, a non-loopback listener is fine")
	closeServer(s)
}

// closeServer releases what Open opened for a daemon that never ran.
func closeServer(s *Daemon) {
	if s.deps.Usage != nil {
		stopWriter(s.deps.Usage)
	}
	s.deps.Close()
}

// TestKeyNeverInDatabaseOrLogs is SE-2 at the daemon level: after creating
// and using keys through the API, no file of the data directory and no log
// line holds a key.
func TestKeyNeverInDatabaseOrLogs(t *testing.T) {
	var logs syncBuffer
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = 0.01
	cfg.DataDir = t.TempDir()
	s, err := Open(cfg, newBufferLogger(&logs))
	require.NoError(t, err)
	base := startServer(t, s)
	c := testClient(t)

	var keys []string
	resp, b := call(t, c, http.MethodPost, base+"/v1/admin/keys", "", `{"admin":true,"tenant":"ops"}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	admin := jsonMap(t, string(b))["key"].(string)
	keys = append(keys, admin)
	for _, tenant := range []string{"acme", "globex"} {
		resp, b := call(t, c, http.MethodPost, base+"/v1/admin/keys", admin, `{"tenant":"`+tenant+`"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
		keys = append(keys, jsonMap(t, string(b))["key"].(string))
	}
	for _, k := range keys {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", k,
			`{"model":"sim/small","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	call(t, c, http.MethodGet, base+"/v1/models", keys[1]+"x", "")

	files, err := filepath.Glob(filepath.Join(cfg.DataDir, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, k := range keys {
		secretPart := k[12:] // after the displayed id
		require.NotContains(t, logs.String(), secretPart)
		for _, f := range files {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.False(t, bytes.Contains(data, []byte(secretPart)), "%s holds a key", f)
		}
	}
}
