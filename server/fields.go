package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// A request field llmd does not implement is refused with a 400 naming it,
// never ignored: a client that believes a feature is on when it is not
// breaks later, far from the cause. The only exceptions are ignoredFields.

// ignoredFields are accepted and ignored: they ask for nothing that
// changes the answer (bookkeeping on OpenAI's side). The README lists them.
var ignoredFields = map[string]bool{
	"store":             true, // OpenAI keeps the completion for its dashboard
	"metadata":          true, // tags for that stored completion
	"service_tier":      true, // OpenAI's processing tier
	"safety_identifier": true, // an end-user id for OpenAI's abuse checks
	"prompt_cache_key":  true, // a hint for OpenAI's prompt cache; llmd's is automatic
}

// unsupportedFields are fields of the OpenAI, vLLM or llama.cpp APIs that
// llmd does not implement, with what to say.
var unsupportedFields = map[string]string{
	"functions":                     "the legacy functions field is not supported; use tools",
	"function_call":                 "the legacy function_call field is not supported; use tool_choice",
	"audio":                         "audio output is not supported",
	"modalities":                    "only text output is supported",
	"prediction":                    "predicted outputs are not supported",
	"web_search_options":            "web search is not supported",
	"reasoning_effort":              "reasoning effort is not supported",
	"verbosity":                     "verbosity is not supported",
	"suffix":                        "suffix (insertion) is not supported",
	"use_beam_search":               "beam search is not supported",
	"length_penalty":                "length_penalty (beam search) is not supported",
	"include_stop_str_in_output":    "include_stop_str_in_output is not supported",
	"prompt_logprobs":               "prompt_logprobs is not supported",
	"logits_processors":             "logits processors are not supported",
	"chat_template":                 "a request's own chat_template is not supported; the model's is used",
	"continue_final_message":        "continue_final_message is not supported",
	"add_generation_prompt":         "add_generation_prompt is not supported on this endpoint",
	"documents":                     "documents are not supported",
	"guided_decoding_backend":       "llmd has one constrained-decoding engine; guided_decoding_backend is not supported",
	"guided_whitespace_pattern":     "guided_whitespace_pattern is not supported",
	"structural_tag":                "structural tags are not supported",
	"truncate_prompt_tokens":        "truncate_prompt_tokens is not supported",
	"spaces_between_special_tokens": "spaces_between_special_tokens is not supported",
	"return_tokens_as_token_ids":    "return_tokens_as_token_ids is not supported",
	"n_predict":                     "n_predict is llama.cpp's name; use max_tokens",
}

// knownFields returns the top-level JSON fields of v's type (a struct; the
// fields of embedded structs included), computed once per type.
func knownFields(v any) map[string]bool {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]bool)
	}
	out := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case tag == "-":
			case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
				walk(f.Type)
			case tag != "":
				out[tag] = true
			default:
				out[f.Name] = true
			}
		}
	}
	walk(t)
	fieldCache.Store(t, out)
	return out
}

var fieldCache sync.Map // reflect.Type -> map[string]bool

