package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// day is 2026-03-01 at midnight UTC plus d days.
func day(d int) time.Time { return time.Date(2026, 3, 1+d, 0, 0, 0, 0, time.UTC) }

// report is a usage report by key with rows, its total computed from them
// (cost known when every row with tokens has one).
func report(currency string, price float64, rows ...api.UsageRow) *api.UsageReport {
	r := &api.UsageReport{Since: day(0), Until: day(1), By: "tenant", Currency: currency, GPUHourPrice: price,
		Rows: rows, Total: api.UsageRow{Key: "total"}, OutputCosts: []api.OutputCost{}}
	var cost costSum
	for _, u := range rows {
		r.Total.AddCounts(u)
		cost.add(u)
	}
	r.Total.Cost = cost.value()
	return r
}

func row(key string, requests, in, out int64, cost *float64) api.UsageRow {
	return api.UsageRow{Key: key, Requests: requests, InputTokens: in, OutputTokens: out, Cost: cost}
}

func TestMergeUsage(t *testing.T) {
	withCosts := func(r *api.UsageReport, ocs ...api.OutputCost) *api.UsageReport {
		r.OutputCosts = ocs
		return r
	}
	tests := map[string]struct {
		reports []*api.UsageReport
		want    func(r *api.UsageReport)
		// wantCPM are the costs per million output tokens, in order.
		wantCPM   []*float64
		wantNotes []string
	}{
		"one report is itself, costs per million recomputed": {
			reports: []*api.UsageReport{withCosts(report("USD", 2.5, row("acme", 3, 100, 10, new(0.5))),
				api.OutputCost{Model: "sim/small", Tier: "paid", GPUs: 1, GPUHours: 2, OutputTokens: 10, CostPerMillion: new(500000.0)})},
			want: func(r *api.UsageReport) {
				*r = *withCosts(report("USD", 2.5, row("acme", 3, 100, 10, new(0.5))),
					api.OutputCost{Model: "sim/small", Tier: "paid", GPUs: 1, GPUHours: 2, OutputTokens: 10})
			},
			wantCPM: []*float64{new(500000.0)},
		},
		"rows with the same key summed, sorted by key": {
			reports: []*api.UsageReport{
				report("USD", 0, row("globex", 1, 10, 1, new(0.25)), row("initech", 2, 20, 2, new(0.5))),
				report("USD", 0, row("acme", 4, 40, 4, new(1.0)), row("initech", 8, 80, 8, new(2.0))),
			},
			want: func(r *api.UsageReport) {
				*r = *report("USD", 0, row("acme", 4, 40, 4, new(1.0)), row("globex", 1, 10, 1, new(0.25)),
					row("initech", 10, 100, 10, new(2.5)))
			},
		},
		"every counter adds up": {
			reports: []*api.UsageReport{
				report("USD", 0, api.UsageRow{Key: "k", Requests: 1, Cancelled: 2, Errors: 3, Rejected: 4, InputTokens: 5, CachedTokens: 6, OutputTokens: 7}),
				report("USD", 0, api.UsageRow{Key: "k", Requests: 10, Cancelled: 20, Errors: 30, Rejected: 40, InputTokens: 50, CachedTokens: 60, OutputTokens: 70}),
			},
			want: func(r *api.UsageReport) {
				*r = *report("USD", 0, api.UsageRow{Key: "k", Requests: 11, Cancelled: 22, Errors: 33, Rejected: 44,
					InputTokens: 55, CachedTokens: 66, OutputTokens: 77})
			},
		},
		"a node that did not price its tokens makes the cost unknown": {
			reports: []*api.UsageReport{
				report("USD", 0, row("acme", 1, 10, 1, new(0.25))),
				report("USD", 0, row("acme", 1, 10, 1, nil)),
			},
			want: func(r *api.UsageReport) { *r = *report("USD", 0, row("acme", 2, 20, 2, nil)) },
		},
		"a row without tokens needs no price": {
			reports: []*api.UsageReport{
				report("USD", 0, row("acme", 1, 10, 1, new(0.25))),
				report("USD", 0, api.UsageRow{Key: "acme", Rejected: 3}),
			},
			want: func(r *api.UsageReport) {
				*r = *report("USD", 0, api.UsageRow{Key: "acme", Requests: 1, Rejected: 3, InputTokens: 10, OutputTokens: 1,
					Cost: new(0.25)})
			},
		},
		"no prices anywhere": {
			reports: []*api.UsageReport{report("USD", 0, row("acme", 1, 10, 1, nil)), report("EUR", 0, row("b", 1, 10, 1, nil))},
			want: func(r *api.UsageReport) {
				*r = *report("USD", 0, row("acme", 1, 10, 1, nil), row("b", 1, 10, 1, nil))
			},
		},
		"currencies differ: no cost is added up": {
			reports: []*api.UsageReport{
				withCosts(report("USD", 2, row("acme", 1, 10, 1, new(0.25))),
					api.OutputCost{Model: "m", GPUs: 1, GPUHours: 1, OutputTokens: 1, CostPerMillion: new(2e6)}),
				report("EUR", 0, row("acme", 1, 10, 1, new(0.5))),
				report("EUR", 0, row("acme", 1, 10, 1, new(0.5))),
			},
			want: func(r *api.UsageReport) {
				*r = *withCosts(report("", 2, row("acme", 3, 30, 3, nil)),
					api.OutputCost{Model: "m", GPUs: 1, GPUHours: 1, OutputTokens: 1})
				r.Total.Cost = nil
			},
			wantCPM:   []*float64{nil},
			wantNotes: []string{"costs left out: the nodes price in different currencies (EUR on b, c; USD on a)"},
		},
		"GPU time at each node's price": {
			reports: []*api.UsageReport{
				withCosts(report("USD", 2, row("acme", 1, 10, 100, nil)),
					api.OutputCost{Model: "m", Tier: "paid", GPUs: 1, GPUHours: 3, OutputTokens: 100},
					api.OutputCost{Model: "m", Tier: "batch", GPUs: 1, GPUHours: 1, OutputTokens: 0}),
				withCosts(report("USD", 4, row("acme", 1, 10, 300, nil)),
					api.OutputCost{Model: "m", Tier: "paid", GPUs: 2, GPUHours: 1, OutputTokens: 300},
					api.OutputCost{Model: "a", Tier: "paid", GPUs: 2, GPUHours: 0.5, OutputTokens: 50}),
			},
			want: func(r *api.UsageReport) {
				*r = *withCosts(report("USD", 0, row("acme", 2, 20, 400, nil)),
					api.OutputCost{Model: "a", Tier: "paid", GPUs: 2, GPUHours: 0.5, OutputTokens: 50},
					api.OutputCost{Model: "m", Tier: "batch", GPUs: 1, GPUHours: 1, OutputTokens: 0},
					api.OutputCost{Model: "m", Tier: "paid", GPUs: 3, GPUHours: 4, OutputTokens: 400})
			},
			// a: 0.5 h x 4 / 50 tokens; m/batch: no output; m/paid: (3 h x 2 + 1 h x 4) / 400.
			wantCPM:   []*float64{new(40000.0), nil, new(25000.0)},
			wantNotes: []string{"GPU time is priced at each node's GPU-hour price (a 2, b 4)"},
		},
		"GPU time without a price on one node": {
			reports: []*api.UsageReport{
				withCosts(report("USD", 2, row("acme", 1, 10, 100, nil)),
					api.OutputCost{Model: "m", GPUs: 1, GPUHours: 3, OutputTokens: 100}),
				withCosts(report("USD", 0, row("acme", 1, 10, 100, nil)),
					api.OutputCost{Model: "m", GPUs: 1, GPUHours: 1, OutputTokens: 100}),
			},
			want: func(r *api.UsageReport) {
				*r = *withCosts(report("USD", 0, row("acme", 2, 20, 200, nil)),
					api.OutputCost{Model: "m", GPUs: 2, GPUHours: 4, OutputTokens: 200})
			},
			wantCPM:   []*float64{nil},
			wantNotes: []string{"GPU time is priced at each node's GPU-hour price (a 2, b none)"},
		},
		"the window is the union of the nodes' windows": {
			reports: func() []*api.UsageReport {
				a, b := report("USD", 0), report("USD", 0)
				a.Since, a.Until = day(0).Add(time.Second), day(1).Add(time.Second)
				b.Since, b.Until = day(0), day(1)
				return []*api.UsageReport{a, b}
			}(),
			want: func(r *api.UsageReport) {
				*r = *report("USD", 0)
				r.Rows, r.Until = []api.UsageRow{}, day(1).Add(time.Second)
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var answered []nodeUsage
			var before []string
			for i, r := range tc.reports {
				answered = append(answered, nodeUsage{node: string(rune('a' + i)), report: r})
				b, err := json.Marshal(r)
				require.NoError(t, err)
				before = append(before, string(b))
			}
			got, notes := mergeUsage(answered)
			var want api.UsageReport
			tc.want(&want)
			if want.Rows == nil {
				want.Rows = []api.UsageRow{}
			}
			// Costs per million are floats computed another way: compared
			// apart.
			var cpm []*float64
			for i := range got.OutputCosts {
				cpm = append(cpm, got.OutputCosts[i].CostPerMillion)
				got.OutputCosts[i].CostPerMillion = nil
			}
			require.Equal(t, want, got)
			require.Len(t, cpm, len(tc.wantCPM))
			for i, w := range tc.wantCPM {
				if w == nil {
					require.Nil(t, cpm[i], "cost per million %d", i)
				} else {
					require.NotNil(t, cpm[i], "cost per million %d", i)
					require.InDelta(t, *w, *cpm[i], 1e-6, "cost per million %d", i)
				}
			}
			require.Equal(t, tc.wantNotes, notes)
			for i, r := range tc.reports {
				b, _ := json.Marshal(r)
				require.Equal(t, before[i], string(b), "report %d was modified", i)
			}
		})
	}
}

