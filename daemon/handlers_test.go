package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/pipeline"
)

const fakeModel = "sim/fake"

func TestChatStreamFraming(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "Hello")
	base := startFake(t, testConfig(), f)
	c := testClient(t)

	resp, body := post(t, c, base+"/v1/chat/completions", `{"model":"sim/fake","stream":true,
		"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))
	id := resp.Header.Get("X-Request-Id")
	require.True(t, strings.HasPrefix(id, "chatcmpl-"), id)

	evs := parseSSE(t, body)
	require.Len(t, evs, 1+5+1+1+1, "role, 5 content, finish, usage, [DONE]: %s", body)
	for _, e := range evs {
		require.Len(t, e.lines, 1, "only a data line: %q", e.lines)
		require.True(t, strings.HasPrefix(e.lines[0], "data: "), e.lines[0])
	}
	var content strings.Builder
	for i, e := range evs[:len(evs)-1] {
		m := jsonMap(t, e.data)
		require.Equal(t, id, m["id"])
		require.Equal(t, "chat.completion.chunk", m["object"])
		require.Equal(t, fakeModel, m["model"])
		require.Contains(t, m, "created")
		require.Contains(t, m, "usage")
		choices := m["choices"].([]any)
		switch {
		case i == 0:
			ch := choices[0].(map[string]any)
			require.Equal(t, map[string]any{"role": "assistant", "content": ""}, ch["delta"])
			require.Nil(t, ch["finish_reason"])
			require.Nil(t, m["usage"])
		case i == len(evs)-3:
			ch := choices[0].(map[string]any)
			require.Equal(t, map[string]any{}, ch["delta"])
			require.Equal(t, "stop", ch["finish_reason"])
		case i == len(evs)-2:
			require.Empty(t, choices)
			require.Equal(t, map[string]any{
				"prompt_tokens": float64(len(renderChat(nil, true)) + len("<|user|>\nhi\n")), "completion_tokens": 5.0,
				"total_tokens":          float64(len(renderChat(nil, true))+len("<|user|>\nhi\n")) + 5,
				"prompt_tokens_details": map[string]any{"cached_tokens": 3.0}, "completion_tokens_details": map[string]any{"reasoning_tokens": 0.0},
			}, m["usage"])
		default:
			ch := choices[0].(map[string]any)
			require.Nil(t, ch["finish_reason"])
			require.Nil(t, m["usage"])
			content.WriteString(ch["delta"].(map[string]any)["content"].(string))
		}
	}
	require.Equal(t, "Hello", content.String())
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)

	reqs := f.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, id, reqs[0].ID)
	assert.Equal(t, byteTokenizer{}.Encode("<|user|>\nhi\n<|assistant|>\n"), reqs[0].Prompt)
	assert.Equal(t, 4096-len(reqs[0].Prompt), reqs[0].MaxTokens, "chat default: the rest of the context")
	assert.Equal(t, pipeline.PromptSeed(reqs[0].Prompt), reqs[0].Seed)
	assert.Equal(t, engine.SamplingParams{Temperature: 1, TopP: 1}, reqs[0].Sampling)
}

func TestChatStreamWithoutUsage(t *testing.T) {
	t.Parallel()
	base := startFake(t, testConfig(), newFake(fakeModel, 4096, "ab"))
	// stream_options without stream is ignored (friendlier than vLLM's 400).
	resp, body := post(t, testClient(t), base+"/v1/chat/completions", `{"model":"sim/fake","stream":true,"n":2,
		"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := parseSSE(t, body)
	require.Len(t, evs, 2+4+2+1, "2 role chunks, 2x2 content, 2 finish, [DONE]: %s", body)
	for _, e := range evs[:len(evs)-1] {
		require.NotContains(t, jsonMap(t, e.data)["choices"].([]any)[0], "usage")
	}
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)
}

