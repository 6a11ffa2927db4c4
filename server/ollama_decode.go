package server

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// The Ollama API's requests as pipeline requests: Ollama's messages,
// tools, format and options become the same fields the OpenAI codecs
// fill, and the request is forwarded to peers and upstream engines as
// the OpenAI request it amounts to.

// Endpoints of the Ollama API, in logs and usage rows. The pipeline treats
// them as chat completions; a raw /api/generate is a completion.
const (
	endpointOllamaChat     pipeline.Endpoint = "ollama.chat"
	endpointOllamaGenerate pipeline.Endpoint = "ollama.generate"
)

// ollamaIgnoredOptions are options that size Ollama's runner, not the
// answer: llmd sizes its engines at load time and accepts them without
// effect (num_ctx included: the context is the model's; a prompt that
// does not fit is refused, never truncated). The README lists them.
var ollamaIgnoredOptions = map[string]bool{
	"num_ctx": true, "num_batch": true, "num_gpu": true, "main_gpu": true, "num_thread": true,
	"use_mmap": true, "use_mlock": true, "numa": true, "low_vram": true, "f16_kv": true, "vocab_only": true,
	"num_keep": true, "penalize_newline": true,
}

// ollamaNoopOptions are sampling options llmd does not have, accepted only
// at the value that turns them off.
var ollamaNoopOptions = map[string]float64{"typical_p": 1, "tfs_z": 1, "mirostat": 0}

// ollamaOptions maps Ollama's options onto req's sampling and max_tokens.
// An option llmd does not implement is refused, naming it.
func ollamaOptions(opts map[string]any, req *pipeline.Request) error {
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	sp := &req.Sampling
	for _, k := range keys {
		v := opts[k]
		param := "options." + capText(k, 64)
		if v == nil || ollamaIgnoredOptions[k] {
			continue
		}
		num := func() (float64, error) {
			f, ok := v.(float64)
			if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
				return 0, pipeline.InvalidParam(param, "%s must be a number", param)
			}
			return f, nil
		}
		integer := func() (int, error) {
			f, err := num()
			if err == nil && (f != math.Trunc(f) || math.Abs(f) > 1<<31) {
				err = pipeline.InvalidParam(param, "%s must be an integer, got %v", param, f)
			}
			return int(f), err
		}
		var err error
		switch k {
		case "temperature":
			sp.Temperature, err = floatPtr(num())
		case "top_p":
			sp.TopP, err = floatPtr(num())
		case "min_p":
			sp.MinP, err = floatPtr(num())
		case "presence_penalty":
			sp.PresencePenalty, err = floatPtr(num())
		case "frequency_penalty":
			sp.FrequencyPenalty, err = floatPtr(num())
		case "repeat_penalty":
			sp.RepetitionPenalty, err = floatPtr(num())
		case "top_k":
			var n int
			if n, err = integer(); err == nil {
				sp.TopK = &n
			}
		case "seed":
			var n int
			if n, err = integer(); err == nil {
				s := int64(n)
				sp.Seed = &s
			}
		case "num_predict":
			var n int
			if n, err = integer(); err == nil && n >= 0 {
				// -1 (no limit) and -2 (fill the context) leave the room
				// left in the context, llmd's default.
				req.MaxTokens = &n
			}
		case "stop":
			sp.Stop, err = ollamaStop(v, param)
		case "repeat_last_n":
			// llmd's repetition penalty looks at the whole sequence.
			if p, ok := opts["repeat_penalty"].(float64); ok && p != 1 {
				err = pipeline.InvalidParam(param, "repeat_last_n is not supported: llmd's repeat_penalty applies to every token so far")
			}
		default:
			off, noop := ollamaNoopOptions[k]
			if !noop {
				return pipeline.InvalidParam(param, "option %q is not supported by llmd (the README lists the options it takes)", capText(k, 64))
			}
			if f, ok := v.(float64); !ok || f != off {
				return pipeline.InvalidParam(param, "option %q is not supported by llmd except at %v (off)", k, off)
			}
		}
		if err != nil {
			return err
		}
	}
	req.MaxTokensParam = "options.num_predict"
	return nil
}

