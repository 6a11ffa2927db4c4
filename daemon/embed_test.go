package daemon

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
	"github.com/llmd/llmd/store"
)

// writeEmbedGGUF writes a small random embedding model with a built
// WordPiece vocabulary of 600 tokens to path.
func writeEmbedGGUF(t *testing.T, path string, m synth.Model) {
	t.Helper()
	vocab, err := tokenizer.BuildVocab("wordpiece", 600)
	require.NoError(t, err)
	m.Dim, m.Layers, m.Heads, m.FFN, m.Vocab, m.Type, m.Seed = 32, 2, 2, 64, 600, gguf.TypeF16, 5
	w, err := m.Writer()
	require.NoError(t, err)
	for k, v := range vocab.Metadata() {
		require.NoError(t, w.Set(k, v))
	}
	require.NoError(t, w.WriteFile(path))
}

// embedServer serves three GGUF models: "bge" (bert, CLS pooling, a
// context of 24 tokens), "nomic" (nomic-bert, Matryoshka) and "tiny" (a
// generative llama); with a store when store is set.
func embedServer(t *testing.T, withStore bool) (*Daemon, string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	paths := map[string]string{"bge": filepath.Join(dir, "bge.gguf"), "nomic": filepath.Join(dir, "nomic.gguf"),
		"tiny": filepath.Join(dir, "tiny.gguf")}
	writeEmbedGGUF(t, paths["bge"], synth.Model{Arch: "bert", Name: "bge", ContextLength: 24, Pooling: "cls"})
	writeEmbedGGUF(t, paths["nomic"], synth.Model{Arch: "nomic-bert", Name: "nomic", ContextLength: 128, Matryoshka: true})
	writeTestGGUF(t, paths["tiny"])
	cfg := testConfig()
	cfg.Models = nil
	cfg.CPUThreads = 2
	cfg.ModelFiles = []string{paths["bge"], paths["nomic"], paths["tiny"]}
	if withStore {
		cfg.DataDir = t.TempDir()
	}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	return s, startServer(t, s), paths
}

// directEmbeddings computes the embeddings of texts with the model file
// itself: its tokenizer and an Embedder of its own, no server.
func directEmbeddings(t *testing.T, path string, texts ...string) [][]float32 {
	t.Helper()
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	tok, err := tokenizer.New(f)
	require.NoError(t, err)
	e, err := cpu.NewEmbedder(f, cpu.EmbedConfig{Threads: 1})
	require.NoError(t, err)
	defer e.Close()
	var inputs [][]int32
	for _, s := range texts {
		inputs = append(inputs, tok.Encode(s, true))
	}
	out, err := e.Embed(t.Context(), inputs)
	require.NoError(t, err)
	return out
}

func requireClose(t *testing.T, want []float32, got []float64, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		require.InDelta(t, want[i], got[i], 1e-6, "%s: value %d", msg, i)
	}
}

// TestEmbeddingsSDK drives /v1/embeddings with the official OpenAI Go
// SDK: one string, a batch of strings, token ids, base64, dimensions;
// each vector the model file's own embedding of the input.
func TestEmbeddingsSDK(t *testing.T) {
	t.Parallel()
	_, base, paths := embedServer(t, false)
	client := sdkClient(t, base)
	texts := []string{"The small server woke before dawn.", "A good cache saves time.", "hello"}
	want := directEmbeddings(t, paths["bge"], texts...)

	res, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "bge",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[0])}})
	require.NoError(t, err)
	require.Len(t, res.Data, 1)
	require.Equal(t, "bge", res.Model)
	requireClose(t, want[0], res.Data[0].Embedding, "one string")
	require.Positive(t, res.Usage.PromptTokens)
	require.Equal(t, res.Usage.PromptTokens, res.Usage.TotalTokens)

	res, err = client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "bge",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}})
	require.NoError(t, err)
	require.Len(t, res.Data, 3)
	for i := range texts {
		require.Equal(t, int64(i), res.Data[i].Index)
		requireClose(t, want[i], res.Data[i].Embedding, texts[i])
	}

	// Token ids: the tokenizer's ids of the first text give its vector.
	f, err := gguf.Open(paths["bge"])
	require.NoError(t, err)
	tok, err := tokenizer.New(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	var ids [][]int64
	for _, s := range texts[:2] {
		var l []int64
		for _, id := range tok.Encode(s, true) {
			l = append(l, int64(id))
		}
		ids = append(ids, l)
	}
	res, err = client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "bge",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: ids}})
	require.NoError(t, err)
	requireClose(t, want[1], res.Data[1].Embedding, "token arrays")
	res, err = client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "bge",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: ids[0]}})
	require.NoError(t, err)
	requireClose(t, want[0], res.Data[0].Embedding, "token ids")
	require.Equal(t, int64(len(ids[0])), res.Usage.PromptTokens)

	// base64: the float32 bytes.
	res, err = client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "bge",
		Input:          openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[0])},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64})
	require.NoError(t, err)
	var b64 string
	require.NoError(t, json.Unmarshal([]byte(res.Data[0].JSON.Embedding.Raw()), &b64))
	v, err := api.DecodeBase64Floats(b64)
	require.NoError(t, err)
	require.Equal(t, want[0], v, "base64 carries the exact float32 bits")

	// dimensions on a Matryoshka model: the leading values, renormalised.
	full := directEmbeddings(t, paths["nomic"], texts[0])[0]
	res, err = client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "nomic",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[0])}, Dimensions: openai.Int(8)})
	require.NoError(t, err)
	require.Len(t, res.Data[0].Embedding, 8)
	var norm float64
	for _, x := range full[:8] {
		norm += float64(x) * float64(x)
	}
	for i, x := range res.Data[0].Embedding {
		require.InDelta(t, float64(full[i])/math.Sqrt(norm), x, 1e-6)
	}
}