func TestNativeStreamFraming(t *testing.T) {
	t.Parallel()
	base := startFake(t, testConfig(), newFake(fakeModel, 4096, "Hey"))
	resp, body := post(t, testClient(t), base+"/v1/chat", `{"model":"sim/fake","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	id := resp.Header.Get("X-Request-Id")
	require.NotEmpty(t, id)

	evs := parseSSE(t, body)
	require.Len(t, evs, 4, "%s", body)
	for i, r := range "Hey" {
		require.Equal(t, fmt.Sprint(i), evs[i].id)
		require.Empty(t, evs[i].event)
		require.JSONEq(t, fmt.Sprintf(`{"delta":%q,"index":0}`, string(r)), evs[i].data)
	}
	done := evs[3]
	require.Equal(t, "done", done.event)
	require.Equal(t, "3", done.id)
	require.JSONEq(t, fmt.Sprintf(`{"id":%q,"model":"sim/fake","finish_reason":"stop",
		"usage":{"input_tokens":%d,"cached_tokens":3,"output_tokens":3}}`, id, len("<|user|>\nhi\n<|assistant|>\n")), done.data)
}

func TestNonStreamed(t *testing.T) {
	t.Parallel()
	base := startFake(t, testConfig(), newFake(fakeModel, 4096, "Hello world"))
	c := testClient(t)

	t.Run("chat", func(t *testing.T) {
		resp, body := post(t, c, base+"/v1/chat/completions", `{"model":"sim/fake","n":2,"max_tokens":5,
			"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		m := jsonMap(t, string(body))
		require.Equal(t, "chat.completion", m["object"])
		require.Equal(t, resp.Header.Get("X-Request-Id"), m["id"])
		choices := m["choices"].([]any)
		require.Len(t, choices, 2)
		for i, ch := range choices {
			require.Equal(t, map[string]any{"index": float64(i), "finish_reason": "length", "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": "Hello", "refusal": nil}}, ch)
		}
		u := m["usage"].(map[string]any)
		require.Equal(t, 10.0, u["completion_tokens"])
		require.Equal(t, map[string]any{"cached_tokens": 3.0}, u["prompt_tokens_details"])
	})
	t.Run("completions", func(t *testing.T) {
		resp, body := post(t, c, base+"/v1/completions", `{"model":"sim/fake","prompt":["Say"],"stop":" "}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		m := jsonMap(t, string(body))
		require.Equal(t, "text_completion", m["object"])
		require.True(t, strings.HasPrefix(m["id"].(string), "cmpl-"))
		require.Equal(t, []any{map[string]any{"index": 0.0, "text": "Hello", "logprobs": nil, "finish_reason": "stop"}}, m["choices"])
	})
	t.Run("native", func(t *testing.T) {
		resp, body := post(t, c, base+"/v1/chat", `{"model":"sim/fake","stream":false,"max_tokens":4,"priority":"batch",
			"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		m := jsonMap(t, string(body))
		require.Equal(t, "Hell", m["text"])
		require.Equal(t, "length", m["finish_reason"])
		require.Equal(t, resp.Header.Get("X-Request-Id"), m["id"])
		require.Equal(t, map[string]any{"input_tokens": float64(len("<|user|>\nhi\n<|assistant|>\n")),
			"cached_tokens": 3.0, "output_tokens": 4.0}, m["usage"])
	})
}

func TestCompletionsStream(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "abcdefghijklmnopqrstuvwxyz")
	base := startFake(t, testConfig(), f)
	resp, body := post(t, testClient(t), base+"/v1/completions",
		`{"model":"sim/fake","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := parseSSE(t, body)
	require.Len(t, evs, 16+1+1+1, "16 tokens (the default max_tokens), finish, usage, [DONE]")
	var text strings.Builder
	for _, e := range evs[:16] {
		m := jsonMap(t, e.data)
		require.Equal(t, "text_completion", m["object"])
		text.WriteString(m["choices"].([]any)[0].(map[string]any)["text"].(string))
	}
	require.Equal(t, "abcdefghijklmnop", text.String())
	require.Equal(t, "length", jsonMap(t, evs[16].data)["choices"].([]any)[0].(map[string]any)["finish_reason"])
	require.Equal(t, 16.0, jsonMap(t, evs[17].data)["usage"].(map[string]any)["completion_tokens"])
	require.Equal(t, "[DONE]", evs[18].data)
	require.Equal(t, 16, f.requests()[0].MaxTokens)
}

// TestCompletionsTokenIDs: a completion prompt of token ids reaches the
// engine as those ids, unchanged (no tokenizer, no BOS), and is echoed as
// their text.
func TestCompletionsTokenIDs(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "abc")
	base := startFake(t, testConfig(), f)
	c := testClient(t)
	for _, prompt := range []string{`[104,105,33]`, `[[104,105,33]]`} {
		resp, body := post(t, c, base+"/v1/completions", `{"model":"sim/fake","max_tokens":2,"echo":true,"prompt":`+prompt+`}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		m := jsonMap(t, string(body))
		require.Equal(t, 3.0, m["usage"].(map[string]any)["prompt_tokens"])
		require.Equal(t, "hi!ab", m["choices"].([]any)[0].(map[string]any)["text"])
	}
	reqs := f.requests()
	require.Len(t, reqs, 2)
	for _, r := range reqs {
		require.Equal(t, []int32{104, 105, 33}, r.Prompt)
	}
}

