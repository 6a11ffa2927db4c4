package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// The tests in this file cover disaggregated prefill and decode between
// two llmd nodes in one process (real memberlist on loopback, real HTTP,
// the CPU executor on a small random GGUF model).

// writeDisaggGGUF writes a small llama served as "tiny" (two layers,
// grouped-query attention); layers changes its KV layout.
func writeDisaggGGUF(t *testing.T, path string, layers int) {
	t.Helper()
	vocab, err := tokenizer.BuildVocab("bpe", 600)
	require.NoError(t, err)
	w, err := synth.Model{Arch: "llama", Name: "tiny", Dim: 64, Layers: layers, Heads: 4, KVHeads: 2, FFN: 128,
		Vocab: 600, ContextLength: 2048, Type: gguf.TypeQ8_0, Seed: 11}.Writer()
	require.NoError(t, err)
	for k, v := range vocab.Metadata() {
		require.NoError(t, w.Set(k, v))
	}
	require.NoError(t, w.WriteFile(path))
}

// disaggNodes starts a decode node (node-a, which gets the requests) and a
// prefill node (node-b) serving the GGUF models at paths[0] and paths[1].
func disaggNodes(t *testing.T, paths [2]string, minPrompt int) []testNode {
	t.Helper()
	return startTestCluster(t, 2, func(i int, c *Config) {
		c.Models, c.ModelFiles = nil, []string{paths[i]}
		c.CPUThreads = 1
		if i == 0 {
			c.Cluster.Role, c.Cluster.Disagg = cluster.RoleDecode, cluster.DisaggPolicy{MinPromptTokens: minPrompt}
		} else {
			c.Cluster.Role = cluster.RolePrefill
		}
	})
}

// completion posts a greedy completion of prompt and returns its id and
// text.
func completion(t *testing.T, base, prompt string) (id, text string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0})
	require.NoError(t, err)
	resp, b := post(t, testClient(t), base+"/v1/completions", string(body))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var out api.Completion
	require.NoError(t, json.Unmarshal(b, &out))
	require.Len(t, out.Choices, 1)
	return out.ID, out.Choices[0].Text
}

var disaggNote = regexp.MustCompile(`disagg long_prompt from node-b: (\d+)/(\d+) blocks (\d+)B`)

// pulled returns the blocks imported and asked for and the bytes moved of
// the disaggregation note of request id's usage row on the decode node;
// ok is false when the request was not disaggregated.
func pulled(t *testing.T, nodes []testNode, id string) (imported, asked, bytes int, ok bool) {
	t.Helper()
	row := usageRows(t, nodes, id)["node-a"]
	require.Equal(t, store.UsageFinished, row.Status, "%+v", row)
	m := disaggNote.FindStringSubmatch(row.Route)
	if m == nil {
		require.NotContains(t, row.Route, "disagg", "route %q", row.Route)
		return 0, 0, 0, false
	}
	imported, _ = strconv.Atoi(m[1])
	asked, _ = strconv.Atoi(m[2])
	bytes, _ = strconv.Atoi(m[3])
	return imported, asked, bytes, true
}

// metricValue reads one sample of a node's /metrics.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, b := get(t, testClient(t), base+"/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// disaggPrompt is a prompt of a few hundred tokens.
func disaggPrompt(topic string) string {
	return strings.Repeat("The shop sells "+topic+" and answers questions about their sizes, prices and delivery. ", 6)
}

// TestDisaggGreedyMatchesSingleNode: a decode node that pulls a long
// prompt's KV blocks from a prefill node answers exactly what one node
// alone answers; a prompt sharing a cached prefix pulls only the blocks
// the decode node lacks; a short or fully cached prompt pulls nothing;
// no block stays referenced on either node.
func TestDisaggGreedyMatchesSingleNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeDisaggGGUF(t, path, 2)
	single := newStoreServer(t, func(c *Config) { c.Models, c.ModelFiles, c.CPUThreads = nil, []string{path}, 1 })
	singleBase := startServer(t, single)
	nodes := disaggNodes(t, [2]string{path, path}, 64)

	long := disaggPrompt("bicycles")
	_, want := completion(t, singleBase, long)
	id, got := completion(t, nodes[0].base, long)
	require.Equal(t, want, got)
	imported, asked, bytes, ok := pulled(t, nodes, id)
	require.True(t, ok, "a long prompt is disaggregated")
	require.Positive(t, asked)
	require.Equal(t, asked, imported)
	require.Positive(t, bytes)
	require.Equal(t, float64(1), metricValue(t, nodes[0].base, `llmd_disagg_requests_total{outcome="pulled"}`))
	require.Equal(t, float64(asked), metricValue(t, nodes[1].base, `llmd_kv_transfer_blocks_total{direction="sent"}`))
	require.Equal(t, float64(bytes), metricValue(t, nodes[1].base, `llmd_kv_transfer_bytes_total{direction="sent"}`))

	// The same prompt again: every block is cached on the decode node.
	id, got = completion(t, nodes[0].base, long)
	require.Equal(t, want, got)
	_, _, _, ok = pulled(t, nodes, id)
	require.False(t, ok)

	// A longer prompt sharing the first: only its new blocks move.
	longer := long + disaggPrompt("tents")
	_, want = completion(t, singleBase, longer)
	id, got = completion(t, nodes[0].base, longer)
	require.Equal(t, want, got)
	imported2, asked2, bytes2, ok := pulled(t, nodes, id)
	require.True(t, ok)
	require.Equal(t, asked2, imported2)
	require.Less(t, asked2, asked+asked2-1, "the shared blocks are not asked for again")
	perBlock := bytes / asked
	require.InDelta(t, asked2*perBlock, bytes2, float64(perBlock), "bytes follow the blocks asked for")

	// A short prompt runs on the decode node alone.
	id, _ = completion(t, nodes[0].base, "Hello there, shop.")
	_, _, _, ok = pulled(t, nodes, id)
	require.False(t, ok)

	for _, nd := range nodes {
		requireIdle(t, nd.s)
	}
}

