package fleet

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/workload"
)

// routingPolicies are the policies compared: round robin, prefix and cost.
var routingPolicies = []cluster.Policy{cluster.PolicyRoundRobin, cluster.PolicyPrefix, cluster.PolicyCost}

// routingResult is one (workload, policy) run of the comparison.
type routingResult struct {
	workload string
	rate     float64
	policy   cluster.Policy
	r        *Report
}

// compareRouting runs every routing workload at each rate (requests per
// second, fleet-wide) under each policy, on nodes nodes of sim/mid (one
// simulated H100 each), for duration of virtual time after a warm-up of a
// tenth of it.
func compareRouting(t *testing.T, nodes int, rates map[string][]float64, duration time.Duration) []routingResult {
	t.Helper()
	mid, err := sim.ModelByName("mid")
	require.NoError(t, err)
	var out []routingResult
	for _, w := range workload.RoutingWorkloads(1, duration, 1) {
		for _, rate := range rates[w.Name] {
			for _, p := range routingPolicies {
				cfg := DefaultConfig()
				cfg.Nodes = nodes
				cfg.Sim.Model = mid
				cfg.Route = p
				cfg.Workload = w.Spec
				cfg.Workload.Rate = rate
				cfg.Warmup = duration / 10
				r, err := Run(t.Context(), cfg)
				require.NoError(t, err, "%s at %g/s, %s", w.Name, rate, p)
				out = append(out, routingResult{workload: w.Name, rate: rate, policy: p, r: r})
			}
		}
	}
	return out
}

// routingTable formats results as BENCHMARKS.md's table.
func routingTable(res []routingResult) string {
	var sb strings.Builder
	sb.WriteString("| workload | req/s | routing | TTFT p50 | TTFT p95 | p50 vs round robin | prefix hit rate | busiest / mean |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	rr := map[string]time.Duration{}
	for _, x := range res {
		if x.policy == cluster.PolicyRoundRobin {
			rr[x.workload+strconv.FormatFloat(x.rate, 'g', -1, 64)] = x.r.Fleet.TTFT.P50
		}
	}
	for _, x := range res {
		mean, most := 0.0, 0
		for _, n := range x.r.Nodes {
			mean += float64(n.Requests)
			most = max(most, n.Requests)
		}
		mean /= float64(len(x.r.Nodes))
		base := rr[x.workload+strconv.FormatFloat(x.rate, 'g', -1, 64)]
		fmt.Fprintf(&sb, "| %s | %g | %s | %s | %s | %.2fx | %.1f%% | %.2f |\n", x.workload, x.rate, x.policy,
			ms(x.r.Fleet.TTFT.P50), ms(x.r.Fleet.TTFT.P95), float64(base)/float64(max(x.r.Fleet.TTFT.P50, 1)),
			100*x.r.Fleet.CacheHit, float64(most)/max(mean, 1))
	}
	return sb.String()
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// TestRoutingFigures prints BENCHMARKS.md's SIMULATED routing table (and
// writes it to LLMD_ROUTE_SIM_OUT when set, for scripts/benchreport): the
// three routing workloads on three sim/mid nodes, 10 minutes of virtual
// time each, at a light and a heavy rate (and one past turns-1000's
// capacity), under round robin, prefix and cost routing. It takes about a
// minute, so it runs only with LLMD_ROUTE_SIM=1.
func TestRoutingFigures(t *testing.T) {
	if os.Getenv("LLMD_ROUTE_SIM") == "" {
		t.Skip("set LLMD_ROUTE_SIM=1 to print the simulated routing comparison")
	}
	res := compareRouting(t, 3, map[string][]float64{"documents": {4, 8}, "turns-1000": {3, 4.5, 6}, "turns-200": {10, 20}}, 10*time.Minute)
	table := routingTable(res)
	t.Logf("\n%s", table)
	if out := os.Getenv("LLMD_ROUTE_SIM_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(table), 0o644))
	}
}

// TestCostRoutingAgainstRoundRobin compares the policies on the routing
// workloads at a small scale (3 minutes of virtual time, deterministic)
// and checks only what holds with a margin: cost routing's TTFT p50 at
// least 2x better than round robin's where each conversation's prefix is
// private (documents), and never more than 5% worse elsewhere (the
// workloads' p50s are within a few percent of each other there); its p95
// and its cache hit rate better than round robin's everywhere.
func TestCostRoutingAgainstRoundRobin(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("about 40 s under -race")
	}
	res := compareRouting(t, 3, map[string][]float64{"documents": {6}, "turns-1000": {3}, "turns-200": {10}}, 3*time.Minute)
	t.Logf("\n%s", routingTable(res))
	by := map[string]map[cluster.Policy]*Report{}
	for _, x := range res {
		if by[x.workload] == nil {
			by[x.workload] = map[cluster.Policy]*Report{}
		}
		by[x.workload][x.policy] = x.r
	}
	for w, rs := range by {
		rr, cost := rs[cluster.PolicyRoundRobin].Fleet, rs[cluster.PolicyCost].Fleet
		require.Positive(t, cost.TTFT.Count, w)
		if w == "documents" {
			require.LessOrEqual(t, 2*cost.TTFT.P50, rr.TTFT.P50, "%s: p50 at least 2x better", w)
		} else {
			require.LessOrEqual(t, float64(cost.TTFT.P50), 1.05*float64(rr.TTFT.P50), "%s: p50 no worse", w)
		}
		require.Less(t, cost.TTFT.P95, rr.TTFT.P95, "%s: p95", w)
		require.Greater(t, cost.CacheHit, rr.CacheHit, "%s: hit rate", w)
	}
}

// TestZones: with two zones, prefix routing keeps requests in their zone
// at a light load (no inter-zone latency paid), while round robin, which
// knows no zones (as llmd's), sends about half out of it and pays the
// latency on their first token.
func TestZones(t *testing.T) {
	t.Parallel()
	run := func(p cluster.Policy, zones int) *Report {
		cfg := DefaultConfig()
		cfg.Route = p
		cfg.Zones, cfg.InterZoneLatency = zones, 200*time.Millisecond
		cfg.Workload = workload.Spec{Rate: 8, Duration: 20 * time.Second, Input: workload.Fixed(64), Output: workload.Fixed(16), Seed: 3}
		r, err := Run(t.Context(), cfg)
		require.NoError(t, err)
		return r
	}
	prefix, rr, one := run(cluster.PolicyPrefix, 2), run(cluster.PolicyRoundRobin, 2), run(cluster.PolicyRoundRobin, 1)
	require.Zero(t, prefix.CrossZone, "light load: every request in its zone")
	require.InDelta(t, 0.5, rr.CrossZone, 0.1)
	require.Zero(t, one.CrossZone, "one zone: nothing is out of it")
	// Half of round robin's first tokens wait 200 ms more.
	require.Greater(t, rr.Fleet.TTFT.P90, one.Fleet.TTFT.P90+150*time.Millisecond)
	require.Less(t, prefix.Fleet.TTFT.P90, one.Fleet.TTFT.P90+100*time.Millisecond)

	cfg := DefaultConfig()
	cfg.Zones = 5
	cfg.Workload = workload.Spec{Rate: 1, Duration: time.Second, Input: workload.Fixed(8), Output: workload.Fixed(1)}
	_, err := Run(t.Context(), cfg)
	require.ErrorContains(t, err, "zones must be from 0 to the number of nodes (4), got 5")
}