func TestMemberBase(t *testing.T) {
	tests := map[string]struct {
		apiAddr, base, want, wantErr string
	}{
		"host:port":          {apiAddr: "10.0.0.2:8700", base: "http://10.0.0.1:8700", want: "http://10.0.0.2:8700"},
		"scheme of --addr":   {apiAddr: "llmd-b:8700", base: "https://llmd-a:8700", want: "https://llmd-b:8700"},
		"a URL":              {apiAddr: "https://b.example/llmd/", base: "http://a:1", want: "https://b.example/llmd"},
		"IPv6":               {apiAddr: "[fd00::2]:8700", base: "http://a:1", want: "http://[fd00::2]:8700"},
		"unspecified IPv4":   {apiAddr: "0.0.0.0:8700", base: "http://a:1", wantErr: "names no host (start that llmd with --advertise-api)"},
		"unspecified IPv6":   {apiAddr: "[::]:8700", base: "http://a:1", wantErr: "names no host"},
		"no host":            {apiAddr: ":8700", base: "http://a:1", wantErr: "names no host"},
		"not a URL":          {apiAddr: "ftp://b:21", base: "http://a:1", wantErr: `its API address "ftp://b:21" is not host:port or a URL`},
		"not even host:port": {apiAddr: "%zz", base: "http://a:1", wantErr: "is not host:port or a URL"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := memberBase(tc.apiAddr, tc.base)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// fakeMember is a cluster member: usage like fakeUsage and, when nodes is
// set, GET /v1/admin/nodes.
type fakeMember struct {
	fakeUsage
	nodes func() api.NodeList
	// hang makes the usage route wait for the client to give up.
	hang bool
}

func newFakeMember(t *testing.T, f *fakeMember) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/usage", func(w http.ResponseWriter, r *http.Request) {
		if f.hang {
			<-r.Context().Done()
			return
		}
		f.serveUsage(w, r)
	})
	mux.HandleFunc("GET /v1/admin/nodes", func(w http.ResponseWriter, r *http.Request) {
		if !adminOnly(w, r) {
			return
		}
		if f.nodes == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.nodes())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// hostPort is a test server's address without its scheme, as llmd
// advertises it.
func hostPort(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

// fakeCluster is node a (at --addr) with b alive, c suspect and not
// listening, d dead, e advertising no host and f no API address.
type fakeCluster struct {
	a, b       *fakeMember
	srvA, srvB *httptest.Server
	closed     string
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{closed: closedAddr(t)}
	ra := report("USD", 2.5, row("acme", 10, 1000, 200, new(0.5)),
		api.UsageRow{Key: "globex", Requests: 2, Rejected: 1, InputTokens: 100, OutputTokens: 20, Cost: new(0.05)})
	ra.OutputCosts = []api.OutputCost{{Model: "sim/small", Tier: "paid", GPUs: 1, GPUHours: 2, OutputTokens: 220,
		CostPerMillion: new(2 * 2.5 / 220 * 1e6)}}
	rb := report("USD", 2.5, api.UsageRow{Key: "acme", Requests: 5, Cancelled: 1, InputTokens: 500, OutputTokens: 100, Cost: new(0.25)},
		row("initech", 1, 10, 0, new(0.001)))
	rb.Since, rb.Until = rb.Since.Add(time.Second), rb.Until.Add(time.Second)
	rb.OutputCosts = []api.OutputCost{{Model: "sim/small", Tier: "paid", GPUs: 1, GPUHours: 2, OutputTokens: 100,
		CostPerMillion: new(2 * 2.5 / 100 * 1e6)}}
	fc.b = &fakeMember{fakeUsage: fakeUsage{report: *rb}}
	fc.srvB = newFakeMember(t, fc.b)
	fc.a = &fakeMember{fakeUsage: fakeUsage{report: *ra}}
	fc.a.nodes = func() api.NodeList {
		return api.NodeList{Clustered: true, Nodes: []api.NodeInfo{
			{ID: "a", APIAddr: "10.255.0.1:8700", Status: "alive", Local: true},
			{ID: "b", APIAddr: hostPort(fc.srvB), Status: "alive"},
			{ID: "c", APIAddr: fc.closed, Status: "suspect"},
			{ID: "d", APIAddr: "10.255.0.4:8700", Status: "dead"},
			{ID: "e", APIAddr: "0.0.0.0:8700", Status: "alive"},
			{ID: "f", Status: "alive"},
		}}
	}
	fc.srvA = newFakeMember(t, fc.a)
	return fc
}

// TestUsageClusterTable: llmctl asks a through --addr (not its advertised
// address), b at its advertised one, reports c as unreachable and d-f as
// skipped, and merges a's and b's reports.
func TestUsageClusterTable(t *testing.T) {
	fc := newFakeCluster(t)
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", fc.srvA.URL, "--api-key", adminKey, "usage", "--cluster", "--by", "tenant",
		"--since", "24h"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, ""+
		"usage from 2026-03-01T00:00:00Z to 2026-03-02T00:00:01Z (UTC) by tenant, all tenants, all models\n"+
		"2 nodes: a, b; not in the report: c, d, e, f\n"+
		"\n"+
		"TENANT   REQUESTS  REJECTED  CANCELLED  ERRORS  INPUT  CACHED  OUTPUT  COST\n"+
		"acme     15        0         1          0       1,500  0       300     0.7500 USD\n"+
		"globex   2         1         0          0       100    0       20      0.0500 USD\n"+
		"initech  1         0         0          0       10     0       0       0.001 USD\n"+
		"TOTAL    18        1         1          0       1,610  0       320     0.8010 USD\n"+
		"\n"+
		"cost per 1M output tokens (GPU time at 2.5 USD/GPU-hour)\n"+
		"MODEL      TIER  GPUS  GPU-HOURS  OUTPUT  COST/1M\n"+
		"sim/small  paid  2     4.00       320     31250.0000 USD\n", stdout.String())
	require.Equal(t, ""+
		"llmctl: node d (10.255.0.4:8700): skipped: it is dead; its usage is not in the report\n"+
		"llmctl: node e (0.0.0.0:8700): skipped: its API address 0.0.0.0:8700 names no host (start that llmd with --advertise-api); its usage is not in the report\n"+
		"llmctl: node f: skipped: it has no API address; its usage is not in the report\n"+
		"llmctl: node c (http://"+fc.closed+"): unreachable: connect: connection refused\n", stderr.String())
	// The same query and key everywhere.
	require.Equal(t, []string{"by=tenant&since=24h"}, fc.a.requests())
	require.Equal(t, []string{"by=tenant&since=24h"}, fc.b.requests())
}

// TestUsageClusterReservations: the provisioned-throughput table of the
// merged report sums each reservation's delivered rate over the nodes that
// report it, against the reservation; JSON carries the merged section.
func TestUsageClusterReservations(t *testing.T) {
	fc := newFakeCluster(t)
	fc.a.report.Reservations = []api.ReservationUsage{
		{Tenant: "acme", Model: "sim/small", ReservedTPS: 400, DeliveredTPS: 250, OutputTokens: 864_010, MeanTPS: 10},
		{Tenant: "globex", Model: "sim/small", ReservedTPS: 50, DeliveredTPS: 0},
	}
	fc.b.report.Reservations = []api.ReservationUsage{
		{Tenant: "acme", Model: "sim/small", ReservedTPS: 400, DeliveredTPS: 180.5, OutputTokens: 172_802, MeanTPS: 2},
	}
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", fc.srvA.URL, "--api-key", adminKey, "usage", "--cluster", "--by", "tenant"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	// The merged window is 86,401 s (b's is a second later than a's).
	require.True(t, strings.HasSuffix(stdout.String(), ""+
		"sim/small  paid  2     4.00       320     31250.0000 USD\n"+
		"\n"+
		"Provisioned throughput (output tokens/s):\n"+
		"  TENANT      MODEL  RESERVED  DELIVERED NOW  OF RESERVED  WINDOW MEAN  NODES\n"+
		"    acme  sim/small       400          430.5         108%           12      2\n"+
		"  globex  sim/small        50              0           0%            0      1\n"+
		"DELIVERED NOW is summed over the nodes' engines (each its last 2 s); each engine holds the reservation on its own.\n"),
		stdout.String())

	out, _, err := runCmd(t, "", "--addr", fc.srvA.URL, "--api-key", adminKey, "usage", "--cluster", "--json")
	require.NoError(t, err)
	var got clusterUsageReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.Reservations, 2)
	require.Equal(t, 430.5, got.Reservations[0].DeliveredTPS)
	require.EqualValues(t, 1_036_812, got.Reservations[0].OutputTokens)
}

func TestUsageClusterJSONAndCSV(t *testing.T) {
	fc := newFakeCluster(t)
	out, _, err := runCmd(t, "", "--addr", fc.srvA.URL, "--api-key", adminKey, "usage", "--cluster", "--json")
	require.NoError(t, err)
	var got clusterUsageReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, []string{"a", "b"}, got.Nodes)
	require.Equal(t, []string{"c", "d", "e", "f"}, got.Missing)
	require.Len(t, got.Rows, 3)
	require.EqualValues(t, 18, got.Total.Requests)
	require.InDelta(t, 0.801, *got.Total.Cost, 1e-9)
	// It is a usage report too, with two more fields.
	var plain api.UsageReport
	require.NoError(t, json.Unmarshal([]byte(out), &plain))
	require.Equal(t, got.UsageReport, plain)
	require.Contains(t, out, "\n  \"nodes\": [\n    \"a\",\n    \"b\"\n  ],\n  \"missing_nodes\": [")

	out, errOut, err := runCmd(t, "", "--addr", fc.srvA.URL, "--api-key", adminKey, "usage", "--cluster", "--csv")
	require.NoError(t, err)
	require.Contains(t, errOut, "node c (")
	records, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{
		{"tenant", "requests", "rejected", "cancelled", "errors", "input_tokens", "cached_tokens", "output_tokens", "cost", "currency"},
		{"acme", "15", "0", "1", "0", "1500", "0", "300", "0.75", "USD"},
		{"globex", "2", "1", "0", "0", "100", "0", "20", "0.05", "USD"},
		{"initech", "1", "0", "0", "0", "10", "0", "0", "0.001", "USD"},
		{"TOTAL", "18", "1", "1", "0", "1610", "0", "320", "0.801", "USD"},
	}, records)
}

