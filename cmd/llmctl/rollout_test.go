package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// rolloutCall is a request the fake rollout routes received.
type rolloutCall struct {
	Method, Path, Query string
	ContentType         string
	Body                string
}

// fakeRollouts serves llmd's rollout routes with canned answers, checking
// keys like llmd's admin routes (adminOnly) and recording every request.
// Alias "nope" does not exist (404).
type fakeRollouts struct {
	list   api.RolloutList
	report api.ShadowReport

	mu    sync.Mutex
	calls []rolloutCall
}

func newFakeRollouts(t *testing.T, f *fakeRollouts) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	// handle records the request, checks the key and the alias, then
	// calls h with the raw body.
	handle := func(pattern string, h func(w http.ResponseWriter, r *http.Request, body []byte)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if !assert.NoError(t, err) {
				return
			}
			f.mu.Lock()
			f.calls = append(f.calls, rolloutCall{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
				ContentType: r.Header.Get("Content-Type"), Body: string(body)})
			f.mu.Unlock()
			if !adminOnly(w, r) {
				return
			}
			if r.PathValue("alias") == "nope" {
				writeAPIError(w, http.StatusNotFound, "invalid_request_error", "no alias nope in the models config")
				return
			}
			h(w, r, body)
		})
	}
	status := func(alias string) api.CanaryStatus {
		for _, c := range f.list.Aliases {
			if c.Alias == alias {
				return c
			}
		}
		return api.CanaryStatus{Alias: alias, State: "none"}
	}
	handle("GET /v1/admin/models/rollouts", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		reply(w, f.list)
	})
	handle("PUT /v1/admin/models/aliases/{alias}/canary", func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req api.CanaryRequest
		require.NoError(t, json.Unmarshal(body, &req))
		st := status(r.PathValue("alias"))
		st.Canary, st.Percent, st.State, st.Reason, st.RolledBackAt = req.Version, req.Percent, "running", "", nil
		reply(w, st)
	})
	handle("DELETE /v1/admin/models/aliases/{alias}/canary", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		st := status(r.PathValue("alias"))
		st.Canary, st.Percent, st.State, st.CanaryStats = "", nil, "none", api.VersionStats{}
		reply(w, st)
	})
	handle("PUT /v1/admin/models/aliases/{alias}/shadow", func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req api.ShadowRequest
		require.NoError(t, json.Unmarshal(body, &req))
		st := status(r.PathValue("alias"))
		st.Shadow, st.ShadowPercent = req.Version, req.Percent
		reply(w, st)
	})
	handle("DELETE /v1/admin/models/aliases/{alias}/shadow", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		st := status(r.PathValue("alias"))
		st.Shadow, st.ShadowPercent = "", 0
		reply(w, st)
	})
	handle("POST /v1/admin/models/aliases/{alias}/promote", func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req api.PromoteRequest
		require.NoError(t, json.Unmarshal(body, &req))
		st := status(r.PathValue("alias"))
		res := api.PromoteResult{Alias: st.Alias, Stable: st.Canary, Previous: st.Stable}
		parse := func(v string) *time.Time {
			if v == "" {
				return nil
			}
			tm, err := parseRolloutDate("date", v)
			require.NoError(t, err)
			return &tm
		}
		res.Deprecated, res.Sunset = parse(req.Deprecate), parse(req.Sunset)
		reply(w, res)
	})
	handle("PUT /v1/admin/models/config", func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), "broken") {
			writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "models config: aliases.flagship.version \"zzz\": no such model")
			return
		}
		reply(w, api.ModelsApplied{Loaded: []string{"sim/flagship-2026-11-15", "sim/small"}, Unloaded: []string{"sim/old"},
			Names: []string{"flagship", "sim/flagship-2026-10-01", "sim/flagship-2026-11-15", "sim/small"}, Saved: true})
	})
	handle("GET /v1/admin/models/shadow/report", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		rep := f.report
		rep.Alias, rep.ShadowModel = r.URL.Query().Get("alias"), r.URL.Query().Get("shadow_model")
		reply(w, rep)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// requests returns the requests received so far.
func (f *fakeRollouts) requests() []rolloutCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// testRollouts is a fake llmd with three aliases: flagship with a running
// canary and a shadow, small whose canary was rolled back, and mini with
// neither.
func testRollouts() *fakeRollouts {
	return &fakeRollouts{
		list: api.RolloutList{Aliases: []api.CanaryStatus{
			{Alias: "flagship", Stable: "sim/flagship-2026-10-01", Canary: "sim/flagship-2026-11-15",
				Percent: map[string]float64{"free": 5, "paid": 1, "enterprise": 0}, State: "running",
				StableStats: api.VersionStats{Model: "sim/flagship-2026-10-01", Requests: 12345, ErrorRate: 0.0012,
					LengthRate: 0.031, CancelRate: 0.004, TTFTP50Ms: 120.5, TTFTP95Ms: 410, ITLP50Ms: 21.2, ITLP95Ms: 35.75},
				CanaryStats: api.VersionStats{Model: "sim/flagship-2026-11-15", Requests: 321, ErrorRate: 0.0031,
					LengthRate: 0.0125, CancelRate: 0, TTFTP50Ms: 98.25, TTFTP95Ms: 380.5, ITLP50Ms: 19, ITLP95Ms: 30.1},
				Shadow: "sim/flagship-2026-12-01", ShadowPercent: 10},
			{Alias: "small", Stable: "sim/small-2026-09-01", Canary: "sim/small-2026-11-01",
				Percent: map[string]float64{"paid": 50, "batch": 2.5}, State: "rolled_back",
				Reason: "error rate 4.10% over the stable's 0.20%", RolledBackAt: &t1,
				StableStats: api.VersionStats{Model: "sim/small-2026-09-01", Requests: 2000, ErrorRate: 0.002, TTFTP50Ms: 10, TTFTP95Ms: 20, ITLP50Ms: 2, ITLP95Ms: 3},
				CanaryStats: api.VersionStats{Model: "sim/small-2026-11-01", Requests: 100, ErrorRate: 0.041, TTFTP50Ms: 11, TTFTP95Ms: 25, ITLP50Ms: 2.5, ITLP95Ms: 4}},
			{Alias: "mini", Stable: "sim/mini", State: "none"},
		}},
		report: api.ShadowReport{
			Since: time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC),
			Until: time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC),
			Rows: []api.ShadowSummary{
				{Alias: "flagship", PrimaryModel: "sim/flagship-2026-10-01", ShadowModel: "sim/flagship-2026-11-15",
					Runs: 1200, ShadowErrors: 12, ShadowSkipped: 3, Greedy: 1100, Compared: 1000, ExactMatches: 830,
					MeanEditDistance: 2.413, PrimaryTTFTP50Ms: 120, ShadowTTFTP50Ms: 135.25, PrimaryTTFTP95Ms: 400.5,
					ShadowTTFTP95Ms: 512, PrimaryITLMeanMs: 21.5, ShadowITLMeanMs: 23.04, PrimaryTokensMean: 180.2,
					ShadowTokensMean: 176.9, Scored: 40, MeanScore: 0.8725},
				{Alias: "small", PrimaryModel: "sim/small-2026-09-01", ShadowModel: "sim/small-2026-11-01", Runs: 5},
			},
		},
	}
}

