package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// newClient starts an httptest server with h and returns a client of it.
func newClient(t *testing.T, h http.Handler) *api.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := api.NewClient(srv.URL, srv.Client())
	require.NoError(t, err)
	return c
}

// sse writes raw SSE text and flushes it.
func sse(w http.ResponseWriter, s string) {
	_, _ = io.WriteString(w, s)
	_ = http.NewResponseController(w).Flush()
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
}

func writeError(w http.ResponseWriter, status int, typ, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := api.ErrorBody{Error: api.ErrorDetail{Message: message, Type: typ}}
	if code != "" {
		body.Error.Code = &code
	}
	_ = json.NewEncoder(w).Encode(body)
}

func nativeToken(n int, delta string) string {
	b, _ := json.Marshal(api.NativeDelta{Delta: delta})
	return fmt.Sprintf("id: %d\ndata: %s\n\n", n, b)
}

func nativeDone(d api.NativeDone) string {
	b, _ := json.Marshal(d)
	return fmt.Sprintf("event: done\ndata: %s\n\n", b)
}

// collect returns a Chat callback that appends deltas to *sb.
func collect(sb *strings.Builder) func(api.NativeDelta) error {
	return func(d api.NativeDelta) error {
		sb.WriteString(d.Delta)
		return nil
	}
}

func TestNewClient(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    string
		wantErr bool
	}{
		"plain":           {in: "http://127.0.0.1:8700", want: "http://127.0.0.1:8700"},
		"trailing slash":  {in: "http://127.0.0.1:8700/", want: "http://127.0.0.1:8700"},
		"https with path": {in: "https://example.com/llmd/", want: "https://example.com/llmd"},
		"no scheme":       {in: "127.0.0.1:8700", wantErr: true},
		"host only":       {in: "localhost:8700", wantErr: true},
		"other scheme":    {in: "ftp://example.com", wantErr: true},
		"no host":         {in: "http://", wantErr: true},
		"query":           {in: "http://h:1/?a=b", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := api.NewClient(tc.in, nil)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c.BaseURL())
		})
	}
}

func TestModels(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /prefix/v1/models", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.ModelList{Object: "list", Data: []api.Model{
			{ID: "sim/small", Object: "model", OwnedBy: "llmd", MaxModelLen: 4096},
			{ID: "sim/mid", Object: "model", OwnedBy: "llmd"},
		}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := api.NewClient(srv.URL+"/prefix/", nil)
	require.NoError(t, err)

	models, err := c.Models(t.Context())
	require.NoError(t, err)
	require.Equal(t, []api.Model{
		{ID: "sim/small", Object: "model", OwnedBy: "llmd", MaxModelLen: 4096},
		{ID: "sim/mid", Object: "model", OwnedBy: "llmd"},
	}, models)
}

func TestChatStreams(t *testing.T) {
	done := api.NativeDone{ID: "req-1", Model: "sim/small", FinishReason: "stop",
		Usage: api.NativeUsage{InputTokens: 12, CachedTokens: 8, OutputTokens: 3}}
	type received struct {
		req    api.NativeChatRequest
		accept string
	}
	recv := make(chan received, 1)
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/v1/chat", r.URL.Path)
		assert.Equal(t, http.MethodPost, r.Method)
		var rc received
		rc.accept = r.Header.Get("Accept")
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&rc.req))
		recv <- rc
		startSSE(w)
		sse(w, ": ping\n\n")
		sse(w, nativeToken(1, "Hel"))
		sse(w, ": ping\n\n")
		sse(w, nativeToken(2, "lo"))
		sse(w, "id: 3\r\ndata: {\"delta\": \"!\", \"index\": 0}\r\n\r\n")
		sse(w, ": ping\n\n")
		sse(w, nativeDone(done))
	}))

	maxTokens := 5
	var sb strings.Builder
	got, err := c.Chat(t.Context(), api.NativeChatRequest{
		Model:     "sim/small",
		Messages:  []api.Message{{Role: "user", Content: "hi"}},
		MaxTokens: &maxTokens,
	}, collect(&sb))
	require.NoError(t, err)
	require.Equal(t, "Hello!", sb.String())
	require.Equal(t, &done, got)
	rc := <-recv
	gotReq := rc.req
	require.Equal(t, "text/event-stream", rc.accept)
	require.NotNil(t, gotReq.Stream)
	require.True(t, *gotReq.Stream)
	require.Equal(t, "sim/small", gotReq.Model)
	require.Equal(t, 5, *gotReq.MaxTokens)
}