// TestEmbeddingsBatchedAcrossRequests sends many requests at once: all
// are answered with their own vectors, in fewer forward passes than
// requests (the batcher merged them).
func TestEmbeddingsBatchedAcrossRequests(t *testing.T) {
	t.Parallel()
	s, base, paths := embedServer(t, false)
	c := testClient(t)
	texts := []string{"one", "two words", "three little words", "the river ran quietly", "bread cheese apples"}
	want := directEmbeddings(t, paths["bge"], texts...)
	const rounds = 8
	var wg sync.WaitGroup
	for r := range rounds {
		for i, text := range texts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, b := post(t, c, base+"/v1/embeddings", `{"model":"bge","input":"`+text+`"}`)
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
				var er api.EmbeddingResponse
				require.NoError(t, json.Unmarshal(b, &er))
				got, err := er.Data[0].Floats()
				require.NoError(t, err)
				require.Equal(t, want[i], got, "round %d text %q", r, text)
			}()
		}
	}
	wg.Wait()
	found := false
	for _, m := range s.Stats() {
		if m.Model == "bge" {
			found = true
			require.Equal(t, uint64(rounds*len(texts)), m.Completed)
			require.Less(t, m.Steps, m.Completed, "concurrent requests share forward passes")
			require.Positive(t, m.Steps)
		}
	}
	require.True(t, found)
}