// runRollout runs llmctl with the admin key against srv and returns its
// exit status, stdout and stderr.
func runRollout(t *testing.T, srv *httptest.Server, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	all := append([]string{"--addr", srv.URL, "--api-key", adminKey}, args...)
	code := execute(t.Context(), all, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

const flagshipBlock = "" +
	"alias:    flagship\n" +
	"stable:   sim/flagship-2026-10-01\n" +
	"canary:   sim/flagship-2026-11-15\n" +
	"state:    running\n" +
	"percent:  free 5%, paid 1%, enterprise 0%\n" +
	"shadow:   sim/flagship-2026-12-01 (10% of requests copied)\n" +
	"\n" +
	"          MODEL                    REQUESTS  ERRORS  TTFT p50  TTFT p95  ITL p50  ITL p95  LENGTH  CANCELLED\n" +
	"  stable  sim/flagship-2026-10-01  12,345    0.12%   120.5ms   410.0ms   21.2ms   35.8ms   3.10%   0.40%\n" +
	"  canary  sim/flagship-2026-11-15  321       0.31%   98.2ms    380.5ms   19.0ms   30.1ms   1.25%   0.00%\n"

func TestRolloutCanaryStatus(t *testing.T) {
	f := testRollouts()
	srv := newFakeRollouts(t, f)
	want := flagshipBlock + "\n" +
		"alias:    small\n" +
		"stable:   sim/small-2026-09-01\n" +
		"canary:   sim/small-2026-11-01\n" +
		"state:    rolled back at 2026-03-02T08:30:05Z: error rate 4.10% over the stable's 0.20%\n" +
		"percent:  paid 50%, batch 2.5%\n" +
		"shadow:   none\n" +
		"\n" +
		"          MODEL                 REQUESTS  ERRORS  TTFT p50  TTFT p95  ITL p50  ITL p95  LENGTH  CANCELLED\n" +
		"  stable  sim/small-2026-09-01  2,000     0.20%   10.0ms    20.0ms    2.0ms    3.0ms    0.00%   0.00%\n" +
		"  canary  sim/small-2026-11-01  100       4.10%   11.0ms    25.0ms    2.5ms    4.0ms    0.00%   0.00%\n" +
		"\n" +
		"alias:   mini\n" +
		"stable:  sim/mini\n" +
		"canary:  none\n" +
		"state:   none\n" +
		"shadow:  none\n" +
		"\n" +
		"          MODEL     REQUESTS  ERRORS  TTFT p50  TTFT p95  ITL p50  ITL p95  LENGTH  CANCELLED\n" +
		"  stable  sim/mini  0         -       -         -         -        -        -       -\n"
	for _, args := range [][]string{{"models", "canary"}, {"models", "canary", "status"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runRollout(t, srv, "", args...)
			require.Equal(t, exitOK, code, errOut)
			require.Empty(t, errOut)
			require.Equal(t, want, out)
		})
	}
	for _, args := range [][]string{{"models", "canary", "--alias", "flagship"}, {"models", "canary", "status", "--alias", "flagship"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runRollout(t, srv, "", args...)
			require.Equal(t, exitOK, code, errOut)
			require.Equal(t, flagshipBlock, out)
		})
	}
	for _, c := range f.requests() {
		require.Equal(t, rolloutCall{Method: http.MethodGet, Path: "/v1/admin/models/rollouts"}, c)
	}
}

