package pipeline

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/model/toolcall"
)

// ToolPlan is how a job's answer is read for tool calls: the model's
// format, in which its text is parsed into calls as it streams.
type ToolPlan struct {
	Format toolcall.Format
}

// ChatInput is what a model's chat template renders: the conversation,
// the tools (a JSON array of OpenAI tool definitions, for the template's
// tools variable; nil for none), and whether to end with the assistant's
// cue.
type ChatInput struct {
	Messages            []api.Message
	Tools               json.RawMessage
	AddGenerationPrompt bool
	// Kwargs is a JSON object of extra template variables (the request's
	// chat_template_kwargs, checked by chat.CheckKwargs); nil for none.
	Kwargs json.RawMessage
}

// toolNameRE is OpenAI's rule for function names.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validateTools checks what needs no model: the tool definitions, the tool
// choice and structured output, and how they combine.
func validateTools(req *Request) error {
	names := map[string]bool{}
	for i, t := range req.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return InvalidParam(param+".type", "tool type must be \"function\", got %q", capText(t.Type, 32))
		}
		if !toolNameRE.MatchString(t.Function.Name) {
			return InvalidParam(param+".function.name", "a function name must be 1 to 64 letters, digits, _ or -; got %q",
				capText(t.Function.Name, 80))
		}
		if names[t.Function.Name] {
			return InvalidParam(param+".function.name", "two tools are named %q", t.Function.Name)
		}
		names[t.Function.Name] = true
		if p := t.Function.Parameters; len(p) > 0 && string(p) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(p, &obj) != nil {
				return InvalidParam(param+".function.parameters", "parameters must be a JSON Schema object")
			}
		}
	}
	switch c := req.ToolChoice; c.Mode {
	case api.ToolChoiceRequired:
		if len(req.Tools) == 0 {
			return InvalidParam("tool_choice", `tool_choice "required" needs tools`)
		}
	case api.ToolChoiceFunction:
		if !names[c.Name] {
			return InvalidParam("tool_choice", "tool_choice names the function %q, which is not among the tools", capText(c.Name, 80))
		}
	}
	if s := req.Structured; s != nil && toolsActive(req) {
		forced := req.ToolChoice.Mode == api.ToolChoiceRequired || req.ToolChoice.Mode == api.ToolChoiceFunction
		if forced || (s.Kind != StructuredJSONObject && s.Kind != StructuredJSONSchema) {
			return InvalidParam(s.Param, "%s cannot be combined with tools unless tool_choice is \"auto\" (with a JSON "+
				"response_format: the answer is then a tool call or that JSON) or \"none\"", s.Param)
		}
	}
	return nil
}

// toolsActive reports whether req's tools are offered to the model:
// there are some and tool_choice is not "none".
func toolsActive(req *Request) bool {
	return len(req.Tools) > 0 && req.ToolChoice.Mode != api.ToolChoiceNone
}

// chatInput is what the model's template renders for req, and how its
// answer is read for tool calls (nil: not at all). Tools go to the
// template when it renders them; otherwise they are described in a system
// message (toolcall.SystemPrompt) in the format the template implies.
func chatInput(req *Request, tm TextModel) (ChatInput, *ToolPlan, error) {
	in := ChatInput{Messages: req.Messages, AddGenerationPrompt: true, Kwargs: req.TemplateKwargs}
	if !toolsActive(req) {
		return in, nil, nil
	}
	tools, err := json.Marshal(req.Tools)
	if err != nil {
		return in, nil, fmt.Errorf("pipeline: encode tools: %w", err)
	}
	format, renders := tm.ToolFormat()
	if renders {
		in.Tools = tools
	} else {
		in.Messages = withSystemPrompt(req.Messages, toolcall.SystemPrompt(format, tools))
	}
	return in, &ToolPlan{Format: format}, nil
}

// withSystemPrompt returns msgs with text added to its system message, or
// a system message of text put first.
func withSystemPrompt(msgs []api.Message, text string) []api.Message {
	out := make([]api.Message, 0, len(msgs)+1)
	if len(msgs) > 0 && (msgs[0].Role == "system" || msgs[0].Role == "developer") {
		first := msgs[0]
		first.Content = api.Content(strings.TrimRight(string(first.Content), "\n") + "\n\n" + text)
		return append(append(out, first), msgs[1:]...)
	}
	out = append(out, api.Message{Role: "system", Content: api.Content(text)})
	return append(out, msgs...)
}

