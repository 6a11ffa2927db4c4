package daemon

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

// writeKVTestGGUF writes a small llama model (heads of headDim dims) with a
// byte-level BPE vocabulary and a ChatML template to path.
func writeKVTestGGUF(t *testing.T, path string, headDim int) {
	writeTestGGUFOf(t, path, headDim, gguf.TypeQ8_0)
}

// writeTestGGUFOf is writeKVTestGGUF with weights of type typ.
func writeTestGGUFOf(t *testing.T, path string, headDim int, typ gguf.TensorType) {
	t.Helper()
	vocab, err := tokenizer.BuildVocab("bpe", 600)
	require.NoError(t, err)
	w, err := synth.Model{Arch: "llama", Name: "tiny", Dim: 64, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: headDim, FFN: 64,
		Vocab: 600, ContextLength: 512, Type: typ, Seed: 7}.Writer()
	require.NoError(t, err)
	for k, v := range vocab.Metadata() {
		require.NoError(t, w.Set(k, v))
	}
	w.SetString("tokenizer.chat_template", testChatML)
	require.NoError(t, w.WriteFile(path))
}

// TestGGUFQuantizedKVCache serves one model with an F16 and with a Q8_0
// KV cache of the same size through HTTP: the Q8_0 cache holds 64/34
// times the blocks, says its type in the load log and /metrics
// (vllm:cache_config_info's cache_dtype), generates, and gives
// the same greedy text again from its cached (quantized) prompt blocks.
func TestGGUFQuantizedKVCache(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeKVTestGGUF(t, path, 32)
	const req = `{"model":"tiny","max_tokens":16,"temperature":0,"messages":[{"role":"user","content":"the quick brown fox"}]}`
	blocks := map[string]int{}
	for _, kv := range []string{"f16", "q8_0"} {
		var logs syncBuffer
		cfg := testConfig()
		cfg.Models = nil
		cfg.ModelFiles = []string{path}
		cfg.KVCacheBytes = 1 << 20
		cfg.KVCacheType = kv
		s, err := Open(cfg, newBufferLogger(&logs))
		require.NoError(t, err, kv)
		base := startServer(t, s)
		c := testClient(t)
		require.Contains(t, logs.String(), `"kv_type":"`+kv+`"`)

		var texts []string
		for range 2 {
			resp, body := post(t, c, base+"/v1/chat/completions", req)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", kv, body)
			var cc api.ChatCompletion
			require.NoError(t, json.Unmarshal(body, &cc))
			require.Positive(t, cc.Usage.CompletionTokens, kv)
			texts = append(texts, cc.Choices[0].Message.Content)
		}
		require.Equal(t, texts[0], texts[1], "%s: greedy text from the cached prompt blocks", kv)

		resp, body := get(t, c, base+"/v1/stats")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var st api.StatsResponse
		require.NoError(t, json.Unmarshal(body, &st))
		require.Len(t, st.Models, 1)
		require.Positive(t, st.Models[0].BlocksCached, "%s: the prompt's blocks stay cached", kv)
		blocks[kv] = st.Models[0].BlocksTotal
		resp, body = get(t, c, base+"/metrics")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), `cache_dtype="`+kv+`"`)
		requireIdle(t, s)
	}
	// 1 MiB over 16 tokens of one layer's one KV head, K and V of 32 dims.
	require.Equal(t, (1<<20)/(16*2*64), blocks["f16"])
	require.Equal(t, (1<<20)/(16*2*34), blocks["q8_0"])
}

// TestGGUFQuantizedKVCacheRefused checks that an unknown KV cache type
// fails validation and that a quantized type fails the load of a model
// whose head dim is not a multiple of 32, saying why.
func TestGGUFQuantizedKVCacheRefused(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.KVCacheType = "q5_1"
	err := cfg.Validate()
	require.ErrorContains(t, err, "kv cache type")
	require.ErrorContains(t, err, "q4_0")

	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeKVTestGGUF(t, path, 16)
	cfg = testConfig()
	cfg.Models = nil
	cfg.ModelFiles = []string{path}
	cfg.KVCacheType = "q4_0"
	_, err = Open(cfg, testLogger(t))
	require.ErrorContains(t, err, "multiples of 32")
}

// TestLoadWithKVCacheType: a model loaded while llmd runs takes its own
// KV cache type (kv_cache_type), else llmd's; a bad one is a 400.
func TestLoadWithKVCacheType(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeKVTestGGUF(t, path, 32)
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.KVCacheBytes = 1 << 20
	var logs syncBuffer
	d, err := Open(cfg, newBufferLogger(&logs))
	require.NoError(t, err)
	c := fleetClient(t, startServer(t, d))
	_, err = c.LoadModel(t.Context(), api.ModelLoadRequest{Source: path, ID: "tiny-q8", KVCacheType: "q8_0"}, nil)
	require.NoError(t, err)
	_, err = c.LoadModel(t.Context(), api.ModelLoadRequest{Source: path, ID: "tiny-f16"}, nil)
	require.NoError(t, err)
	st, err := c.Stats(t.Context())
	require.NoError(t, err)
	blocks := map[string]int{}
	for _, m := range st.Models {
		blocks[m.Model] = m.BlocksTotal
	}
	require.Equal(t, (1<<20)/(16*2*34), blocks["tiny-q8"])
	require.Equal(t, (1<<20)/(16*2*64), blocks["tiny-f16"], "llmd's type, f16")

	_, err = c.LoadModel(t.Context(), api.ModelLoadRequest{Source: path, ID: "tiny-x", KVCacheType: "q5_1"}, nil)
	var se *api.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadRequest, se.StatusCode)
	require.Contains(t, se.Error(), "q5_1")
}