func TestRolloutCanaryStatusJSON(t *testing.T) {
	f := testRollouts()
	srv := newFakeRollouts(t, f)
	code, out, errOut := runRollout(t, srv, "", "models", "canary", "--json")
	require.Equal(t, exitOK, code, errOut)
	var l api.RolloutList
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, f.list, l)

	code, out, errOut = runRollout(t, srv, "", "models", "canary", "status", "--json", "--alias", "small")
	require.Equal(t, exitOK, code, errOut)
	l = api.RolloutList{}
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, api.RolloutList{Aliases: f.list.Aliases[1:2]}, l)

	// No aliases: an empty list, not null.
	empty := newFakeRollouts(t, &fakeRollouts{})
	code, out, errOut = runRollout(t, empty, "", "models", "canary", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.JSONEq(t, `{"aliases": []}`, out)
	code, out, _ = runRollout(t, empty, "", "models", "canary")
	require.Equal(t, exitOK, code)
	require.Equal(t, "no aliases: define them in llmd's models config (llmctl models apply FILE)\n", out)
}

func TestRolloutCanaryStatusUnknownAlias(t *testing.T) {
	srv := newFakeRollouts(t, testRollouts())
	code, out, errOut := runRollout(t, srv, "", "models", "canary", "--alias", "big")
	require.Equal(t, exitFailure, code)
	require.Empty(t, out)
	require.Equal(t, "llmctl: no alias \"big\": the aliases are flagship, small, mini\n", errOut)
}

