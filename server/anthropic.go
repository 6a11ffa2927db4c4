package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// Anthropic's Messages API: POST /v1/messages decoded into the one
// pipeline.Request (system, content blocks, tools and tool_choice become
// the chat fields the OpenAI codec fills), and POST
// /v1/messages/count_tokens with the model's tokenizer and template.

// Endpoints of the Messages API, in logs and usage rows.
const (
	endpointMessages    pipeline.Endpoint = "messages"
	endpointCountTokens pipeline.Endpoint = "messages.count_tokens"
)

// anthropicErrors is Anthropic's error shape: {"type": "error", "error":
// {"type": ..., "message": ...}}, with its statuses (an overloaded engine
// is 529).
type anthropicErrors struct{}

func (anthropicErrors) errorBody(ae apiError) (int, any) {
	status, typ := ae.Status, "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusForbidden:
		typ = "permission_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		status, typ = 529, "overloaded_error"
	case status == http.StatusGatewayTimeout:
		typ = "timeout_error"
	case status >= 500:
		typ = "api_error"
	}
	msg := ae.Detail.Message
	if ae.Status == http.StatusUnauthorized {
		msg = strings.Replace(msg, "send `Authorization: Bearer <key>`", "send `x-api-key: <key>` (or `Authorization: Bearer <key>`)", 1)
	}
	return status, api.AnthropicError{Type: "error", Error: api.AnthropicErrorDetail{Type: typ, Message: msg}}
}

// anthropicCodec is POST /v1/messages.
var anthropicCodec = codec{endpoint: endpointMessages, decode: decodeAnthropic}

func decodeAnthropic(body []byte, req *pipeline.Request) (format, error) {
	var ar api.AnthropicRequest
	if err := decodeStrict(body, &ar); err != nil {
		return nil, err
	}
	if ar.MaxTokens == nil {
		return nil, pipeline.InvalidParam("max_tokens", "max_tokens: Field required")
	}
	if err := anthropicThinking(ar.Thinking); err != nil {
		return nil, err
	}
	msgs, err := anthropicMessages(ar.System, ar.Messages)
	if err != nil {
		return nil, err
	}
	if err := anthropicTools(req, ar.Tools, ar.ToolChoice); err != nil {
		return nil, err
	}
	req.Model, req.Messages, req.Stream = ar.Model, msgs, ar.Stream
	req.MaxTokensParam, req.MaxTokens = "max_tokens", ar.MaxTokens
	req.Sampling = api.Sampling{Temperature: ar.Temperature, TopP: ar.TopP, TopK: ar.TopK, Stop: ar.StopSequences}
	if ar.Metadata != nil {
		req.User = capText(ar.Metadata.UserID, 256)
		req.AffinityKey = req.User
	}
	f := &anthropicFormat{}
	req.OnStopString = func(i int, stop string) {
		if i == 0 {
			f.matched = stop
		}
	}
	if req.Forward, err = openAIForward(req); err != nil {
		return nil, err
	}
	return f, nil
}

// anthropicThinking refuses extended thinking: llmd does not separate a
// model's reasoning from its answer.
func anthropicThinking(raw json.RawMessage) error {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return nil
	}
	var th struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &th) == nil && th.Type == "disabled" {
		return nil
	}
	return pipeline.InvalidParam("thinking", "extended thinking is not supported: llmd does not separate a model's thinking from its answer")
}

