package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// fakeUsage serves GET /v1/admin/usage with a canned report, checking keys
// like llmd (adminKey passes, userKey gets 403, others 401) and refusing
// since=bad with 400. It records the raw query of each request.
type fakeUsage struct {
	report api.UsageReport

	mu      sync.Mutex
	queries []string
}

func newFakeUsage(t *testing.T, f *fakeUsage) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/usage", f.serveUsage)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// serveUsage serves GET /v1/admin/usage.
func (f *fakeUsage) serveUsage(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.queries = append(f.queries, r.URL.RawQuery)
	f.mu.Unlock()
	if !adminOnly(w, r) {
		return
	}
	if since := r.URL.Query().Get("since"); since == "bad" {
		writeAPIError(w, http.StatusBadRequest, "invalid_parameter",
			`since must be a positive duration back from now (24h, 7d) or an RFC 3339 time, got "bad"`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(f.report)
}

// adminOnly checks keys like llmd's admin routes: adminKey passes, userKey
// gets 403, others 401.
func adminOnly(w http.ResponseWriter, r *http.Request) bool {
	switch auth := r.Header.Get("Authorization"); {
	case auth == "Bearer "+userKey:
		writeAPIError(w, http.StatusForbidden, "admin_key_required", "this route needs an admin key")
		return false
	case auth != "Bearer "+adminKey:
		writeAPIError(w, http.StatusUnauthorized, "invalid_api_key", "invalid API key")
		return false
	}
	return true
}

// requests returns the raw queries received so far.
func (f *fakeUsage) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries...)
}

// acmeUsage is a report by day for one tenant, with a day whose cost is
// unknown and a model without a cost per million.
func acmeUsage() api.UsageReport {
	return api.UsageReport{
		Since:    time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		Until:    time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC),
		By:       "day",
		Tenant:   "acme",
		Currency: "USD",
		Rows: []api.UsageRow{
			{Key: "2026-03-01", Requests: 1234, Cancelled: 3, Errors: 1, Rejected: 5,
				InputTokens: 1234567, CachedTokens: 400000, OutputTokens: 98765, Cost: new(12.3456)},
			{Key: "2026-03-02", Requests: 10, InputTokens: 2000, OutputTokens: 500},
		},
		Total: api.UsageRow{Requests: 1244, Cancelled: 3, Errors: 1, Rejected: 5,
			InputTokens: 1236567, CachedTokens: 400000, OutputTokens: 99265},
		GPUHourPrice: 2.5,
		OutputCosts: []api.OutputCost{
			{Model: "sim/small", Tier: "paid", GPUs: 2, GPUHours: 95.5, OutputTokens: 99000, CostPerMillion: new(2411.6162)},
			{Model: "sim/small", Tier: "batch", GPUs: 2, GPUHours: 0.5, OutputTokens: 0},
		},
	}
}

func TestUsageCmdTable(t *testing.T) {
	f := &fakeUsage{report: acmeUsage()}
	srv := newFakeUsage(t, f)
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--tenant", "acme", "--since", "48h")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"usage from 2026-03-01T00:00:00Z to 2026-03-03T00:00:00Z (UTC) by day, tenant acme, all models\n"+
		"\n"+
		"DAY         REQUESTS  REJECTED  CANCELLED  ERRORS  INPUT      CACHED   OUTPUT  COST\n"+
		"2026-03-01  1,234     5         3          1       1,234,567  400,000  98,765  12.3456 USD\n"+
		"2026-03-02  10        0         0          0       2,000      0        500     -\n"+
		"TOTAL       1,244     5         3          1       1,236,567  400,000  99,265  -\n"+
		"\n"+
		"cost per 1M output tokens (GPU time at 2.5 USD/GPU-hour)\n"+
		"MODEL      TIER   GPUS  GPU-HOURS  OUTPUT  COST/1M\n"+
		"sim/small  paid   2     95.50      99,000  2411.6162 USD\n"+
		"sim/small  batch  2     0.50       0       -\n", out)
	require.Equal(t, []string{"since=48h&tenant=acme"}, f.requests())
}