func TestRolloutCanarySet(t *testing.T) {
	tests := map[string]struct {
		percent  string
		wantBody string
		wantOut  string
	}{
		"per tier": {
			percent:  "free=5,paid=1,enterprise=0",
			wantBody: `{"version":"sim/flagship-2026-11-15","percent":{"enterprise":0,"free":5,"paid":1}}`,
			wantOut: "flagship: stable sim/flagship-2026-10-01, canary sim/flagship-2026-11-15 (running) at free 5%, paid 1%, enterprise 0%; " +
				"shadow sim/flagship-2026-12-01 at 10%\n",
		},
		"spaces and percent signs": {
			percent:  " free = 2.5% , batch=100 ",
			wantBody: `{"version":"sim/flagship-2026-11-15","percent":{"batch":100,"free":2.5}}`,
			wantOut: "flagship: stable sim/flagship-2026-10-01, canary sim/flagship-2026-11-15 (running) at free 2.5%, batch 100%; " +
				"shadow sim/flagship-2026-12-01 at 10%\n",
		},
		"every tier": {
			percent:  "5",
			wantBody: `{"version":"sim/flagship-2026-11-15","percent":{"batch":5,"enterprise":5,"free":5,"paid":5}}`,
			wantOut: "flagship: stable sim/flagship-2026-10-01, canary sim/flagship-2026-11-15 (running) at free 5%, paid 5%, enterprise 5%, batch 5%; " +
				"shadow sim/flagship-2026-12-01 at 10%\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := testRollouts()
			srv := newFakeRollouts(t, f)
			code, out, errOut := runRollout(t, srv, "", "models", "canary", "set", "flagship", "sim/flagship-2026-11-15", "--percent", tc.percent)
			require.Equal(t, exitOK, code, errOut)
			require.Empty(t, errOut)
			require.Equal(t, tc.wantOut, out)
			calls := f.requests()
			require.Len(t, calls, 1)
			require.Equal(t, http.MethodPut, calls[0].Method)
			require.Equal(t, "/v1/admin/models/aliases/flagship/canary", calls[0].Path)
			require.JSONEq(t, tc.wantBody, calls[0].Body)
		})
	}
}

func TestRolloutClear(t *testing.T) {
	tests := map[string]struct {
		args     []string
		wantPath string
		wantOut  string
	}{
		"canary": {
			args:     []string{"models", "canary", "clear", "flagship"},
			wantPath: "/v1/admin/models/aliases/flagship/canary",
			wantOut:  "flagship: stable sim/flagship-2026-10-01, no canary; shadow sim/flagship-2026-12-01 at 10%\n",
		},
		"shadow": {
			args:     []string{"models", "shadow", "clear", "flagship"},
			wantPath: "/v1/admin/models/aliases/flagship/shadow",
			wantOut:  "flagship: stable sim/flagship-2026-10-01, canary sim/flagship-2026-11-15 (running) at free 5%, paid 1%, enterprise 0%; no shadow\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := testRollouts()
			srv := newFakeRollouts(t, f)
			code, out, errOut := runRollout(t, srv, "", tc.args...)
			require.Equal(t, exitOK, code, errOut)
			require.Equal(t, tc.wantOut, out)
			require.Equal(t, []rolloutCall{{Method: http.MethodDelete, Path: tc.wantPath}}, f.requests())
		})
	}
}

func TestRolloutShadowSet(t *testing.T) {
	f := testRollouts()
	srv := newFakeRollouts(t, f)
	code, out, errOut := runRollout(t, srv, "", "models", "shadow", "set", "small", "sim/small-2026-12-01", "--percent", "12.5")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "small: stable sim/small-2026-09-01, canary sim/small-2026-11-01 (rolled back) at paid 50%, batch 2.5%: "+
		"error rate 4.10% over the stable's 0.20%; shadow sim/small-2026-12-01 at 12.5%\n", out)
	calls := f.requests()
	require.Len(t, calls, 1)
	require.Equal(t, http.MethodPut, calls[0].Method)
	require.Equal(t, "/v1/admin/models/aliases/small/shadow", calls[0].Path)
	require.JSONEq(t, `{"version":"sim/small-2026-12-01","percent":12.5}`, calls[0].Body)
}