// TestDisaggMismatchRecomputes: a prefill node whose model has another KV
// layout under the same name sends blocks the decode node refuses; the
// decode node recomputes the prompt and answers as one node alone.
func TestDisaggMismatchRecomputes(t *testing.T) {
	paths := [2]string{filepath.Join(t.TempDir(), "tiny.gguf"), filepath.Join(t.TempDir(), "tiny.gguf")}
	writeDisaggGGUF(t, paths[0], 2)
	writeDisaggGGUF(t, paths[1], 3)
	single := newStoreServer(t, func(c *Config) { c.Models, c.ModelFiles, c.CPUThreads = nil, []string{paths[0]}, 1 })
	singleBase := startServer(t, single)
	nodes := disaggNodes(t, paths, 64)

	long := disaggPrompt("kayaks")
	_, want := completion(t, singleBase, long)
	id, got := completion(t, nodes[0].base, long)
	require.Equal(t, want, got)
	row := usageRows(t, nodes, id)["node-a"]
	require.Contains(t, row.Route, "disagg long_prompt from node-b failed after")
	require.Contains(t, row.Route, "recomputed")
	require.Equal(t, float64(1), metricValue(t, nodes[0].base, `llmd_disagg_requests_total{outcome="fallback"}`))
	for _, nd := range nodes {
		requireIdle(t, nd.s)
	}
}

// TestDisaggDecodeNodeGoneMidTransfer: a decode node that goes away while
// the prefill node works on its prompt (its connection cut) leaves no
// block referenced there, and the prefill node goes on serving. A client
// that is not a peer cannot call the prefill route.
func TestDisaggDecodeNodeGoneMidTransfer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeDisaggGGUF(t, path, 2)
	nodes := disaggNodes(t, [2]string{path, path}, 64)
	prefill := nodes[1]

	auth, err := peer.NewAuth(clusterTestKey)
	require.NoError(t, err)
	f := peer.NewForwarder(peer.Config{NodeID: "node-a", Auth: auth, ForwardTimeout: 2 * time.Second, Stall: 2 * time.Second})
	defer f.Close()
	var member cluster.Member
	for _, m := range nodes[0].s.cluster.Load().Members() {
		if m.ID == "node-b" {
			member = m
		}
	}
	require.Equal(t, cluster.RolePrefill, member.Role)
	resp, b := get(t, testClient(t), nodes[0].base+"/v1/admin/nodes")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var nl api.NodeList
	require.NoError(t, json.Unmarshal(b, &nl))
	roles := map[string]string{}
	for _, n := range nl.Nodes {
		roles[n.ID] = n.Role
	}
	require.Equal(t, map[string]string{"node-a": "decode", "node-b": "prefill"}, roles)
	prompt := make([]int32, 1500)
	for i := range prompt {
		prompt[i] = int32(3 + i%500)
	}
	job := &pipeline.Job{ID: "chatcmpl-gone1", Principal: pipeline.Principal{Tenant: store.LocalTenant}, Tier: store.TierPaid}
	// Cut at different points: during the prefill, or while the blocks
	// are exported or sent (the later cuts may come too late).
	for i, cut := range []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(t.Context(), cut)
		job.ID = fmt.Sprintf("chatcmpl-gone%d", i)
		_, err := f.PullKV(ctx, member, job, pipeline.KVPrefillRequest{Model: "tiny", Prompt: prompt, Want: []int{0, 1, 2}})
		cancel()
		if i == 0 {
			require.Error(t, err)
		}
		t.Logf("cut after %s: %v", cut, err)
	}
	requireIdle(t, prefill.s)

	// A whole pull works, and then nothing stays referenced either.
	job.ID = "chatcmpl-whole"
	data, err := f.PullKV(t.Context(), member, job, pipeline.KVPrefillRequest{Model: "tiny", Prompt: prompt, Want: []int{0, 1, 2}})
	require.NoError(t, err)
	require.NotEmpty(t, data)
	requireIdle(t, prefill.s)

	// Bad requests are refused with a clear error.
	job.ID = "chatcmpl-bad"
	_, err = f.PullKV(t.Context(), member, job, pipeline.KVPrefillRequest{Model: "tiny", Prompt: prompt, Want: []int{2, 1}})
	require.ErrorContains(t, err, "ascending")
	job.ID = "chatcmpl-absent"
	_, err = f.PullKV(t.Context(), member, job, pipeline.KVPrefillRequest{Model: "absent", Prompt: prompt})
	require.ErrorContains(t, err, "404")

	resp, b = post(t, testClient(t), prefill.base+pipeline.KVPrefillPath, `{"model":"tiny","prompt":[1,2,3]}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
	_, text := completion(t, prefill.base, "Still serving?")
	require.NotEmpty(t, text)
}