// checkFields refuses the first field of the JSON object body, in sorted
// order, that v's type does not have and ignoredFields does not list. A
// body that is not a JSON object is left to decodeJSON's errors.
func checkFields(body []byte, v any) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil
	}
	known := knownFields(v)
	keys := make([]string, 0, len(top))
	for k := range top {
		if !known[k] && !ignoredFields[k] {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	k := keys[0]
	name := capText(k, 64)
	if msg, ok := unsupportedFields[k]; ok {
		return pipeline.InvalidParam(name, "%s", msg)
	}
	return pipeline.InvalidParam(name, "unknown field %q: llmd does not implement it (the README lists the fields it takes)", name)
}

// decodeStrict decodes a generation request: every field known (see
// checkFields), then the JSON into v.
func decodeStrict(body []byte, v any) error {
	if err := checkFields(body, v); err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// decodeChatOptions fills req's template variables and reasoning split
// from a chat request's fields. The variables' names are checked later,
// with the other checks of the request (pipeline).
func decodeChatOptions(req *pipeline.Request, o api.ChatOptions) error {
	if k := bytes.TrimSpace(o.ChatTemplateKwargs); len(k) > 0 && string(k) != "null" {
		if k[0] != '{' {
			return pipeline.InvalidParam("chat_template_kwargs", "chat_template_kwargs must be a JSON object")
		}
		req.TemplateKwargs = o.ChatTemplateKwargs
	}
	switch o.ReasoningFormat {
	case "", api.ReasoningNone:
	case api.ReasoningDeepSeek, api.ReasoningAuto:
		req.Reasoning = true
	default:
		return pipeline.InvalidParam("reasoning_format", "reasoning_format must be %q, %q or %q; got %q",
			api.ReasoningNone, api.ReasoningAuto, api.ReasoningDeepSeek, capText(o.ReasoningFormat, 32))
	}
	return nil
}

// decodeTools fills req's tools from a chat request's fields.
func decodeTools(req *pipeline.Request, tu api.ToolUse) error {
	req.Tools = tu.Tools
	if tu.ToolChoice != nil {
		req.ToolChoice = *tu.ToolChoice
	}
	req.ParallelToolCalls = tu.ParallelToolCalls == nil || *tu.ParallelToolCalls
	return nil
}

// decodeControls fills req's structured output and generation controls
// from the fields the generation APIs share. At most one field may ask for
// structured output.
func decodeControls(req *pipeline.Request, rf *api.ResponseFormat, g api.Guided, c api.Controls) error {
	req.Mode = capText(c.Mode, 64)
	var set []*pipeline.Structured
	add := func(s *pipeline.Structured) { set = append(set, s) }
	if rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			add(&pipeline.Structured{Kind: pipeline.StructuredJSONObject, Param: "response_format"})
		case "json_schema":
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || string(rf.JSONSchema.Schema) == "null" {
				return pipeline.InvalidParam("response_format", "response_format of type json_schema needs json_schema.schema")
			}
			add(&pipeline.Structured{Kind: pipeline.StructuredJSONSchema, Param: "response_format", Schema: rf.JSONSchema.Schema})
		default:
			return pipeline.InvalidParam("response_format", "response_format.type must be text, json_object or json_schema; got %q", capText(rf.Type, 32))
		}
	}
	for _, f := range []struct {
		param  string
		schema json.RawMessage
	}{{"guided_json", g.GuidedJSON}, {"json_schema", g.JSONSchema}} {
		if len(f.schema) == 0 || string(f.schema) == "null" {
			continue
		}
		schema := f.schema
		var text string
		if json.Unmarshal(schema, &text) == nil { // vLLM takes the schema as a JSON string too
			schema = json.RawMessage(text)
		}
		add(&pipeline.Structured{Kind: pipeline.StructuredJSONSchema, Param: f.param, Schema: schema})
	}
	if g.GuidedRegex != "" {
		add(&pipeline.Structured{Kind: pipeline.StructuredRegex, Param: "guided_regex", Text: g.GuidedRegex})
	}
	if g.GuidedChoice != nil {
		if len(g.GuidedChoice) == 0 {
			return pipeline.InvalidParam("guided_choice", "guided_choice must hold at least one string")
		}
		add(&pipeline.Structured{Kind: pipeline.StructuredChoice, Param: "guided_choice", Choices: g.GuidedChoice})
	}
	for _, f := range []struct{ param, text string }{{"guided_grammar", g.GuidedGrammar}, {"grammar", g.Grammar}} {
		if f.text != "" {
			add(&pipeline.Structured{Kind: pipeline.StructuredGrammar, Param: f.param, Text: f.text})
		}
	}
	if len(set) > 1 {
		return pipeline.InvalidParam(set[1].Param, "only one structured-output field may be set; got %s and %s", set[0].Param, set[1].Param)
	}
	if len(set) == 1 {
		req.Structured = set[0]
	}

	req.IgnoreEOS, req.StopTokenIDs = c.IgnoreEOS, c.StopTokenIDs
	if c.MinTokens != nil {
		req.MinTokens = *c.MinTokens
	}
	req.ShowSpecial = c.SkipSpecialTokens != nil && !*c.SkipSpecialTokens
	if b := c.BestOf; b != nil {
		n := 1
		if req.N != nil {
			n = *req.N
		}
		if *b != n {
			return pipeline.InvalidParam("best_of", "best_of must equal n (%d): llmd does not generate extra candidates to choose from; got %d", n, *b)
		}
	}
	return nil
}