func TestUsageCmdTableVariants(t *testing.T) {
	tests := map[string]struct {
		report api.UsageReport
		want   string
	}{
		"no usage": {
			report: api.UsageReport{Since: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
				By: "model", Currency: "EUR", Total: api.UsageRow{Cost: new(0.0)}},
			want: "" +
				"usage from 2026-03-01T00:00:00Z to 2026-03-02T00:00:00Z (UTC) by model, all tenants, all models\n" +
				"\n" +
				"MODEL  REQUESTS  REJECTED  CANCELLED  ERRORS  INPUT  CACHED  OUTPUT  COST\n" +
				"TOTAL  0         0         0          0       0      0       0       0.0000 EUR\n",
		},
		"by tier, no GPU-hour price, no currency": {
			report: api.UsageReport{Since: time.Date(2026, 3, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600)),
				Until: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), By: "tier", Model: "sim/small",
				Rows:        []api.UsageRow{{Key: "paid", Requests: 1, OutputTokens: 7, Cost: new(0.00006)}},
				Total:       api.UsageRow{Requests: 1, OutputTokens: 7, Cost: new(0.00006)},
				OutputCosts: []api.OutputCost{{Model: "sim/small", Tier: "paid", GPUs: 1, GPUHours: 1, OutputTokens: 7}}},
			want: "" +
				"usage from 2026-02-28T23:00:00Z to 2026-03-02T00:00:00Z (UTC) by tier, all tenants, model sim/small\n" +
				"\n" +
				"TIER   REQUESTS  REJECTED  CANCELLED  ERRORS  INPUT  CACHED  OUTPUT  COST\n" +
				"paid   1         0         0          0       0      0       7       0.00006\n" +
				"TOTAL  1         0         0          0       0      0       7       0.00006\n" +
				"\n" +
				"cost per 1M output tokens (no GPU-hour price configured)\n" +
				"MODEL      TIER  GPUS  GPU-HOURS  OUTPUT  COST/1M\n" +
				"sim/small  paid  1     1.00       7       -\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := newFakeUsage(t, &fakeUsage{report: tc.report})
			out, _, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage")
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		})
	}
}

func TestUsageCmdParams(t *testing.T) {
	tests := map[string]struct {
		flags     []string
		wantQuery string
	}{
		"none": {},
		"every flag": {
			flags: []string{"--tenant", "a&b c", "--model", "org/m", "--since", "7d",
				"--until", "2026-03-02T00:00:00+01:00", "--by", "tenant"},
			wantQuery: "by=tenant&model=org%2Fm&since=7d&tenant=a%26b+c&until=2026-03-02T00%3A00%3A00%2B01%3A00",
		},
		"since as a time":  {flags: []string{"--since=2026-03-01T00:00:00Z"}, wantQuery: "since=2026-03-01T00%3A00%3A00Z"},
		"by model, --json": {flags: []string{"--by", "model", "--json"}, wantQuery: "by=model"},
		"by day, --csv":    {flags: []string{"--by=day", "--csv"}, wantQuery: "by=day"},
		"by decision":      {flags: []string{"--by", "decision"}, wantQuery: "by=decision"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeUsage{report: acmeUsage()}
			srv := newFakeUsage(t, f)
			args := append([]string{"--addr", srv.URL, "--api-key", adminKey, "usage"}, tc.flags...)
			_, _, err := runCmd(t, "", args...)
			require.NoError(t, err)
			require.Equal(t, []string{tc.wantQuery}, f.requests())
		})
	}
}

// decisionUsage is a report by decision with latencies, a decision whose
// cost is unknown, and requests without a decision.
func decisionUsage() api.UsageReport {
	return api.UsageReport{
		Since:    time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		Until:    time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		By:       "decision",
		Currency: "USD",
		Rows: []api.UsageRow{
			{Key: "", Requests: 3, Finished: 3, InputTokens: 600, OutputTokens: 400, Cost: new(0.002),
				MeanTTFTMs: 81.25, MeanITLMs: 9.5},
			{Key: "auto/long", Requests: 2, Errors: 2, InputTokens: 4000, OutputTokens: 0},
			{Key: "auto/short-chat", Requests: 10, Cancelled: 1, Finished: 9, InputTokens: 1500, CachedTokens: 500,
				OutputTokens: 500, Cost: new(0.01), MeanTTFTMs: 120, MeanITLMs: 11.04},
		},
		Total: api.UsageRow{Requests: 15, Cancelled: 1, Errors: 2, Finished: 12, InputTokens: 6100, CachedTokens: 500,
			OutputTokens: 900, MeanTTFTMs: 110.3125, MeanITLMs: 10.655},
		OutputCosts: []api.OutputCost{},
	}
}

