package api

// NativeChatRequest is the body of POST /v1/chat, llmd's native API. It
// streams by default (SSE); "stream": false returns one JSON object.
type NativeChatRequest struct {
	Model     string    `json:"model"`
	Messages  []Message `json:"messages"`
	MaxTokens *int      `json:"max_tokens,omitempty"`
	Stream    *bool     `json:"stream,omitempty"`
	Sampling
	// Priority is the request's class: "enterprise", "paid", "free" or
	// "batch". Empty means the tenant's default.
	Priority string `json:"priority,omitempty"`
	// ResponseFormat is as in ChatCompletionRequest.
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	ToolUse
	Guided
	Controls
	ChatOptions
}

// NativeDelta is the data of one native token event:
// "id: N\ndata: {\"delta\": \"...\", \"index\": 0}".
// A tool call comes as deltas with ToolCall set (and Delta empty), as in
// the OpenAI stream.
// With reasoning_format set, a piece of a reasoning model's reasoning
// section comes as Reasoning (and Delta empty).
type NativeDelta struct {
	Delta     string         `json:"delta"`
	Index     int            `json:"index"`
	Reasoning string         `json:"reasoning,omitempty"`
	ToolCall  *ToolCallDelta `json:"tool_call,omitempty"`
}

// NativeUsage counts tokens in the native API.
type NativeUsage struct {
	InputTokens  int `json:"input_tokens"`
	CachedTokens int `json:"cached_tokens"`
	OutputTokens int `json:"output_tokens"`
	// ReasoningTokens are the output tokens of reasoning sections, counted
	// when the answer was split (reasoning_format).
	ReasoningTokens int `json:"reasoning_tokens,omitempty"`
}

// NativeDone is the data of the final "event: done" of a native stream, and
// the body of a non-streamed native response.
type NativeDone struct {
	// ID is the request id (for resume and cancel).
	ID           string      `json:"id"`
	Model        string      `json:"model"`
	FinishReason string      `json:"finish_reason"`
	Usage        NativeUsage `json:"usage"`
	// Text is the whole answer and ToolCalls the calls it made; set only
	// on non-streamed responses.
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Reasoning is the whole reasoning section, when the request asked
	// for it apart; set only on non-streamed responses.
	Reasoning string `json:"reasoning,omitempty"`
}

// NativeError is the data of an "event: error" frame of a native stream.
type NativeError struct {
	Error ErrorDetail `json:"error"`
}