func TestStopStrings(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "Hello world. Bye")
	base := startFake(t, testConfig(), f)
	c := testClient(t)

	resp, body := post(t, c, base+"/v1/chat/completions", `{"model":"sim/fake","stream":true,"stop":["xyz","wor"],
		"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var content strings.Builder
	var reasons []any
	for _, e := range parseSSE(t, body) {
		if e.data == "[DONE]" {
			continue
		}
		ch := jsonMap(t, e.data)["choices"].([]any)[0].(map[string]any)
		if s, ok := ch["delta"].(map[string]any)["content"].(string); ok {
			content.WriteString(s)
		}
		if ch["finish_reason"] != nil {
			reasons = append(reasons, ch["finish_reason"])
		}
	}
	require.Equal(t, "Hello ", content.String())
	require.Equal(t, []any{"stop"}, reasons)
	// Every choice ended on a stop string: the engine request is cancelled.
	require.Equal(t, 1, f.cancellations())
}

func TestBadRequestsFake(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 64, "ok")
	cfg := testConfig()
	cfg.MaxBodyBytes = 4096
	base := startFake(t, cfg, f)
	c := testClient(t)
	for _, tc := range badRequests(fakeModel, 64, cfg.MaxBodyBytes, strings.Repeat("a", 100)) {
		t.Run(tc.name, func(t *testing.T) {
			checkBadRequest(t, c, base, tc)
		})
	}
	require.Empty(t, f.requests(), "no bad request may reach the engine")
	resp, body := post(t, c, base+"/v1/chat/completions", `{"model":"sim/fake","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
}

func TestEngineErrors(t *testing.T) {
	t.Parallel()
	failing := func(req engine.Request) []engine.Event {
		return []engine.Event{
			{Kind: engine.EventToken, Index: 0, Token: 'a'},
			{Kind: engine.EventFinish, Index: 0, Finish: engine.FinishError, Err: errors.New("gpu on fire")},
			{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: len(req.Prompt), OutputTokens: 1}},
		}
	}
	shutdown := func(req engine.Request) []engine.Event {
		return []engine.Event{
			{Kind: engine.EventFinish, Index: 0, Finish: engine.FinishCancelled},
			{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: len(req.Prompt)}},
		}
	}
	const chat = `{"model":"sim/fake","messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name       string
		submitErr  error
		script     func(engine.Request) []engine.Event
		path, body string
		status     int
		retryAfter string
		code       any
		msg        string
		// sse is the expected stream tail: "openai" or "native"; "" for a JSON error.
		sse string
	}{
		{name: "queue full", submitErr: engine.ErrQueueFull, path: "/v1/chat/completions", body: chat + `}`,
			status: 503, retryAfter: "1", msg: "overloaded"},
		{name: "closed", submitErr: engine.ErrClosed, path: "/v1/chat/completions", body: chat + `,"stream":true}`,
			status: 503, msg: "shutting down"},
		{name: "context length from engine", submitErr: &engine.ContextLengthError{PromptTokens: 30, MaxTokens: 10, Limit: 32},
			path: "/v1/chat/completions", body: chat + `,"max_tokens":10}`, status: 400, code: pipeline.CodeContextLength,
			msg: "maximum context length is 32 tokens. However, you requested 40 tokens (30 in the messages, 10 in the completion)"},
		{name: "invalid from engine", submitErr: &engine.InvalidRequestError{Reason: "bad"}, path: "/v1/chat", body: chat + `}`,
			status: 400, msg: "bad"},
		{name: "unexpected submit error", submitErr: errors.New("boom"), path: "/v1/completions",
			body: `{"model":"sim/fake","prompt":"x"}`, status: 500, msg: "internal error (request id cmpl-"},
		{name: "engine error non-stream", script: failing, path: "/v1/chat/completions", body: chat + `}`,
			status: 500, msg: "internal error (request id chatcmpl-"},
		{name: "engine error stream", script: failing, path: "/v1/chat/completions", body: chat + `,"stream":true}`,
			status: 200, sse: "openai", msg: "internal error (request id chatcmpl-"},
		{name: "engine error completions stream", script: failing, path: "/v1/completions",
			body: `{"model":"sim/fake","prompt":"x","stream":true}`, status: 200, sse: "openai", msg: "internal error"},
		{name: "engine error native", script: failing, path: "/v1/chat", body: chat + `}`,
			status: 200, sse: "native", msg: "internal error (request id req_"},
		{name: "engine stopped mid-stream", script: shutdown, path: "/v1/chat/completions", body: chat + `,"stream":true}`,
			status: 200, sse: "openai", msg: "shutting down"},
		{name: "engine stopped non-stream", script: shutdown, path: "/v1/chat", body: chat + `,"stream":false}`,
			status: 503, msg: "shutting down"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(fakeModel, 4096, "abc")
			f.err = tc.submitErr
			if tc.script != nil {
				f.script = tc.script
			}
			base := startFake(t, testConfig(), f)
			resp, body := post(t, testClient(t), base+tc.path, tc.body)
			require.Equal(t, tc.status, resp.StatusCode, "%s", body)
			var e map[string]any
			switch tc.sse {
			case "":
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.Equal(t, tc.retryAfter, resp.Header.Get("Retry-After"))
				e = errorOf(t, body)
			case "openai":
				evs := parseSSE(t, body)
				require.GreaterOrEqual(t, len(evs), 2)
				require.Equal(t, "[DONE]", evs[len(evs)-1].data)
				e = errorOf(t, []byte(evs[len(evs)-2].data))
			case "native":
				evs := parseSSE(t, body)
				last := evs[len(evs)-1]
				require.Equal(t, "error", last.event)
				e = errorOf(t, []byte(last.data))
			}
			require.Contains(t, e["message"], tc.msg)
			require.NotContains(t, e["message"], "gpu on fire", "details stay in the log")
			require.Equal(t, tc.code, e["code"])
		})
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "ab")
	f.delay = 150 * time.Millisecond
	cfg := testConfig()
	cfg.HeartbeatInterval = 20 * time.Millisecond
	base := startFake(t, cfg, f)
	c := testClient(t)
	for _, path := range []string{"/v1/chat/completions", "/v1/chat"} {
		t.Run(path, func(t *testing.T) {
			resp, body := post(t, c, base+path, `{"model":"sim/fake","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			evs := parseSSE(t, body)
			pings := 0
			for _, e := range evs {
				if e.comment != "" {
					require.Equal(t, "ping", e.comment)
					require.Equal(t, []string{": ping"}, e.lines)
					pings++
				}
			}
			require.GreaterOrEqual(t, pings, 3, "%s", body)
			require.NotEmpty(t, dataEvents(evs))
		})
	}
}

