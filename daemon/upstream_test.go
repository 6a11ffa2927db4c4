package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
	"github.com/llmd/llmd/upstream"
)

// startEngine runs an llmd serving sim/small, to stand for an engine on
// the node (it speaks vLLM's OpenAI routes, /tokenize and /metrics names).
func startEngine(t *testing.T, scale float64) (*Daemon, string) {
	t.Helper()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = scale
	d, err := Open(cfg, nil)
	require.NoError(t, err)
	return d, startServer(t, d)
}

// asVLLM fronts an engine as vLLM presents itself: /version, and its
// models owned by "vllm".
func asVLLM(t *testing.T, base string) string {
	t.Helper()
	return asVLLMNamed(t, base, "sim/small")
}

// asVLLMNamed is asVLLM for an engine serving model id.
func asVLLMNamed(t *testing.T, base, id string) string {
	t.Helper()
	target, err := url.Parse(base)
	require.NoError(t, err)
	proxy := newTestProxy(t, target)
	proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			_, _ = io.WriteString(w, `{"version":"0.9.2"}`)
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+id+`","object":"model","owned_by":"vllm","max_model_len":4096}]}`)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startFront runs an llmd serving model "qwen" through the engines at urls.
func startFront(t *testing.T, urls ...string) (*Daemon, string) {
	t.Helper()
	return startFrontLogged(t, testLogger(t), 0, urls...)
}

// startFrontLogged is startFront logging to logger (nil: nowhere), the
// engines' waiting queue bounded by maxWaiting (0: the default).
func startFrontLogged(t *testing.T, logger *slog.Logger, maxWaiting int, urls ...string) (*Daemon, string) {
	t.Helper()
	cfg := testConfig()
	cfg.Models = nil
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: urls, MaxWaiting: maxWaiting}}
	d, err := Open(cfg, logger)
	require.NoError(t, err)
	return d, startServer(t, d)
}