// grammarSource is the GBNF text that constrains req's output, "" for
// none: its structured output; a forced tool call (tool_choice "required"
// or a named function), built from the tools' parameter schemas; or, with
// tool_choice "auto" and a JSON response_format, a tool call or that JSON.
// Its errors are the client's (a 400 naming the field).
func grammarSource(req *Request, tp *ToolPlan) (string, error) {
	s := req.Structured
	forced := tp != nil && (req.ToolChoice.Mode == api.ToolChoiceRequired || req.ToolChoice.Mode == api.ToolChoiceFunction)
	switch {
	case forced:
		return toolGrammar(req, tp, nil)
	case s == nil:
		return "", nil
	case tp != nil:
		return toolGrammar(req, tp, s)
	}
	var (
		src string
		err error
	)
	switch s.Kind {
	case StructuredJSONObject:
		src = grammar.JSONObjectGBNF()
	case StructuredJSONSchema:
		src, err = grammar.JSONSchemaGBNF(s.Schema)
	case StructuredGrammar:
		src = s.Text
	case StructuredRegex:
		src, err = grammar.RegexGBNF(s.Text)
	case StructuredChoice:
		src, err = grammar.ChoiceGBNF(s.Choices)
	default:
		return "", fmt.Errorf("pipeline: unknown structured output kind %q", s.Kind)
	}
	if err != nil {
		return "", InvalidParam(s.Param, "%s: %v", s.Param, err)
	}
	return src, nil
}

// anyObjectSchema is the schema of response_format json_object.
var anyObjectSchema = []byte(`{"type": "object", "additionalProperties": true}`)

// toolGrammar is the grammar of a call of req's tools in tp's format (the
// named one only, for a named tool_choice; one or more calls when
// parallel_tool_calls allows), or, with answer set, of such a call or a
// JSON answer.
func toolGrammar(req *Request, tp *ToolPlan, answer *Structured) (string, error) {
	var (
		b           strings.Builder
		names, args []string
	)
	for i, t := range req.Tools {
		if req.ToolChoice.Mode == api.ToolChoiceFunction && t.Function.Name != req.ToolChoice.Name {
			continue
		}
		params := []byte(t.Function.Parameters)
		if len(params) == 0 || string(params) == "null" {
			params = []byte(`{"type": "object", "properties": {}}`)
		}
		rules, root, err := grammar.SchemaRules(params, fmt.Sprintf("tool%d-", i))
		if err != nil {
			return "", InvalidParam(fmt.Sprintf("tools[%d].function.parameters", i), "the parameters of tool %q: %v", t.Function.Name, err)
		}
		b.WriteString(rules)
		b.WriteString("\n")
		names, args = append(names, t.Function.Name), append(args, root)
	}
	parallel := req.ParallelToolCalls && req.ToolChoice.Mode != api.ToolChoiceFunction
	if answer == nil {
		b.WriteString(tp.Format.GBNF("root", names, args, parallel))
		return b.String(), nil
	}
	b.WriteString(tp.Format.GBNF("calls", names, args, parallel))
	schema := []byte(answer.Schema)
	if answer.Kind == StructuredJSONObject {
		schema = anyObjectSchema
	}
	rules, root, err := grammar.SchemaRules(schema, "answer-")
	if err != nil {
		return "", InvalidParam(answer.Param, "%s: %v", answer.Param, err)
	}
	b.WriteString("\n")
	b.WriteString(rules)
	fmt.Fprintf(&b, "\nroot ::= calls | %s\n", root)
	return b.String(), nil
}

// bindGrammar compiles src for m's vocabulary (cached by its text); a
// grammar that does not compile is the client's error, from param.
func bindGrammar(m *Model, src, param string) (*grammar.Bound, error) {
	v := m.Text.Vocabulary()
	if v == nil {
		return nil, InvalidParam(param, "model %s does not support constrained decoding", m.ID)
	}
	b, err := v.Bind(src)
	if err != nil {
		return nil, InvalidParam(param, "%s: %v", param, err)
	}
	return b, nil
}

// grammarParam names the field whose grammar constrains req, for errors.
func grammarParam(req *Request) string {
	if req.Structured != nil && (req.ToolChoice.Mode == "" || req.ToolChoice.Mode == api.ToolChoiceAuto || len(req.Tools) == 0) {
		return req.Structured.Param
	}
	return "tools"
}

// NewToolCallID returns an id for a tool call in format f: Mistral's
// templates want nine letters and digits, the others OpenAI's
// "call_" and 24 of them.
func NewToolCallID(f toolcall.Format) string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	n, prefix := 24, "call_"
	if f == toolcall.Mistral {
		n, prefix = 9, ""
	}
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return prefix + string(b)
}
