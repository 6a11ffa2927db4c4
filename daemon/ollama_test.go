package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/store"
)

// The tests in this file drive llmd's Ollama API with Ollama's own Go
// client (github.com/ollama/ollama/api), against a real llmd.

// keyTransport adds a bearer key to every request.
type keyTransport struct {
	key string
	rt  http.RoundTripper
}

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return k.rt.RoundTrip(r)
}

func ollamaClient(t *testing.T, base, key string) *ollama.Client {
	u, err := url.Parse(base)
	require.NoError(t, err)
	hc := testClient(t)
	if key != "" {
		hc.Transport = keyTransport{key: key, rt: hc.Transport}
	}
	return ollama.NewClient(u, hc)
}

func statusError(t *testing.T, err error) ollama.StatusError {
	t.Helper()
	var se ollama.StatusError
	require.True(t, errors.As(err, &se), "%v", err)
	return se
}

func TestOllamaClientChat(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := ollamaClient(t, base, "")
	req := &ollama.ChatRequest{
		Model: "sim/small:latest",
		Messages: []ollama.Message{
			{Role: "system", Content: "You are terse."},
			{Role: "user", Content: "Tell me about paged attention."},
		},
		Options: map[string]any{"num_predict": 12, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 3, "num_ctx": 4096},
	}
	var (
		streamed strings.Builder
		lines    int
		last     ollama.ChatResponse
	)
	require.NoError(t, client.Chat(t.Context(), req, func(r ollama.ChatResponse) error {
		lines++
		require.False(t, last.Done, "nothing after the final object")
		require.Equal(t, "sim/small:latest", r.Model, "the model as the client named it")
		require.Equal(t, "assistant", r.Message.Role)
		require.False(t, r.CreatedAt.IsZero())
		streamed.WriteString(r.Message.Content)
		last = r
		return nil
	}))
	require.True(t, last.Done)
	require.Equal(t, "length", last.DoneReason)
	require.Equal(t, 12, last.EvalCount)
	require.Equal(t, 13, lines, "a line per token, then the final one")
	require.Positive(t, last.PromptEvalCount)
	require.Positive(t, last.TotalDuration)
	require.Positive(t, last.PromptEvalDuration)
	require.Positive(t, last.EvalDuration)
	require.LessOrEqual(t, last.PromptEvalDuration+last.EvalDuration, last.TotalDuration)

	stream := false
	req.Stream = &stream
	var whole []ollama.ChatResponse
	require.NoError(t, client.Chat(t.Context(), req, func(r ollama.ChatResponse) error {
		whole = append(whole, r)
		return nil
	}))
	require.Len(t, whole, 1)
	assert.True(t, whole[0].Done)
	assert.Equal(t, streamed.String(), whole[0].Message.Content, "the same seed, the same answer")
	assert.Equal(t, last.PromptEvalCount, whole[0].PromptEvalCount)
	assert.Equal(t, 12, whole[0].EvalCount)
}

