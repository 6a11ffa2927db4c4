package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// Keys known to fakeAdmin: their display IDs are the part before the dot.
const (
	adminKey = "llmd-ADMIN001.admin-s3cr3t"
	userKey  = "llmd-USER0001.user-s3cr3t"
	newKey   = "llmd-NEW00001.fresh-s3cr3t"
)

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t1 = time.Date(2026, 3, 2, 8, 30, 5, 0, time.UTC)
)

// fakeAdmin mimics llmd's /v1/admin routes and its key checks: a request
// without "Bearer <key>" of a known key gets 401, a non-admin key 403.
// With bootstrap set it behaves as an llmd with no key yet: POST
// /v1/admin/keys needs none.
type fakeAdmin struct {
	bootstrap bool

	mu sync.Mutex
	// bodies holds the raw JSON body of every POST and PUT, in order.
	bodies []map[string]any
	// requests counts the requests that reached a handler.
	requests int
}

func newFakeAdmin(t *testing.T, f *fakeAdmin) *httptest.Server {
	t.Helper()
	keys := []api.KeyInfo{
		{ID: "llmd-ADMIN001", Tenant: "default", Admin: true, Name: "ops", Created: t0, LastUsed: &t1},
		{ID: "llmd-USER0001", Tenant: "acme", Created: t1},
		{ID: "llmd-OLD00001", Tenant: "acme", Name: "old ci", Created: t0, Revoked: &t1},
	}
	quotas := []api.QuotaInfo{
		{Tenant: "acme", Tier: api.TierEnterprise,
			Limits:     api.QuotaLimits{RequestsPerMinute: 600, TokensPerMinute: 0, Concurrency: 8, DailyTokens: 1_000_000},
			Overridden: []string{"tpm", "daily_tokens"},
			Usage:      &api.QuotaUsage{InFlight: 2, RequestsAvailable: 598, TokensAvailable: 0, DailyTokensUsed: 1234, Rejected: 5}},
		{Tenant: "default", Tier: api.TierPaid,
			Limits: api.QuotaLimits{RequestsPerMinute: 60, TokensPerMinute: 40000, Concurrency: 4},
			Usage:  &api.QuotaUsage{RequestsAvailable: 60, TokensAvailable: 40000}},
	}
	mux := http.NewServeMux()
	// handle wraps h with the key checks of llmd.
	handle := func(pattern string, admin bool, h func(w http.ResponseWriter, r *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.requests++
			f.mu.Unlock()
			auth := r.Header.Get("Authorization")
			bootstrap := f.bootstrap && auth == "" && r.Method == http.MethodPost
			switch {
			case bootstrap:
			case auth != "Bearer "+adminKey && auth != "Bearer "+userKey:
				// An llmd that echoes the refused key: llmctl must not print it.
				writeAPIError(w, http.StatusUnauthorized, "invalid_api_key",
					fmt.Sprintf("invalid API key %q", strings.TrimPrefix(auth, "Bearer ")))
				return
			case admin && auth != "Bearer "+adminKey:
				writeAPIError(w, http.StatusForbidden, "admin_key_required", "this route needs an admin key")
				return
			}
			if r.Method == http.MethodPost || r.Method == http.MethodPut {
				var body map[string]any
				if !assert.NoError(t, json.NewDecoder(r.Body).Decode(&body)) {
					return
				}
				f.mu.Lock()
				f.bodies = append(f.bodies, body)
				f.mu.Unlock()
			}
			h(w, r)
		})
	}
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	handle("GET /v1/models", false, func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, api.ModelList{Object: "list", Data: []api.Model{{ID: "sim/small"}}})
	})
	handle("POST /v1/admin/keys", true, func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		body := f.bodies[len(f.bodies)-1]
		f.mu.Unlock()
		kc := api.KeyCreated{Key: newKey, KeyInfo: api.KeyInfo{ID: "llmd-NEW00001", Tenant: "default", Created: t1}}
		if s, ok := body["tenant"].(string); ok {
			kc.Tenant = s
		}
		kc.Admin, _ = body["admin"].(bool)
		kc.Name, _ = body["name"].(string)
		reply(w, http.StatusCreated, kc)
	})
	handle("GET /v1/admin/keys", true, func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, api.KeyList{Keys: keys})
	})
	handle("DELETE /v1/admin/keys/{id}", true, func(w http.ResponseWriter, r *http.Request) {
		i := slices.IndexFunc(keys, func(k api.KeyInfo) bool { return k.ID == r.PathValue("id") })
		if i < 0 {
			writeAPIError(w, http.StatusNotFound, "key_not_found", "not found")
			return
		}
		k := keys[i]
		k.Revoked = &t1
		reply(w, http.StatusOK, k)
	})
	handle("GET /v1/admin/tenants", true, func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, api.TenantList{Tenants: []api.TenantInfo{
			{ID: "acme", Tier: api.TierEnterprise, Created: t0, Keys: 1},
			{ID: "default", Tier: api.TierPaid, Created: t0, Keys: 12},
		}})
	})
	handle("GET /v1/admin/quotas", true, func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, api.QuotaList{Quotas: quotas})
	})
	handle("GET /v1/admin/quotas/{tenant}", true, func(w http.ResponseWriter, r *http.Request) {
		i := slices.IndexFunc(quotas, func(q api.QuotaInfo) bool { return q.Tenant == r.PathValue("tenant") })
		if i < 0 {
			writeAPIError(w, http.StatusNotFound, "tenant_not_found", "not found")
			return
		}
		reply(w, http.StatusOK, quotas[i])
	})
	handle("PUT /v1/admin/quotas/{tenant}", true, func(w http.ResponseWriter, r *http.Request) {
		q := quotas[0]
		q.Tenant = r.PathValue("tenant")
		reply(w, http.StatusOK, q)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// lastBody returns the body of the last POST or PUT.
func (f *fakeAdmin) lastBody(t *testing.T) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.bodies, "no POST or PUT reached llmd")
	return f.bodies[len(f.bodies)-1]
}

