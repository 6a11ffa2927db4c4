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
	// TTFT is the time to the first chunk carrying a token (0 when none
	// came); ITL the gaps between consecutive tokens after it (tokens
	// that come in one chunk are gaps of 0); E2E the time to the end of
	// the stream ("data: [DONE]"). Basis says how tokens were counted
	// (Config.Basis; BasisChunks when the server reported none).
	Basis string
	TTFT  time.Duration
	ITL   []time.Duration
	E2E   time.Duration
	// PromptTokens, OutputTokens and CachedTokens come from the usage
	// chunk when the server sent one (Usage true); otherwise
	// OutputTokens counts the tokens as Basis says and PromptTokens is the
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

// body returns the JSON of it's request after the conversation msgs
// (chat), or after their text or the workload's token ids (completions).
func (r *Runner) body(it workload.Item, msgs []api.Message) ([]byte, error) {
	maxTokens := it.OutputTokens
	opts := &api.StreamOptions{IncludeUsage: true}
	controls := api.Controls{IgnoreEOS: r.cfg.IgnoreEOS}
	timings := r.cfg.Basis == BasisTimings
	if r.cfg.Endpoint != EndpointCompletions {
		req := api.ChatCompletionRequest{
			Model: r.cfg.Model, Messages: msgs, MaxTokens: &maxTokens,
			Stream: true, StreamOptions: opts,
			Sampling: api.Sampling{Temperature: r.cfg.Temperature},
			Controls: controls, ResponseFormat: r.cfg.ResponseFormat,
		}
		if r.cfg.Basis == BasisLogprobs {
			req.Logprobs = ptr(true)
		}
		return json.Marshal(struct {
			api.ChatCompletionRequest
			TimingsPerToken bool `json:"timings_per_token,omitempty"`
		}{req, timings})
	}
	var prompt any
	if ids := r.cfg.PromptIDs; ids.Hi > ids.Lo {
		var p []int
		if it.System >= 0 && it.System < len(r.systems) {
			p = r.spec.SystemIDs(it.System, ids.Lo, ids.Hi)
		}
		prompt = append(p, workload.TokenIDs(it.InputTokens, it.Seed, ids.Lo, ids.Hi)...)
	} else {
		var b strings.Builder
		for i, m := range msgs {
			if i > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(string(m.Content))
		}
		prompt = b.String()
	}
	raw, err := json.Marshal(prompt)
	if err != nil {
		return nil, err
	}
	req := api.CompletionRequest{
		Model: r.cfg.Model, Prompt: raw, MaxTokens: &maxTokens,
		Stream: true, StreamOptions: opts,
		Sampling: api.Sampling{Temperature: r.cfg.Temperature},
		Controls: controls, ResponseFormat: r.cfg.ResponseFormat,
	}
	if r.cfg.Basis == BasisLogprobs {
		req.Logprobs = ptr(0)
	}
	return json.Marshal(struct {
		api.CompletionRequest
		TimingsPerToken bool `json:"timings_per_token,omitempty"`
	}{req, timings})
}

func ptr[T any](v T) *T { return &v }

// streamChunk is what loadgen reads of a streamed chunk of either API:
// the text, the tokens it reports (Config.Basis), the usage, an error.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Text     *string `json:"text"`
		Logprobs *struct {
			Content []json.RawMessage `json:"content"` // chat (and llama.cpp's completions)
			Tokens  []json.RawMessage `json:"tokens"`  // legacy completions
		} `json:"logprobs"`
	} `json:"choices"`
	Usage   *api.Usage `json:"usage"`
	Timings *struct {
		PredictedN *int `json:"predicted_n"`
	} `json:"timings"`
	Error *struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
}

// text returns the chunk's text, of every choice.
func (c *streamChunk) text() string {
	s := ""
	for _, ch := range c.Choices {
		if ch.Delta.Content != nil {
			s += *ch.Delta.Content
		}
		if ch.Text != nil {
			s += *ch.Text
		}
	}
	return s
}

// logprobTokens counts the tokens the chunk's log probabilities cover, and
// reports whether it had any log probabilities.
func (c *streamChunk) logprobTokens() (int, bool) {
	n, any := 0, false
	for _, ch := range c.Choices {
		if ch.Logprobs != nil {
			any = true
			n += len(ch.Logprobs.Content) + len(ch.Logprobs.Tokens)
		}
	}
	return n, any
}