func TestOllamaClientGenerate(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := ollamaClient(t, base, "")
	var text strings.Builder
	var last ollama.GenerateResponse
	require.NoError(t, client.Generate(t.Context(), &ollama.GenerateRequest{Model: "sim/small", Prompt: "Why is the sky blue?",
		System: "Be brief.", Options: map[string]any{"num_predict": 8, "stop": []string{"zzz"}}}, func(r ollama.GenerateResponse) error {
		text.WriteString(r.Response)
		last = r
		return nil
	}))
	require.True(t, last.Done)
	require.Equal(t, 8, last.EvalCount)
	require.NotEmpty(t, text.String())

	// raw: the prompt as it is, no template (so fewer prompt tokens).
	var raw ollama.GenerateResponse
	require.NoError(t, client.Generate(t.Context(), &ollama.GenerateRequest{Model: "sim/small", Prompt: "Why is the sky blue?", Raw: true,
		Options: map[string]any{"num_predict": 4}}, func(r ollama.GenerateResponse) error {
		raw = r
		return nil
	}))
	require.True(t, raw.Done)
	require.Less(t, raw.PromptEvalCount, last.PromptEvalCount)

	// format: a JSON Schema constrains the answer.
	schema := `{"type":"object","properties":{"color":{"enum":["red","blue"]},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["color","n"]}`
	no := false
	var out ollama.GenerateResponse
	require.NoError(t, client.Generate(t.Context(), &ollama.GenerateRequest{Model: "sim/small", Prompt: "Pick.", Stream: &no,
		Format: json.RawMessage(schema), Options: map[string]any{"num_predict": 100}}, func(r ollama.GenerateResponse) error {
		out = r
		return nil
	}))
	var v struct {
		Color string
		N     *int
	}
	require.NoError(t, json.Unmarshal([]byte(out.Response), &v), out.Response)
	require.Contains(t, []string{"red", "blue"}, v.Color)
	require.NotNil(t, v.N)
	require.Equal(t, "stop", out.DoneReason)
}

func TestOllamaClientModels(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := ollamaClient(t, base, "")
	list, err := client.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list.Models, 1)
	m := list.Models[0]
	assert.Equal(t, "sim/small:latest", m.Name)
	assert.Equal(t, "sim/small:latest", m.Model)
	assert.Len(t, m.Digest, 64)
	assert.Equal(t, "8.0B", m.Details.ParameterSize)
	assert.NotEmpty(t, m.Details.QuantizationLevel)

	ps, err := client.ListRunning(t.Context())
	require.NoError(t, err)
	require.Len(t, ps.Models, 1)
	assert.Equal(t, 32768, ps.Models[0].ContextLength)
	assert.True(t, ps.Models[0].ExpiresAt.After(time.Now().Add(24*time.Hour)), "no keep_alive: loaded for good")

	show, err := client.Show(t.Context(), &ollama.ShowRequest{Model: "sim/small:latest"})
	require.NoError(t, err)
	assert.Contains(t, show.Parameters, "num_ctx 32768")
	assert.EqualValues(t, 32768, show.ModelInfo["sim.context_length"])
	assert.Contains(t, fmt.Sprint(show.Capabilities), "completion")

	v, err := client.Version(t.Context())
	require.NoError(t, err)
	assert.NotEmpty(t, v)

	_, err = client.Show(t.Context(), &ollama.ShowRequest{Model: "llama3:latest"})
	se := statusError(t, err)
	assert.Equal(t, http.StatusNotFound, se.StatusCode)
	assert.Contains(t, se.ErrorMessage, `model "llama3" not found, try pulling it first`)

	_, err = client.Embed(t.Context(), &ollama.EmbedRequest{Model: "sim/small", Input: "hello"})
	se = statusError(t, err)
	assert.Equal(t, http.StatusBadRequest, se.StatusCode)
	assert.Contains(t, se.ErrorMessage, "does not support embeddings")
}

// TestOllamaShowGGUF: /api/show of a GGUF model reports its chat
// template, details and metadata (model_info) from the file.
func TestOllamaShowGGUF(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Models = nil
	cfg.ModelFiles = []string{filepath.Join(fixtures.Dir(t), "qwen2-d64-q8_0.gguf")}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	client := ollamaClient(t, base, "")
	show, err := client.Show(t.Context(), &ollama.ShowRequest{Model: "qwen2-d64-q8_0:latest"})
	require.NoError(t, err)
	assert.Equal(t, "qwen2", show.Details.Family)
	assert.Equal(t, "gguf", show.Details.Format)
	assert.Equal(t, "Q8_0", show.Details.QuantizationLevel)
	assert.Equal(t, "qwen2", show.ModelInfo["general.architecture"])
	assert.EqualValues(t, 1024, show.ModelInfo["qwen2.context_length"])
	assert.EqualValues(t, 64, show.ModelInfo["qwen2.embedding_length"])
	require.Contains(t, show.ModelInfo, "tokenizer.ggml.tokens")
	assert.Nil(t, show.ModelInfo["tokenizer.ggml.tokens"], "the vocabulary is left out")
	assert.Contains(t, show.Template, "<|im_start|>")
	assert.Contains(t, show.Parameters, "num_ctx")
}

