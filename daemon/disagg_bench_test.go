package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

// writeBenchGGUF writes a random llama big enough that a prompt of a
// thousand tokens takes a noticeable prefill on one thread
// (dim 256, 6 layers, 4 KV heads of 64, Q8_0).
func writeBenchGGUF(b *testing.B, path string) {
	b.Helper()
	vocab, err := tokenizer.BuildVocab("bpe", 600)
	require.NoError(b, err)
	w, err := synth.Model{Arch: "llama", Name: "bench", Dim: 256, Layers: 6, Heads: 4, KVHeads: 4, FFN: 768,
		Vocab: 600, ContextLength: 4096, Type: gguf.TypeQ8_0, Seed: 5}.Writer()
	require.NoError(b, err)
	for k, v := range vocab.Metadata() {
		require.NoError(b, w.Set(k, v))
	}
	require.NoError(b, w.WriteFile(path))
}

// streamTimes posts a streamed completion and returns when each text
// event arrived.
func streamTimes(c *http.Client, base, body string) ([]time.Time, error) {
	resp, err := c.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var times []time.Time
	sr := api.NewSSEReader(resp.Body)
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return times, nil
		}
		if err != nil {
			return nil, err
		}
		if ev.Data == "[DONE]" {
			return times, nil
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(ev.Data), &chunk) == nil && len(chunk.Choices) > 0 {
			times = append(times, time.Now())
		}
	}
}

// BenchmarkDisagg measures, in one run, a long prompt (about 1,200
// tokens, 75 blocks) arriving at a node that is streaming another answer: its time
// to first token, and the other stream's inter-token latency while the
// prompt is prefilled (mean and worst gap). mode=local: the node computes
// the prompt itself; mode=disagg: it pulls the prompt's KV blocks from a
// prefill node on loopback (two llmd in this process, one CPU thread
// each), and the transfer's bytes and time are reported.
//
//	go test -run '^$' -bench BenchmarkDisagg -benchtime 5x ./daemon/
func BenchmarkDisagg(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.gguf")
	writeBenchGGUF(b, path)
	long := func(i int) string {
		return fmt.Sprintf("Request %d. ", i) + strings.Repeat("The warehouse lists tents, stoves, ropes and lamps with their weights and prices. ", 28)
	}
	for _, mode := range []string{"local", "disagg"} {
		b.Run("mode="+mode, func(b *testing.B) {
			nodes := startBenchCluster(b, path, mode == "disagg")
			c := &http.Client{}
			var ttft, itlMean, itlMax time.Duration
			var bytes, pulls float64
			n := 0
			for b.Loop() {
				var wg sync.WaitGroup
				var bg []time.Time
				var bgErr error
				wg.Go(func() {
					bg, bgErr = streamTimes(c, nodes[0].base, `{"model":"bench","prompt":"Hello","max_tokens":1500,"ignore_eos":true,"temperature":0,"stream":true}`)
				})
				time.Sleep(300 * time.Millisecond) // the stream is decoding
				sent := time.Now()
				body, _ := json.Marshal(map[string]any{"model": "bench", "prompt": long(n), "max_tokens": 8, "temperature": 0,
					"stream": true, "ignore_eos": true})
				times, err := streamTimes(c, nodes[0].base, string(body))
				require.NoError(b, err)
				require.NotEmpty(b, times)
				wg.Wait()
				require.NoError(b, bgErr)
				ttft += times[0].Sub(sent)
				// The background stream's gaps that overlap the long
				// prompt's wait for its first token.
				var sum, worst time.Duration
				gaps := 0
				for i := 1; i < len(bg); i++ {
					if bg[i].Before(sent) || bg[i-1].After(times[0]) {
						continue
					}
					g := bg[i].Sub(bg[i-1])
					sum += g
					worst = max(worst, g)
					gaps++
				}
				if gaps > 0 {
					itlMean += sum / time.Duration(gaps)
				}
				itlMax += worst
				n++
			}
			if mode == "disagg" {
				bytes = benchMetric(b, nodes[0].base, `llmd_kv_transfer_bytes_total{direction="received"}`)
				pulls = benchMetric(b, nodes[0].base, `llmd_disagg_requests_total{outcome="pulled"}`)
				require.Equal(b, float64(n), pulls, "every long prompt was pulled")
				b.ReportMetric(bytes/float64(n), "kv_bytes/op")
			}
			b.ReportMetric(float64(ttft.Milliseconds())/float64(n), "ttft_ms")
			b.ReportMetric(float64(itlMean.Microseconds())/1e3/float64(n), "bg_itl_mean_ms")
			b.ReportMetric(float64(itlMax.Microseconds())/1e3/float64(n), "bg_itl_max_ms")
		})
	}
}

// startBenchCluster starts node-a (decode when disagg, else alone in the
// cluster's routing: policy local) and node-b (prefill).
func startBenchCluster(b *testing.B, path string, disagg bool) []testNode {
	b.Helper()
	nodes := make([]testNode, 2)
	for i := range 2 {
		cfg := testConfig()
		cfg.NodeID = fmt.Sprintf("node-%c", 'a'+i)
		cfg.Models, cfg.ModelFiles, cfg.CPUThreads = nil, []string{path}, 1
		cfg.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", Key: clusterTestKey, Profile: "local", RoutePolicy: cluster.PolicyLocal}
		if i > 0 {
			cfg.Cluster.Join = []string{nodes[0].s.cluster.Load().Addr()}
			cfg.Cluster.Role = cluster.RolePrefill
		} else if disagg {
			cfg.Cluster.Role, cfg.Cluster.Disagg = cluster.RoleDecode, cluster.DisaggPolicy{MinPromptTokens: 256}
		}
		s, err := Open(cfg, nil)
		require.NoError(b, err)
		nodes[i] = testNode{s: s, base: startServer(b, s)}
	}
	require.Eventually(b, func() bool { return len(nodes[0].s.cluster.Load().PrefillNodes("bench")) == 1 }, 10*time.Second, 10*time.Millisecond)
	return nodes
}

// benchMetric reads one sample of a node's /metrics.
func benchMetric(b *testing.B, base, series string) float64 {
	b.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(b, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			require.NoError(b, err)
			return f
		}
	}
	return 0
}