func (f *fakeAdmin) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// requireNoKey fails when any key appears in s.
func requireNoKey(t *testing.T, s string) {
	t.Helper()
	for _, k := range []string{adminKey, userKey, newKey, "s3cr3t"} {
		require.NotContains(t, s, k)
	}
}

func TestKeysCreate(t *testing.T) {
	tests := map[string]struct {
		args      []string
		bootstrap bool
		noEnv     bool // clear LLMD_API_KEY
		wantBody  map[string]any
		wantNote  string
	}{
		"admin key": {
			args:     []string{"--api-key", adminKey, "keys", "create", "--admin", "--name", "ops 2"},
			wantBody: map[string]any{"admin": true, "name": "ops 2"},
			wantNote: "created admin key llmd-NEW00001 for tenant \"default\"; store it now, it will not be shown again\n",
		},
		"tenant and tier": {
			args:     []string{"--api-key", adminKey, "keys", "create", "--tenant", "acme", "--tier", "batch"},
			wantBody: map[string]any{"tenant": "acme", "tier": "batch"},
			wantNote: "created key llmd-NEW00001 for tenant \"acme\"; store it now, it will not be shown again\n",
		},
		"first key without a key": {
			noEnv:     true,
			args:      []string{"keys", "create", "--admin", "--no-save"}, // saving: TestKeysCreateSaves
			bootstrap: true,
			wantBody:  map[string]any{"admin": true},
			wantNote:  "created admin key llmd-NEW00001 for tenant \"default\"; store it now, it will not be shown again\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.noEnv {
				t.Setenv("LLMD_API_KEY", "")
			}
			f := &fakeAdmin{bootstrap: tc.bootstrap}
			srv := newFakeAdmin(t, f)
			out, errOut, err := runCmd(t, "", append([]string{"--addr", srv.URL}, tc.args...)...)
			require.NoError(t, err)
			require.Equal(t, newKey+"\n", out, "the key alone on stdout")
			require.Equal(t, tc.wantNote, errOut)
			require.Equal(t, tc.wantBody, f.lastBody(t))
		})
	}
}