// TestOllamaKeepAlive: keep_alive 0 unloads the model after the request
// (and /api/generate with no prompt does it at once); the next request
// loads it again, with a load_duration; a duration sets when it unloads;
// a non-admin key may not send keep_alive.
func TestOllamaKeepAlive(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, nil)
	client := ollamaClient(t, base, "")
	chat := func(keep *ollama.Duration) ollama.ChatResponse {
		var last ollama.ChatResponse
		require.NoError(t, client.Chat(t.Context(), &ollama.ChatRequest{Model: "sim/small", KeepAlive: keep,
			Messages: []ollama.Message{{Role: "user", Content: "hi"}}, Options: map[string]any{"num_predict": 2}},
			func(r ollama.ChatResponse) error { last = r; return nil }))
		return last
	}
	first := chat(&ollama.Duration{Duration: 0})
	require.True(t, first.Done)
	require.Zero(t, first.LoadDuration)
	require.Empty(t, s.models.List(), "unloaded after the request")
	ps, err := client.ListRunning(t.Context())
	require.NoError(t, err)
	require.Empty(t, ps.Models)
	list, err := client.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list.Models, 1, "still listed: it loads on request")

	again := chat(&ollama.Duration{Duration: time.Hour})
	require.True(t, again.Done)
	require.Positive(t, again.LoadDuration, "loaded again for the request")
	ps, err = client.ListRunning(t.Context())
	require.NoError(t, err)
	require.Len(t, ps.Models, 1)
	require.WithinDuration(t, time.Now().Add(time.Hour), ps.Models[0].ExpiresAt, time.Minute)

	var unload ollama.GenerateResponse
	require.NoError(t, client.Generate(t.Context(), &ollama.GenerateRequest{Model: "sim/small:latest", KeepAlive: &ollama.Duration{}},
		func(r ollama.GenerateResponse) error { unload = r; return nil }))
	require.Equal(t, "unload", unload.DoneReason)
	require.Empty(t, s.models.List())
	var load ollama.GenerateResponse
	require.NoError(t, client.Generate(t.Context(), &ollama.GenerateRequest{Model: "sim/small:latest"},
		func(r ollama.GenerateResponse) error { load = r; return nil }))
	require.Equal(t, "load", load.DoneReason)
	require.Len(t, s.models.List(), 1)
}

// TestOllamaAuthAndQuota: with keys, a missing key is a 401 and a tenant
// over its requests per minute a 429, both in Ollama's shape; a user key
// may not send keep_alive.
func TestOllamaAuthAndQuota(t *testing.T) {
	s := newStoreServer(t, nil)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{RPM: i64(1)})
	base := startServer(t, s)
	req := &ollama.ChatRequest{Model: "sim/small", Messages: []ollama.Message{{Role: "user", Content: "hi"}},
		Options: map[string]any{"num_predict": 2}}
	noop := func(ollama.ChatResponse) error { return nil }

	// Ollama's client reads a 401 as a sign-in error, without its body.
	err := ollamaClient(t, base, "").Chat(t.Context(), req, noop)
	var ae ollama.AuthorizationError
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.Equal(t, http.StatusUnauthorized, ae.StatusCode)
	resp, b := get(t, testClient(t), base+"/api/tags")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, jsonMap(t, string(b))["error"], "API key")

	client := ollamaClient(t, base, key)
	req.KeepAlive = &ollama.Duration{Duration: time.Minute}
	se := statusError(t, client.Chat(t.Context(), req, noop))
	assert.Equal(t, http.StatusForbidden, se.StatusCode)
	assert.Contains(t, se.ErrorMessage, "admin key")

	req.KeepAlive = nil
	require.NoError(t, client.Chat(t.Context(), req, noop))
	se = statusError(t, client.Chat(t.Context(), req, noop))
	assert.Equal(t, http.StatusTooManyRequests, se.StatusCode)
	assert.Contains(t, se.ErrorMessage, "Rate limit")
}

