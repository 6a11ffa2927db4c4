package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/workload"
)

// Error kinds of a Result. An HTTP error's kind carries its status
// ("http_404", "http_503"); 429 is "http_429". A stream error's kind
// carries its code when the server gave one ("stream_error:server_error").
const (
	// KindTimeout: the request ran past Config.Timeout.
	KindTimeout = "timeout"
	// KindTransport: the connection failed, or broke before the end.
	KindTransport = "transport"
	// KindIncomplete: the stream ended before "data: [DONE]" with no
	// error (the server closed it).
	KindIncomplete = "incomplete_stream"
	// KindProtocol: the response was not an OpenAI stream (wrong content
	// type, a chunk that is not JSON).
	KindProtocol = "protocol"
	// KindStreamError: an error event inside a 200 stream.
	KindStreamError = "stream_error"
)

// Result is what one request did. Times are measured on the client, from
// the moment the request is handed to the HTTP transport.
type Result struct {
	Item workload.Item
	// Sent is when the request was sent, as an offset from the start of
	// the run.
	Sent time.Duration
	// TTFT is the time to the first chunk carrying content (0 when none
	// came); ITL the gaps between consecutive content chunks after it;
	// E2E the time to the end of the stream ("data: [DONE]").
	TTFT time.Duration
	ITL  []time.Duration
	E2E  time.Duration
	// PromptTokens, OutputTokens and CachedTokens come from the usage
	// chunk when the server sent one (Usage true); otherwise
	// OutputTokens counts the content chunks and PromptTokens is the
	// workload's estimate.
	PromptTokens, OutputTokens, CachedTokens int
	Usage                                    bool
	// cachedReported is set when the usage had prompt_tokens_details.
	cachedReported bool
	// Status is the HTTP status (0 when none came back).
	Status int
	// Kind is "" for a request that completed, KindCancelled for one
	// cancelled by design after its first token, KindInterrupted for one
	// cut by the end of the run, else an error kind.
	Kind string
	// Message describes the error, for logs.
	Message string
	// Text is the answer received, for the next turn (Runner.Results
	// does not keep it).
	Text string
}

const (
	// KindCancelled: cancelled after the first token, as the workload
	// asked (Item.Cancel); not an error.
	KindCancelled = "cancelled"
	// KindInterrupted: the run was stopped (Ctrl-C) while it was in
	// flight; not counted.
	KindInterrupted = "interrupted"
)

// OK reports whether r completed.
func (r *Result) OK() bool { return r.Kind == "" }