func TestAPIKeyFromEnv(t *testing.T) {
	f := &fakeAdmin{}
	srv := newFakeAdmin(t, f)
	t.Setenv("LLMD_API_KEY", adminKey+"\n") // as from KEY=$(cat file) with a newline kept
	out, _, err := runCmd(t, "", "--addr", srv.URL, "keys", "create")
	require.NoError(t, err)
	require.Equal(t, newKey+"\n", out)

	// --api-key wins over the environment, even when empty.
	var errOut bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", userKey, "keys", "list"}, strings.NewReader(""), io.Discard, &errOut)
	require.Equal(t, exitFailure, code)
	require.Equal(t, notAdminMsg, errOut.String())
	errOut.Reset()
	code = execute(t.Context(), []string{"--addr", srv.URL, "--api-key", "", "keys", "list"}, strings.NewReader(""), io.Discard, &errOut)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "llmctl: llmd at "+srv.URL+" needs an API key: save one with \"llmctl login\" (or pass --api-key, set LLMD_API_KEY)\n", errOut.String())
}

func TestAPIKeyNotInHelp(t *testing.T) {
	t.Setenv("LLMD_API_KEY", adminKey)
	for _, args := range [][]string{{"--help"}, {"keys", "create", "--help"}, {"quota", "set", "--help"}} {
		out, errOut, err := runCmd(t, "", args...)
		require.NoError(t, err)
		require.Contains(t, out, "--api-key")
		requireNoKey(t, out+errOut)
	}
}

func TestKeysList(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "keys", "list")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"ID             TENANT   ADMIN  NAME    CREATED               LAST USED             REVOKED\n"+
		"llmd-ADMIN001  default  yes    ops     2026-03-01T12:00:00Z  2026-03-02T08:30:05Z  -\n"+
		"llmd-USER0001  acme     no     -       2026-03-02T08:30:05Z  never                 -\n"+
		"llmd-OLD00001  acme     no     old ci  2026-03-01T12:00:00Z  never                 2026-03-02T08:30:05Z\n", out)

	out, _, err = runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "keys", "list", "--json")
	require.NoError(t, err)
	var list api.KeyList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Keys, 3)
	require.Equal(t, api.KeyInfo{ID: "llmd-OLD00001", Tenant: "acme", Name: "old ci", Created: t0, Revoked: &t1}, list.Keys[2])
	requireNoKey(t, out)
}

func TestKeysRevoke(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "keys", "revoke", "llmd-USER0001")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, "revoked key llmd-USER0001 of tenant \"acme\"\n", out)

	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "keys", "revoke", "llmd-NOPE"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout.String())
	require.Equal(t, "llmctl: no key with ID \"llmd-NOPE\": see the IDs with \"llmctl keys list\"\n", stderr.String())
}

func TestKeysRevokeRefusesOwnKey(t *testing.T) {
	f := &fakeAdmin{}
	srv := newFakeAdmin(t, f)
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "keys", "revoke", adminKey},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitUsage, code)
	require.Equal(t, "llmctl: give the key's ID (see \"llmctl keys list\"), not the key itself\n"+
		"Run 'llmctl keys revoke --help' for usage.\n", stderr.String())
	require.Zero(t, f.requestCount())
}

func TestKeysCreateOffline(t *testing.T) {
	// No llmd: the offline path must not send a request.
	addr := closedAddr(t)
	orig := createKeyOffline // set in builds with the store
	t.Cleanup(func() { createKeyOffline = orig })
	t.Run("not in this build", func(t *testing.T) {
		createKeyOffline = nil
		var stdout, stderr bytes.Buffer
		code := execute(t.Context(), []string{"--addr", addr, "keys", "create", "--data-dir", t.TempDir()},
			strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, exitFailure, code)
		require.Empty(t, stdout.String())
		require.Equal(t, "llmctl: offline key creation is not available in this build\n", stderr.String())
	})
	t.Run("with the store", func(t *testing.T) {
		dir := t.TempDir()
		type call struct {
			dir string
			req api.KeyCreateRequest
		}
		var got []call
		createKeyOffline = func(ctx context.Context, dataDir string, req api.KeyCreateRequest) (api.KeyCreated, error) {
			got = append(got, call{dataDir, req})
			return api.KeyCreated{Key: newKey, KeyInfo: api.KeyInfo{ID: "llmd-NEW00001", Tenant: "ops", Admin: true, Created: t1}}, nil
		}
		out, errOut, err := runCmd(t, "", "--addr", addr, "keys", "create", "--data-dir", dir, "--admin", "--tenant", "ops")
		require.NoError(t, err)
		require.Equal(t, newKey+"\n", out)
		require.Equal(t, "created admin key llmd-NEW00001 for tenant \"ops\"; store it now, it will not be shown again\n", errOut)
		require.Equal(t, []call{{dir, api.KeyCreateRequest{Tenant: "ops", Admin: true}}}, got)
	})
}

