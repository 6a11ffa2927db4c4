package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// ollamaFormat writes Ollama answers: one JSON object, or newline-
// delimited JSON objects (never resumable: Ollama's clients do not
// reconnect).
type ollamaFormat struct {
	chat bool
	// asked is the model as the client named it; start is when the
	// request arrived (after the model's load, which took load).
	asked string
	start time.Time
	load  time.Duration
}

func (*ollamaFormat) resumable(*http.Request) bool { return false }

func (f *ollamaFormat) streamSink(st *relay.Stream, m meta) pipeline.Sink {
	return &ollamaStream{st: st, f: f, c: collected{calls: make([][]api.ToolCall, m.n)}}
}

func (f *ollamaFormat) jsonBody(_ meta, c *collected) any {
	var text string
	if len(c.texts) > 0 {
		text = c.texts[0].String()
	}
	var calls []api.ToolCall
	if len(c.calls) > 0 {
		calls = c.calls[0]
	}
	var reason string
	if len(c.reasons) > 0 {
		reason = c.reasons[0]
	}
	return f.line(text, calls, true, reason, c.usage, c.first)
}

func (f *ollamaFormat) follow(ctx context.Context, w http.ResponseWriter, st *relay.Stream, cfg relay.FollowConfig, log *slog.Logger) {
	followNDJSON(ctx, w, st, cfg, log)
}

// line is one answer object: text (and, for chat, the tool calls) so far,
// or with done the last, with its reason and metrics.
func (f *ollamaFormat) line(text string, calls []api.ToolCall, done bool, reason string, u pipeline.Usage, first time.Time) any {
	now := time.Now()
	var metrics api.OllamaMetrics
	if done {
		if reason == "tool_calls" {
			reason = "stop" // Ollama's reason for an answer that called tools
		}
		metrics = api.OllamaMetrics{TotalDuration: (now.Sub(f.start) + f.load).Nanoseconds(), LoadDuration: f.load.Nanoseconds(),
			PromptEvalCount: u.InputTokens, EvalCount: u.OutputTokens}
		if !first.IsZero() {
			// The prompt's evaluation ends with the first token (the wait
			// in the engine's queue included).
			metrics.PromptEvalDuration, metrics.EvalDuration = first.Sub(f.start).Nanoseconds(), now.Sub(first).Nanoseconds()
		}
	} else {
		reason = ""
	}
	if !f.chat {
		return api.OllamaGenerateResponse{Model: f.asked, CreatedAt: now.UTC(), Response: text, Done: done, DoneReason: reason,
			OllamaMetrics: metrics}
	}
	msg := api.OllamaMessage{Role: "assistant", Content: text}
	for k, tc := range calls {
		args := json.RawMessage(strings.TrimSpace(tc.Function.Arguments))
		if !json.Valid(args) {
			b, _ := json.Marshal(tc.Function.Arguments) // a string, never lost
			args = b
		}
		msg.ToolCalls = append(msg.ToolCalls, api.OllamaToolCall{ID: tc.ID,
			Function: api.OllamaFunctionCall{Index: k, Name: tc.Function.Name, Arguments: args}})
	}
	return api.OllamaChatResponse{Model: f.asked, CreatedAt: now.UTC(), Message: msg, Done: done, DoneReason: reason,
		OllamaMetrics: metrics}
}

// ollamaStream writes an answer as NDJSON lines into its stream's log: a
// line per piece of text, a line with the tool calls once they are
// complete, then the final line with the metrics (or an error line).
type ollamaStream struct {
	st    *relay.Stream
	f     *ollamaFormat
	c     collected
	first time.Time
}

func (o *ollamaStream) push(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	o.st.Push(append(b, '\n'))
	return nil
}

func (o *ollamaStream) Begin() error { return nil }

func (o *ollamaStream) mark() {
	if o.first.IsZero() {
		o.first = time.Now()
	}
}

func (o *ollamaStream) Text(i int, text string, _ []api.TokenLogprob) error {
	o.mark()
	if i != 0 {
		return nil // n is always 1 on the Ollama API
	}
	return o.push(o.f.line(text, nil, false, "", pipeline.Usage{}, time.Time{}))
}

func (o *ollamaStream) ToolCall(i int, d api.ToolCallDelta) error {
	o.mark()
	o.c.addCall(i, d)
	return nil
}

func (o *ollamaStream) Finish(i int, reason string, _ []api.TokenLogprob) error {
	if i != 0 {
		return nil
	}
	o.c.reasons = []string{reason}
	if len(o.c.calls[0]) > 0 {
		return o.push(o.f.line("", o.c.calls[0], false, "", pipeline.Usage{}, time.Time{}))
	}
	return nil
}

func (o *ollamaStream) End(u pipeline.Usage) error {
	reason := ""
	if len(o.c.reasons) > 0 {
		reason = o.c.reasons[0]
	}
	return o.push(o.f.line("", nil, true, reason, u, o.first))
}

func (o *ollamaStream) Fail(err error) int {
	_, body := ollamaErrors{}.errorBody(apiErrorFor(err, ""))
	if o.push(body) != nil {
		return pipeline.StatusClientClosed
	}
	return http.StatusOK
}

// followNDJSON copies an NDJSON stream's log to the client until it ends,
// ctx ends (the client left) or the client falls more than MaxLag bytes
// behind. Every write has its deadline and is flushed at once. NDJSON has
// no comment line, so a silent stream sends nothing (as Ollama's).
func followNDJSON(ctx context.Context, w http.ResponseWriter, st *relay.Stream, cfg relay.FollowConfig, log *slog.Logger) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
		return rc.Flush()
	}
	if flush() != nil {
		return
	}
	from := 0
	for {
		evs, next, done, gone, wait := st.Read(from)
		if gone {
			return
		}
		for _, b := range evs {
			_ = rc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
			if _, err := w.Write(b); err != nil {
				return
			}
		}
		if len(evs) > 0 && flush() != nil {
			return
		}
		from = next
		if cfg.MaxLag > 0 && st.Lag(from) > cfg.MaxLag {
			log.Info("closing a client that fell behind", "request_id", st.ID, "lag_bytes", st.Lag(from))
			return
		}
		if done && len(evs) == 0 {
			return
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		}
	}
}