func TestDisconnectCancels(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, strings.Repeat("x", 1000))
	f.delay = 5 * time.Millisecond
	base := startFake(t, testConfig(), f)
	c := testClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim/fake","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 5 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return f.cancellations() == 1 }, 5*time.Second, 5*time.Millisecond)
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	base := startFake(t, testConfig(), newFake(fakeModel, 4096, "ab"), newFake("sim/other", 8192, "cd"))
	c := testClient(t)

	resp, body := get(t, c, base+"/v1/models")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"object":"list","data":[
		{"id":"sim/fake","object":"model","created":1700000000,"owned_by":"llmd","max_model_len":4096},
		{"id":"sim/other","object":"model","created":1700000000,"owned_by":"llmd","max_model_len":8192}]}`, string(body))

	resp, body = get(t, c, base+"/v1/models/sim/other")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"id":"sim/other","object":"model","created":1700000000,"owned_by":"llmd","max_model_len":8192}`, string(body))

	for _, id := range []string{"nope", ""} {
		resp, body = get(t, c, base+"/v1/models/"+id)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Equal(t, pipeline.CodeModelNotFound, errorOf(t, body)["code"])
	}

	resp, body = get(t, c, base+"/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"status":"ok"}`, string(body))
	resp, body = get(t, c, base+"/readyz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"status":"ready"}`, string(body))

	resp, body = get(t, c, base+"/v1/chat/completions")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, http.MethodPost, resp.Header.Get("Allow"))
	errorOf(t, body)

	resp, body = post(t, c, base+"/v1/models", `{}`)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	errorOf(t, body)

	resp, body = get(t, c, base+"/v1/nothing")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "invalid_request_error", errorOf(t, body)["type"])
}