// TestUpstreamServesThroughLLMD: a model served by an engine behind llmd:
// the kind detected, JSON and streamed answers relayed, the engine's usage
// billed, and a client that leaves frees the engine's request.
func TestUpstreamServesThroughLLMD(t *testing.T) {
	t.Parallel()
	engine, engineBase := startEngine(t, 0.05)
	front, base := startFront(t, asVLLM(t, engineBase))
	c := fleetClient(t, base)
	ctx := t.Context()

	st, err := c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, "upstream:vllm", st.Models[0].Executor)

	resp, body := chatVia(t, testClient(t), base, "qwen", "Hello there", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "qwen", body["model"])
	msg := body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	require.NotEmpty(t, msg["content"])
	id := resp.Header.Get("X-Request-Id")
	var ev store.UsageEvent
	require.Eventually(t, func() bool {
		ev, err = front.deps.Store.UsageEvent(context.Background(), id)
		return err == nil && ev.Status == store.UsageFinished
	}, 5*time.Second, 10*time.Millisecond)
	usage := body["usage"].(map[string]any)
	require.EqualValues(t, usage["prompt_tokens"], ev.InputTokens)
	require.EqualValues(t, usage["completion_tokens"], ev.OutputTokens)
	require.Positive(t, ev.InputTokens)
	require.NotContains(t, ev.Route, "estimated")

	// Streamed.
	finish, err := chatOnce(ctx, c, "qwen", 12)
	require.NoError(t, err)
	require.Equal(t, "length", finish)

	// A client that leaves aborts the engine's request.
	sctx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	go func() {
		max := 4000
		_ = c.ChatCompletionStream(sctx, api.ChatCompletionRequest{Model: "qwen", MaxTokens: &max,
			Controls: api.Controls{IgnoreEOS: true}, Messages: []api.Message{{Role: "user", Content: "Go on"}}},
			func(api.ChatCompletionChunk) error {
				select {
				case <-started:
				default:
					close(started)
				}
				return nil
			})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the long stream did not start")
	}
	// The first chunk (the role) may come before the engine runs it.
	require.Eventually(t, func() bool { return engine.Stats()[0].Running == 1 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	require.Eventually(t, func() bool { return engine.Stats()[0].Running == 0 }, 5*time.Second, 5*time.Millisecond,
		"the engine still runs the request its client left")
}

// TestUpstreamEngineDies: an engine killed mid-stream ends the stream with
// an error event, billed what was delivered; the replica leaves rotation
// and new requests get 503 until an engine answers again.
func TestUpstreamEngineDies(t *testing.T) {
	t.Parallel()
	_, engineBase := startEngine(t, 0.2)
	// A proxy the test can cut: the engine "dies" when it closes.
	target, err := url.Parse(engineBase)
	require.NoError(t, err)
	proxy := newTestProxy(t, target)
	proxy.FlushInterval = -1
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	front, base := startFront(t, srv.URL)
	c := fleetClient(t, base)
	ctx := t.Context()

	var text strings.Builder
	max := 5000
	got := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.ChatCompletionStream(ctx, api.ChatCompletionRequest{Model: "qwen", MaxTokens: &max,
			Controls: api.Controls{IgnoreEOS: true}, Messages: []api.Message{{Role: "user", Content: "Go on"}}},
			func(ch api.ChatCompletionChunk) error {
				for _, c := range ch.Choices {
					if c.Delta.Content != nil && *c.Delta.Content != "" {
						text.WriteString(*c.Delta.Content)
						select {
						case got <- struct{}{}:
						default:
						}
					}
				}
				return nil
			})
	}()
	select {
	case <-got:
	case err := <-done:
		t.Fatalf("the stream ended before its first token: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no first token")
	}
	srv.CloseClientConnections()
	srv.Close()
	err = <-done
	var se *api.StreamError
	require.ErrorAs(t, err, &se)
	require.NotEmpty(t, text.String())

	// Billed what was delivered, as an error.
	var rows []store.UsageRow
	require.Eventually(t, func() bool {
		rows, err = front.deps.Store.UsageReport(context.Background(), store.UsageQuery{By: "model"})
		return err == nil && len(rows) == 1 && rows[0].Errors == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(1), rows[0].Errors)
	require.Positive(t, rows[0].OutputTokens)

	resp, body := chatVia(t, testClient(t), base, "qwen", "Hi", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	b, _ := json.Marshal(body)
	require.Contains(t, string(b), "upstream")
}

// TestUpstreamQuotaAndCancel: a tenant with a token limit has its prompt
// counted by the engine's tokenizer before it is sent, and is refused
// past its limit; a resumable stream through the upstream is cancelled by
// DELETE /v1/requests/{id}, which frees the engine's request.
func TestUpstreamQuotaAndCancel(t *testing.T) {
	t.Parallel()
	engine, engineBase := startEngine(t, 0.2)
	front, base := startFront(t, engineBase)
	ctx := context.Background()
	key := makeKey(t, front, "acme", store.TierPaid, false)
	admin := makeKey(t, front, "ops", store.TierPaid, true)
	tpm := int64(60)
	_, err := front.deps.Store.UpdateQuota(ctx, "acme", store.QuotaUpdate{TPM: &tpm})
	require.NoError(t, err)
	hc := testClient(t)
	body := `{"model":"qwen","max_tokens":8,"messages":[{"role":"user","content":"Hello there"}]}`
	resp, raw := call(t, hc, http.MethodPost, base+"/v1/chat/completions", key, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(raw, &cc))
	// The engine's count of the rendered prompt, as the engine tokenizes it.
	var tok struct {
		Count int `json:"count"`
	}
	resp, raw = call(t, hc, http.MethodPost, engineBase+"/tokenize", "",
		`{"model":"sim/small","messages":[{"role":"user","content":"Hello there"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	require.NoError(t, json.Unmarshal(raw, &tok))
	require.Equal(t, tok.Count, cc.Usage.PromptTokens)
	for {
		resp, raw = call(t, hc, http.MethodPost, base+"/v1/chat/completions", key, body)
		if resp.StatusCode != http.StatusOK {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(raw))

	// Cancel a resumable stream.
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"qwen","max_tokens":3000,"stream":true,"ignore_eos":true,"messages":[{"role":"user","content":"Go on"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Resumable", "true")
	req.Header.Set("Authorization", "Bearer "+admin)
	sresp, err := hc.Do(req)
	require.NoError(t, err)
	defer sresp.Body.Close()
	require.Equal(t, http.StatusOK, sresp.StatusCode)
	id := sresp.Header.Get("X-Request-Id")
	require.Eventually(t, func() bool { return engine.Stats()[0].Running == 1 }, 5*time.Second, 5*time.Millisecond)
	resp, raw = call(t, hc, http.MethodDelete, base+"/v1/requests/"+id, admin, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	require.Eventually(t, func() bool { return engine.Stats()[0].Running == 0 }, 5*time.Second, 5*time.Millisecond,
		"the engine still runs a cancelled request")
}

// TestSDKThroughUpstream: the official OpenAI SDK streams and gets whole
// answers from a model behind an upstream engine, with the engine's usage.
func TestSDKThroughUpstream(t *testing.T) {
	t.Parallel()
	_, engineBase := startEngine(t, 0.05)
	_, base := startFront(t, engineBase)
	client := sdkClient(t, base)
	params := openai.ChatCompletionNewParams{
		Model:         "qwen",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about paged attention.")},
		MaxTokens:     openai.Int(20),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		require.True(t, acc.AddChunk(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.NotEmpty(t, acc.Choices[0].Message.Content)
	require.Equal(t, int64(20), acc.Usage.CompletionTokens)
	require.Equal(t, "qwen", acc.Model)

	cc, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.NotEmpty(t, cc.Choices[0].Message.Content)
	require.Equal(t, cc.Usage.PromptTokens+cc.Usage.CompletionTokens, cc.Usage.TotalTokens)
}

// TestUpstreamInModelsConfig: a models config names an upstream version
// (source upstream:URL) behind an alias; it is loaded at start and serves
// through the alias.
func TestUpstreamInModelsConfig(t *testing.T) {
	t.Parallel()
	_, engineBase := startEngine(t, 0.05)
	cfg := withModelsConfig(t, fmt.Sprintf(`
models:
  - {id: qwen-2026-12-01, source: "upstream:%s#sim/small"}
aliases:
  qwen: {version: qwen-2026-12-01}
`, engineBase))
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	c := fleetClient(t, base)
	resp, body := chatVia(t, testClient(t), base, "qwen", "Hi", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "qwen-2026-12-01", body["model"])
	require.Equal(t, "ready", stateOf(c, "qwen-2026-12-01"))
	st, err := c.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, "upstream:llmd", st.Models[0].Executor)
}

// asLlamaCpp fronts an engine as llama.cpp's server presents itself: its
// models owned by "llamacpp", /props naming the GGUF file it loaded, and
// no /tokenize in vLLM's shape. tokenizes counts the /tokenize calls.
func asLlamaCpp(t *testing.T, base, id, modelPath string, tokenizes *atomic.Int64) string {
	t.Helper()
	target, err := url.Parse(base)
	require.NoError(t, err)
	proxy := newTestProxy(t, target)
	proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/props":
			b, _ := json.Marshal(map[string]any{"build_info": "b6000-test", "model_path": modelPath,
				"default_generation_settings": map[string]any{"n_ctx": 1024}})
			_, _ = w.Write(b)
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+id+`","object":"model","owned_by":"llamacpp"}]}`)
		case "/tokenize":
			tokenizes.Add(1)
			http.Error(w, "not this shape", http.StatusBadRequest)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestUpstreamLocalTokenizer: for an engine without vLLM's /tokenize
// (llama.cpp's server), llmd reads the tokenizer and chat template from
// the GGUF file the engine reports, and counts a rendered conversation as
// the engine does, without asking it; --upstream-tokenizer names one for
// an engine that has /tokenize.
func TestUpstreamLocalTokenizer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(fixtures.Dir(t), "qwen2-d64-q8_0.gguf")
	ecfg := testConfig()
	ecfg.Models = nil
	ecfg.ModelFiles = []string{path}
	ecfg.CPUThreads = 1
	engine, err := Open(ecfg, nil)
	require.NoError(t, err)
	engineBase := startServer(t, engine)
	var tokenizes atomic.Int64
	front := asLlamaCpp(t, engineBase, "qwen2-d64-q8_0", path, &tokenizes)

	msgs := []api.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello there, how are you?"}}
	hc := testClient(t)
	b, err := json.Marshal(map[string]any{"model": "qwen2-d64-q8_0", "messages": msgs})
	require.NoError(t, err)
	resp, raw := call(t, hc, http.MethodPost, engineBase+"/tokenize", "", string(b))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var want struct {
		Tokens []int32 `json:"tokens"`
	}
	require.NoError(t, json.Unmarshal(raw, &want))
	require.NotEmpty(t, want.Tokens)

	for _, explicit := range []bool{false, true} {
		cfg := testConfig()
		cfg.Models = nil
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		spec := UpstreamSpec{Model: "qwen", URLs: []string{front}}
		if explicit {
			spec.URLs = []string{asVLLMNamed(t, engineBase, "qwen2-d64-q8_0")}
			spec.Tokenizer = path
		}
		cfg.Upstreams = []UpstreamSpec{spec}
		d, err := Open(cfg, nil)
		require.NoError(t, err)
		base := startServer(t, d)
		set := d.models.Get("qwen").Text.(*upstream.Set)
		require.Equal(t, "tokenizer "+path, set.Counting())
		got, err := set.ChatPrompt(pipeline.ChatInput{Messages: msgs, AddGenerationPrompt: true})
		require.NoError(t, err)
		require.Equal(t, want.Tokens, got, "the local count is the engine's")

		key := makeKey(t, d, "acme", store.TierPaid, false)
		tpm := int64(1000)
		_, err = d.deps.Store.UpdateQuota(context.Background(), "acme", store.QuotaUpdate{TPM: &tpm})
		require.NoError(t, err)
		b, err := json.Marshal(map[string]any{"model": "qwen", "max_tokens": 4, "messages": msgs})
		require.NoError(t, err)
		resp, raw := call(t, hc, http.MethodPost, base+"/v1/chat/completions", key, string(b))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
		var cc api.ChatCompletion
		require.NoError(t, json.Unmarshal(raw, &cc))
		require.Equal(t, len(want.Tokens), cc.Usage.PromptTokens)
	}
	require.Zero(t, tokenizes.Load(), "llmd asked the engine to tokenize")
}

// newTestProxy is a reverse proxy to target with a transport of its own:
// http.DefaultTransport's pool is shared by every test of the package,
// where an engine's port can be reused by a later test's engine.
func newTestProxy(t *testing.T, target *url.URL) *httputil.ReverseProxy {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(target)
	tr := &http.Transport{Proxy: nil, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	proxy.Transport = tr
	return proxy
}