// TestAdminCommandErrors runs every admin command against llmd with no key,
// a wrong key, a key that is not an admin key, and no llmd at all.
func TestAdminCommandErrors(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	commands := [][]string{
		{"keys", "create"},
		{"keys", "list"},
		{"keys", "list", "--json"},
		{"keys", "revoke", "llmd-USER0001"},
		{"tenants", "list"},
		{"quota", "list"},
		{"quota", "get", "acme"},
		{"quota", "set", "acme", "--rpm", "1"},
	}
	const wrongKey = "llmd-WRONG001.wrong-s3cr3t"
	srv := newFakeAdmin(t, &fakeAdmin{})
	addr := closedAddr(t)
	cases := map[string]struct {
		global  []string
		wantErr string
	}{
		"no key": {global: []string{"--addr", srv.URL},
			wantErr: noKeyMsg(srv.URL)},
		"wrong key": {global: []string{"--addr", srv.URL, "--api-key", wrongKey},
			wantErr: "llmctl: llmd refused the API key (from --api-key): invalid API key \"[redacted]\"; " +
				"pass a valid one with --api-key or LLMD_API_KEY, or save one with \"llmctl login\"\n"},
		"not an admin key": {global: []string{"--addr", srv.URL, "--api-key", userKey},
			wantErr: notAdminMsg},
		"no llmd": {global: []string{"--addr", addr, "--api-key", adminKey},
			wantErr: "llmctl: cannot reach llmd at http://" + addr + ": start it with \"make run\" or \"llmd\", or pass --addr\n"},
	}
	for name, tc := range cases {
		for _, cmd := range commands {
			t.Run(name+"/"+strings.Join(cmd, " "), func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				code := execute(t.Context(), append(slices.Clone(tc.global), cmd...), strings.NewReader(""), &stdout, &stderr)
				require.Equal(t, exitFailure, code)
				require.Empty(t, stdout.String())
				require.Equal(t, tc.wantErr, stderr.String())
				requireNoKey(t, stderr.String())
				require.NotContains(t, stderr.String(), "WRONG001.wrong")
			})
		}
	}
}

// TestUnauthorizedNonAdmin: a 401 on any route, not only the admin ones,
// says how to pass a key.
func TestUnauthorizedNonAdmin(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	srv := newFakeAdmin(t, &fakeAdmin{})
	var stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "models"}, strings.NewReader(""), io.Discard, &stderr)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "llmctl: llmd at "+srv.URL+" needs an API key: save one with \"llmctl login\" (or pass --api-key, set LLMD_API_KEY)\n", stderr.String())

	// A non-admin key is enough for the models.
	out, _, err := runCmd(t, "", "--addr", srv.URL, "--api-key", userKey, "models")
	require.NoError(t, err)
	require.Contains(t, out, "sim/small")
}

// TestKeysRevokeLastAdminNeedsForce (issue 18): the last active admin key
// is revoked only with --force, with a warning.
func TestKeysRevokeLastAdminNeedsForce(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "keys", "revoke", "llmd-ADMIN001"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), "llmd-ADMIN001 is the last active admin key")
	require.Contains(t, stderr.String(), "--force")

	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "keys", "revoke", "--force", "llmd-ADMIN001")
	require.NoError(t, err)
	require.Equal(t, "revoked key llmd-ADMIN001 of tenant \"default\"\n", out)
	require.Contains(t, errOut, "warning: no active admin key is left")
}
