package server

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// anthropicFormat writes Messages API answers: one message, or its
// events (message_start, ping, content_block_start/delta/stop per block,
// message_delta with the stop reason and usage, message_stop).
type anthropicFormat struct {
	// matched is the stop sequence that ended the answer ("" for none),
	// set through the request's OnStopString on the relaying goroutine
	// before the sink's Finish, which reads it there.
	matched string
}

// Anthropic's stop reasons.
const (
	stopEndTurn      = "end_turn"
	stopMaxTokens    = "max_tokens"
	stopSequence     = "stop_sequence"
	stopToolUse      = "tool_use"
	stopRefusal      = "refusal"
	anthropicMsgType = "message"
)

func (*anthropicFormat) resumable(*http.Request) bool { return false }

// stop is the stop reason (and matched stop sequence) of the pipeline's
// finish reason.
func (f *anthropicFormat) stop(reason string) (stopReason, seq *string) {
	r := stopEndTurn
	switch reason {
	case "length":
		r = stopMaxTokens
	case "tool_calls":
		r = stopToolUse
	case "content_filter":
		r = stopRefusal
	case "stop":
		if f.matched != "" {
			r, seq = stopSequence, &f.matched
		}
	}
	return &r, seq
}

// messageID is the message id of request id: "msg_" and its random part.
func messageID(id string) string {
	_, rest, ok := strings.Cut(id, "_")
	if !ok {
		rest = id
	}
	return "msg_" + rest
}

func anthropicUsage(u pipeline.Usage) api.AnthropicUsage {
	return api.AnthropicUsage{InputTokens: u.InputTokens - u.CachedTokens, CacheReadInputTokens: u.CachedTokens,
		OutputTokens: u.OutputTokens}
}

// toolInput is a call's arguments as a tool_use block's input: a JSON
// object (or, should the model have written something else, that text as
// a JSON string).
func toolInput(args string) json.RawMessage {
	args = strings.TrimSpace(args)
	if args == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

func (f *anthropicFormat) jsonBody(m meta, c *collected) any {
	resp := api.AnthropicResponse{ID: messageID(m.id), Type: anthropicMsgType, Role: "assistant", Model: m.model,
		Content: []api.AnthropicContent{}, Usage: anthropicUsage(c.usage)}
	if len(c.texts) > 0 {
		if text := c.texts[0].String(); text != "" {
			resp.Content = append(resp.Content, api.AnthropicContent{Type: "text", Text: &text})
		}
		for _, tc := range c.calls[0] {
			resp.Content = append(resp.Content, api.AnthropicContent{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name,
				Input: toolInput(tc.Function.Arguments)})
		}
		resp.StopReason, resp.StopSequence = f.stop(c.reasons[0])
	}
	return resp
}

func (f *anthropicFormat) streamSink(st *relay.Stream, m meta) pipeline.Sink {
	return &anthropicStream{st: st, m: m, f: f, index: -1}
}

// anthropicStream writes a message's events into its stream's log. The
// text and each tool call are content blocks, opened as they begin and
// closed when the next begins or the answer ends.
type anthropicStream struct {
	st *relay.Stream
	m  meta
	f  *anthropicFormat
	// index is the open block's (-1: none), open its type.
	index  int
	open   string
	reason string
}

func (a *anthropicStream) event(ev api.AnthropicEvent) error { return a.st.Data(ev.Type, ev) }

func (a *anthropicStream) Begin() error {
	msg := api.AnthropicResponse{ID: messageID(a.m.id), Type: anthropicMsgType, Role: "assistant", Model: a.m.model,
		Content: []api.AnthropicContent{}, Usage: api.AnthropicUsage{InputTokens: a.m.promptTokens}}
	if err := a.event(api.AnthropicEvent{Type: "message_start", Message: &msg}); err != nil {
		return err
	}
	return a.event(api.AnthropicEvent{Type: "ping"})
}

// start closes the open block and opens block of type kind.
func (a *anthropicStream) start(block api.AnthropicContent) error {
	if err := a.closeBlock(); err != nil {
		return err
	}
	a.index++
	a.open = block.Type
	idx := a.index
	return a.event(api.AnthropicEvent{Type: "content_block_start", Index: &idx, ContentBlock: &block})
}

func (a *anthropicStream) closeBlock() error {
	if a.open == "" {
		return nil
	}
	a.open = ""
	idx := a.index
	return a.event(api.AnthropicEvent{Type: "content_block_stop", Index: &idx})
}

func (a *anthropicStream) Text(i int, text string, _ []api.TokenLogprob) error {
	if i != 0 {
		return nil // n is always 1 on the Messages API
	}
	if a.open != "text" {
		empty := ""
		if err := a.start(api.AnthropicContent{Type: "text", Text: &empty}); err != nil {
			return err
		}
	}
	idx := a.index
	return a.event(api.AnthropicEvent{Type: "content_block_delta", Index: &idx,
		Delta: api.AnthropicDelta{Type: "text_delta", Text: &text}})
}

func (a *anthropicStream) ToolCall(i int, d api.ToolCallDelta) error {
	if i != 0 {
		return nil
	}
	if d.ID != "" {
		if err := a.start(api.AnthropicContent{Type: "tool_use", ID: d.ID, Name: d.Function.Name,
			Input: json.RawMessage("{}")}); err != nil {
			return err
		}
	}
	if d.Function.Arguments == "" || a.open != "tool_use" {
		return nil
	}
	idx, args := a.index, d.Function.Arguments
	return a.event(api.AnthropicEvent{Type: "content_block_delta", Index: &idx,
		Delta: api.AnthropicDelta{Type: "input_json_delta", PartialJSON: &args}})
}

func (a *anthropicStream) Finish(i int, reason string, _ []api.TokenLogprob) error {
	if i != 0 {
		return nil
	}
	a.reason = reason
	return a.closeBlock()
}

func (a *anthropicStream) End(u pipeline.Usage) error {
	reason, seq := a.f.stop(a.reason)
	usage := anthropicUsage(u)
	if err := a.event(api.AnthropicEvent{Type: "message_delta", Delta: api.AnthropicStop{StopReason: reason, StopSequence: seq},
		Usage: &usage}); err != nil {
		return err
	}
	return a.st.Final("message_stop", api.AnthropicEvent{Type: "message_stop"})
}

func (a *anthropicStream) Fail(err error) int {
	_, body := anthropicErrors{}.errorBody(apiErrorFor(err, a.m.id))
	if a.st.Final("error", body) != nil {
		return pipeline.StatusClientClosed
	}
	return http.StatusOK
}
