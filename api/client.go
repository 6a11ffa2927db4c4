package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ErrIncompleteStream is returned when a stream ends before its final event
// ("event: done" in the native API, "data: [DONE]" in the OpenAI API). When
// the connection broke, the read error is wrapped too.
var ErrIncompleteStream = errors.New("api: stream ended before its final event")

// maxErrorBodyBytes bounds how much of an error response is read.
const maxErrorBodyBytes = 64 << 10

// StatusError is an error response from llmd received before any streaming:
// an HTTP status of 4xx or 5xx with the OpenAI error body.
type StatusError struct {
	// StatusCode is the HTTP status code.
	StatusCode int
	// Type is the error type, e.g. "invalid_request_error".
	Type string
	// Code is the error code, e.g. "model_not_found"; it may be empty.
	Code string
	// Param is the request field the error is about; it may be empty.
	Param string
	// Message is the human-readable message. When the body was not an
	// OpenAI error body it is the body's text, or the status text.
	Message string
	// RetryAfter is the delay the server asked for in Retry-After (429, 503);
	// zero when absent.
	RetryAfter time.Duration
}

// Error returns e.g. `llmd: 404 model_not_found: model "x" not found`.
func (e *StatusError) Error() string {
	kind := e.Code
	if kind == "" {
		kind = e.Type
	}
	if kind == "" {
		return fmt.Sprintf("llmd: %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("llmd: %d %s: %s", e.StatusCode, kind, e.Message)
}

// StreamError is an error llmd reported inside a stream after the response
// had started: an "event: error" frame (native API) or a data event whose
// JSON carries "error" (OpenAI API). Part of the answer may have been
// delivered already.
type StreamError struct {
	Type    string
	Code    string
	Message string
}

// Error returns e.g. `llmd: stream error server_error: engine stopped`.
func (e *StreamError) Error() string {
	kind := e.Code
	if kind == "" {
		kind = e.Type
	}
	if kind == "" {
		return "llmd: stream error: " + e.Message
	}
	return fmt.Sprintf("llmd: stream error %s: %s", kind, e.Message)
}

func streamErrorFrom(d ErrorDetail) *StreamError {
	e := &StreamError{Type: d.Type, Message: d.Message}
	if d.Code != nil {
		e.Code = *d.Code
	}
	if e.Message == "" {
		e.Message = "unknown error"
	}
	return e
}

// Client talks to one llmd over HTTP. It is safe for concurrent use.
//
// Network errors are returned as the *url.Error of net/http, so
// errors.Is(err, syscall.ECONNREFUSED) tells that llmd is not running, and a
// cancelled context gives an error for which errors.Is(err, context.Canceled)
// holds.
//
// With an API key set (see [Client.SetAPIKey]) every request carries it as
// "Authorization: Bearer <key>"; the key never appears in an error the
// client returns.
type Client struct {
	base *url.URL
	hc   *http.Client
	// apiKey is the key set by SetAPIKey; nil or "" means none.
	apiKey atomic.Pointer[string]
}

// NewClient returns a client of the llmd at baseURL, e.g.
// "http://127.0.0.1:8700" (a path prefix such as "https://host/llmd" is
// kept). hc nil means an http.Client without an overall timeout, since
// streams last as long as the generation; bound calls with their context.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("api: parse base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("api: base URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("api: base URL %q has no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("api: base URL %q must not have a query or fragment", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, hc: hc}, nil
}

// SetAPIKey makes every later request, streamed or not, carry key as
// "Authorization: Bearer <key>"; "" sends none. It is safe to call while
// other requests are in flight: they keep the key they started with.
//
// A key holding characters that an HTTP header cannot (a newline, say)
// makes requests fail with an error that does not include it.
func (c *Client) SetAPIKey(key string) {
	c.apiKey.Store(&key)
}

func (c *Client) key() string {
	if k := c.apiKey.Load(); k != nil {
		return *k
	}
	return ""
}

// BaseURL returns the base URL the client sends requests to, without a
// trailing slash.
func (c *Client) BaseURL() string {
	return c.base.String()
}

// Models returns the models llmd serves (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/models", nil, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list ModelList
	if err := decodeJSON(resp, &list); err != nil {
		return nil, err
	}
	return list.Data, nil
}

// Stats returns every model replica's engine state (GET /v1/stats).
func (c *Client) Stats(ctx context.Context) (*StatsResponse, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/stats", nil, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st StatsResponse
	if err := decodeJSON(resp, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Health checks GET /healthz: nil when llmd is up.
func (c *Client) Health(ctx context.Context) error {
	return c.probe(ctx, "/healthz")
}

// Ready checks GET /readyz: nil when llmd accepts requests.
func (c *Client) Ready(ctx context.Context) error {
	return c.probe(ctx, "/readyz")
}

func (c *Client) probe(ctx context.Context, path string) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBodyBytes))
	return resp.Body.Close()
}