func TestRolloutPromote(t *testing.T) {
	tests := map[string]struct {
		flags    []string
		wantBody string
		wantOut  string
	}{
		"dates": {
			flags:    []string{"--deprecate-old", "2026-12-01", "--sunset-old", "2027-03-01T12:00:00Z"},
			wantBody: `{"deprecate":"2026-12-01","sunset":"2027-03-01T12:00:00Z"}`,
			wantOut: "flagship: sim/flagship-2026-11-15 is now stable (was sim/flagship-2026-10-01, " +
				"deprecated from 2026-12-01, sunset 2027-03-01T12:00:00Z)\n",
		},
		"no dates": {
			wantBody: `{}`,
			wantOut:  "flagship: sim/flagship-2026-11-15 is now stable (was sim/flagship-2026-10-01)\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := testRollouts()
			srv := newFakeRollouts(t, f)
			code, out, errOut := runRollout(t, srv, "", append([]string{"models", "promote", "flagship"}, tc.flags...)...)
			require.Equal(t, exitOK, code, errOut)
			require.Equal(t, tc.wantOut, out)
			calls := f.requests()
			require.Len(t, calls, 1)
			require.Equal(t, http.MethodPost, calls[0].Method)
			require.Equal(t, "/v1/admin/models/aliases/flagship/promote", calls[0].Path)
			require.JSONEq(t, tc.wantBody, calls[0].Body)
		})
	}
}

func TestRolloutApply(t *testing.T) {
	const config = "versions:\n  sim/small: {source: \"sim:small\"}\naliases:\n  flagship: {version: sim/flagship-2026-10-01}\n"
	const want = "" +
		"loaded: sim/flagship-2026-11-15, sim/small\n" +
		"unloaded: sim/old\n" +
		"names: flagship, sim/flagship-2026-10-01, sim/flagship-2026-11-15, sim/small\n" +
		"saved to llmd's --models-config file\n"
	path := filepath.Join(t.TempDir(), "models.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	for name, tc := range map[string]struct{ arg, stdin string }{
		"file":  {arg: path},
		"stdin": {arg: "-", stdin: config},
	} {
		t.Run(name, func(t *testing.T) {
			f := testRollouts()
			srv := newFakeRollouts(t, f)
			code, out, errOut := runRollout(t, srv, tc.stdin, "models", "apply", tc.arg)
			require.Equal(t, exitOK, code, errOut)
			require.Equal(t, want, out)
			require.Equal(t, []rolloutCall{{Method: http.MethodPut, Path: "/v1/admin/models/config",
				ContentType: "application/yaml", Body: config}}, f.requests())
		})
	}
}

func TestRolloutApplyNotSaved(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeModelsApplied(&b, &api.ModelsApplied{Names: []string{"sim/small"}}))
	require.Equal(t, "loaded: none\nunloaded: none\nnames: sim/small\n"+
		"not saved to a --models-config file: it lasts until llmd restarts\n", b.String())
}

func TestRolloutApplyErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	require.NoError(t, os.WriteFile(empty, []byte("\n  \n"), 0o600))
	broken := filepath.Join(dir, "broken.yaml")
	require.NoError(t, os.WriteFile(broken, []byte("aliases: {flagship: {version: zzz}} # broken\n"), 0o600))
	missing := filepath.Join(dir, "nope.yaml")
	tests := map[string]struct {
		arg, stdin string
		wantErr    string
		wantSent   bool
	}{
		"missing file": {arg: missing, wantErr: "llmctl: models config " + missing + " does not exist\n"},
		"empty file":   {arg: empty, wantErr: "llmctl: models config " + empty + " is empty\n"},
		"empty stdin":  {arg: "-", wantErr: "llmctl: models config stdin is empty\n"},
		"refused": {arg: broken, wantSent: true,
			wantErr: "llmctl: models config: aliases.flagship.version \"zzz\": no such model\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := testRollouts()
			srv := newFakeRollouts(t, f)
			code, out, errOut := runRollout(t, srv, tc.stdin, "models", "apply", tc.arg)
			require.Equal(t, exitFailure, code)
			require.Empty(t, out)
			require.Equal(t, tc.wantErr, errOut)
			require.Equal(t, tc.wantSent, len(f.requests()) > 0)
		})
	}
}

