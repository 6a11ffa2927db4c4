package api

import (
	"encoding/json"
)

// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens),
// as llmd serves it. Field names follow Anthropic's API reference.

// AnthropicRequest is the body of POST /v1/messages. MaxTokens is
// required (nil: absent).
type AnthropicRequest struct {
	Model         string             `json:"model"`
	Messages      []AnthropicMessage `json:"messages"`
	System        json.RawMessage    `json:"system,omitempty"`
	MaxTokens     *int               `json:"max_tokens"`
	StopSequences []string           `json:"stop_sequences,omitempty"`
	Stream        bool               `json:"stream,omitempty"`
	Temperature   *float64           `json:"temperature,omitempty"`
	TopP          *float64           `json:"top_p,omitempty"`
	TopK          *int               `json:"top_k,omitempty"`
	Metadata      *AnthropicMetadata `json:"metadata,omitempty"`
	Tools         []AnthropicTool    `json:"tools,omitempty"`
	ToolChoice    *AnthropicChoice   `json:"tool_choice,omitempty"`
	// Thinking is refused unless disabled; ServiceTier is accepted and
	// ignored (llmd has one tier per tenant).
	Thinking    json.RawMessage `json:"thinking,omitempty"`
	ServiceTier string          `json:"service_tier,omitempty"`
}

// AnthropicCountRequest is the body of POST /v1/messages/count_tokens.
type AnthropicCountRequest struct {
	Model      string             `json:"model"`
	Messages   []AnthropicMessage `json:"messages"`
	System     json.RawMessage    `json:"system,omitempty"`
	Tools      []AnthropicTool    `json:"tools,omitempty"`
	ToolChoice *AnthropicChoice   `json:"tool_choice,omitempty"`
	Thinking   json.RawMessage    `json:"thinking,omitempty"`
}

// AnthropicCount is the answer of POST /v1/messages/count_tokens.
type AnthropicCount struct {
	InputTokens int `json:"input_tokens"`
}

// AnthropicMetadata is a request's metadata: the end user's id.
type AnthropicMetadata struct {
	UserID string `json:"user_id,omitempty"`
}

// AnthropicMessage is one message of the conversation. Content is a
// string or an array of content blocks.
type AnthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// AnthropicBlock is a content block: text, tool_use (ID, Name, Input) or
// tool_result (ToolUseID, Content, IsError). CacheControl is accepted and
// ignored (llmd's prefix cache is automatic).
type AnthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result: Content is a string or an array of text blocks.
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	Content      json.RawMessage `json:"content,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
	Citations    json.RawMessage `json:"citations,omitempty"`
}

// AnthropicTool is a client tool: a name, a description and the JSON
// Schema of its input. Type is empty or "custom" (server tools are
// refused).
type AnthropicTool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// AnthropicChoice is tool_choice: auto, any (a tool must be called), tool
// (the one named) or none.
type AnthropicChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// AnthropicContent is a content block of an answer: text, or a tool_use
// with its input.
type AnthropicContent struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// AnthropicUsage counts an answer's tokens: InputTokens those of the
// prompt not read from the prefix cache, CacheReadInputTokens those that
// were.
type AnthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// AnthropicResponse is a message: the body of a non-streamed answer, and
// the message of a stream's message_start (Content empty, StopReason
// null).
type AnthropicResponse struct {
	ID           string             `json:"id"`
	Type         string             `json:"type"` // "message"
	Role         string             `json:"role"` // "assistant"
	Content      []AnthropicContent `json:"content"`
	Model        string             `json:"model"`
	StopReason   *string            `json:"stop_reason"`
	StopSequence *string            `json:"stop_sequence"`
	Usage        AnthropicUsage     `json:"usage"`
}

// AnthropicEvent is the data of one event of a streamed answer; Type is
// also the event's name. Which fields are set depends on it:
// message_start (Message), content_block_start (Index, ContentBlock),
// content_block_delta (Index, Delta: text_delta or input_json_delta),
// content_block_stop (Index), message_delta (Delta: stop_reason and
// stop_sequence; Usage), message_stop, ping.
type AnthropicEvent struct {
	Type         string             `json:"type"`
	Message      *AnthropicResponse `json:"message,omitempty"`
	Index        *int               `json:"index,omitempty"`
	ContentBlock *AnthropicContent  `json:"content_block,omitempty"`
	Delta        any                `json:"delta,omitempty"`
	Usage        *AnthropicUsage    `json:"usage,omitempty"`
}

// AnthropicDelta is a content_block_delta's delta: text_delta (Text) or
// input_json_delta (PartialJSON).
type AnthropicDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

// AnthropicStop is a message_delta's delta.
type AnthropicStop struct {
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// AnthropicError is Anthropic's error body, and the data of a stream's
// error event.
type AnthropicError struct {
	Type  string               `json:"type"` // "error"
	Error AnthropicErrorDetail `json:"error"`
}

// AnthropicErrorDetail is an error's type (invalid_request_error,
// authentication_error, permission_error, not_found_error,
// request_too_large, rate_limit_error, api_error, overloaded_error) and
// message.
type AnthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
