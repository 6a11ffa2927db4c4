package server

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// OpenAI's limits on logprobs.
const (
	maxTopLogprobs        = 20
	maxCompletionLogprobs = 5
)

// resumeHeader opts an OpenAI-format stream in to resuming: its events then
// carry ids and it outlives a dropped connection.
const resumeHeader = "X-Resumable"

// openaiResumable reports whether an OpenAI-format request asked for a
// resumable stream.
func openaiResumable(r *http.Request) bool {
	v := strings.ToLower(strings.TrimSpace(r.Header.Get(resumeHeader)))
	return v == "true" || v == "1" || v == "yes"
}

var doneData = []byte("[DONE]")

func openaiUsage(u pipeline.Usage) *api.Usage {
	return &api.Usage{
		PromptTokens:            u.InputTokens,
		CompletionTokens:        u.OutputTokens,
		TotalTokens:             u.InputTokens + u.OutputTokens,
		PromptTokensDetails:     &api.PromptTokensDetails{CachedTokens: u.CachedTokens},
		CompletionTokensDetails: &api.CompletionTokensDetails{ReasoningTokens: u.ReasoningTokens},
	}
}

// chatCodec is POST /v1/chat/completions.
var chatCodec = codec{endpoint: pipeline.EndpointChatCompletions, decode: decodeChat}