// TestOllamaWire checks what the client library does not: NDJSON framing
// and content type, tool messages in, refused options and fields, and
// an in-stream error line.
func TestOllamaWire(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)
	resp, b := post(t, c, base+"/api/chat", `{"model":"sim/small","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":3}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, 4)
	for i, l := range lines {
		m := jsonMap(t, l)
		require.Equal(t, i == 3, m["done"], l)
	}

	// A history with a tool call and its result renders (the call's id
	// is made up when the client sends none).
	resp, b = post(t, c, base+"/api/chat", `{"model":"sim/small","stream":false,"options":{"num_predict":3},
		"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
		"messages":[{"role":"user","content":"Weather in Lyon?"},
		{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Lyon"}}}]},
		{"role":"tool","tool_name":"get_weather","content":"21 degrees"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))

	for name, tc := range map[string]struct {
		body, want string
		status     int
	}{
		"unknown option":     {`{"model":"sim/small","prompt":"x","options":{"mirostat":2}}`, "mirostat", 400},
		"bad option type":    {`{"model":"sim/small","prompt":"x","options":{"temperature":"hot"}}`, "number", 400},
		"temperature range":  {`{"model":"sim/small","prompt":"x","options":{"temperature":9}}`, "temperature", 400},
		"images":             {`{"model":"sim/small","prompt":"x","images":["aGk="]}`, "images", 400},
		"think":              {`{"model":"sim/small","prompt":"x","think":true}`, "think", 400},
		"context":            {`{"model":"sim/small","prompt":"x","context":[1,2]}`, "context", 400},
		"unknown field":      {`{"model":"sim/small","prompt":"x","bogus":1}`, "bogus", 400},
		"bad format":         {`{"model":"sim/small","prompt":"x","format":"yaml"}`, "format", 400},
		"bad keep_alive":     {`{"model":"sim/small","prompt":"x","keep_alive":"soon"}`, "keep_alive", 400},
		"unknown model":      {`{"model":"nope:7b","prompt":"x"}`, `model "nope:7b" not found`, 404},
		"context overflow":   {`{"model":"sim/small","prompt":"x","options":{"num_predict":99999}}`, "context length", 400},
		"empty prompt, nope": {`{"model":"nope"}`, `model "nope" not found`, 404},
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := post(t, c, base+"/api/generate", tc.body)
			require.Equal(t, tc.status, resp.StatusCode, "%s", b)
			m := jsonMap(t, string(b))
			require.Len(t, m, 1, "Ollama's error shape: %s", b)
			require.Contains(t, m["error"], tc.want)
		})
	}
	// Ignored options (the runner's sizes) are accepted.
	resp, b = post(t, c, base+"/api/generate", `{"model":"sim/small","prompt":"x","stream":false,
		"options":{"num_predict":2,"num_ctx":2048,"num_thread":4,"num_gpu":1,"use_mmap":true,"typical_p":1,"mirostat":0}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	// An unknown route under /api/ answers in Ollama's shape too.
	resp, b = post(t, c, base+"/api/pull", `{"model":"x"}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, jsonMap(t, string(b)), "error")
}

// TestOllamaDisconnectFreesBlocks: an NDJSON client that leaves
// mid-answer frees its KV blocks at the engine's next step.
func TestOllamaDisconnectFreesBlocks(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, func(c *Config) { c.Clock = nil })
	testDisconnectFrees(t, s, base+"/api/chat", fmt.Sprintf(
		`{"model":"sim/small","options":{"num_predict":2000,"seed":%d},"messages":[{"role":"user","content":"Go on"}]}`,
		longSeed(t, 400)), `"done":false`)
}
