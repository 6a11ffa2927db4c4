package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Message is one chat message. Content on the wire is a string or an array
// of parts ([{"type":"text","text":"..."}]); both decode into Content. An
// assistant message may carry the ToolCalls it made (its content then
// often null), and a "tool" message answers the call ToolCallID.
type Message struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// Tool is a tool the model may call: a function with a JSON Schema for its
// arguments ({"type": "function", "function": {...}}).
type Tool struct {
	Type     string      `json:"type"`
	Function FunctionDef `json:"function"`
}

// FunctionDef defines a function tool. Parameters is a JSON Schema (an
// object schema); absent means no arguments.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a call the model made: in an assistant message of the
// history, and in a non-streamed answer.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function called and its arguments, a JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallDelta is a fragment of a tool call in a streamed chunk: the
// first fragment of call Index carries its ID, Type and Function.Name;
// the following ones carry pieces of Function.Arguments to concatenate.
type ToolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function FunctionCallDelta `json:"function"`
}

// FunctionCallDelta is the function part of a ToolCallDelta.
type FunctionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ToolChoice is tool_choice: "none", "auto", "required", or a named
// function ({"type": "function", "function": {"name": "..."}}), which
// decodes into Mode "function" and Name.
type ToolChoice struct {
	Mode string
	Name string
}

// Tool choice modes.
const (
	ToolChoiceNone     = "none"
	ToolChoiceAuto     = "auto"
	ToolChoiceRequired = "required"
	ToolChoiceFunction = "function"
)