func floatPtr(f float64, err error) (*float64, error) {
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// ollamaStop reads the stop option: a string or an array of strings.
func ollamaStop(v any, param string) (api.Stop, error) {
	switch s := v.(type) {
	case string:
		return api.Stop{s}, nil
	case []any:
		out := make(api.Stop, 0, len(s))
		for _, x := range s {
			str, ok := x.(string)
			if !ok {
				return nil, pipeline.InvalidParam(param, "%s must be a string or an array of strings", param)
			}
			out = append(out, str)
		}
		return out, nil
	}
	return nil, pipeline.InvalidParam(param, "%s must be a string or an array of strings", param)
}

// ollamaStructured reads format: "json" (any JSON object), a JSON Schema,
// or nothing.
func ollamaStructured(raw json.RawMessage) (*pipeline.Structured, error) {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" || t == `""` {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "json" {
			return nil, pipeline.InvalidParam("format", `format must be "json" or a JSON Schema object, got %q`, capText(s, 32))
		}
		return &pipeline.Structured{Kind: pipeline.StructuredJSONObject, Param: "format"}, nil
	}
	if !strings.HasPrefix(t, "{") {
		return nil, pipeline.InvalidParam("format", `format must be "json" or a JSON Schema object`)
	}
	return &pipeline.Structured{Kind: pipeline.StructuredJSONSchema, Param: "format", Schema: raw}, nil
}

// keepAlive is a request's keep_alive: unset, or a duration (0: unload
// after the request; negative: keep loaded).
type keepAlive struct {
	set bool
	d   time.Duration
}

// parseKeepAlive reads keep_alive: a number of seconds or a duration
// string ("5m", "0", "-1").
func parseKeepAlive(raw json.RawMessage) (keepAlive, error) {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" {
		return keepAlive{}, nil
	}
	bad := pipeline.InvalidParam("keep_alive", `keep_alive must be a number of seconds or a duration such as "5m" (0 unloads, negative keeps loaded)`)
	var secs float64
	if json.Unmarshal(raw, &secs) == nil {
		if math.IsNaN(secs) || math.Abs(secs) > 1e9 {
			return keepAlive{}, bad
		}
		return keepAlive{set: true, d: time.Duration(secs * float64(time.Second))}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return keepAlive{}, bad
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(n) && math.Abs(n) <= 1e9 {
		return keepAlive{set: true, d: time.Duration(n * float64(time.Second))}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return keepAlive{}, bad
	}
	return keepAlive{set: true, d: d}, nil
}

// ollamaThink refuses think: true (or a level): llmd does not separate a
// model's reasoning from its answer.
func ollamaThink(raw json.RawMessage) error {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", "false":
		return nil
	}
	return pipeline.InvalidParam("think", "think is not supported: llmd does not separate a model's thinking from its answer; leave it out or false")
}

// ollamaControls refuses the request fields that ask for what llmd does
// not do: truncating or shifting the context, log-probabilities.
func ollamaControls(truncate, shift *bool, logprobs bool) error {
	switch {
	case truncate != nil && *truncate:
		return pipeline.InvalidParam("truncate", "truncate is not supported: llmd never drops messages; a prompt longer than the context is refused")
	case shift != nil && *shift:
		return pipeline.InvalidParam("shift", "shift is not supported: llmd never shifts the context")
	case logprobs:
		return pipeline.InvalidParam("logprobs", "logprobs are not supported on the Ollama API; use /v1/chat/completions")
	}
	return nil
}