func TestChatErrors(t *testing.T) {
	tests := map[string]struct {
		handler    http.HandlerFunc
		wantText   string // deltas delivered before the error
		check      func(t *testing.T, err error)
		wantErrMsg string
	}{
		"404 model not found": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", `model "x" not found`)
			},
			check: func(t *testing.T, err error) {
				var se *api.StatusError
				require.ErrorAs(t, err, &se)
				require.Equal(t, &api.StatusError{StatusCode: 404, Type: "invalid_request_error",
					Code: "model_not_found", Message: `model "x" not found`}, se)
			},
			wantErrMsg: `llmd: 404 model_not_found: model "x" not found`,
		},
		"429 with retry-after": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "3")
				writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded", "slow down")
			},
			check: func(t *testing.T, err error) {
				var se *api.StatusError
				require.ErrorAs(t, err, &se)
				require.Equal(t, 3*time.Second, se.RetryAfter)
				require.Equal(t, "rate_limit_exceeded", se.Code)
			},
			wantErrMsg: "llmd: 429 rate_limit_exceeded: slow down",
		},
		"500 without code": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusInternalServerError, "server_error", "", "internal error (request id r1)")
			},
			wantErrMsg: "llmd: 500 server_error: internal error (request id r1)",
		},
		"non-JSON error body": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "404 page not found", http.StatusNotFound)
			},
			wantErrMsg: "llmd: 404: 404 page not found",
		},
		"HTML error body": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusBadGateway)
				_, _ = io.WriteString(w, "<html>bad gateway</html>")
			},
			wantErrMsg: "llmd: 502: Bad Gateway",
		},
		"error event mid-stream": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, nativeToken(1, "par"))
				sse(w, "event: error\ndata: {\"error\": {\"message\": \"executor failed\", \"type\": \"server_error\", \"param\": null, \"code\": null}}\n\n")
			},
			wantText: "par",
			check: func(t *testing.T, err error) {
				var se *api.StreamError
				require.ErrorAs(t, err, &se)
				require.Equal(t, &api.StreamError{Type: "server_error", Message: "executor failed"}, se)
			},
			wantErrMsg: "llmd: stream error server_error: executor failed",
		},
		"stream ends before done": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, nativeToken(1, "a"))
				sse(w, ": ping\n\n")
				sse(w, nativeToken(2, "b"))
			},
			wantText: "ab",
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, api.ErrIncompleteStream)
			},
			wantErrMsg: "api: stream ended before its final event",
		},
		"unterminated done event": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, nativeToken(1, "a"))
				sse(w, "event: done\ndata: {}\n")
			},
			wantText: "a",
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, api.ErrIncompleteStream)
			},
		},
		"connection cut mid-stream": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, nativeToken(1, "a"))
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = conn.Close() // no terminating chunk: the body ends unexpectedly
				}
			},
			wantText: "a",
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, api.ErrIncompleteStream)
				require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			},
		},
		"not an event stream": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"text": "hi"}`)
			},
			wantErrMsg: `api: /v1/chat: expected text/event-stream, got "application/json"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, tc.handler)
			var sb strings.Builder
			done, err := c.Chat(t.Context(), api.NativeChatRequest{Model: "x"}, collect(&sb))
			require.Error(t, err)
			require.Nil(t, done)
			require.Equal(t, tc.wantText, sb.String())
			if tc.check != nil {
				tc.check(t, err)
			}
			if tc.wantErrMsg != "" {
				require.EqualError(t, err, tc.wantErrMsg)
			}
		})
	}
}

// cancelServer streams tokens until the client goes away and reports the
// cancellation of the request's context on the returned channel.
func cancelServer(t *testing.T) (*api.Client, <-chan struct{}) {
	t.Helper()
	gone := make(chan struct{})
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-r.Context().Done():
				close(gone)
				return
			case <-tick.C:
				sse(w, nativeToken(n, "x"))
			}
		}
	}))
	return c, gone
}

func TestChatCallbackErrorClosesStream(t *testing.T) {
	c, gone := cancelServer(t)
	errStop := errors.New("stop")
	n := 0
	_, err := c.Chat(t.Context(), api.NativeChatRequest{Model: "x"}, func(api.NativeDelta) error {
		n++
		if n == 3 {
			return errStop
		}
		return nil
	})
	require.ErrorIs(t, err, errStop)
	require.Equal(t, 3, n)
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not see the request cancelled")
	}
}

