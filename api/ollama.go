package api

import (
	"encoding/json"
	"time"
)

// Ollama's native API (/api/chat, /api/generate, /api/tags, /api/show,
// /api/ps, /api/version), as llmd serves it on its own port. Field names
// and shapes follow Ollama's api package; durations are nanoseconds.

// OllamaChatRequest is the body of POST /api/chat. Stream is nil for
// Ollama's default (streamed, newline-delimited JSON).
type OllamaChatRequest struct {
	Model    string          `json:"model"`
	Messages []OllamaMessage `json:"messages"`
	Stream   *bool           `json:"stream,omitempty"`
	// Format is "json" (any JSON object) or a JSON Schema.
	Format    json.RawMessage `json:"format,omitempty"`
	KeepAlive json.RawMessage `json:"keep_alive,omitempty"`
	Tools     []OllamaTool    `json:"tools,omitempty"`
	Options   map[string]any  `json:"options,omitempty"`
	// Think, Truncate, Shift, Logprobs and TopLogprobs are Ollama's;
	// llmd refuses the values that ask for what it does not do.
	Think       json.RawMessage `json:"think,omitempty"`
	Truncate    *bool           `json:"truncate,omitempty"`
	Shift       *bool           `json:"shift,omitempty"`
	Logprobs    bool            `json:"logprobs,omitempty"`
	TopLogprobs int             `json:"top_logprobs,omitempty"`
}

// OllamaMessage is one chat message. An assistant message may carry the
// tool calls it made; a "tool" message answers one (ToolName, and
// ToolCallID when the client kept the call's id).
type OllamaMessage struct {
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	Thinking   string           `json:"thinking,omitempty"`
	Images     []string         `json:"images,omitempty"`
	ToolCalls  []OllamaToolCall `json:"tool_calls,omitempty"`
	ToolName   string           `json:"tool_name,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

// OllamaTool is a tool the model may call, as in OpenAI's API.
type OllamaTool struct {
	Type     string      `json:"type"`
	Function FunctionDef `json:"function"`
}

// OllamaToolCall is a call the model made: its arguments are a JSON
// object, not a string as in OpenAI's API.
type OllamaToolCall struct {
	ID       string             `json:"id,omitempty"`
	Function OllamaFunctionCall `json:"function"`
}

// OllamaFunctionCall names the function called (Index: its position among
// the answer's calls) and its arguments.
type OllamaFunctionCall struct {
	Index     int             `json:"index"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// OllamaMetrics are the timings and counts of a final answer object, in
// nanoseconds and tokens.
type OllamaMetrics struct {
	TotalDuration      int64 `json:"total_duration,omitempty"`
	LoadDuration       int64 `json:"load_duration,omitempty"`
	PromptEvalCount    int   `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64 `json:"prompt_eval_duration,omitempty"`
	EvalCount          int   `json:"eval_count,omitempty"`
	EvalDuration       int64 `json:"eval_duration,omitempty"`
}

// OllamaChatResponse is one line of a streamed /api/chat answer, or the
// whole answer: Done is set on the last, with DoneReason ("stop",
// "length", "load", "unload") and the metrics.
type OllamaChatResponse struct {
	Model      string        `json:"model"`
	CreatedAt  time.Time     `json:"created_at"`
	Message    OllamaMessage `json:"message"`
	Done       bool          `json:"done"`
	DoneReason string        `json:"done_reason,omitempty"`
	OllamaMetrics
}

// OllamaGenerateRequest is the body of POST /api/generate. An empty
// Prompt loads the model (and with KeepAlive 0 unloads it).
type OllamaGenerateRequest struct {
	Model  string `json:"model"`
	Prompt string `json:"prompt"`
	// System replaces the model's system message; Raw sends Prompt as is,
	// without the chat template.
	System    string          `json:"system,omitempty"`
	Raw       bool            `json:"raw,omitempty"`
	Stream    *bool           `json:"stream,omitempty"`
	Format    json.RawMessage `json:"format,omitempty"`
	KeepAlive json.RawMessage `json:"keep_alive,omitempty"`
	Options   map[string]any  `json:"options,omitempty"`
	// Suffix, Template, Context, Images, Think, Truncate, Shift, Logprobs
	// and TopLogprobs are Ollama's; llmd refuses the values that ask for
	// what it does not do.
	Suffix      string          `json:"suffix,omitempty"`
	Template    string          `json:"template,omitempty"`
	Context     []int           `json:"context,omitempty"`
	Images      []string        `json:"images,omitempty"`
	Think       json.RawMessage `json:"think,omitempty"`
	Truncate    *bool           `json:"truncate,omitempty"`
	Shift       *bool           `json:"shift,omitempty"`
	Logprobs    bool            `json:"logprobs,omitempty"`
	TopLogprobs int             `json:"top_logprobs,omitempty"`
}

// OllamaGenerateResponse is one line of a streamed /api/generate answer,
// or the whole answer.
type OllamaGenerateResponse struct {
	Model      string    `json:"model"`
	CreatedAt  time.Time `json:"created_at"`
	Response   string    `json:"response"`
	Done       bool      `json:"done"`
	DoneReason string    `json:"done_reason,omitempty"`
	OllamaMetrics
}

// OllamaError is Ollama's error body, and the line that ends a stream that
// failed.
type OllamaError struct {
	Error string `json:"error"`
}

// OllamaModelDetails describes a model in /api/tags, /api/ps and
// /api/show.
type OllamaModelDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// OllamaModel is one model of GET /api/tags and GET /api/ps (ExpiresAt,
// SizeVRAM and ContextLength are /api/ps's).
type OllamaModel struct {
	Name          string             `json:"name"`
	Model         string             `json:"model"`
	ModifiedAt    time.Time          `json:"modified_at"`
	Size          int64              `json:"size"`
	Digest        string             `json:"digest"`
	Details       OllamaModelDetails `json:"details"`
	ExpiresAt     *time.Time         `json:"expires_at,omitempty"`
	SizeVRAM      *int64             `json:"size_vram,omitempty"`
	ContextLength int                `json:"context_length,omitempty"`
}

// OllamaModelList is the answer of GET /api/tags and GET /api/ps.
type OllamaModelList struct {
	Models []OllamaModel `json:"models"`
}

// OllamaShowRequest is the body of POST /api/show; Name is the older
// spelling of Model, which some clients still send.
type OllamaShowRequest struct {
	Model   string `json:"model,omitempty"`
	Name    string `json:"name,omitempty"`
	Verbose bool   `json:"verbose,omitempty"`
}

// OllamaShowResponse is the answer of POST /api/show.
type OllamaShowResponse struct {
	License      string             `json:"license"`
	Modelfile    string             `json:"modelfile"`
	Parameters   string             `json:"parameters"`
	Template     string             `json:"template"`
	System       string             `json:"system"`
	Details      OllamaModelDetails `json:"details"`
	ModelInfo    map[string]any     `json:"model_info"`
	Capabilities []string           `json:"capabilities"`
	ModifiedAt   time.Time          `json:"modified_at"`
}

// OllamaVersion is the answer of GET /api/version.
type OllamaVersion struct {
	Version string `json:"version"`
}