// ollamaMessages converts Ollama's chat messages. An assistant's tool
// calls get ids when the client sent none, and a tool result names the
// call it answers (its tool_call_id, else the earliest unanswered call of
// its tool_name).
func ollamaMessages(msgs []api.OllamaMessage) ([]api.Message, error) {
	out := make([]api.Message, 0, len(msgs))
	type pending struct{ id, name string }
	var open []pending
	for i, m := range msgs {
		p := fmt.Sprintf("messages[%d]", i)
		if len(m.Images) > 0 {
			return nil, pipeline.InvalidParam(p+".images", "images are not supported: llmd serves text models")
		}
		am := api.Message{Role: m.Role, Content: api.Content(m.Content)}
		switch m.Role {
		case "system", "user":
		case "assistant":
			open = open[:0]
			for j, tc := range m.ToolCalls {
				id := tc.ID
				if id == "" {
					id = fmt.Sprintf("call_%d_%d", i, j)
				}
				args := strings.TrimSpace(string(tc.Function.Arguments))
				if args == "" || args == "null" {
					args = "{}"
				}
				if !json.Valid([]byte(args)) {
					return nil, pipeline.InvalidParam(fmt.Sprintf("%s.tool_calls[%d].function.arguments", p, j), "arguments must be a JSON object")
				}
				am.ToolCalls = append(am.ToolCalls, api.ToolCall{ID: id, Type: "function",
					Function: api.FunctionCall{Name: tc.Function.Name, Arguments: args}})
				open = append(open, pending{id: id, name: tc.Function.Name})
			}
		case "tool":
			am.Name, am.ToolCallID = m.ToolName, m.ToolCallID
			k := slices.IndexFunc(open, func(c pending) bool {
				return (m.ToolCallID != "" && c.id == m.ToolCallID) || (m.ToolCallID == "" && (m.ToolName == "" || c.name == m.ToolName))
			})
			if k >= 0 {
				am.ToolCallID = open[k].id
				if am.Name == "" {
					am.Name = open[k].name
				}
				open = slices.Delete(open, k, k+1)
			}
		default:
			return nil, pipeline.InvalidParam(p+".role", "%s.role must be one of system, user, assistant, tool; got %q", p, capText(m.Role, 32))
		}
		out = append(out, am)
	}
	return out, nil
}

// ollamaTools converts Ollama's tools (OpenAI's shape).
func ollamaTools(tools []api.OllamaTool) []api.Tool {
	if len(tools) == 0 {
		return nil
	}
	out := make([]api.Tool, len(tools))
	for i, t := range tools {
		out[i] = api.Tool{Type: t.Type, Function: t.Function}
		if out[i].Type == "" {
			out[i].Type = "function"
		}
	}
	return out
}

// openAIForward is req as the OpenAI request it amounts to, for a peer or
// an upstream engine: a chat completion, or a completion for a prompt.
func openAIForward(req *pipeline.Request) (pipeline.Forward, error) {
	if req.Endpoint == pipeline.EndpointCompletions {
		prompt, err := json.Marshal(req.Prompt)
		if err != nil {
			return pipeline.Forward{}, err
		}
		body, err := json.Marshal(api.CompletionRequest{Model: req.Model, Prompt: prompt, MaxTokens: req.MaxTokens,
			Stream: req.Stream, Sampling: req.Sampling, ResponseFormat: responseFormat(req.Structured)})
		return pipeline.Forward{Path: "/v1/completions", Body: body}, err
	}
	cr := api.ChatCompletionRequest{Model: req.Model, Messages: req.Messages, MaxTokens: req.MaxTokens, Stream: req.Stream,
		Sampling: req.Sampling, ResponseFormat: responseFormat(req.Structured), User: req.User}
	cr.Tools = req.Tools
	if req.ToolChoice.Mode != "" {
		tc := req.ToolChoice
		cr.ToolChoice = &tc
	}
	if !req.ParallelToolCalls && len(req.Tools) > 0 {
		cr.ParallelToolCalls = new(bool)
	}
	body, err := json.Marshal(cr)
	return pipeline.Forward{Path: "/v1/chat/completions", Body: body}, err
}

// responseFormat is s as OpenAI's response_format (nil for none).
func responseFormat(s *pipeline.Structured) *api.ResponseFormat {
	switch {
	case s == nil:
		return nil
	case s.Kind == pipeline.StructuredJSONObject:
		return &api.ResponseFormat{Type: "json_object"}
	case s.Kind == pipeline.StructuredJSONSchema:
		return &api.ResponseFormat{Type: "json_schema", JSONSchema: &api.JSONSchemaSpec{Name: "output", Schema: s.Schema}}
	}
	return nil
}
