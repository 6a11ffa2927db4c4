package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// The acceptance checks of the streams (the SDK, framing, heartbeats,
// resume, shutdown, a stalled engine) with the served model behind an
// upstream engine: a real llmd serving sim/small, presented as vLLM, with
// another llmd in front serving it as "qwen".

// behindUpstream is a front llmd serving "qwen" through engine.
type behindUpstream struct {
	engine, front *Daemon
	engineBase    string
	base          string
}

// startBehindUpstream starts the engine (steps scale times an H100's) and
// the front (edit changes its config), and checks both idle at the end.
func startBehindUpstream(t *testing.T, scale float64, edit func(*Config)) behindUpstream {
	t.Helper()
	engine, engineBase := startEngine(t, scale)
	cfg := testConfig()
	cfg.Models = nil
	cfg.DataDir = t.TempDir()
	cfg.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: []string{asVLLM(t, engineBase)}}}
	if edit != nil {
		edit(&cfg)
	}
	front, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, front)
	t.Cleanup(func() {
		requireIdle(t, front)
		requireIdle(t, engine)
	})
	return behindUpstream{engine: engine, front: front, engineBase: engineBase, base: base}
}

func TestUpstreamAcceptanceSDK(t *testing.T) {
	t.Parallel()
	u := startBehindUpstream(t, 0.02, nil)
	client := sdkClient(t, u.base)
	params := openai.ChatCompletionNewParams{
		Model:         "qwen",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Tell me about paged attention.")},
		MaxTokens:     openai.Int(40),
		Seed:          openai.Int(11),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	usageChunks := 0
	for stream.Next() {
		chunk := stream.Current()
		require.True(t, acc.AddChunk(chunk))
		if len(chunk.Choices) == 0 {
			usageChunks++
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, 1, usageChunks, "exactly one usage chunk")
	require.Len(t, acc.Choices, 1)
	require.NotEmpty(t, acc.Choices[0].Message.Content)
	require.Equal(t, "qwen", acc.Model)
	require.True(t, strings.HasPrefix(acc.ID, "chatcmpl-"), acc.ID)
	require.Positive(t, acc.Usage.PromptTokens)
	require.Equal(t, acc.Usage.PromptTokens+acc.Usage.CompletionTokens, acc.Usage.TotalTokens)

	resp, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.Equal(t, acc.Choices[0].Message.Content, resp.Choices[0].Message.Content, "same seed, same answer")
	require.Equal(t, acc.Usage.PromptTokens, resp.Usage.PromptTokens)

	// Errors are llmd's, before the engine is asked.
	var apiErr *openai.Error
	_, err = client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "gpt-nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.Equal(t, pipeline.CodeModelNotFound, apiErr.Code)
	_, err = client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(40000)})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, pipeline.CodeContextLength, apiErr.Code)
	models, err := client.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, models.Data, 1)
	require.Equal(t, "qwen", models.Data[0].ID)
}