func decodeChat(body []byte, req *pipeline.Request) (format, error) {
	var cr api.ChatCompletionRequest
	if err := decodeStrict(body, &cr); err != nil {
		return nil, err
	}
	req.Model, req.Messages, req.Sampling, req.N, req.Stream = cr.Model, cr.Messages, cr.Sampling, cr.N, cr.Stream
	req.MaxTokensParam, req.MaxTokens = "max_tokens", cr.MaxTokens
	if cr.MaxCompletionTokens != nil {
		req.MaxTokensParam, req.MaxTokens = "max_completion_tokens", cr.MaxCompletionTokens
	}
	req.AffinityKey = capText(cr.User, 256)
	req.User = capText(cr.User, 256)
	if err := decodeTools(req, cr.ToolUse); err != nil {
		return nil, err
	}
	if err := decodeControls(req, cr.ResponseFormat, cr.Guided, cr.Controls); err != nil {
		return nil, err
	}
	if err := decodeChatOptions(req, cr.ChatOptions); err != nil {
		return nil, err
	}
	req.Logprobs = cr.Logprobs != nil && *cr.Logprobs
	if top := cr.TopLogprobs; top != nil {
		if *top < 0 || *top > maxTopLogprobs {
			return nil, pipeline.InvalidParam("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *top)
		}
		if !req.Logprobs {
			return nil, pipeline.InvalidParam("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		req.TopLogprobs = *top
	}
	return chatFormat{includeUsage: cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage}, nil
}

// chatFormat writes chat completions.
type chatFormat struct{ includeUsage bool }

func (chatFormat) resumable(r *http.Request) bool { return openaiResumable(r) }

func (f chatFormat) streamSink(st *relay.Stream, m meta) pipeline.Sink {
	return &chatStream{st: st, m: m, includeUsage: f.includeUsage}
}

func (chatFormat) jsonBody(m meta, c *collected) any {
	resp := api.ChatCompletion{ID: m.id, Object: "chat.completion", Created: m.created, Model: m.model,
		Choices: make([]api.ChatChoice, len(c.texts)), Usage: openaiUsage(c.usage)}
	for i := range c.texts {
		resp.Choices[i] = api.ChatChoice{Index: i, FinishReason: c.reasons[i],
			Message: api.ResponseMessage{Role: "assistant", Content: c.texts[i].String(), ReasoningContent: c.reasoning[i].String(),
				ToolCalls: c.calls[i]}}
		if m.logprobs {
			resp.Choices[i].Logprobs = &api.ChoiceLogprobs{Content: c.logprobs(i)}
		}
	}
	return resp
}

// chatStream writes a chat completion as OpenAI chunks: a role chunk per
// choice, content chunks, a finish chunk per choice, the usage chunk when
// asked for, then [DONE]. No id or event lines unless resumable (the SDKs
// want none).
type chatStream struct {
	st           *relay.Stream
	m            meta
	includeUsage bool
}

func (c *chatStream) chunk(choices []api.ChunkChoice, u *api.Usage) error {
	return c.st.Data("", api.ChatCompletionChunk{ID: c.m.id, Object: "chat.completion.chunk", Created: c.m.created,
		Model: c.m.model, Choices: choices, Usage: u})
}

func (c *chatStream) Begin() error {
	empty := ""
	for i := range c.m.n {
		if err := c.chunk([]api.ChunkChoice{{Index: i, Delta: api.ChunkDelta{Role: "assistant", Content: &empty}}}, nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *chatStream) Text(i int, s string, lps []api.TokenLogprob) error {
	return c.chunk([]api.ChunkChoice{{Index: i, Delta: api.ChunkDelta{Content: &s}, Logprobs: chunkLogprobs(lps)}}, nil)
}

// Reasoning implements pipeline.ReasoningSink: reasoning_content deltas.
func (c *chatStream) Reasoning(i int, s string, lps []api.TokenLogprob) error {
	return c.chunk([]api.ChunkChoice{{Index: i, Delta: api.ChunkDelta{ReasoningContent: &s}, Logprobs: chunkLogprobs(lps)}}, nil)
}

func (c *chatStream) ToolCall(i int, d api.ToolCallDelta) error {
	return c.chunk([]api.ChunkChoice{{Index: i, Delta: api.ChunkDelta{ToolCalls: []api.ToolCallDelta{d}}}}, nil)
}

func (c *chatStream) Finish(i int, reason string, lps []api.TokenLogprob) error {
	return c.chunk([]api.ChunkChoice{{Index: i, FinishReason: &reason, Logprobs: chunkLogprobs(lps)}}, nil)
}

func (c *chatStream) End(u pipeline.Usage) error {
	if c.includeUsage {
		if err := c.chunk([]api.ChunkChoice{}, openaiUsage(u)); err != nil {
			return err
		}
	}
	return c.st.Final("", doneData)
}

func (c *chatStream) Fail(err error) int { return streamError(c.st, c.m.id, err) }

// chunkLogprobs are a chunk's logprobs, nil if none.
func chunkLogprobs(lps []api.TokenLogprob) *api.ChoiceLogprobs {
	if len(lps) == 0 {
		return nil
	}
	return &api.ChoiceLogprobs{Content: lps}
}

// streamError ends an OpenAI stream with an in-band error and [DONE].
func streamError(st *relay.Stream, id string, err error) int {
	if st.Data("", api.ErrorBody{Error: apiErrorFor(err, id).Detail}) != nil || st.Final("", doneData) != nil {
		return pipeline.StatusClientClosed
	}
	return http.StatusOK
}

// completionCodec is POST /v1/completions.
var completionCodec = codec{endpoint: pipeline.EndpointCompletions, decode: decodeCompletion}

func decodeCompletion(body []byte, req *pipeline.Request) (format, error) {
	var cr api.CompletionRequest
	if err := decodeStrict(body, &cr); err != nil {
		return nil, err
	}
	req.Model, req.Sampling, req.N, req.Stream = cr.Model, cr.Sampling, cr.N, cr.Stream
	req.MaxTokensParam, req.MaxTokens = "max_tokens", cr.MaxTokens
	req.AffinityKey = capText(cr.User, 256)
	req.User = capText(cr.User, 256)
	req.Echo = cr.Echo
	if err := decodeControls(req, cr.ResponseFormat, cr.Guided, cr.Controls); err != nil {
		return nil, err
	}
	if cr.Echo && cr.Logprobs != nil {
		return nil, pipeline.InvalidParam("echo", "echo with logprobs is not supported (llmd does not compute the prompt's log-probabilities)")
	}
	if lp := cr.Logprobs; lp != nil {
		if *lp < 0 || *lp > maxCompletionLogprobs {
			return nil, pipeline.InvalidParam("logprobs", "logprobs must be between 0 and %d, got %d", maxCompletionLogprobs, *lp)
		}
		req.Logprobs, req.TopLogprobs = true, *lp
	}
	if ids, ok, err := promptIDs(cr.Prompt); ok {
		if err != nil {
			return nil, err
		}
		req.PromptIDs = ids
	} else {
		prompt, err := promptText(cr.Prompt)
		if err != nil {
			return nil, err
		}
		req.Prompt = prompt
	}
	return completionFormat{includeUsage: cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage}, nil
}

// promptIDs reads a prompt of /v1/completions given as token ids: an
// array of integers, or an array of one such array. ok is false when raw is
// not an array of numbers or of arrays (a text prompt, or an error for
// promptText to report).
func promptIDs(raw json.RawMessage) (ids []int32, ok bool, err error) {
	var flat []json.Number
	if json.Unmarshal(raw, &flat) != nil || len(flat) == 0 {
		var nested [][]json.Number
		if json.Unmarshal(raw, &nested) != nil || len(nested) == 0 {
			return nil, false, nil
		}
		if len(nested) != 1 {
			return nil, true, pipeline.InvalidParam("prompt", "prompt must hold exactly one token array (batched prompts are not supported), got %d", len(nested))
		}
		flat = nested[0]
	}
	if len(flat) == 0 {
		return nil, true, pipeline.InvalidParam("prompt", "prompt must not be empty")
	}
	ids = make([]int32, len(flat))
	for i, n := range flat {
		v, err := n.Int64()
		if err != nil || v < 0 || v > math.MaxInt32 {
			return nil, true, pipeline.InvalidParam("prompt", "prompt[%d] is %s: token ids are integers >= 0", i, capText(n.String(), 32))
		}
		ids[i] = int32(v)
	}
	return ids, true, nil
}

// promptText reads the prompt of /v1/completions: a string or an array of
// one string.
func promptText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", pipeline.InvalidParam("prompt", "you must provide a prompt")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", pipeline.InvalidParam("prompt", "prompt must not be empty")
		}
		return s, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return "", pipeline.InvalidParam("prompt", "prompt must be a string or an array of one string")
	}
	if len(ss) != 1 {
		return "", pipeline.InvalidParam("prompt", "prompt must hold exactly one string (batched prompts are not supported), got %d", len(ss))
	}
	if ss[0] == "" {
		return "", pipeline.InvalidParam("prompt", "prompt must not be empty")
	}
	return ss[0], nil
}

// completionFormat writes text completions.
type completionFormat struct{ includeUsage bool }

func (completionFormat) resumable(r *http.Request) bool { return openaiResumable(r) }

func (f completionFormat) streamSink(st *relay.Stream, m meta) pipeline.Sink {
	return &completionStream{st: st, m: m, includeUsage: f.includeUsage, offsets: make([]int, m.n)}
}

func (completionFormat) jsonBody(m meta, c *collected) any {
	resp := api.Completion{ID: m.id, Object: "text_completion", Created: m.created, Model: m.model,
		Choices: make([]api.CompletionChoice, len(c.texts)), Usage: openaiUsage(c.usage)}
	for i := range c.texts {
		resp.Choices[i] = api.CompletionChoice{Index: i, Text: c.texts[i].String(), FinishReason: &c.reasons[i]}
		if m.logprobs {
			var offset int
			resp.Choices[i].Logprobs = legacyLogprobs(c.logprobs(i), &offset)
		}
	}
	return resp
}

// completionStream writes a text completion as OpenAI "text_completion"
// chunks, the usage chunk when asked for, then [DONE].
type completionStream struct {
	st           *relay.Stream
	m            meta
	includeUsage bool
	// offsets are each choice's text offset so far (legacy text_offset).
	offsets []int
}

// logprobs are choice i's logprobs in the legacy format, nil if none.
func (c *completionStream) logprobs(i int, lps []api.TokenLogprob) *api.CompletionLogprobs {
	if len(lps) == 0 {
		return nil
	}
	return legacyLogprobs(lps, &c.offsets[i])
}

// legacyLogprobs converts logprobs to the /v1/completions format; offset is
// the choice's text offset before them and is advanced past them.
func legacyLogprobs(lps []api.TokenLogprob, offset *int) *api.CompletionLogprobs {
	out := &api.CompletionLogprobs{Tokens: make([]string, len(lps)), TokenLogprobs: make([]float64, len(lps)),
		TopLogprobs: make([]map[string]float64, len(lps)), TextOffset: make([]int, len(lps))}
	for k, lp := range lps {
		out.Tokens[k], out.TokenLogprobs[k], out.TextOffset[k] = lp.Token, float64(lp.Logprob), *offset
		*offset += len(lp.Token)
		top := make(map[string]float64, len(lp.TopLogprobs))
		for _, t := range lp.TopLogprobs {
			if _, dup := top[t.Token]; !dup {
				top[t.Token] = float64(t.Logprob)
			}
		}
		out.TopLogprobs[k] = top
	}
	return out
}

func (c *completionStream) chunk(choices []api.CompletionChoice, u *api.Usage) error {
	return c.st.Data("", api.Completion{ID: c.m.id, Object: "text_completion", Created: c.m.created,
		Model: c.m.model, Choices: choices, Usage: u})
}

func (c *completionStream) Begin() error { return nil }

func (c *completionStream) Text(i int, s string, lps []api.TokenLogprob) error {
	return c.chunk([]api.CompletionChoice{{Index: i, Text: s, Logprobs: c.logprobs(i, lps)}}, nil)
}

// ToolCall never comes: the pipeline refuses tools on completions.
func (c *completionStream) ToolCall(int, api.ToolCallDelta) error {
	return errors.New("server: a tool call in a text completion")
}

func (c *completionStream) Finish(i int, reason string, lps []api.TokenLogprob) error {
	return c.chunk([]api.CompletionChoice{{Index: i, FinishReason: &reason, Logprobs: c.logprobs(i, lps)}}, nil)
}

func (c *completionStream) End(u pipeline.Usage) error {
	if c.includeUsage {
		if err := c.chunk([]api.CompletionChoice{}, openaiUsage(u)); err != nil {
			return err
		}
	}
	return c.st.Final("", doneData)
}

func (c *completionStream) Fail(err error) int { return streamError(c.st, c.m.id, err) }
