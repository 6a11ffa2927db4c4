package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// newFakeSnapshot serves GET /v1/admin/snapshot with s, checking keys like
// llmd: adminKey passes, userKey gets 403, others 401.
func newFakeSnapshot(t *testing.T, s api.Snapshot) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/snapshot", func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer " + adminKey:
		case "Bearer " + userKey:
			writeAPIError(w, http.StatusForbidden, "permission_denied", "this route needs an admin API key")
			return
		default:
			writeAPIError(w, http.StatusUnauthorized, "invalid_api_key", "invalid API key")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func testSnapshot() api.Snapshot {
	return api.Snapshot{
		Node: "node-a", Time: t0, Uptime: 90,
		Models: []api.ModelSnapshot{{EngineStats: api.EngineStats{
			Model: "sim/small", Executor: "simulated", BlocksTotal: 100, BlocksUsed: 80, BlocksCached: 10,
			Running: 1, Waiting: 1, WaitingByTier: map[string]int{"free": 1}, GeneratedTokens: 5000, Degrade: "pause_batch", DegradeLevel: 1,
		}, TTFTP50: 0.1, TTFTP95: 0.2}},
		Requests: []api.RequestSnapshot{
			{ID: "req_00112233445566778899aabbccddeeff", Tenant: "acme", Model: "sim/small", Tier: "paid", State: "decode",
				PromptTokens: 20, GeneratedTokens: 7, TTFT: 0.1, TokensPerSecond: 30, Age: 2, Resumable: true},
			{ID: "req_ffeeddccbbaa99887766554433221100", Tenant: "acme", Model: "sim/small", Tier: "free", State: "queued",
				PromptTokens: 5, Age: 1},
		},
		Tenants: []api.TenantSnapshot{{Tenant: "acme", Tier: "paid", Running: 1,
			Limits: api.QuotaLimits{RequestsPerMinute: 60}, Usage: api.QuotaUsage{RequestsAvailable: 15}}},
		GPUs: []api.GPUInfo{{Index: 0, Name: "H100 x1 (sim/small)", MemoryUsed: 40 << 30, MemoryTotal: 80 << 30, Simulated: true}},
	}
}

func TestTopOnce(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	srv := newFakeSnapshot(t, testSnapshot())
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "top", "--once"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Empty(t, stderr.String())
	out := stdout.String()
	require.NotContains(t, out, "\x1b", "plain text: no escape sequences")
	for _, want := range []string{
		"node node-a  up 1m30s  at 2026-03-01T12:00:00Z  (not clustered)",
		"sim/small  simulated  [########+.] 80%",
		"pause_batch",
		"MODEL      BATCH  FREE  PAID  ENTERPRISE\nsim/small  0/0    0/1   1/0   0/0",
		"0    H100 x1 (sim/small)  40.0/80.0   50%",
		"req_00112233445566778899aabbccddeeff  acme    sim/small  paid  decode",
		"req_ffeeddccbbaa99887766554433221100  acme    sim/small  free  queued",
		"acme    paid  1    45/60 75%  unlimited",
	} {
		require.Contains(t, out, want)
	}
	for i, l := range strings.Split(out, "\n") {
		require.LessOrEqual(t, len(l), 80, "line %d: %q", i, l)
	}

	// --json: the snapshot as llmd sent it.
	stdout.Reset()
	code = execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "top", "--json"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	var got api.Snapshot
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
	require.Equal(t, "node-a", got.Node)
	require.Len(t, got.Requests, 2)
}

// TestTopOnceCluster: a clustered node's snapshot says so on the first line
// and ends with its members.
func TestTopOnceCluster(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	s := testSnapshot()
	s.Cluster = []api.NodeInfo{
		{ID: "node-a", APIAddr: "10.0.0.1:8700", Models: []string{"sim/small"}, Status: "alive", Local: true,
			Load: map[string]api.NodeModelLoad{"sim/small": {Running: 1, Waiting: 1, KVUsage: 0.8}}, PrefixKeys: 12, Updated: t0},
		{ID: "node-b", APIAddr: "10.0.0.2:8700", Models: []string{"sim/mid"}, Status: "suspect",
			Load: map[string]api.NodeModelLoad{"sim/mid": {Running: 4, KVUsage: 0.25}}, Updated: t0.Add(-9 * time.Second)},
	}
	srv := newFakeSnapshot(t, s)
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "top", "--once"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	out := stdout.String()
	require.True(t, strings.HasPrefix(out,
		"node node-a  up 1m30s  at 2026-03-01T12:00:00Z  (cluster: 2 members, 1 alive)\n"), out)
	require.True(t, strings.HasSuffix(out, "\nCLUSTER\n"+
		"NODE           STATUS   API            RUN  WAIT  KV MAX  KEYS  UPDATED\n"+
		"node-a (this)  alive    10.0.0.1:8700  1    1     80%     12    0s ago\n"+
		"node-b         suspect  10.0.0.2:8700  4    0     25%     0     9s ago\n"+
		"\nCLUSTER MODELS\n"+
		"NODE           MODELS\n"+
		"node-a (this)  sim/small\n"+
		"node-b         sim/mid\n"), out)
}

func TestTopOnceErrors(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	srv := newFakeSnapshot(t, testSnapshot())
	addr := closedAddr(t)
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
	}{
		"no key": {[]string{"--addr", srv.URL},
			noKeyMsg(srv.URL)},
		"not an admin key": {[]string{"--addr", srv.URL, "--api-key", userKey},
			notAdminMsg},
		"no llmd": {[]string{"--addr", addr, "--api-key", adminKey},
			"llmctl: cannot reach llmd at http://" + addr + ": start it with \"make run\" or \"llmd\", or pass --addr\n"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := execute(t.Context(), append(tc.args, "top", "--once"), strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, exitFailure, code)
			require.Empty(t, stdout.String())
			require.Equal(t, tc.wantErr, stderr.String())
		})
	}
}

func TestTopUsage(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	srv := newFakeSnapshot(t, testSnapshot())
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "top", "--interval", "100ms"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "llmctl: --interval 100ms is below the minimum of 250ms\n")

	// Without --once, top needs a terminal; a buffer is not one.
	stderr.Reset()
	code = execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "top"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "llmctl: llmctl top needs a terminal on stdout; use --once to print one snapshot as plain text\n", stderr.String())
	require.Empty(t, stdout.String())
}

func TestIsTerminalWriter(t *testing.T) {
	require.False(t, isTerminalWriter(&bytes.Buffer{}))
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminalWriter(w), "a pipe")
	f, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminalWriter(f), "the null device")
}