// TestUpstreamAcceptanceFraming: one terminal event per stream, for one
// choice and for n=2, and a stop string cuts the text as it does locally.
func TestUpstreamAcceptanceFraming(t *testing.T) {
	t.Parallel()
	u := startBehindUpstream(t, 0.02, nil)
	c := testClient(t)
	for _, n := range []int{1, 2} {
		resp, body := post(t, c, u.base+"/v1/chat/completions", fmt.Sprintf(
			`{"model":"qwen","stream":true,"n":%d,"max_tokens":12,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, n))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		evs := parseSSE(t, body)
		require.Equal(t, 1, terminalCount(evs), "%v", tailLines(evs))
		require.Zero(t, countErrors(evs))
		require.Equal(t, "[DONE]", evs[len(evs)-1].data)
		seen := map[float64]bool{}
		for _, e := range evs {
			if strings.HasPrefix(e.data, "{") {
				for _, ch := range jsonMap(t, e.data)["choices"].([]any) {
					seen[ch.(map[string]any)["index"].(float64)] = true
				}
			}
		}
		require.Len(t, seen, n)
	}

	// The text of a seeded run, then the same run stopped at a word of it.
	resp, body := post(t, c, u.base+"/v1/chat/completions",
		`{"model":"qwen","seed":5,"max_tokens":30,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	text := jsonMap(t, string(body))["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	words := strings.Fields(text)
	require.GreaterOrEqual(t, len(words), 4, text)
	stop := words[3]
	resp, body = post(t, c, u.base+"/v1/chat/completions", fmt.Sprintf(
		`{"model":"qwen","seed":5,"max_tokens":30,"stop":[%q],"messages":[{"role":"user","content":"hi"}]}`, stop))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	choice := jsonMap(t, string(body))["choices"].([]any)[0].(map[string]any)
	require.Equal(t, "stop", choice["finish_reason"])
	require.Equal(t, text[:strings.Index(text, stop)], choice["message"].(map[string]any)["content"])
}

// TestUpstreamAcceptanceHeartbeat: llmd's heartbeats keep a stream alive
// while a slow engine works.
func TestUpstreamAcceptanceHeartbeat(t *testing.T) {
	t.Parallel()
	u := startBehindUpstream(t, 20, func(c *Config) { c.HeartbeatInterval = 10 * time.Millisecond })
	resp, body := post(t, testClient(t), u.base+"/v1/chat/completions",
		`{"model":"qwen","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := parseSSE(t, body)
	pings := 0
	for _, e := range evs {
		if e.comment == "ping" {
			pings++
		}
	}
	require.GreaterOrEqual(t, pings, 5, "%s", body)
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)
}

// TestUpstreamAcceptanceResume: a resumable stream through an upstream,
// cut by its client, goes on at the engine and is resumed from where the
// client was, with no gap and no duplicate.
func TestUpstreamAcceptanceResume(t *testing.T) {
	t.Parallel()
	u := startBehindUpstream(t, 0.3, nil)
	c := testClient(t)
	const tokens = 60
	body := openaiBody("qwen", 9, tokens, "Go on")
	resumable := map[string]string{"X-Resumable": "true"}

	uncut := openSSE(t, c, http.MethodPost, u.base+"/v1/chat/completions", "", body, resumable)
	require.Equal(t, http.StatusOK, uncut.resp.StatusCode)
	want, _ := openaiText(t, uncut.rest(t))

	first := openSSE(t, c, http.MethodPost, u.base+"/v1/chat/completions", "", body, resumable)
	require.Equal(t, http.StatusOK, first.resp.StatusCode)
	id := first.resp.Header.Get("X-Request-Id")
	head := first.take(t, 6)
	first.close()
	last := head[len(head)-1].id
	require.NotEmpty(t, last)
	again := openSSE(t, c, http.MethodGet, resumeURL(u.base, id), "", "", map[string]string{"Last-Event-ID": last})
	require.Equal(t, http.StatusOK, again.resp.StatusCode)
	tail := again.rest(t)
	headText, _ := openaiText(t, head)
	tailText, _ := openaiText(t, tail)
	require.Equal(t, want, headText+tailText, "resumed text is the uncut run's")
	require.Equal(t, 1, terminalCount(tail))
}

// TestUpstreamAcceptanceStalledEngine: an engine that stops sending mid-
// stream is given up after the stall timeout: one error event, the
// stream's end, billed what was delivered, and the engine's request
// closed.
func TestUpstreamAcceptanceStalledEngine(t *testing.T) {
	t.Parallel()
	engine, engineBase := startEngine(t, 0.2)
	target, err := url.Parse(engineBase)
	require.NoError(t, err)
	// The engine "stalls" after a few chunks: the proxy stops copying.
	proxy := newTestProxy(t, target)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Header.Get("Content-Type") == "text/event-stream" {
			r.Body = &stallAfter{rc: r.Body, left: 2000, done: r.Request.Context().Done()}
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	cfg := testConfig()
	cfg.Models = nil
	cfg.DataDir = t.TempDir()
	cfg.StallTimeout = 300 * time.Millisecond
	cfg.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: []string{asVLLM(t, srv.URL)}}}
	front, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, front)

	start := time.Now()
	resp, body := post(t, testClient(t), base+"/v1/chat/completions",
		`{"model":"qwen","stream":true,"max_tokens":2000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Less(t, time.Since(start), 30*time.Second)
	evs := parseSSE(t, body)
	require.Equal(t, 1, terminalCount(evs), "%v", tailLines(evs))
	require.Equal(t, 1, countErrors(evs), "%v", tailLines(evs))
	text, _ := openaiText(t, evs)
	require.NotEmpty(t, text)
	require.Eventually(t, func() bool { return engine.Stats()[0].Running == 0 }, 10*time.Second, 5*time.Millisecond,
		"the engine still runs the stalled request")
	require.Eventually(t, func() bool {
		rows, err := front.deps.Store.UsageReport(context.Background(), store.UsageQuery{By: "model"})
		return err == nil && len(rows) == 1 && rows[0].Errors == 1 && rows[0].OutputTokens > 0
	}, 5*time.Second, 10*time.Millisecond)
	requireIdle(t, front)
}

// stallAfter passes left bytes through and then blocks until done (the
// request's end).
type stallAfter struct {
	rc   io.ReadCloser
	left int
	done <-chan struct{}
}

func (s *stallAfter) Read(p []byte) (int, error) {
	if s.left <= 0 {
		<-s.done
		return 0, context.Canceled
	}
	n, err := s.rc.Read(p[:min(len(p), s.left)])
	s.left -= n
	return n, err
}

func (s *stallAfter) Close() error { return s.rc.Close() }

// TestUpstreamAcceptanceShutdown: shutting the front down ends its live
// streams with an error event and [DONE], and frees the engine.
func TestUpstreamAcceptanceShutdown(t *testing.T) {
	t.Parallel()
	engine, engineBase := startEngine(t, 0.2)
	cfg := testConfig()
	cfg.Models = nil
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 100 * time.Millisecond
	cfg.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: []string{asVLLM(t, engineBase)}}}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	addr, err := s.Listen()
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateReady }, 5*time.Second, time.Millisecond)

	live := openSSE(t, testClient(t), http.MethodPost, "http://"+addr.String()+"/v1/chat/completions", "",
		`{"model":"qwen","stream":true,"max_tokens":3000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on"}]}`, nil)
	require.Equal(t, http.StatusOK, live.resp.StatusCode)
	live.take(t, 3)
	stop()
	evs := live.rest(t)
	require.GreaterOrEqual(t, len(evs), 2)
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)
	require.Contains(t, errorOf(t, []byte(evs[len(evs)-2].data))["message"], "shutting down")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Eventually(t, func() bool { return engine.Stats()[0].Running == 0 }, 5*time.Second, 5*time.Millisecond)
}