func TestClientRequestIDIsNotTheEngineID(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "ab")
	base := startFake(t, testConfig(), f)
	c := testClient(t)
	for range 2 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat",
			strings.NewReader(`{"model":"sim/fake","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("X-Request-Id", strings.Repeat("z", 10000))
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	reqs := f.requests()
	require.Len(t, reqs, 2)
	require.NotEqual(t, reqs[0].ID, reqs[1].ID)
	require.NotContains(t, reqs[0].ID, "zzz")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		edit func(*Config)
		want string // "" means valid
	}{
		"default":          {edit: func(*Config) {}},
		"ipv6 loopback":    {edit: func(c *Config) { c.Listen = "[::1]:0" }},
		"localhost":        {edit: func(c *Config) { c.Listen = "localhost:9000" }},
		"all interfaces":   {edit: func(c *Config) { c.Listen = ":8700" }, want: "not a loopback address"},
		"public":           {edit: func(c *Config) { c.Listen = "0.0.0.0:8700" }, want: "API keys"},
		"no port":          {edit: func(c *Config) { c.Listen = "127.0.0.1" }, want: "missing port"},
		"tp":               {edit: func(c *Config) { c.TP = 0 }, want: "tp is 0"},
		"no models":        {edit: func(c *Config) { c.Models = nil }, want: "no models"},
		"duplicate models": {edit: func(c *Config) { c.Models = []string{"small", "sim/small"} }, want: "listed twice"},
		"heartbeat":        {edit: func(c *Config) { c.HeartbeatInterval = 0 }, want: "heartbeat interval"},
		"max n":            {edit: func(c *Config) { c.MaxN = 0 }, want: "max n"},
		"body":             {edit: func(c *Config) { c.MaxBodyBytes = 0 }, want: "max body bytes"},
		"engine":           {edit: func(c *Config) { c.Engine.MaxRunning = 0 }, want: "max running"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestKeepAliveAfterStream(t *testing.T) {
	t.Parallel()
	// A stream's per-write deadline must not outlive it on a kept-alive
	// connection (net/http clears it after each request).
	f := newFake(fakeModel, 4096, "abc")
	cfg := testConfig()
	cfg.StreamWriteTimeout = 50 * time.Millisecond
	base := startFake(t, cfg, f)
	c := testClient(t)
	const body = `{"model":"sim/fake","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	resp, _ := post(t, c, base+"/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	time.Sleep(150 * time.Millisecond)
	f.delay = 0
	for range 2 {
		resp, b := post(t, c, base+"/v1/chat", `{"model":"sim/fake","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(b), `"text":"abc"`)
	}
}

// TestSamplingSameOnEveryAPI: the three generation APIs decode their
// sampling fields into one shape and check them once: the same fields
// reach the engine alike, and the same bad value gets the same 400.
func TestSamplingSameOnEveryAPI(t *testing.T) {
	t.Parallel()
	f := newFake(fakeModel, 4096, "ab")
	base := startFake(t, testConfig(), f)
	c := testClient(t)
	const sampling = `"temperature":0.5,"top_p":0.9,"top_k":7,"min_p":0.1,"presence_penalty":0.3,` +
		`"frequency_penalty":-0.2,"repetition_penalty":1.1,"logit_bias":{"97":-5},"seed":11,"stop":["zz"],"max_tokens":2`
	bodies := map[string]string{
		"/v1/chat/completions": `{"model":"sim/fake","messages":[{"role":"user","content":"hi"}],` + sampling + `}`,
		"/v1/completions":      `{"model":"sim/fake","prompt":"hi",` + sampling + `}`,
		"/v1/chat":             `{"model":"sim/fake","stream":false,"messages":[{"role":"user","content":"hi"}],` + sampling + `}`,
	}
	want := engine.SamplingParams{Temperature: 0.5, TopP: 0.9, TopK: 7, MinP: 0.1, PresencePenalty: 0.3,
		FrequencyPenalty: -0.2, RepetitionPenalty: 1.1, LogitBias: map[int32]float32{97: -5}}
	for path, body := range bodies {
		resp, b := post(t, c, base+path, body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
		reqs := f.requests()
		got := reqs[len(reqs)-1]
		require.Equal(t, want, got.Sampling, path)
		require.Equal(t, uint64(11), got.Seed, path)
		require.Equal(t, 2, got.MaxTokens, path)

		resp, b = post(t, c, base+path, strings.Replace(body, `"min_p":0.1`, `"min_p":3`, 1))
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", path, b)
		require.Equal(t, "min_p", errorOf(t, b)["param"], path)
	}
}

// TestOneLogLinePerRequest: every generation request gets one log line,
// written from its outcome, with the status the client got: 200, a 400
// refused before any stage ran, 499 for a client that left mid-stream.
func TestOneLogLinePerRequest(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	f := newFake(fakeModel, 4096, strings.Repeat("x", 1000))
	f.delay = 5 * time.Millisecond
	cfg := testConfig()
	s := newServer(t, cfg, newBufferLogger(&logs), []*pipeline.Model{newModel(f, byteTokenizer{}, time.Unix(0, 0), nil)})
	base := startServer(t, s)
	c := testClient(t)

	resp, b := post(t, c, base+"/v1/chat/completions", `{"model":"sim/fake","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	ok := resp.Header.Get("X-Request-Id")
	resp, _ = post(t, c, base+"/v1/chat/completions", `{"model":"sim/fake","temperature":9,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	bad := resp.Header.Get("X-Request-Id")

	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim/fake","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err = c.Do(req)
	require.NoError(t, err)
	gone := resp.Header.Get("X-Request-Id")
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 5 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	cancel()
	resp.Body.Close()

	lines := func(id string) []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(logs.String(), "\n") {
			if line == "" {
				continue
			}
			if m := jsonMap(t, line); m["msg"] == "request" && m["request_id"] == id {
				out = append(out, m)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(lines(gone)) == 1 }, 5*time.Second, 5*time.Millisecond)
	for id, want := range map[string]struct {
		status float64
		finish string
	}{ok: {200, "length"}, bad: {400, ""}, gone: {499, "cancelled"}} {
		ls := lines(id)
		require.Len(t, ls, 1, "one line for %s", id)
		require.Equal(t, want.status, ls[0]["status"], "%v", ls[0])
		require.Equal(t, want.finish, ls[0]["finish_reason"], "%v", ls[0])
		require.Equal(t, "chat.completions", ls[0]["endpoint"])
		require.Equal(t, "sim/fake", ls[0]["model"])
	}
}