// TestUsageCmdByDecision: the key column is the decision, "(none)" for
// requests without one, with the cost per million tokens and the mean
// latencies.
func TestUsageCmdByDecision(t *testing.T) {
	f := &fakeUsage{report: decisionUsage()}
	srv := newFakeUsage(t, f)
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--by", "decision")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"usage from 2026-03-01T00:00:00Z to 2026-03-02T00:00:00Z (UTC) by decision, all tenants, all models\n"+
		"\n"+
		"DECISION         REQUESTS  REJECTED  CANCELLED  ERRORS  INPUT  CACHED  OUTPUT  COST        COST/1M     MEAN TTFT  MEAN ITL\n"+
		"(none)           3         0         0          0       600    0       400     0.002 USD   2.0000 USD  81.2ms     9.5ms\n"+
		"auto/long        2         0         0          2       4,000  0       0       -           -           -          -\n"+
		"auto/short-chat  10        0         1          0       1,500  500     500     0.0100 USD  5.0000 USD  120.0ms    11.0ms\n"+
		"TOTAL            15        0         1          2       6,100  500     900     -           -           110.3ms    10.7ms\n", out)
	require.Equal(t, []string{"by=decision"}, f.requests())

	// --json keeps every field.
	out, _, err = runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--by", "decision", "--json")
	require.NoError(t, err)
	var got api.UsageReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, decisionUsage(), got)
	require.Contains(t, out, `"mean_ttft_ms": 81.25`)
}

func TestUsageCmdJSON(t *testing.T) {
	srv := newFakeUsage(t, &fakeUsage{report: acmeUsage()})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--json")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.True(t, strings.HasPrefix(out, "{\n  \"since\": \"2026-03-01T00:00:00Z\",\n"), "indented JSON: %s", out)
	var got api.UsageReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, acmeUsage(), got)
}

func TestUsageCmdCSV(t *testing.T) {
	report := acmeUsage()
	report.Rows[0].Key = `odd, "key"` // must be quoted, not split
	srv := newFakeUsage(t, &fakeUsage{report: report})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--csv")
	require.NoError(t, err)
	require.Empty(t, errOut)
	records, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{
		{"day", "requests", "rejected", "cancelled", "errors", "input_tokens", "cached_tokens", "output_tokens", "cost", "currency"},
		{`odd, "key"`, "1234", "5", "3", "1", "1234567", "400000", "98765", "12.3456", "USD"},
		{"2026-03-02", "10", "0", "0", "0", "2000", "0", "500", "", "USD"},
		{"TOTAL", "1244", "5", "3", "1", "1236567", "400000", "99265", "", "USD"},
	}, records)
}

func TestUsageCmdFlagErrors(t *testing.T) {
	tests := map[string]struct {
		flags   []string
		wantErr string
	}{
		"unknown --by": {flags: []string{"--by", "week"},
			wantErr: "llmctl: unknown --by \"week\": use one of day, tenant, model, tier, decision\n"},
		"empty --by": {flags: []string{"--by="},
			wantErr: "llmctl: unknown --by \"\": use one of day, tenant, model, tier, decision\n"},
		"--json and --csv": {flags: []string{"--json", "--csv"},
			wantErr: "llmctl: give --json or --csv, not both\n"},
		"an argument": {flags: []string{"acme"},
			wantErr: "llmctl: unknown command \"acme\" for \"llmctl usage\"\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeUsage{report: acmeUsage()}
			srv := newFakeUsage(t, f)
			var stdout, stderr bytes.Buffer
			args := append([]string{"--addr", srv.URL, "--api-key", adminKey, "usage"}, tc.flags...)
			code := execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Empty(t, stdout.String())
			require.Equal(t, tc.wantErr+"Run 'llmctl usage --help' for usage.\n", stderr.String())
			require.Empty(t, f.requests(), "a usage error must not reach llmd")
		})
	}
}

func TestUsageCmdServerErrors(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	tests := map[string]struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		"bad --since": {args: []string{"--api-key", adminKey, "usage", "--since", "bad"}, wantCode: exitUsage,
			wantErr: "llmctl: since must be a positive duration back from now (24h, 7d) or an RFC 3339 time, got \"bad\"\n" +
				"Run 'llmctl usage --help' for usage.\n"},
		"not an admin key": {args: []string{"--api-key", userKey, "usage"}, wantCode: exitFailure,
			wantErr: notAdminMsg},
		"no key": {args: []string{"usage", "--by", "tenant"}, wantCode: exitFailure,
			wantErr: noKeyMsg("BASE")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := newFakeUsage(t, &fakeUsage{report: acmeUsage()})
			var stdout, stderr bytes.Buffer
			code := execute(t.Context(), append([]string{"--addr", srv.URL}, tc.args...), strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, tc.wantCode, code)
			require.Empty(t, stdout.String())
			require.Equal(t, strings.ReplaceAll(tc.wantErr, "BASE", srv.URL), stderr.String())
			requireNoKey(t, stderr.String())
		})
	}
}

func TestGroupDigits(t *testing.T) {
	tests := map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345", 123456: "123,456",
		1234567: "1,234,567", -1234: "-1,234", -999: "-999",
		-9223372036854775808: "-9,223,372,036,854,775,808",
	}
	for n, want := range tests {
		require.Equal(t, want, groupDigits(n), "%d", n)
	}
}