func TestChatContextCancelClosesStream(t *testing.T) {
	c, gone := cancelServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	_, err := c.Chat(ctx, api.NativeChatRequest{Model: "x"}, func(api.NativeDelta) error {
		n++
		if n == 2 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not see the request cancelled")
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	c, err := api.NewClient("http://"+addr, nil)
	require.NoError(t, err)
	_, err = c.Models(t.Context())
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = c.Chat(t.Context(), api.NativeChatRequest{Model: "x"}, func(api.NativeDelta) error { return nil })
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorIs(t, c.Health(t.Context()), syscall.ECONNREFUSED)
}

func TestHealth(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "server_error", "", "draining")
	})
	c := newClient(t, mux)
	require.NoError(t, c.Health(t.Context()))
	err := c.Ready(t.Context())
	var se *api.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusServiceUnavailable, se.StatusCode)
	require.Equal(t, "draining", se.Message)
}

func TestChatCompletion(t *testing.T) {
	recv := make(chan map[string]any, 1)
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/v1/chat/completions", r.URL.Path)
		var req map[string]any
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		recv <- req
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"sim/small",
			"choices":[{"index":0,"message":{"role":"assistant","content":"hi there","refusal":null},"logprobs":null,"finish_reason":"stop"}],
			"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}}`)
	}))
	cc, err := c.ChatCompletion(t.Context(), api.ChatCompletionRequest{
		Model:         "sim/small",
		Messages:      []api.Message{{Role: "user", Content: "hi"}},
		Stream:        true, // cleared by ChatCompletion
		StreamOptions: &api.StreamOptions{IncludeUsage: true},
	})
	require.NoError(t, err)
	gotReq := <-recv
	require.NotContains(t, gotReq, "stream")
	require.NotContains(t, gotReq, "stream_options")
	require.Len(t, cc.Choices, 1)
	require.Equal(t, "hi there", cc.Choices[0].Message.Content)
	require.Equal(t, "stop", cc.Choices[0].FinishReason)
	require.Equal(t, 7, cc.Usage.TotalTokens)
}

func chunk(content string, finish string) string {
	ch := api.ChatCompletionChunk{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 1, Model: "sim/small",
		Choices: []api.ChunkChoice{{Delta: api.ChunkDelta{Content: &content}}}}
	if finish != "" {
		ch.Choices[0].FinishReason = &finish
		ch.Choices[0].Delta = api.ChunkDelta{}
	}
	b, _ := json.Marshal(ch)
	return "data: " + string(b) + "\n\n"
}

func TestChatCompletionStream(t *testing.T) {
	usage := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"sim/small","choices":[],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":4}}}` + "\n\n"
	tests := map[string]struct {
		body     string
		wantText string
		check    func(t *testing.T, err error)
	}{
		"complete with usage": {
			body:     chunk("", "") + ": ping\n\n" + chunk("Hi", "") + chunk(" you", "") + chunk("", "stop") + usage + "data: [DONE]\n\n",
			wantText: "Hi you",
			check:    func(t *testing.T, err error) { require.NoError(t, err) },
		},
		"in-band error": {
			body:     chunk("Hi", "") + `data: {"error":{"message":"boom","type":"server_error","param":null,"code":"internal"}}` + "\n\ndata: [DONE]\n\n",
			wantText: "Hi",
			check: func(t *testing.T, err error) {
				require.EqualError(t, err, "llmd: stream error internal: boom")
			},
		},
		"missing DONE": {
			body:     chunk("Hi", "") + chunk("", "stop"),
			wantText: "Hi",
			check:    func(t *testing.T, err error) { require.ErrorIs(t, err, api.ErrIncompleteStream) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			recv := make(chan api.ChatCompletionRequest, 1)
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req api.ChatCompletionRequest
				assert.NoError(t, json.NewDecoder(r.Body).Decode(&req))
				recv <- req
				startSSE(w)
				sse(w, tc.body)
			}))
			var sb strings.Builder
			var usageSeen *api.Usage
			err := c.ChatCompletionStream(t.Context(), api.ChatCompletionRequest{
				Model:         "sim/small",
				StreamOptions: &api.StreamOptions{IncludeUsage: true},
			}, func(ch api.ChatCompletionChunk) error {
				for _, c := range ch.Choices {
					if c.Delta.Content != nil {
						sb.WriteString(*c.Delta.Content)
					}
				}
				if ch.Usage != nil {
					usageSeen = ch.Usage
				}
				return nil
			})
			tc.check(t, err)
			require.True(t, (<-recv).Stream)
			require.Equal(t, tc.wantText, sb.String())
			if err == nil {
				require.NotNil(t, usageSeen)
				require.Equal(t, 4, usageSeen.PromptTokensDetails.CachedTokens)
			}
		})
	}
}