const shadowTables = "" +
	"\n" +
	"quality\n" +
	"ALIAS     PRIMARY                  SHADOW                   RUNS   SHADOW ERRORS  SKIPPED  EXACT MATCH         MEAN EDIT DIST  SCORE\n" +
	"flagship  sim/flagship-2026-10-01  sim/flagship-2026-11-15  1,200  12 (1.00%)     3        830/1,000 (83.00%)  2.41            0.87\n" +
	"small     sim/small-2026-09-01     sim/small-2026-11-01     5      0 (0.00%)      0        -                   -               -\n" +
	"\n" +
	"latency (ms) and length, primary / shadow\n" +
	"ALIAS     PRIMARY                  SHADOW                   TTFT p50       TTFT p95       ITL mean     TOKENS mean\n" +
	"flagship  sim/flagship-2026-10-01  sim/flagship-2026-11-15  120.0 / 135.2  400.5 / 512.0  21.5 / 23.0  180.2 / 176.9\n" +
	"small     sim/small-2026-09-01     sim/small-2026-11-01     - / -          - / -          - / -        - / -\n"

func TestRolloutShadowReport(t *testing.T) {
	f := testRollouts()
	srv := newFakeRollouts(t, f)
	code, out, errOut := runRollout(t, srv, "", "models", "shadow", "report")
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
	require.Equal(t, "shadow traffic from 2026-11-20T00:00:00Z to 2026-11-21T00:00:00Z (UTC), all aliases, all shadow versions\n"+
		shadowTables, out)
	for _, line := range strings.Split(out, "\n") {
		require.LessOrEqual(t, len(line), 140, "line %q", line)
	}

	code, out, errOut = runRollout(t, srv, "", "models", "shadow", "report", "--alias", "flagship",
		"--shadow-model", "sim/flagship-2026-11-15", "--since", "2026-11-20T00:00:00Z", "--until", "2026-11-21T00:00:00+01:00")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "shadow traffic from 2026-11-20T00:00:00Z to 2026-11-21T00:00:00Z (UTC), "+
		"alias flagship, shadow sim/flagship-2026-11-15\n"), out)

	calls := f.requests()
	require.Len(t, calls, 2)
	require.Equal(t, rolloutCall{Method: http.MethodGet, Path: "/v1/admin/models/shadow/report"}, calls[0])
	require.Equal(t, "alias=flagship&shadow_model=sim%2Fflagship-2026-11-15&since=2026-11-20T00%3A00%3A00Z&until=2026-11-20T23%3A00%3A00Z",
		calls[1].Query)
}

func TestRolloutShadowReportRelativeSince(t *testing.T) {
	f := testRollouts()
	srv := newFakeRollouts(t, f)
	before := time.Now().Truncate(time.Second)
	code, _, errOut := runRollout(t, srv, "", "models", "shadow", "report", "--since", "7d", "--until", "90m")
	require.Equal(t, exitOK, code, errOut)
	calls := f.requests()
	require.Len(t, calls, 1)
	q, err := url.ParseQuery(calls[0].Query)
	require.NoError(t, err)
	since, err := time.Parse(time.RFC3339, q.Get("since"))
	require.NoError(t, err)
	until, err := time.Parse(time.RFC3339, q.Get("until"))
	require.NoError(t, err)
	require.WithinDuration(t, before.Add(-7*24*time.Hour), since, 5*time.Second)
	require.WithinDuration(t, before.Add(-90*time.Minute), until, 5*time.Second)
}

func TestRolloutShadowReportJSON(t *testing.T) {
	f := testRollouts()
	srv := newFakeRollouts(t, f)
	code, out, errOut := runRollout(t, srv, "", "models", "shadow", "report", "--json")
	require.Equal(t, exitOK, code, errOut)
	var r api.ShadowReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, f.report, r)

	f = &fakeRollouts{report: api.ShadowReport{Since: t0, Until: t1}}
	srv = newFakeRollouts(t, f)
	code, out, _ = runRollout(t, srv, "", "models", "shadow", "report", "--json")
	require.Equal(t, exitOK, code)
	require.JSONEq(t, `{"since": "2026-03-01T12:00:00Z", "until": "2026-03-02T08:30:05Z", "rows": []}`, out)
	code, out, _ = runRollout(t, srv, "", "models", "shadow", "report")
	require.Equal(t, exitOK, code)
	require.Equal(t, "shadow traffic from 2026-03-01T12:00:00Z to 2026-03-02T08:30:05Z (UTC), all aliases, all shadow versions\n"+
		"no shadow traffic in the window\n", out)
}

