package server

import (
	"net/http"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// nativeCodec is POST /v1/chat, llmd's native API: it streams unless the
// request says "stream": false.
var nativeCodec = codec{endpoint: pipeline.EndpointChat, decode: decodeNative}

func decodeNative(body []byte, req *pipeline.Request) (format, error) {
	var nr api.NativeChatRequest
	if err := decodeStrict(body, &nr); err != nil {
		return nil, err
	}
	if err := decodeTools(req, nr.ToolUse); err != nil {
		return nil, err
	}
	if err := decodeControls(req, nr.ResponseFormat, nr.Guided, nr.Controls); err != nil {
		return nil, err
	}
	if err := decodeChatOptions(req, nr.ChatOptions); err != nil {
		return nil, err
	}
	req.Model, req.Messages, req.Sampling = nr.Model, nr.Messages, nr.Sampling
	req.MaxTokensParam, req.MaxTokens = "max_tokens", nr.MaxTokens
	req.Stream = nr.Stream == nil || *nr.Stream
	if nr.Priority != "" {
		p, ok := pipeline.ParsePriority(nr.Priority)
		if !ok {
			return nil, pipeline.InvalidParam("priority", "priority must be one of enterprise, paid, free, batch; got %q", nr.Priority)
		}
		req.Priority = &p
	}
	return nativeFormat{}, nil
}

func nativeUsage(u pipeline.Usage) api.NativeUsage {
	return api.NativeUsage{InputTokens: u.InputTokens, CachedTokens: u.CachedTokens, OutputTokens: u.OutputTokens,
		ReasoningTokens: u.ReasoningTokens}
}

// nativeFormat writes llmd's native answers. Its streams are always
// resumable.
type nativeFormat struct{}

func (nativeFormat) resumable(*http.Request) bool { return true }

func (nativeFormat) streamSink(st *relay.Stream, m meta) pipeline.Sink {
	return &nativeStream{st: st, m: m}
}

func (nativeFormat) jsonBody(m meta, c *collected) any {
	return api.NativeDone{ID: m.id, Model: m.model, FinishReason: c.reasons[0], Usage: nativeUsage(c.usage),
		Text: c.texts[0].String(), ToolCalls: c.calls[0], Reasoning: c.reasoning[0].String()}
}

// nativeStream writes llmd's native stream: "id: N" and a delta per piece of
// text, then "event: done" with the usage (or "event: error").
type nativeStream struct {
	st     *relay.Stream
	m      meta
	reason string
}

func (c *nativeStream) Begin() error { return nil }

func (c *nativeStream) Text(i int, s string, _ []api.TokenLogprob) error {
	return c.st.Data("", api.NativeDelta{Delta: s, Index: i})
}

// Reasoning implements pipeline.ReasoningSink: deltas with reasoning set.
func (c *nativeStream) Reasoning(i int, s string, _ []api.TokenLogprob) error {
	return c.st.Data("", api.NativeDelta{Index: i, Reasoning: s})
}

func (c *nativeStream) ToolCall(i int, d api.ToolCallDelta) error {
	return c.st.Data("", api.NativeDelta{Index: i, ToolCall: &d})
}

func (c *nativeStream) Finish(i int, reason string, _ []api.TokenLogprob) error {
	if i == 0 {
		c.reason = reason
	}
	return nil
}

func (c *nativeStream) End(u pipeline.Usage) error {
	return c.st.Final("done", api.NativeDone{ID: c.m.id, Model: c.m.model, FinishReason: c.reason, Usage: nativeUsage(u)})
}

func (c *nativeStream) Fail(err error) int {
	if c.st.Final("error", api.NativeError{Error: apiErrorFor(err, c.m.id).Detail}) != nil {
		return pipeline.StatusClientClosed
	}
	return http.StatusOK
}