// Chat streams a native chat (POST /v1/chat), calling fn with each token
// delta as it arrives, and returns the final "done" event (usage and finish
// reason). req.Stream is forced on.
//
// A connection that drops mid-answer is resumed (GET
// /v1/requests/{id}/stream with Last-Event-ID; llmd kept generating), up to
// 8 times with backoff, so fn sees every delta exactly once. If fn returns
// an error, or ctx ends, the stream stops, Chat cancels the request (so
// llmd frees its KV cache at the next step) and returns that error. An
// "event: error"
// frame returns a *StreamError; a stream that still ends without its "done"
// event returns an error wrapping ErrIncompleteStream. Heartbeat comments
// are skipped.
func (c *Client) Chat(ctx context.Context, req NativeChatRequest, fn func(NativeDelta) error) (*NativeDone, error) {
	stream := true
	req.Stream = &stream
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.do(ctx, http.MethodPost, "/v1/chat", req, "text/event-stream")
	if err != nil {
		return nil, err
	}
	id := resp.Header.Get("X-Request-Id")
	lastID := ""
	for attempt := 0; ; attempt++ {
		done, err := c.readNative(ctx, resp, fn, &lastID)
		if err != nil && id != "" && (ctx.Err() != nil || errors.Is(err, errCallback)) {
			// The caller gave up on the answer: stop llmd generating it.
			cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = c.CancelRequest(cctx, id)
			stop()
		}
		if cb, ok := err.(*callbackError); ok {
			return nil, cb.err
		}
		if err == nil || !errors.Is(err, ErrIncompleteStream) || id == "" || attempt >= maxResumes {
			return done, err
		}
		// The connection dropped mid-answer: llmd kept generating, so pick
		// the stream up after the last event seen; nothing is lost or shown
		// twice.
		if werr := sleepCtx(ctx, resumeBackoff(attempt)); werr != nil {
			return nil, werr
		}
		resp, err = c.resume(ctx, id, lastID)
		if err != nil {
			var se *StatusError
			if errors.As(err, &se) {
				return nil, err // gone (404, 410): resuming cannot help
			}
			resp = nil
		}
		if resp == nil {
			// Could not reconnect this time; try again.
			resp = &http.Response{Body: io.NopCloser(errReader{}), Header: http.Header{"Content-Type": {"text/event-stream"}}}
		}
	}
}

// maxResumes bounds how often Chat resumes one answer.
const maxResumes = 8

func resumeBackoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<attempt, 3*time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errReader fails every read: a stream that could not be reopened.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// resume reopens request id's stream after event lastID ("" for the start).
func (c *Client) resume(ctx context.Context, id, lastID string) (*http.Response, error) {
	p, err := adminPath("/v1/requests", "request id", id)
	if err != nil {
		return nil, err
	}
	var extra http.Header
	if lastID != "" {
		extra = http.Header{"Last-Event-Id": {lastID}}
	}
	return c.doWith(ctx, http.MethodGet, p+"/stream", nil, "text/event-stream", extra)
}

// readNative reads a native stream to its final event, calling fn for each
// delta and keeping *lastID at the id of the last event read.
func (c *Client) readNative(ctx context.Context, resp *http.Response, fn func(NativeDelta) error, lastID *string) (*NativeDone, error) {
	defer resp.Body.Close()
	if err := checkEventStream(resp); err != nil {
		return nil, err
	}
	sr := NewSSEReader(resp.Body)
	for {
		ev, err := sr.Next()
		if err != nil {
			return nil, streamReadError(ctx, err)
		}
		if ev.ID != "" {
			*lastID = ev.ID
		}
		switch ev.Event {
		case "message":
			var d NativeDelta
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
				return nil, fmt.Errorf("api: decode token event: %w", err)
			}
			if err := fn(d); err != nil {
				return nil, &callbackError{err}
			}
		case "done":
			var done NativeDone
			if err := json.Unmarshal([]byte(ev.Data), &done); err != nil {
				return nil, fmt.Errorf("api: decode done event: %w", err)
			}
			return &done, nil
		case "error":
			var e NativeError
			if err := json.Unmarshal([]byte(ev.Data), &e); err != nil || e.Error.Message == "" {
				return nil, &StreamError{Message: ev.Data}
			}
			return nil, streamErrorFrom(e.Error)
		}
	}
}

// errCallback marks a callbackError.
var errCallback = errors.New("api: callback error")

// callbackError carries an error returned by a caller's callback, which
// Chat returns unchanged.
type callbackError struct{ err error }

func (e *callbackError) Error() string   { return e.err.Error() }
func (e *callbackError) Is(t error) bool { return t == errCallback }

// CancelRequest cancels a live request of the caller's tenant (DELETE
// /v1/requests/{id}): it leaves the batch at llmd's next step.
func (c *Client) CancelRequest(ctx context.Context, id string) error {
	p, err := adminPath("/v1/requests", "request id", id)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodDelete, p, nil, "application/json")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// ChatCompletion sends a non-streamed OpenAI chat completion
