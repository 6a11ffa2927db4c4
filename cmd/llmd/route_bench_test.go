package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// TestClusterRoutingFigures measures the routing policies on real llmd
// processes (sim executor, real time) under a shared-prefix, multi-turn
// workload, and prints the table BENCHMARKS.md records. It takes about two
// minutes, so it runs only with LLMD_CLUSTER_BENCH=1 (make bench-cluster).
//
// Workload: 48 conversations of 4 turns, 12 at a time; each starts with one
// of 8 shared system prompts (~1,000 tokens) and a document of its own
// (~1,000 tokens); every turn enters the cluster at a random node; 16
// output tokens per turn; model sim/mid (32.8B, FP16, one simulated H100
// per node). Policies named "P/no-id" run P without the conversation
// header (the ring key is then the prompt's first block).
func TestClusterRoutingFigures(t *testing.T) {
	if os.Getenv("LLMD_CLUSTER_BENCH") == "" {
		t.Skip("set LLMD_CLUSTER_BENCH=1 (make bench-cluster) to measure routing on three llmd processes")
	}
	bin := buildLLMD(t)
	type row struct {
		name                     string
		hit                      float64
		p50, p99                 time.Duration
		maxShare                 float64
		served                   []uint64
		requests, errors, cached int
	}
	var rows []row
	for _, policy := range benchPolicies() {
		n := 3
		policy, noID := strings.CutSuffix(policy, "/no-id")
		args := []string{"--models", "mid", "--route-policy", policy}
		if policy == "single" {
			n, args = 1, []string{"--models", "mid", "--route-policy", "local"}
		}
		args = append(args, strings.Fields(os.Getenv("LLMD_CLUSTER_BENCH_ARGS"))...)
		procs := startClusterProcs(t, bin, n, args...)
		res := runConversations(procs, 48, 4, 12, 8, !noID)
		served := make([]uint64, n)
		for i, p := range procs {
			served[i] = completed(t, p.base)
		}
		var ttfts []time.Duration
		prompt, cached, errs := 0, 0, 0
		for _, r := range res {
			if r.transportErr != nil || r.status != http.StatusOK || r.errCode != "" || !r.done {
				errs++
				continue
			}
			ttfts = append(ttfts, r.ttft)
			prompt += r.prompt
			cached += r.cached
		}
		slices.Sort(ttfts)
		mean := 0.0
		for _, s := range served {
			mean += float64(s)
		}
		mean /= float64(n)
		maxShare := 0.0
		for _, s := range served {
			maxShare = math.Max(maxShare, float64(s)/mean)
		}
		name := policy
		if noID {
			name += " (no conversation id)"
		}
		rows = append(rows, row{name: name, hit: float64(cached) / float64(max(prompt, 1)), p50: pct(ttfts, 0.50),
			p99: pct(ttfts, 0.99), maxShare: maxShare, served: served, requests: len(res), errors: errs, cached: cached})
		for _, p := range procs {
			p.kill9(t)
			if dir := os.Getenv("LLMD_CLUSTER_BENCH_LOGS"); dir != "" {
				require.NoError(t, os.WriteFile(fmt.Sprintf("%s/%s-%s.log", dir, policy, p.id), []byte(p.stderr.String()), 0o644))
			}
		}
	}
	var sb strings.Builder
	sb.WriteString("| routing | nodes | requests | errors | prefix hit rate | TTFT p50 | TTFT p99 | requests per node | busiest / mean |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %d | %d | %d | %.1f%% | %s | %s | %v | %.2f |\n", r.name, len(r.served), r.requests, r.errors,
			100*r.hit, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.served, r.maxShare)
	}
	t.Logf("\n%s", sb.String())
	if out := os.Getenv("LLMD_CLUSTER_BENCH_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(sb.String()), 0o644))
	}
}

// completed is the number of requests the node's engines finished.
func completed(t *testing.T, base string) uint64 {
	var n uint64
	for _, m := range engineStats(t, base).Models {
		n += m.Completed
	}
	return n
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// runConversations runs convs conversations of turns turns, workers at a
// time, over systems shared system prompts; each turn enters at a random
// node (sending X-Conversation-Id when withID).
func runConversations(procs []*llmdProc, convs, turns, workers, systems int, withID bool) []turnResult {
	c := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer c.CloseIdleConnections()
	next := make(chan int)
	go func() {
		for k := range convs {
			next <- k
		}
		close(next)
	}()
	var (
		mu  sync.Mutex
		out []turnResult
		wg  sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for k := range next {
				r := rand.New(rand.NewPCG(uint64(k), 11))
				msgs := []api.Message{{Role: "system", Content: api.Content(systemPrompt(k%systems, 600))},
					{Role: "user", Content: api.Content("Please read this document:\n" + systemPrompt(1000+k, 600) +
						"\nWhat is it about?")}}
				for turn := range turns {
					p := procs[r.IntN(len(procs))]
					conv := ""
					if withID {
						conv = fmt.Sprintf("conv-%d", k)
					}
					res := streamTurn(c, p.base, "sim/mid", conv, msgs, 16)
					mu.Lock()
					out = append(out, res)
					mu.Unlock()
					msgs = append(msgs, api.Message{Role: "assistant", Content: api.Content(res.text)},
						api.Message{Role: "user", Content: api.Content(fmt.Sprintf("Tell me more about part %d.", turn+2))})
				}
			}
		})
	}
	wg.Wait()
	return out
}

// benchPolicies are the policies to measure: LLMD_CLUSTER_BENCH_POLICIES
// (comma-separated) or all.
func benchPolicies() []string {
	if v := os.Getenv("LLMD_CLUSTER_BENCH_POLICIES"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"single", "prefix", "affinity", "round_robin", "prefix/no-id", "affinity/no-id"}
}
