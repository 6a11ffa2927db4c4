package api

import (
	"encoding/json"
	"errors"
	"strings"
)

// Message is one chat message. Content on the wire is a string or an array
// of parts ([{"type":"text","text":"..."}]); both decode into Content.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
	Name    string  `json:"name,omitempty"`
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

// StreamOptions are the options of a streamed response.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
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

// ChatCompletionRequest is the body of POST /v1/chat/completions. Unknown
// fields are ignored. Pointer fields distinguish "absent" from zero.
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
type ResponseMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
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
	Architecture   string `json:"architecture,omitempty"`
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