// TPOT returns (E2E - TTFT) / (OutputTokens - 1), vLLM's time per output
// token excluding the first; ok is false for fewer than 2 tokens.
func (r *Result) TPOT() (time.Duration, bool) {
	if r.OutputTokens < 2 || r.TTFT == 0 {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// errCancelByDesign stops reading a stream the workload cancels.
var errCancelByDesign = errors.New("loadgen: cancelled by design")

// do sends one streamed chat completion and measures it. start is the
// run's start, for Result.Sent. It never returns an error: failures are
// in the Result.
func (r *Runner) do(ctx context.Context, start time.Time, it workload.Item, messages []api.Message) Result {
	res := Result{Item: it}
	maxTokens := it.OutputTokens
	body := api.ChatCompletionRequest{
		Model:          r.cfg.Model,
		Messages:       messages,
		MaxTokens:      &maxTokens,
		Stream:         true,
		StreamOptions:  &api.StreamOptions{IncludeUsage: true},
		Sampling:       api.Sampling{Temperature: r.cfg.Temperature},
		Controls:       api.Controls{IgnoreEOS: r.cfg.IgnoreEOS},
		ResponseFormat: r.cfg.ResponseFormat,
	}
	b, err := json.Marshal(body)
	if err != nil {
		res.Kind, res.Message = KindProtocol, err.Error()
		return res
	}
	if r.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
	}
	// A context of its own, so that a cancel by design closes this
	// connection only.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(b))
	if err != nil {
		res.Kind, res.Message = KindProtocol, err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key := r.key(it.Tenant); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}

	t0 := time.Now()
	res.Sent = t0.Sub(start)
	resp, err := r.hc.Do(req)
	if err != nil {
		fail(ctx, &res, err)
		return res
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		res.Kind = fmt.Sprintf("http_%d", resp.StatusCode)
		res.Message = statusMessage(resp)
		res.E2E = time.Since(t0)
		return res
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		res.Kind = KindProtocol
		res.Message = fmt.Sprintf("expected text/event-stream, got %q", resp.Header.Get("Content-Type"))
		return res
	}

	var (
		text   strings.Builder
		last   time.Time
		chunks int
		sr     = api.NewSSEReader(resp.Body)
	)
	for {
		ev, err := sr.Next()
		now := time.Now()
		if err != nil {
			if errors.Is(err, io.EOF) && ctx.Err() == nil {
				res.Kind, res.Message = KindIncomplete, "stream ended before [DONE]"
			} else {
				fail(ctx, &res, err)
			}
			break
		}
		if ev.Data == "[DONE]" {
			res.E2E = now.Sub(t0)
			break
		}
		var chunk struct {
			api.ChatCompletionChunk
			Error *struct {
				Message string          `json:"message"`
				Type    string          `json:"type"`
				Code    json.RawMessage `json:"code"`
			} `json:"error"`
		}
		jsonErr := json.Unmarshal([]byte(ev.Data), &chunk)
		if chunk.Error != nil || ev.Event == "error" {
			res.Kind = KindStreamError
			if chunk.Error != nil {
				if c := errorCode(chunk.Error.Code, chunk.Error.Type); c != "" {
					res.Kind += ":" + c
				}
				res.Message = chunk.Error.Message
			} else {
				res.Message = ev.Data
			}
			break
		}
		if jsonErr != nil {
			res.Kind, res.Message = KindProtocol, "chunk is not JSON: "+jsonErr.Error()
			break
		}
		if u := chunk.Usage; u != nil {
			res.Usage = true
			res.PromptTokens, res.OutputTokens = u.PromptTokens, u.CompletionTokens
			if u.PromptTokensDetails != nil {
				res.CachedTokens = u.PromptTokensDetails.CachedTokens
				res.cachedReported = true
			}
		}
		content := ""
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				content += *c.Delta.Content
			}
		}
		if content == "" {
			continue
		}
		chunks++
		text.WriteString(content)
		if res.TTFT == 0 {
			res.TTFT = max(now.Sub(t0), 1)
			if it.Cancel {
				res.Kind = KindCancelled
				res.E2E = res.TTFT
				break
			}
		} else {
			res.ITL = append(res.ITL, now.Sub(last))
		}
		last = now
	}
	res.Text = text.String()
	if !res.Usage {
		res.OutputTokens = chunks
	}
	if res.Kind == "" && res.TTFT == 0 {
		// A stream with no token at all: count it as completed with
		// nothing to measure but E2E (a max_tokens of 0 is impossible
		// here, so the server ended at once).
		res.TTFT = res.E2E
	}
	return res
}

// fail classifies a transport or read error of a request whose context is
// ctx.
func fail(ctx context.Context, res *Result, err error) {
	res.Message = err.Error()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		res.Kind = KindTimeout
	case errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled):
		// Only the run's context is cancelled while a request is in
		// flight: the run was stopped.
		res.Kind = KindInterrupted
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			res.Kind = KindTimeout
		} else {
			res.Kind = KindTransport
		}
	}
}

// errorCode returns an in-stream error's code (a string, or vLLM's
// integer status), else its type.
func errorCode(code json.RawMessage, typ string) string {
	var s string
	if err := json.Unmarshal(code, &s); err == nil && s != "" {
		return s
	}
	var n int
	if err := json.Unmarshal(code, &n); err == nil && n != 0 {
		return fmt.Sprint(n)
	}
	return typ
}

// statusMessage reads an error response's message (OpenAI error body, or
// its text).
func statusMessage(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	if s := strings.TrimSpace(string(b)); s != "" && len(s) < 200 && !strings.HasPrefix(s, "<") {
		return s
	}
	return http.StatusText(resp.StatusCode)
}