// TestRolloutUsageErrors: bad flag values are refused before any request.
func TestRolloutUsageErrors(t *testing.T) {
	set := []string{"models", "canary", "set", "flagship", "sim/flagship-2026-11-15"}
	shadowSet := []string{"models", "shadow", "set", "flagship", "sim/flagship-2026-11-15"}
	promote := []string{"models", "promote", "flagship"}
	report := []string{"models", "shadow", "report"}
	with := func(base []string, more ...string) []string { return append(slices.Clone(base), more...) }
	tests := map[string]struct {
		args    []string
		wantErr string
		command string // the command whose help the hint names
	}{
		"canary over 100": {args: with(set, "--percent", "free=101"),
			wantErr: "--percent 101: give a share from 0 to 100 (tier free)"},
		"canary bare over 100": {args: with(set, "--percent", "100.5"),
			wantErr: "--percent 100.5: give a share from 0 to 100"},
		"canary negative": {args: with(set, "--percent", "paid=-1"),
			wantErr: "--percent -1: give a share from 0 to 100 (tier paid)"},
		"canary unknown tier": {args: with(set, "--percent", "free=5,gold=1"),
			wantErr: "--percent: unknown tier \"gold\": use one of enterprise, paid, free, batch"},
		"canary tier twice": {args: with(set, "--percent", "free=5,free=6"),
			wantErr: "--percent: tier free given twice"},
		"canary not a number": {args: with(set, "--percent", "lots"),
			wantErr: "--percent \"lots\" is not a number"},
		"canary NaN": {args: with(set, "--percent", "NaN"),
			wantErr: "--percent NaN: give a share from 0 to 100"},
		"canary bad pair": {args: with(set, "--percent", "free=5,paid"),
			wantErr: "--percent \"free=5,paid\": give TIER=PERCENT pairs separated by commas, e.g. free=5,paid=1"},
		"canary empty percent": {args: with(set, "--percent", ""),
			wantErr: "--percent is empty: give TIER=PERCENT,... or one number"},
		"canary no percent": {args: set,
			wantErr: "give the canary's share with --percent, e.g. --percent free=5,paid=1 or --percent 5"},
		"canary no version": {args: set[:4], command: "llmctl models canary set",
			wantErr: "accepts 2 arg(s), received 1"},
		"canary empty alias": {args: []string{"models", "canary", "--alias", ""}, command: "llmctl models canary",
			wantErr: "--alias is empty"},
		"shadow over 100": {args: with(shadowSet, "--percent", "150"),
			wantErr: "--percent 150: give a share from 0 to 100"},
		"shadow no percent": {args: shadowSet,
			wantErr: "give the share of requests to copy with --percent, e.g. --percent 10"},
		"shadow not a number": {args: with(shadowSet, "--percent", "ten"),
			wantErr: "invalid argument \"ten\" for \"--percent\" flag: strconv.ParseFloat: parsing \"ten\": invalid syntax"},
		"promote bad date": {args: with(promote, "--deprecate-old", "2026-13-01"), command: "llmctl models promote",
			wantErr: "--deprecate-old \"2026-13-01\": give a date (2026-12-01) or an RFC 3339 time (2026-12-01T00:00:00Z)"},
		"promote bad sunset": {args: with(promote, "--sunset-old", "next year"), command: "llmctl models promote",
			wantErr: "--sunset-old \"next year\": give a date (2026-12-01) or an RFC 3339 time (2026-12-01T00:00:00Z)"},
		"promote sunset first": {args: with(promote, "--deprecate-old", "2027-01-01", "--sunset-old", "2026-12-01"), command: "llmctl models promote",
			wantErr: "--sunset-old 2026-12-01 is before --deprecate-old 2027-01-01"},
		"report bad since": {args: with(report, "--since", "yesterday"),
			wantErr: "--since \"yesterday\": give a duration back from now (24h, 7d) or an RFC 3339 time"},
		"report negative since": {args: with(report, "--since", "-24h"),
			wantErr: "--since \"-24h\": give a duration back from now (24h, 7d) or an RFC 3339 time"},
		"report until first": {args: with(report, "--since", "2026-11-21T00:00:00Z", "--until", "2026-11-20T00:00:00Z"),
			wantErr: "--until (2026-11-20T00:00:00Z) must be after --since (2026-11-21T00:00:00Z)"},
		"apply no file": {args: []string{"models", "apply"}, command: "llmctl models apply",
			wantErr: "accepts 1 arg(s), received 0"},
		"unknown subcommand": {args: []string{"models", "canary", "start"}, command: "llmctl models canary",
			wantErr: "unknown command \"start\" for \"llmctl models canary\""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := testRollouts()
			srv := newFakeRollouts(t, f)
			code, out, errOut := runRollout(t, srv, "", tc.args...)
			require.Equal(t, exitUsage, code, errOut)
			require.Empty(t, out)
			command := tc.command
			if command == "" {
				command = "llmctl " + strings.Join(tc.args[:3], " ")
			}
			require.Equal(t, "llmctl: "+tc.wantErr+"\nRun '"+command+" --help' for usage.\n", errOut)
			require.Empty(t, f.requests(), "a usage error sends nothing")
		})
	}
}