// TestUsageClusterNotClustered: a node alone is asked once, and the report
// is the one of plain "llmctl usage".
func TestUsageClusterNotClustered(t *testing.T) {
	for name, nodes := range map[string]func() api.NodeList{
		"alone": func() api.NodeList {
			return api.NodeList{Nodes: []api.NodeInfo{{ID: "a", APIAddr: "127.0.0.1:1", Status: "alive", Local: true}}}
		},
		"no nodes route": nil,
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeMember{fakeUsage: fakeUsage{report: acmeUsage()}, nodes: nodes}
			srv := newFakeMember(t, f)
			plain, _, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage")
			require.NoError(t, err)
			out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--cluster")
			require.NoError(t, err)
			require.Equal(t, plain, out)
			if nodes == nil {
				require.Equal(t, "llmctl: llmd at "+srv.URL+" does not list cluster members; its own report follows\n", errOut)
			} else {
				require.Empty(t, errOut)
			}
			require.Len(t, f.requests(), 2)
		})
	}
}

func TestUsageClusterFailures(t *testing.T) {
	t.Setenv("LLMD_API_KEY", "")
	t.Run("no member answers", func(t *testing.T) {
		closed := closedAddr(t)
		f := &fakeMember{hang: true}
		f.nodes = func() api.NodeList {
			return api.NodeList{Clustered: true, Nodes: []api.NodeInfo{
				{ID: "a", Status: "alive", Local: true}, {ID: "b", APIAddr: closed, Status: "alive"}}}
		}
		srv := newFakeMember(t, f)
		var stdout, stderr bytes.Buffer
		code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "usage", "--cluster",
			"--node-timeout", "100ms"}, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, exitFailure, code)
		require.Empty(t, stdout.String())
		require.Equal(t, ""+
			"llmctl: node a ("+srv.URL+"): unreachable: no answer within 100ms\n"+
			"llmctl: node b (http://"+closed+"): unreachable: connect: connection refused\n"+
			"llmctl: no cluster member answered (2 asked)\n", stderr.String())
	})
	t.Run("a member refuses the key", func(t *testing.T) {
		srvB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeAPIError(w, http.StatusUnauthorized, "invalid_api_key", "invalid API key")
		}))
		t.Cleanup(srvB.Close)
		a := &fakeMember{fakeUsage: fakeUsage{report: *report("USD", 0, row("acme", 1, 2, 3, nil))}}
		a.nodes = func() api.NodeList {
			return api.NodeList{Clustered: true, Nodes: []api.NodeInfo{
				{ID: "a", Status: "alive", Local: true}, {ID: "b", APIAddr: hostPort(srvB), Status: "alive"}}}
		}
		srv := newFakeMember(t, a)
		out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "usage", "--cluster")
		require.NoError(t, err, "one node answered")
		require.Contains(t, out, "\n1 node: a; not in the report: b\n")
		require.Equal(t, "llmctl: node b ("+srvB.URL+"): refused the API key (invalid API key): "+
			"each llmd checks keys in its own store; create the key there too\n", errOut)
		requireNoKey(t, errOut)
	})
	t.Run("bad --since", func(t *testing.T) {
		fc := newFakeCluster(t)
		var stdout, stderr bytes.Buffer
		code := execute(t.Context(), []string{"--addr", fc.srvA.URL, "--api-key", adminKey, "usage", "--cluster", "--since", "bad"},
			strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, exitUsage, code)
		require.Empty(t, stdout.String())
		require.True(t, strings.HasPrefix(stderr.String(), "llmctl: node d (10.255.0.4:8700): skipped"), stderr.String())
		require.True(t, strings.HasSuffix(stderr.String(), "llmctl: since must be a positive duration back from now (24h, 7d) "+
			"or an RFC 3339 time, got \"bad\"\nRun 'llmctl usage --help' for usage.\n"), stderr.String())
	})
	t.Run("not an admin key", func(t *testing.T) {
		fc := newFakeCluster(t)
		var stdout, stderr bytes.Buffer
		code := execute(t.Context(), []string{"--addr", fc.srvA.URL, "--api-key", userKey, "usage", "--cluster"},
			strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, exitFailure, code)
		require.Equal(t, notAdminMsg, stderr.String())
		require.Empty(t, fc.a.requests(), "the node list is refused first")
	})
	t.Run("--node-timeout", func(t *testing.T) {
		fc := newFakeCluster(t)
		for _, c := range []struct{ flags, want string }{
			{"--node-timeout=0s --cluster", "llmctl: --node-timeout must be positive, got 0s\n"},
			{"--node-timeout=1s", "llmctl: --node-timeout goes with --cluster\n"},
		} {
			var stdout, stderr bytes.Buffer
			args := append([]string{"--addr", fc.srvA.URL, "--api-key", adminKey, "usage"}, strings.Fields(c.flags)...)
			code := execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, exitUsage, code)
			require.Equal(t, c.want+"Run 'llmctl usage --help' for usage.\n", stderr.String())
		}
	})
}
