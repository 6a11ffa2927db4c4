package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

// writeDisaggModel writes a random llama ("bench") whose prefill of a few
// thousand tokens takes a while on one thread.
func writeDisaggModel(t *testing.T) string {
	t.Helper()
	vocab, err := tokenizer.BuildVocab("bpe", 600)
	require.NoError(t, err)
	w, err := synth.Model{Arch: "llama", Name: "bench", Dim: 256, Layers: 6, Heads: 4, KVHeads: 4, FFN: 768,
		Vocab: 600, ContextLength: 8192, Type: gguf.TypeQ8_0, Seed: 5}.Writer()
	require.NoError(t, err)
	for k, v := range vocab.Metadata() {
		require.NoError(t, w.Set(k, v))
	}
	path := filepath.Join(t.TempDir(), "bench.gguf")
	require.NoError(t, w.WriteFile(path))
	return path
}

// modelStats reads base's /v1/stats for its one model.
func modelStats(c *http.Client, base string) (api.EngineStats, bool) {
	resp, err := c.Get(base + "/v1/stats")
	if err != nil {
		return api.EngineStats{}, false
	}
	defer resp.Body.Close()
	var st api.StatsResponse
	if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Models) != 1 {
		return api.EngineStats{}, false
	}
	return st.Models[0], true
}

// TestDisaggKill9DecodeNodeMidTransfer: two llmd processes, node-a
// (--role prefill) and node-b (--role decode). A long prompt entering at
// node-a is routed to node-b, which asks node-a to prefill it; node-b is
// killed with SIGKILL while node-a computes the prompt for it. The request
// completes on node-a (the forward failed before its first token), with
// the text node-a gives alone, and node-a's KV blocks are all free
// afterwards.
func TestDisaggKill9DecodeNodeMidTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts two llmd processes; make test runs it")
	}
	bin := buildLLMD(t)
	model := writeDisaggModel(t)
	key := "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	first := freeAddr(t)
	common := []string{"--gossip-key", key, "--model", model, "--cpu-threads", "1", "--forward-timeout", "10s"}
	prefill := startNode(t, bin, "node-a", append(common, "--gossip-addr", first, "--role", "prefill")...)
	decode := startNode(t, bin, "node-b", append(common, "--gossip-addr", freeAddr(t), "--join", first, "--role", "decode",
		"--disagg-min-prompt", "64")...)
	c := &http.Client{Timeout: 2 * time.Minute}
	for _, p := range []*llmdProc{prefill, decode} {
		require.Eventually(t, func() bool { return aliveNodes(c, p.base) == 2 }, 20*time.Second, 50*time.Millisecond)
	}

	prompt := strings.Repeat("The warehouse lists tents, stoves, ropes and lamps with their weights and prices. ", 70)
	body, _ := json.Marshal(map[string]any{"model": "bench", "prompt": prompt, "max_tokens": 8, "temperature": 0})
	type answer struct {
		status int
		text   string
		err    error
	}
	send := func() answer {
		resp, err := c.Post(prefill.base+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		var out api.Completion
		if err == nil && resp.StatusCode == http.StatusOK {
			err = json.Unmarshal(b, &out)
		}
		a := answer{status: resp.StatusCode, err: err}
		if len(out.Choices) > 0 {
			a.text = out.Choices[0].Text
		} else {
			a.text = string(b)
		}
		return a
	}
	done := make(chan answer, 1)
	go func() { done <- send() }()
	// node-a runs the prompt for node-b: a running sequence there.
	require.Eventually(t, func() bool {
		st, ok := modelStats(c, prefill.base)
		return ok && st.Running > 0
	}, 60*time.Second, 2*time.Millisecond, "node-a never prefilled for node-b; stderr:\n%s", decode.stderr.String())
	decode.kill9(t)

	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, http.StatusOK, got.status, got.text)
	// node-a alone (node-b is dead now) gives the same text.
	again := send()
	require.NoError(t, again.err)
	require.Equal(t, http.StatusOK, again.status, again.text)
	require.Equal(t, again.text, got.text)
	require.Eventually(t, func() bool {
		st, ok := modelStats(c, prefill.base)
		return ok && st.BlocksUsed == 0 && st.Running == 0 && st.Waiting == 0
	}, 10*time.Second, 10*time.Millisecond, "node-a's blocks stay in use")
	require.Contains(t, prefill.stderr.String(), "KV prefill for a peer failed", "node-a saw node-b go away mid-transfer")
	t.Logf("answer %q", got.text)
}