// (POST /v1/chat/completions). req.Stream and req.StreamOptions are cleared.
func (c *Client) ChatCompletion(ctx context.Context, req ChatCompletionRequest) (*ChatCompletion, error) {
	req.Stream = false
	req.StreamOptions = nil
	resp, err := c.do(ctx, http.MethodPost, "/v1/chat/completions", req, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var cc ChatCompletion
	if err := decodeJSON(resp, &cc); err != nil {
		return nil, err
	}
	return &cc, nil
}

// ChatCompletionStream streams an OpenAI chat completion
// (POST /v1/chat/completions with "stream": true), calling fn with each
// chunk, including the final usage chunk when req.StreamOptions asks for it.
// It returns nil after "data: [DONE]". req.Stream is forced on.
//
// Errors behave as in Chat: fn's error is returned unchanged after closing
// the connection; an in-stream error returns a *StreamError; a stream ending
// before [DONE] returns an error wrapping ErrIncompleteStream.
func (c *Client) ChatCompletionStream(ctx context.Context, req ChatCompletionRequest, fn func(ChatCompletionChunk) error) error {
	req.Stream = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.do(ctx, http.MethodPost, "/v1/chat/completions", req, "text/event-stream")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkEventStream(resp); err != nil {
		return err
	}
	sr := NewSSEReader(resp.Body)
	for {
		ev, err := sr.Next()
		if err != nil {
			return streamReadError(ctx, err)
		}
		if ev.Data == "[DONE]" {
			DrainAfterDone(resp.Body)
			return nil
		}
		var chunk struct {
			ChatCompletionChunk
			Error *ErrorDetail `json:"error"`
		}
		jsonErr := json.Unmarshal([]byte(ev.Data), &chunk)
		if chunk.Error != nil {
			return streamErrorFrom(*chunk.Error)
		}
		if ev.Event == "error" {
			return &StreamError{Message: ev.Data}
		}
		if jsonErr != nil {
			return fmt.Errorf("api: decode chunk: %w", jsonErr)
		}
		if err := fn(chunk.ChatCompletionChunk); err != nil {
			return err
		}
	}
}

// do sends one request and returns the response when its status is 2xx;
// otherwise it reads the body into a *StatusError.
func (c *Client) do(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	return c.doWith(ctx, method, path, body, accept, nil)
}

// doWith is do with extra request headers.
func (c *Client) doWith(ctx context.Context, method, path string, body any, accept string, extra http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("api: encode %s body: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	// path may carry a query ("/v1/admin/usage?by=day"); JoinPath would
	// escape its "?".
	p, query, _ := strings.Cut(path, "?")
	u := c.base.JoinPath(p)
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("api: new request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	key := c.key()
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		se := readStatusError(resp)
		if key != "" {
			// A server that echoes the key it refused must not put it
			// into our error (and from there into logs and terminals).
			se.Message = strings.ReplaceAll(se.Message, key, "[redacted]")
			se.Param = strings.ReplaceAll(se.Param, key, "[redacted]")
		}
		return nil, se
	}
	return resp, nil
}

// readStatusError turns a non-2xx response into a *StatusError.
func readStatusError(resp *http.Response) *StatusError {
	se := &StatusError{StatusCode: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	var eb ErrorBody
	if err := json.Unmarshal(b, &eb); err == nil && eb.Error.Message != "" {
		se.Type = eb.Error.Type
		se.Message = eb.Error.Message
		if eb.Error.Code != nil {
			se.Code = *eb.Error.Code
		}
		if eb.Error.Param != nil {
			se.Param = *eb.Error.Param
		}
		return se
	}
	se.Message = strings.TrimSpace(string(b))
	if se.Message == "" || strings.HasPrefix(se.Message, "<") {
		se.Message = http.StatusText(resp.StatusCode)
	}
	return se
}

// parseRetryAfter reads Retry-After as seconds (integer or float) or an HTTP
// date; zero when absent or invalid.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func decodeJSON(resp *http.Response, v any) error {
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("api: decode %s response: %w", resp.Request.URL.Path, err)
	}
	return nil
}

func checkEventStream(resp *http.Response) error {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "text/event-stream" {
		return fmt.Errorf("api: %s: expected text/event-stream, got %q", resp.Request.URL.Path, resp.Header.Get("Content-Type"))
	}
	return nil
}

// streamReadError maps an error from reading a stream: the context's error
// when it ended the stream, else ErrIncompleteStream (wrapping the read
// error when the connection broke rather than ended).
func streamReadError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, io.EOF) {
		return ErrIncompleteStream
	}
	if errors.Is(err, ErrSSEEventTooLarge) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIncompleteStream, err)
}

// Metrics returns GET /metrics: llmd's Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}
