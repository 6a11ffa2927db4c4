package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Kind is the kind of engine behind a base URL.
type Kind string

// The kinds [Detect] tells apart.
const (
	KindVLLM     Kind = "vllm"
	KindSGLang   Kind = "sglang"
	KindLlamaCpp Kind = "llamacpp" // llama.cpp's llama-server
	KindTGI      Kind = "tgi"      // Hugging Face text-generation-inference
	KindOllama   Kind = "ollama"
	KindLLMD     Kind = "llmd"
	// KindOpenAI is an OpenAI-compatible server of no kind above: it
	// lists models on /v1/models but says nothing more about itself.
	KindOpenAI Kind = "openai"
)

// Info is what [Detect] learned about an engine.
type Info struct {
	Kind Kind
	// Version is the engine's own version string: vLLM's /version,
	// SGLang's server_info "version", llama.cpp's build_info, TGI's
	// /info "version", Ollama's /api/version; "" when the engine does not
	// say (llmd, unknown OpenAI servers).
	Version string
	// Models are the models the engine lists on /v1/models, in its order.
	Models []ModelInfo
}

// ModelInfo is one model an engine serves.
type ModelInfo struct {
	// ID is the name requests must carry in "model".
	ID string
	// MaxModelLen is the context length in tokens (prompt plus output) one
	// request may use: vLLM's, SGLang's and llmd's max_model_len,
	// llama.cpp's per-slot n_ctx, TGI's max_total_tokens; 0 when unknown
	// (Ollama).
	MaxModelLen int
	// Root is where the engine loaded the model from, as it says: vLLM's
	// "root" (a Hugging Face model directory or hub name), llama.cpp's
	// model_path (a GGUF file); "" when it does not say. llmd reads a
	// tokenizer from it when it names something on this machine.
	Root string
}

var (
	// ErrUnrecognized is returned by [Detect] when nothing at the base URL
	// answers like an OpenAI-compatible engine. When a probe was refused
	// with a status (401 for an engine that wants a key), that
	// [*StatusError] is wrapped too.
	ErrUnrecognized = errors.New("probe: no OpenAI-compatible engine recognized")
	// ErrNoMetrics is returned by [ParseLoad] and [ReadLoad] when the engine
	// publishes none of the load series this package reads: no /metrics
	// (Ollama; SGLang without --enable-metrics; llama.cpp without
	// --metrics), or none of the kind's series (for the model asked for).
	// The load is then unknown, not zero.
	ErrNoMetrics = errors.New("probe: no load metrics")
)

// StatusError is an answer with an HTTP status other than 2xx.
type StatusError struct {
	// URL is the URL requested.
	URL string
	// StatusCode is the HTTP status, e.g. 503.
	StatusCode int
	// Message is the engine's error message when its body had one in a
	// form this package knows (OpenAI, llama.cpp, Ollama, FastAPI, llmd
	// /readyz), else the start of the body; it may be empty.
	Message string
}

// Error returns e.g. `GET http://127.0.0.1:8080/health: 503 Service
// Unavailable: Loading model`.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("GET %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

const (
	// probeTimeout bounds each request on top of the caller's context, so
	// that one route that hangs costs a probe, not the whole detection.
	probeTimeout = 5 * time.Second
	// maxJSONBytes caps a JSON body (model lists, /props, /info).
	maxJSONBytes = 1 << 20
	// maxMetricsBytes caps a /metrics body.
	maxMetricsBytes = 4 << 20
	// maxErrorBytes caps how much of an error body is read.
	maxErrorBytes = 4 << 10
	// maxMessageBytes caps a StatusError's Message taken from a body.
	maxMessageBytes = 200

	acceptJSON = "application/json"
	// acceptMetrics asks for the classic text format: the parser here does
	// not read OpenMetrics.
	acceptMetrics = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
)

// client is the HTTP side shared by Detect, Health and ReadLoad: one
// engine's base URL and the caller's client.
type client struct {
	hc   *http.Client
	base string // scheme://host[:port][/prefix], no trailing slash
}

// newClient checks base and picks http.DefaultClient for a nil hc.
func newClient(hc *http.Client, base string) (*client, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("probe: base URL %q: want http(s)://host[:port]", base)
	}
	return &client{hc: hc, base: strings.TrimRight(base, "/")}, nil
}

// get requests c.base+path under the per-probe timeout and returns the
// body of a 2xx answer, at most limit bytes (a longer body is an error).
// Any other status is a *StatusError; a transport failure is the client's
// *url.Error, which names the URL.
func (c *client) get(ctx context.Context, path, accept string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	u := c.base + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	req.Header.Set("Accept", accept)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return nil, &StatusError{URL: u, StatusCode: resp.StatusCode, Message: errorMessage(body)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read body: %w", u, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: body over %d bytes", u, limit)
	}
	return body, nil
}

// getJSON gets path and decodes its JSON body into v.
func (c *client) getJSON(ctx context.Context, path string, v any) error {
	body, err := c.get(ctx, path, acceptJSON, maxJSONBytes)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s%s: decode JSON: %w", c.base, path, err)
	}
	return nil
}

// errorMessage pulls the message out of an error body: OpenAI's and
// llama.cpp's {"error":{"message"}}, Ollama's {"error":"..."}, vLLM's older
// {"message"}, FastAPI's {"detail"}, llmd's {"status"}; else the body's
// first line, shortened.
func errorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Status  string          `json:"status"`
	}
	if json.Unmarshal(body, &v) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var flat string
		switch {
		case json.Unmarshal(v.Error, &nested) == nil && nested.Message != "":
			return shorten(nested.Message)
		case json.Unmarshal(v.Error, &flat) == nil && flat != "":
			return shorten(flat)
		case v.Message != "":
			return shorten(v.Message)
		case json.Unmarshal(v.Detail, &flat) == nil && flat != "":
			return shorten(flat)
		case v.Status != "":
			return shorten(v.Status)
		}
	}
	line, _, _ := bytes.Cut(bytes.TrimSpace(body), []byte("\n"))
	return shorten(string(line))
}

func shorten(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxMessageBytes {
		n := maxMessageBytes
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "..."
	}
	return s
}

// isStatus reports whether err is a *StatusError with one of codes.
func isStatus(err error, codes ...int) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.StatusCode == c {
			return true
		}
	}
	return false
}

// unreachable reports whether err means no further probe can succeed: the
// caller's context is done, or nothing listens at the address.
func unreachable(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, syscall.ECONNREFUSED)
}
