package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/loadgen"
	"github.com/llmd/llmd/internal/workload"
)

// TestClusterCostRoutingFigures is issue 25's routing comparison on real
// llmd processes: three nodes of sim/mid (one simulated H100 each, real
// time), every request entering node 1 (as behind a load balancer that
// sends everything to one node), loaded by llmctl bench's generator with
// 4-turn conversations over 8 shared system prompts of 1,000 tokens, at 8
// concurrent conversations; turns of 1,000 tokens (large private prompts,
// where holding a conversation's prefix pays) and of 200 tokens (where the
// shared system prompts are cached everywhere and queueing decides). Each
// (workload, policy) pair runs ROUNDS times (LLMD_CLUSTER_BENCH_ROUNDS,
// default 2), policies interleaved; the table is the median TTFT p50 and
// p99, with the prefix hit rate. About 4 minutes; LLMD_CLUSTER_BENCH=1.
func TestClusterCostRoutingFigures(t *testing.T) {
	if os.Getenv("LLMD_CLUSTER_BENCH") == "" {
		t.Skip("set LLMD_CLUSTER_BENCH=1 (make bench-cluster) to measure routing on three llmd processes")
	}
	bin := buildLLMD(t)
	rounds := 2
	if v := os.Getenv("LLMD_CLUSTER_BENCH_ROUNDS"); v != "" {
		_, err := fmt.Sscan(v, &rounds)
		require.NoError(t, err)
	}
	policies := []string{"round_robin", "prefix", "cost"}
	type key struct{ workload, policy string }
	p50s, p99s, hits := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	workloads := []struct {
		name  string
		input int
	}{{"1,000-token turns", 1000}, {"200-token turns", 200}}
	for round := range rounds {
		for _, w := range workloads {
			for _, policy := range policies {
				procs := startClusterProcs(t, bin, 3, "--models", "mid", "--route-policy", policy)
				spec := workload.Spec{Requests: 96, Concurrency: 8, Input: workload.Fixed(w.input), Output: workload.Fixed(16),
					SharedPrefix: 1, SystemPrompts: 8, SystemTokens: workload.Fixed(1000), Turns: workload.Fixed(4),
					Seed: uint64(round*10 + 1)}
				r, err := loadgen.New(loadgen.Config{BaseURL: procs[0].base, Model: "sim/mid", Timeout: 2 * time.Minute,
					IgnoreEOS: true}, spec)
				require.NoError(t, err)
				rep, err := r.Run(t.Context())
				require.NoError(t, err)
				require.Zero(t, rep.Failed, "%s %s: %v", w.name, policy, rep.FirstErrors)
				k := key{w.name, policy}
				p50s[k] = append(p50s[k], rep.TTFT.P50)
				p99s[k] = append(p99s[k], rep.TTFT.P99)
				if rep.PrefixHitRate != nil {
					hits[k] = append(hits[k], *rep.PrefixHitRate)
				}
				for _, p := range procs {
					p.kill9(t)
				}
				t.Logf("round %d, %s, %s: TTFT p50 %.0f ms, p99 %.0f ms", round+1, w.name, policy, rep.TTFT.P50, rep.TTFT.P99)
			}
		}
	}
	var sb strings.Builder
	sb.WriteString("| workload | routing | TTFT p50 ms | vs round robin | TTFT p99 ms | prefix hit rate |\n|---|---|---|---|---|---|\n")
	for _, w := range workloads {
		rr := median(p50s[key{w.name, "round_robin"}])
		for _, policy := range policies {
			k := key{w.name, policy}
			fmt.Fprintf(&sb, "| %s | %s | %.0f %s | %.2fx | %.0f | %.1f%% |\n", w.name, policy, median(p50s[k]), spread(p50s[k]),
				rr/median(p50s[k]), median(p99s[k]), 100*median(hits[k]))
		}
	}
	t.Logf("\n%s", sb.String())
	if out := os.Getenv("LLMD_CLUSTER_BENCH_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(sb.String()), 0o644))
	}
}

// spread is "[min-max]" of vs, empty for fewer than two.
func spread(vs []float64) string {
	if len(vs) < 2 {
		return ""
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("[%.0f-%.0f]", lo, hi)
}