// UnmarshalJSON implements json.Unmarshaler.
func (c *ToolChoice) UnmarshalJSON(b []byte) error {
	var mode string
	if err := json.Unmarshal(b, &mode); err == nil {
		switch mode {
		case ToolChoiceNone, ToolChoiceAuto, ToolChoiceRequired:
			*c = ToolChoice{Mode: mode}
			return nil
		}
		return errors.New(`tool_choice must be "none", "auto", "required" or a function`)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := strictUnmarshal(b, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return errors.New(`tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
	}
	*c = ToolChoice{Mode: ToolChoiceFunction, Name: named.Function.Name}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (c ToolChoice) MarshalJSON() ([]byte, error) {
	if c.Mode == ToolChoiceFunction {
		return json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
	}
	return json.Marshal(c.Mode)
}

// ResponseFormat is response_format: {"type": "text"}, {"type":
// "json_object"} or {"type": "json_schema", "json_schema": {...}}.
type ResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *JSONSchemaSpec `json:"json_schema,omitempty"`
}

// JSONSchemaSpec is the json_schema of a ResponseFormat.
type JSONSchemaSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Guided holds the structured-output fields of vLLM (guided_*) and of
// llama.cpp's server (grammar, json_schema), embedded in the generation
// requests. At most one structured-output field may be set per request,
// response_format included.
type Guided struct {
	// GuidedJSON is a JSON Schema the output must validate against.
	GuidedJSON json.RawMessage `json:"guided_json,omitempty"`
	// GuidedRegex is a regular expression the output must match whole.
	GuidedRegex string `json:"guided_regex,omitempty"`
	// GuidedChoice is a list of strings the output must be one of.
	GuidedChoice []string `json:"guided_choice,omitempty"`
	// GuidedGrammar and Grammar are GBNF grammars (llama.cpp's dialect).
	GuidedGrammar string `json:"guided_grammar,omitempty"`
	Grammar       string `json:"grammar,omitempty"`
	// JSONSchema is llama.cpp's name for a JSON Schema constraint.
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
}

// Controls are the generation controls vLLM adds to OpenAI's, embedded in
// the generation requests.
type Controls struct {
	// IgnoreEOS generates past end-of-generation tokens, to max_tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	// MinTokens is the fewest tokens generated before an end-of-generation
	// or stop token may end a choice.
	MinTokens *int `json:"min_tokens,omitempty"`
	// StopTokenIDs end a choice as EOS does.
	StopTokenIDs []int32 `json:"stop_token_ids,omitempty"`
	// SkipSpecialTokens leaves special tokens out of the text (default
	// true).
	SkipSpecialTokens *bool `json:"skip_special_tokens,omitempty"`
	// BestOf is accepted only when it equals n (or is 1): llmd does not
	// generate extra candidates to pick from.
	BestOf *int `json:"best_of,omitempty"`
	// Mode is the caller's product mode ("fast", "deep"), which llmd's
	// model routers (a model such as "auto") may choose by; the
	// X-LLMD-Mode header sets it too.
	Mode string `json:"mode,omitempty"`
}

// strictUnmarshal decodes b into v, refusing fields v does not have.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// Content is message text. It unmarshals from a string, null, or an array of
// text parts (concatenated); it marshals as a string.
type Content string

// UnmarshalJSON implements json.Unmarshaler.
func (c *Content) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		*c = ""
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*c = Content(v)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("content must be a string or an array of text parts")
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return errors.New("content part type " + p.Type + " is not supported")
		}
		sb.WriteString(p.Text)
	}
	*c = Content(sb.String())
	return nil
}

// Stop is the stop field: a string or an array of strings.
type Stop []string

// UnmarshalJSON implements json.Unmarshaler.
func (s *Stop) UnmarshalJSON(b []byte) error {
	t := strings.TrimSpace(string(b))
	if t == "null" {
		*s = nil
		return nil
	}
	if strings.HasPrefix(t, `"`) {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = Stop{v}
		return nil
	}
	var v []string
	if err := json.Unmarshal(b, &v); err != nil {
		return errors.New("stop must be a string or an array of strings")
	}
	*s = v
	return nil
}

// StreamOptions are the options of a streamed response. IncludeObfuscation
// is accepted and ignored: llmd adds no obfuscation padding to chunks.
type StreamOptions struct {
	IncludeUsage       bool  `json:"include_usage"`
	IncludeObfuscation *bool `json:"include_obfuscation,omitempty"`
}

// UnmarshalJSON implements json.Unmarshaler, refusing unknown fields.
func (o *StreamOptions) UnmarshalJSON(b []byte) error {
	type plain StreamOptions
	return strictField("stream_options", b, (*plain)(o))
}

// UnmarshalJSON implements json.Unmarshaler, refusing unknown fields.
func (f *ResponseFormat) UnmarshalJSON(b []byte) error {
	type plain ResponseFormat
	return strictField("response_format", b, (*plain)(f))
}

// UnmarshalJSON implements json.Unmarshaler, refusing unknown fields.
func (s *JSONSchemaSpec) UnmarshalJSON(b []byte) error {
	type plain JSONSchemaSpec
	return strictField("response_format.json_schema", b, (*plain)(s))
}

// UnmarshalJSON implements json.Unmarshaler, refusing unknown fields.
func (t *Tool) UnmarshalJSON(b []byte) error {
	type plain Tool
	return strictField("tools[]", b, (*plain)(t))
}

// UnmarshalJSON implements json.Unmarshaler, refusing unknown fields.
func (f *FunctionDef) UnmarshalJSON(b []byte) error {
	type plain FunctionDef
	return strictField("tools[].function", b, (*plain)(f))
}

// strictField decodes b into v, refusing fields v does not have with an
// error that names the object.
func strictField(name string, b []byte, v any) error {
	if err := strictUnmarshal(b, v); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return err
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Sampling holds the sampling parameters that every generation request
// takes (OpenAI's, plus vLLM's top_k, min_p, repetition_penalty), embedded
// in ChatCompletionRequest, CompletionRequest and NativeChatRequest so that
// they have one definition and one validation. Pointer fields distinguish
// "absent" from zero.
type Sampling struct {
	// Temperature is 0 to 2 (0: greedy); TopP above 0 and at most 1.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	// TopK keeps the k most likely tokens (0 or -1: off); MinP (0 to 1)
	// drops tokens less likely than min_p times the most likely one.
	TopK *int     `json:"top_k,omitempty"`
	MinP *float64 `json:"min_p,omitempty"`
	// PresencePenalty and FrequencyPenalty are -2 to 2;
	// RepetitionPenalty is above 0 and at most 10 (1: off).
	PresencePenalty   *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	// LogitBias maps token ids (as strings) to a bias from -100 to 100.
	LogitBias map[string]float64 `json:"logit_bias,omitempty"`
	// Seed makes sampling repeatable; without one llmd derives a seed from
	// the prompt.
	Seed *int64 `json:"seed,omitempty"`
	// Stop ends a choice at the first of up to four strings (not sent).
	Stop Stop `json:"stop,omitempty"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions. llmd
// refuses a field it does not implement with a 400 naming it (see the
// README for the few it accepts and ignores). Pointer fields distinguish
// "absent" from zero.
type ChatCompletionRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	N                   *int           `json:"n,omitempty"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	Sampling
	// Logprobs asks for each output token's log-probability, and
	// TopLogprobs (0 to 20) for that many alternatives.
	Logprobs    *bool  `json:"logprobs,omitempty"`
	TopLogprobs *int   `json:"top_logprobs,omitempty"`
	User        string `json:"user,omitempty"`
	// ResponseFormat constrains the answer to JSON (any object, or one
	// valid against a schema).
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	ToolUse
	Guided
	Controls
	ChatOptions
}

// Reasoning formats (ChatOptions.ReasoningFormat), llama.cpp's names.
const (
	// ReasoningNone leaves a reasoning model's <think> section in the
	// content, tags included (the default).
	ReasoningNone = "none"
	// ReasoningDeepSeek and ReasoningAuto return the section apart from the
	// content: reasoning_content (OpenAI API) or reasoning (native API).
	ReasoningDeepSeek = "deepseek"
	ReasoningAuto     = "auto"
)

// ChatOptions are the chat requests' options for the model's chat
// template and the reading of its answers.
type ChatOptions struct {
	// ChatTemplateKwargs is a JSON object of extra variables for the chat
	// template (vLLM's chat_template_kwargs), e.g. {"enable_thinking":
	// false} for Qwen3.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
	// ReasoningFormat is ReasoningNone (or empty), ReasoningDeepSeek or
	// ReasoningAuto (llama.cpp's reasoning_format). With deepseek or auto,
	// the answer of a model whose chat template writes <think> sections
	// comes back split: the section as reasoning, the rest as content,
	// with the section's tokens counted in
	// completion_tokens_details.reasoning_tokens. Other models' answers
	// are not changed.
	ReasoningFormat string `json:"reasoning_format,omitempty"`
}

// ToolUse holds the tool-calling fields of the chat requests: the tools
// the model may call, whether and which it must call, and whether it may
// call several at once (default true).
type ToolUse struct {
	Tools             []Tool      `json:"tools,omitempty"`
	ToolChoice        *ToolChoice `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool       `json:"parallel_tool_calls,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions. Prompt is a string
// or an array of one string.
type CompletionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens,omitempty"`
	N             *int            `json:"n,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	StreamOptions *StreamOptions  `json:"stream_options,omitempty"`
	Sampling
	User string `json:"user,omitempty"`
	// Logprobs asks for each output token's log-probability and that many
	// (0 to 5) most likely alternatives, in the legacy format
	// (CompletionLogprobs).
	Logprobs *int `json:"logprobs,omitempty"`
	// Echo starts each choice's text with the prompt.
	Echo bool `json:"echo,omitempty"`
	// ResponseFormat constrains the text to JSON (a vLLM extension on
	// completions).
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	Guided
	Controls
}

// PromptTokensDetails breaks down prompt tokens.
type PromptTokensDetails struct {
	// CachedTokens is the number of prompt tokens served from the prefix
	// cache. Always present (0 allowed).
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails breaks down completion tokens.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// Usage is the OpenAI usage object.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// ResponseMessage is the assistant message in a non-streamed response.
// Its content is null when it made tool calls and wrote no text.
type ResponseMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the answer's reasoning section, when the request
	// asked for it apart (ChatOptions.ReasoningFormat).
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	Refusal          *string    `json:"refusal"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// MarshalJSON writes content as null for a message of tool calls only.
func (m ResponseMessage) MarshalJSON() ([]byte, error) {
	content := &m.Content
	if m.Content == "" && len(m.ToolCalls) > 0 {
		content = nil
	}
	return json.Marshal(struct {
		Role             string     `json:"role"`
		Content          *string    `json:"content"`
		ReasoningContent string     `json:"reasoning_content,omitempty"`
		Refusal          *string    `json:"refusal"`
		ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	}{m.Role, content, m.ReasoningContent, m.Refusal, m.ToolCalls})
}

// ChatChoice is one choice of a non-streamed chat completion.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// ChoiceLogprobs are the log-probabilities of a choice's tokens (of the
// tokens of one chunk, when streamed).
type ChoiceLogprobs struct {
	Content []TokenLogprob `json:"content"`
}

// TokenLogprob is one output token's log-probability and the most likely
// alternatives at its position. Bytes are the token's UTF-8 bytes (a token
// may hold part of a character).
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative token at a position.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// ChatCompletion is the non-streamed response of POST /v1/chat/completions.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage"`
}

// ChunkDelta is the delta of a streamed chat chunk.
type ChunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
	// ReasoningContent is a piece of the answer's reasoning section (see
	// ResponseMessage.ReasoningContent).
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ChunkChoice is one choice of a streamed chat chunk.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChunkDelta      `json:"delta"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatCompletionChunk is one SSE event of a streamed chat completion.
// Usage is null on every chunk but the final usage chunk (choices empty).
type ChatCompletionChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"` // "chat.completion.chunk"
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage"`
}

// CompletionChoice is one choice of a text completion (streamed or not).
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// CompletionLogprobs are a completion choice's log-probabilities in the
// legacy format: per token its text, its log-probability, the top
// alternatives by text, and its offset in the generated text.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// Completion is the response (or one streamed chunk) of POST /v1/completions.
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "text_completion"
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint,omitempty"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// MaxModelLen is the model's context length in tokens (as vLLM reports it).
	MaxModelLen int `json:"max_model_len,omitempty"`
	// Architecture is the model family ("llama", "qwen2"; "sim" for a
	// simulated model), ParameterCount its parameters, Quantization its
	// weight type ("Q8_0", "F16", ... or "FP8"/"BF16" for a simulated
	// model). llmd extensions, absent for unknown values.
	Architecture string `json:"architecture,omitempty"`
	// Kind says what a name of the models config is: "alias" (a name for
	// the version it points to, Target), "router" (resolved per request by
	// rules; Target is its default) or "version" (a model of the config,
	// loaded or loaded on demand); "peer" is a model only another node of
	// the cluster serves (Target, requests are forwarded); "embedding" is a
	// loaded embedding model (it answers /v1/embeddings only). Deprecated and Sunset are Unix times of
	// a version's retirement. llmd extensions, absent for plain models.
	Kind           string `json:"kind,omitempty"`
	Target         string `json:"target,omitempty"`
	Deprecated     int64  `json:"deprecated,omitempty"`
	Sunset         int64  `json:"sunset,omitempty"`
	ParameterCount int64  `json:"parameter_count,omitempty"`
	Quantization   string `json:"quantization,omitempty"`
}

// ModelList is the response of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// ErrorBody is the OpenAI error body: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an error. Code is a string or null.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// TokenizeRequest is the body of POST /tokenize (vLLM's shape): either a
// Prompt, or chat Messages rendered with the model's chat template.
type TokenizeRequest struct {
	Model    string    `json:"model"`
	Prompt   *string   `json:"prompt,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	// AddSpecialTokens adds the model's BOS/EOS as the model would for a
	// completion (default true for a prompt, false for messages, whose
	// template places them).
	AddSpecialTokens *bool `json:"add_special_tokens,omitempty"`
	// AddGenerationPrompt ends rendered messages with the assistant cue
	// (default true).
	AddGenerationPrompt *bool `json:"add_generation_prompt,omitempty"`
}

// TokenizeResponse is the response of POST /tokenize.
type TokenizeResponse struct {
	Tokens      []int32 `json:"tokens"`
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

// DetokenizeResponse is the response of POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}