// anthropicText reads text content: a string, or an array of text blocks
// (concatenated). what names it in errors.
func anthropicText(raw json.RawMessage, what string) (string, error) {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []api.AnthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", pipeline.InvalidParam(what, "%s must be a string or an array of text blocks", what)
	}
	var b strings.Builder
	for i, bl := range blocks {
		if bl.Type != "text" {
			return "", pipeline.InvalidParam(fmt.Sprintf("%s[%d].type", what, i), "%s may hold text blocks only, got %q", what, capText(bl.Type, 32))
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// anthropicMessages converts the system prompt and the messages. A user
// message's tool_result blocks become tool messages (before its text), an
// assistant's tool_use blocks its tool calls.
func anthropicMessages(system json.RawMessage, msgs []api.AnthropicMessage) ([]api.Message, error) {
	out := make([]api.Message, 0, len(msgs)+1)
	sys, err := anthropicText(system, "system")
	if err != nil {
		return nil, err
	}
	if sys != "" {
		out = append(out, api.Message{Role: "system", Content: api.Content(sys)})
	}
	names := map[string]string{} // tool_use id -> tool name
	for i, m := range msgs {
		p := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, pipeline.InvalidParam(p+".role", "%s.role must be user or assistant, got %q (the system prompt is the top-level system field)",
				p, capText(m.Role, 32))
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			out = append(out, api.Message{Role: m.Role, Content: api.Content(s)})
			continue
		}
		var blocks []api.AnthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, pipeline.InvalidParam(p+".content", "%s.content must be a string or an array of content blocks", p)
		}
		msg := api.Message{Role: m.Role}
		var text strings.Builder
		for j, b := range blocks {
			bp := fmt.Sprintf("%s.content[%d]", p, j)
			switch {
			case b.Type == "text":
				text.WriteString(b.Text)
			case b.Type == "tool_use" && m.Role == "assistant":
				input := strings.TrimSpace(string(b.Input))
				if input == "" || input == "null" {
					input = "{}"
				}
				if b.ID == "" || b.Name == "" {
					return nil, pipeline.InvalidParam(bp, "a tool_use block needs an id and a name")
				}
				names[b.ID] = b.Name
				msg.ToolCalls = append(msg.ToolCalls, api.ToolCall{ID: b.ID, Type: "function",
					Function: api.FunctionCall{Name: b.Name, Arguments: input}})
			case b.Type == "tool_result" && m.Role == "user":
				content, err := anthropicText(b.Content, bp+".content")
				if err != nil {
					return nil, err
				}
				if b.IsError {
					content = "Error: " + content
				}
				out = append(out, api.Message{Role: "tool", ToolCallID: b.ToolUseID, Name: names[b.ToolUseID],
					Content: api.Content(content)})
			case b.Type == "image" || b.Type == "document":
				return nil, pipeline.InvalidParam(bp+".type", "%s blocks are not supported: llmd serves text models", b.Type)
			default:
				return nil, pipeline.InvalidParam(bp+".type", "content block type %q is not supported in a %s message", capText(b.Type, 32), m.Role)
			}
		}
		msg.Content = api.Content(text.String())
		if msg.Content != "" || len(msg.ToolCalls) > 0 {
			out = append(out, msg)
		}
	}
	return out, nil
}

// anthropicTools fills req's tools and tool choice.
func anthropicTools(req *pipeline.Request, tools []api.AnthropicTool, choice *api.AnthropicChoice) error {
	for i, t := range tools {
		if t.Type != "" && t.Type != "custom" {
			return pipeline.InvalidParam(fmt.Sprintf("tools[%d].type", i), "server tools (%s) are not supported; define client tools with name and input_schema",
				capText(t.Type, 64))
		}
		req.Tools = append(req.Tools, api.Tool{Type: "function",
			Function: api.FunctionDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	req.ParallelToolCalls = true
	if choice == nil {
		return nil
	}
	req.ParallelToolCalls = !choice.DisableParallelToolUse
	switch choice.Type {
	case "auto":
		req.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceAuto}
	case "any":
		req.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceRequired}
	case "tool":
		req.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceFunction, Name: choice.Name}
	case "none":
		req.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceNone}
	default:
		return pipeline.InvalidParam("tool_choice.type", "tool_choice.type must be auto, any, tool or none; got %q", capText(choice.Type, 32))
	}
	return nil
}

// handleCountTokens serves POST /v1/messages/count_tokens: the prompt the
// request's messages, system prompt and tools render to with the model's
// chat template, counted by its tokenizer.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	req := tokenizerRequest(w, r, endpointCountTokens)
	n, err := s.countTokens(w, r, req)
	if err != nil {
		s.pipe.Record(req, nil, writeError(w, req.ID, err), err)
		return
	}
	writeJSON(w, http.StatusOK, api.AnthropicCount{InputTokens: n})
	s.pipe.Record(req, nil, http.StatusOK, nil)
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, req *pipeline.Request) (int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return 0, err
	}
	var cr api.AnthropicCountRequest
	if err := decodeStrict(body, &cr); err != nil {
		return 0, err
	}
	req.Model = cr.Model
	if err := anthropicThinking(cr.Thinking); err != nil {
		return 0, err
	}
	if req.Messages, err = anthropicMessages(cr.System, cr.Messages); err != nil {
		return 0, err
	}
	if err := anthropicTools(req, cr.Tools, cr.ToolChoice); err != nil {
		return 0, err
	}
	m, err := s.models.Lookup(cr.Model)
	if err != nil {
		return 0, err
	}
	toks, err := pipeline.RenderPrompt(req, m)
	return len(toks), err
}