// TestEmbeddingsErrors checks the refusals: each a 400 with a message
// that says what is wrong, never a 500.
func TestEmbeddingsErrors(t *testing.T) {
	t.Parallel()
	_, base, _ := embedServer(t, false)
	c := testClient(t)
	long := strings.Repeat("word ", 40)
	cases := map[string]struct {
		body     string
		status   int
		contains string
	}{
		"generative model":        {`{"model":"tiny","input":"hi"}`, 400, "does not support embeddings"},
		"unknown model":           {`{"model":"nope","input":"hi"}`, 404, "does not exist"},
		"no input":                {`{"model":"bge"}`, 400, "input"},
		"empty array":             {`{"model":"bge","input":[]}`, 400, "empty"},
		"mixed array":             {`{"model":"bge","input":["a",1]}`, 400, "input must be"},
		"empty token list":        {`{"model":"bge","input":[[1],[]]}`, 400, "at least one token"},
		"token outside the vocab": {`{"model":"bge","input":[1,600]}`, 400, "not a token id"},
		"negative token":          {`{"model":"bge","input":[-1]}`, 400, "not a token id"},
		"too long":                {`{"model":"bge","input":"` + long + `"}`, 400, "maximum context length is 24"},
		"bad encoding":            {`{"model":"bge","input":"hi","encoding_format":"hex"}`, 400, "encoding_format"},
		"dimensions not allowed":  {`{"model":"bge","input":"hi","dimensions":8}`, 400, "Matryoshka"},
		"dimensions too many":     {`{"model":"nomic","input":"hi","dimensions":64}`, 400, "exceeds"},
		"dimensions zero":         {`{"model":"nomic","input":"hi","dimensions":0}`, 400, "at least 1"},
		"chat to embedding model": {`{"model":"bge","messages":[{"role":"user","content":"hi"}]}`, 400, "embedding model"},
	}
	for name, tc := range cases {
		path := "/v1/embeddings"
		if strings.Contains(tc.body, "messages") {
			path = "/v1/chat/completions"
		}
		resp, b := post(t, c, base+path, tc.body)
		require.Equal(t, tc.status, resp.StatusCode, "%s: %s", name, b)
		require.Contains(t, errorOf(t, b)["message"], tc.contains, name)
	}
	// The same dimensions as the model's are allowed on any model.
	resp, b := post(t, c, base+"/v1/embeddings", `{"model":"bge","input":"hi","dimensions":32}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	// /v1/models shows the kind.
	resp, b = get(t, c, base+"/v1/models")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var ml api.ModelList
	require.NoError(t, json.Unmarshal(b, &ml))
	kinds := map[string]string{}
	for _, m := range ml.Data {
		kinds[m.ID] = m.Kind
	}
	require.Equal(t, map[string]string{"bge": "embedding", "nomic": "embedding", "tiny": ""}, kinds)
}

// TestOllamaEmbed checks /api/embed and the legacy /api/embeddings.
func TestOllamaEmbed(t *testing.T) {
	t.Parallel()
	_, base, paths := embedServer(t, false)
	c := testClient(t)
	want := directEmbeddings(t, paths["bge"], "why is the sky blue?", "hello")

	resp, b := post(t, c, base+"/api/embed", `{"model":"bge:latest","input":["why is the sky blue?","hello"]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var er api.OllamaEmbedResponse
	require.NoError(t, json.Unmarshal(b, &er))
	require.Equal(t, "bge:latest", er.Model)
	require.Equal(t, want, er.Embeddings)
	require.Positive(t, er.PromptEvalCount)
	require.Positive(t, er.TotalDuration)
	raw := jsonMap(t, string(b))
	for _, k := range []string{"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"} {
		require.Contains(t, raw, k)
	}

	resp, b = post(t, c, base+"/api/embed", `{"model":"bge","input":"hello"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &er))
	require.Equal(t, want[1:], er.Embeddings)

	// truncate (default true) cuts a long input; false refuses it.
	long := strings.Repeat("word ", 40)
	resp, b = post(t, c, base+"/api/embed", `{"model":"bge","input":"`+long+`"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &er))
	require.Equal(t, 24, er.PromptEvalCount)
	resp, b = post(t, c, base+"/api/embed", `{"model":"bge","input":"`+long+`","truncate":false}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	require.Contains(t, jsonMap(t, string(b))["error"], "context length")

	// No input: the model is loaded, no vectors.
	resp, b = post(t, c, base+"/api/embed", `{"model":"bge","input":""}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &er))
	require.Empty(t, er.Embeddings)
	require.NotNil(t, er.Embeddings)

	// dimensions on a Matryoshka model.
	resp, b = post(t, c, base+"/api/embed", `{"model":"nomic","input":"hello","dimensions":4}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &er))
	require.Len(t, er.Embeddings[0], 4)

	// The legacy route: one prompt, one embedding.
	resp, b = post(t, c, base+"/api/embeddings", `{"model":"bge","prompt":"hello"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var legacy api.OllamaEmbeddingResponse
	require.NoError(t, json.Unmarshal(b, &legacy))
	requireClose(t, want[1], legacy.Embedding, "legacy")

	// Errors in Ollama's shape.
	for body, msg := range map[string]string{
		`{"model":"tiny","input":"hi"}`:  "does not support embeddings",
		`{"model":"tiny","prompt":"hi"}`: "does not support embeddings",
		`{"model":"nope","input":"hi"}`:  "not found",
		`{"input":"hi"}`:                 "model is required",
		`{"model":"bge","input":3}`:      "input must be",
	} {
		path := "/api/embed"
		if strings.Contains(body, "prompt") {
			path = "/api/embeddings"
		}
		resp, b := post(t, c, base+path, body)
		require.GreaterOrEqual(t, resp.StatusCode, 400, "%s", body)
		require.Less(t, resp.StatusCode, 500, "%s", body)
		require.Contains(t, jsonMap(t, string(b))["error"], msg, body)
	}
	// Chat and generate to an embedding model: 400.
	for p, body := range map[string]string{
		"/api/chat":     `{"model":"bge","stream":false,"messages":[{"role":"user","content":"hi"}]}`,
		"/api/generate": `{"model":"bge","stream":false,"prompt":"hi"}`,
	} {
		resp, b := post(t, c, base+p, body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", p, b)
		require.Contains(t, jsonMap(t, string(b))["error"], "embedding model")
	}
	// /api/show lists the embedding capability.
	resp, b = post(t, c, base+"/api/show", `{"model":"bge"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var show api.OllamaShowResponse
	require.NoError(t, json.Unmarshal(b, &show))
	require.Equal(t, []string{"embedding"}, show.Capabilities)
	require.Equal(t, "bert", show.ModelInfo["general.architecture"])
}

// TestEmbeddingsMeteredAndLimited checks that embeddings are billed as
// input tokens (a usage row with endpoint "embeddings") and that a
// tenant's tokens-per-minute quota applies to them.
func TestEmbeddingsMeteredAndLimited(t *testing.T) {
	t.Parallel()
	s, base, _ := embedServer(t, true)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	c := testClient(t)

	resp, b := call(t, c, http.MethodPost, base+"/v1/embeddings", key, `{"model":"bge","input":["hello world","a good cache"]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var er api.EmbeddingResponse
	require.NoError(t, json.Unmarshal(b, &er))
	id := resp.Header.Get("X-Request-Id")
	require.NotEmpty(t, id)
	var ev store.UsageEvent
	require.Eventually(t, func() bool {
		var err error
		ev, err = s.deps.Store.UsageEvent(t.Context(), id)
		return err == nil && ev.Status == store.UsageFinished
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "embeddings", ev.Endpoint)
	require.Equal(t, "acme", ev.Tenant)
	require.Equal(t, "bge", ev.Model)
	require.Equal(t, int64(er.Usage.PromptTokens), ev.InputTokens)
	require.Zero(t, ev.OutputTokens)

	// A quota of fewer tokens per minute than a request's inputs: 429.
	setQuota(t, s, "acme", store.QuotaUpdate{TPM: i64(int64(er.Usage.PromptTokens) - 1)})
	resp, b = call(t, c, http.MethodPost, base+"/v1/embeddings", key, `{"model":"bge","input":["hello world","a good cache"]}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	require.Contains(t, errorOf(t, b)["message"], "tokens-per-minute")

	// keep_alive needs an admin key.
	resp, b = call(t, c, http.MethodPost, base+"/api/embed", key, `{"model":"bge","input":"hi","keep_alive":0}`)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)

	// Without a key: 401.
	resp, _ = call(t, c, http.MethodPost, base+"/v1/embeddings", "", `{"model":"bge","input":"hi"}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestEmbeddingsThroughAPeer: an embedding model only node b serves
// answers through node a, on OpenAI's and Ollama's routes; the vectors are
// the model file's own, node a bills the tokens node b counted (one row,
// a's), and node b bills nothing.
func TestEmbeddingsThroughAPeer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bge.gguf")
	writeEmbedGGUF(t, path, synth.Model{Arch: "bert", Name: "bge", ContextLength: 24, Pooling: "cls"})
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Models = nil
			c.CPUThreads = 1
			c.ModelFiles = []string{path}
		}
	})
	a := nodes[0]
	c := testClient(t)
	texts := []string{"The small server woke before dawn.", "hello"}
	want := directEmbeddings(t, path, texts...)

	resp, raw := post(t, c, a.base+"/v1/embeddings", `{"model":"bge","input":["The small server woke before dawn.","hello"]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var er api.EmbeddingResponse
	require.NoError(t, json.Unmarshal(raw, &er))
	require.Len(t, er.Data, 2)
	for i, d := range er.Data {
		got, err := d.Floats()
		require.NoError(t, err)
		g := make([]float64, len(got))
		for j, x := range got {
			g[j] = float64(x)
		}
		requireClose(t, want[i], g, texts[i])
	}
	require.Positive(t, er.Usage.PromptTokens)
	rows := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))
	require.Len(t, rows, 1, "billed once, where it entered")
	require.Equal(t, store.UsageFinished, rows["node-a"].Status)
	require.EqualValues(t, er.Usage.PromptTokens, rows["node-a"].InputTokens, "the serving node's count")
	require.True(t, strings.HasPrefix(rows["node-a"].Route, "node-b "), rows["node-a"].Route)

	// Ollama's /api/embed truncates by default: an input past the
	// model's 24 tokens is cut on b, as it would be locally.
	long := strings.Repeat("cache ", 60)
	resp, raw = post(t, c, a.base+"/api/embed", fmt.Sprintf(`{"model":"bge","input":[%q]}`, long))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var oe api.OllamaEmbedResponse
	require.NoError(t, json.Unmarshal(raw, &oe))
	require.Len(t, oe.Embeddings, 1)
	require.Equal(t, 24, oe.PromptEvalCount)

	// OpenAI's refuses it, with b's error passed on.
	resp, raw = post(t, c, a.base+"/v1/embeddings", fmt.Sprintf(`{"model":"bge","input":%q}`, long))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", raw)
	require.Contains(t, errorOf(t, raw)["message"], "maximum context length")
	requireIdle(t, a.s)
	requireIdle(t, nodes[1].s)
}