// do sends one streamed request (the JSON body) and measures it. start is
// the run's start, for Result.Sent. It never returns an error: failures
// are in the Result.
func (r *Runner) do(ctx context.Context, start time.Time, it workload.Item, b []byte) Result {
	res := Result{Item: it}
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
	// Servers close idle keep-alive connections (llama-server and uvicorn
	// after 5 s, as between a run's phases), and a request sent on one as
	// it closes fails before the server has read it. Marked replayable,
	// it is sent again on a new connection by Go's transport, as the
	// official SDKs retry it, instead of counting as the server's failure.
	// The key is the run's start and the item's place: unique per request.
	req.Header.Set("Idempotency-Key", fmt.Sprintf("llmctl-bench-%x-%d-%d", r.started.Load(), it.Conversation, it.Turn))
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
		text      strings.Builder
		last      time.Time
		tokens    int // tokens counted on the basis
		predicted int // llama.cpp's predicted_n so far
		basis     = BasisChunks
		sr        = api.NewSSEReader(resp.Body)
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
			api.DrainAfterDone(resp.Body)
			break
		}
		var chunk streamChunk
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
		content := chunk.text()
		text.WriteString(content)
		// The tokens this chunk brings, on the best basis the server
		// reports: a basis once seen is kept for the request.
		n := 0
		switch lp, hasLP := chunk.logprobTokens(); {
		case r.cfg.Basis == BasisTimings && chunk.Timings != nil && chunk.Timings.PredictedN != nil:
			basis = BasisTimings
			n = max(*chunk.Timings.PredictedN-predicted, 0)
			predicted = max(predicted, *chunk.Timings.PredictedN)
		case r.cfg.Basis == BasisLogprobs && hasLP:
			basis, n = BasisLogprobs, lp
		case basis == BasisChunks && content != "":
			n = 1
		}
		if n == 0 {
			continue
		}
		tokens += n
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
		// Tokens that arrive together (held back by the server until
		// they complete a character) are gaps of zero.
		for range n - 1 {
			res.ITL = append(res.ITL, 0)
		}
		last = now
	}
	res.Text = text.String()
	res.Basis = basis
	if !res.Usage {
		res.OutputTokens = tokens
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

// DetectBasis returns the best token basis the server at cfg.BaseURL
// offers for cfg's requests: BasisTimings for llama.cpp's server (its GET
// /props describes its generation settings), BasisLogprobs when a
// one-token request asking for log probabilities gets them, else
// BasisChunks. It sends at most one GET and one request of one output
// token.
func DetectBasis(ctx context.Context, cfg Config) string {
	cfg.Basis = BasisLogprobs
	r, err := New(cfg, workload.Spec{Requests: 1, Concurrency: 1, Input: workload.Fixed(4), Output: workload.Fixed(1)})
	if err != nil {
		return BasisChunks
	}
	if r.ownHC {
		defer r.hc.CloseIdleConnections()
	}
	if r.isLlamaCpp(ctx) {
		return BasisTimings
	}
	it := workload.Item{InputTokens: 4, OutputTokens: 1, System: -1, Prompt: -1, Seed: 1}
	msgs := []api.Message{{Role: "user", Content: api.Content(workload.Text(4, 1))}}
	b, err := r.body(it, msgs)
	if err != nil {
		return BasisChunks
	}
	if res := r.do(ctx, time.Now(), it, b); res.OK() && res.Basis == BasisLogprobs {
		return BasisLogprobs
	}
	return BasisChunks
}

// isLlamaCpp reports whether the server is llama.cpp's: its GET /props
// answers a JSON object with default_generation_settings.
func (r *Runner) isLlamaCpp(ctx context.Context) bool {
	base := strings.TrimSuffix(strings.TrimRight(r.cfg.BaseURL, "/"), "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/props", nil)
	if err != nil {
		return false
	}
	if key := r.key(0); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var props struct {
		Settings json.RawMessage `json:"default_generation_settings"`
	}
	return resp.StatusCode == http.StatusOK &&
		json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&props) == nil && len(props.Settings) > 0
}