// TestRolloutAdminErrors: every rollout command needs an admin key, and
// says so in one line; an unknown alias is llmd's one-line error.
func TestRolloutAdminErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "models.yaml")
	require.NoError(t, os.WriteFile(path, []byte("aliases: {}\n"), 0o600))
	commands := [][]string{
		{"models", "apply", path},
		{"models", "canary"},
		{"models", "canary", "set", "flagship", "v2", "--percent", "5"},
		{"models", "canary", "clear", "flagship"},
		{"models", "shadow", "set", "flagship", "v2", "--percent", "5"},
		{"models", "shadow", "clear", "flagship"},
		{"models", "shadow", "report"},
		{"models", "promote", "flagship"},
	}
	srv := newFakeRollouts(t, testRollouts())
	for _, args := range commands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := execute(t.Context(), append([]string{"--addr", srv.URL, "--api-key", userKey}, args...),
				strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, exitFailure, code)
			require.Empty(t, stdout.String())
			require.Equal(t, notAdminMsg, stderr.String())
		})
	}
	for _, args := range [][]string{
		{"models", "canary", "set", "nope", "v2", "--percent", "5"},
		{"models", "canary", "clear", "nope"},
		{"models", "shadow", "set", "nope", "v2", "--percent", "5"},
		{"models", "shadow", "clear", "nope"},
		{"models", "promote", "nope"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runRollout(t, srv, "", args...)
			require.Equal(t, exitFailure, code)
			require.Empty(t, out)
			require.Equal(t, "llmctl: no alias nope in the models config\n", errOut)
		})
	}
}

// TestRolloutHelp: each rollout command has a summary and shows the
// rollout's order: shadow, canary per tier, promote.
func TestRolloutHelp(t *testing.T) {
	for _, args := range [][]string{
		{"models", "canary"}, {"models", "canary", "status"}, {"models", "canary", "set"}, {"models", "canary", "clear"},
		{"models", "shadow"}, {"models", "shadow", "set"}, {"models", "shadow", "clear"}, {"models", "shadow", "report"},
		{"models", "promote"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, _, err := runCmd(t, "", append(args, "--help")...)
			require.NoError(t, err)
			require.Contains(t, out, "Examples:\n")
			require.Contains(t, out, rolloutOrder)
		})
	}
	shadow := strings.Index(rolloutOrder, "llmctl models shadow set flagship")
	canary := strings.Index(rolloutOrder, "llmctl models canary set flagship sim/flagship-2026-11-15 --percent free=5,paid=0")
	promote := strings.Index(rolloutOrder, "llmctl models promote flagship --deprecate-old")
	require.True(t, shadow >= 0 && canary > shadow && promote > canary, rolloutOrder)
	out, _, err := runCmd(t, "", "models", "--help")
	require.NoError(t, err)
	for _, name := range []string{"apply", "canary", "shadow", "promote"} {
		require.Contains(t, out, "\n  "+name+" ")
	}
}
