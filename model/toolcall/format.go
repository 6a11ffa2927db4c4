package toolcall

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Format is a model's tool-call format: the text it writes to call tools.
type Format string

// The formats llmd parses. Each names the text a model writes for one
// call of get_weather; Parser documents what else it accepts.
const (
	// Hermes is the format of Qwen2.5, Qwen3 and the Hermes models: one
	// block per call, possibly after some text,
	//
	//	<tool_call>
	//	{"name": "get_weather", "arguments": {"city": "Paris"}}
	//	</tool_call>
	//
	// with "\n" between the blocks of parallel calls.
	Hermes Format = "hermes"
	// Llama3 is the JSON tool-call format of Llama 3.1, 3.2 and 3.3: the
	// whole output is calls when it starts (after whitespace) with { or
	// <|python_tag|>,
	//
	//	{"name": "get_weather", "parameters": {"city": "Paris"}}
	//
	// several calls separated by "; " (vLLM's llama3_json behaviour).
	Llama3 Format = "llama3"
	// Mistral is the format of Mistral's v3 tokenizer (Mistral 7B
	// Instruct v0.3, Nemo, Small): a JSON array of calls after the
	// [TOOL_CALLS] control token,
	//
	//	[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
	//
	// The Parser also accepts the newer [TOOL_CALLS]get_weather[ARGS]{...}.
	Mistral Format = "mistral"
)

// Markers of the formats, as text. <|python_tag|>, [TOOL_CALLS] and
// [ARGS] are special tokens: the caller must detokenize them into the
// text given to the Parser. No marker has a proper prefix that is also
// its suffix, which the Parser's matching relies on.
const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"
	mistralOpen = "[TOOL_CALLS]"
	mistralArgs = "[ARGS]"
)

// Detect returns the tool-call format of a chat template, from its
// source: Hermes if it contains <tool_call>, else Mistral if it contains
// [TOOL_CALLS], else Llama3 if it contains <|python_tag|>, or Llama 3
// headers (<|start_header_id|>) and a reference to the tools variable.
// Anything else is Hermes: the documented fallback, used with
// [SystemPrompt] for templates that do not render tools (the Llama 3.0
// template is one: it has the headers but no tools).
func Detect(template string) Format {
	switch {
	case strings.Contains(template, hermesOpen):
		return Hermes
	case strings.Contains(template, mistralOpen):
		return Mistral
	case strings.Contains(template, pythonTag),
		strings.Contains(template, "<|start_header_id|>") && Llama3.RendersTools(template):
		return Llama3
	}
	return Hermes
}

// RendersTools reports whether template refers to the tools variable in
// one of its {{ }} or {% %} tags (a use of the name tools that is not
// inside a quoted string and not an attribute such as message.tools).
// When it does not, the template would drop the request's tools, and the
// caller adds them itself as a system message written by [SystemPrompt].
// The answer does not depend on f.
func (f Format) RendersTools(template string) bool {
	for rest := template; ; {
		i := strings.Index(rest, "{")
		if i < 0 || i+1 >= len(rest) {
			return false
		}
		var end string
		switch rest[i+1] {
		case '{':
			end = "}}"
		case '%':
			end = "%}"
		default:
			rest = rest[i+1:]
			continue
		}
		tag := rest[i+2:]
		j := strings.Index(tag, end)
		if j >= 0 {
			tag, rest = tag[:j], tag[j+len(end):]
		} else {
			rest = ""
		}
		if tagUsesTools(tag) {
			return true
		}
		if rest == "" {
			return false
		}
	}
}

// tagUsesTools reports whether the expression text of one tag has the
// identifier tools outside string literals, not after a dot.
func tagUsesTools(tag string) bool {
	var quote byte
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case isIdentByte(c) && (i == 0 || !isIdentByte(tag[i-1])):
			j := i
			for j < len(tag) && isIdentByte(tag[j]) {
				j++
			}
			if tag[i:j] == "tools" && !precededByDot(tag, i) {
				return true
			}
			i = j - 1
		}
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func precededByDot(s string, i int) bool {
	for i--; i >= 0 && isSpace(s[i]); i-- {
	}
	return i >= 0 && s[i] == '.'
}

// SystemPrompt returns the instructions and tool list a caller adds as a
// system message when the model's template does not render tools (see
// [Format.RendersTools]). tools is the request's JSON array of tool
// definitions (OpenAI format).
//
// The text asks for calls in format f, so that a [Parser] for f reads
// them back. Since [Detect] returns Hermes for a template that names no
// tool format, the usual prompt is the Hermes one: Qwen2.5's
// instructions, with the tools one per line inside <tools></tools> and
// calls as <tool_call> blocks of JSON. Llama3 gets Meta's JSON-call
// instructions with the tools indented as Llama 3.1's template writes
// them, and Mistral instructions for a [TOOL_CALLS] array. Tools that are
// not a JSON array are written as given.
func SystemPrompt(f Format, tools json.RawMessage) string {
	list := toolList(tools)
	var b strings.Builder
	switch f {
	case Llama3:
		b.WriteString("You have access to the following functions. To call a function, please respond with JSON for a function call. ")
		b.WriteString(`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. `)
		b.WriteString("Do not use variables.\n\n")
		for _, t := range list {
			var ind bytes.Buffer
			if json.Indent(&ind, t, "", "    ") == nil {
				b.Write(ind.Bytes())
			} else {
				b.Write(t)
			}
			b.WriteString("\n\n")
		}
		return strings.TrimSuffix(b.String(), "\n\n")
	case Mistral:
		b.WriteString("You have access to the following tools:\n[")
		for i, t := range list {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pyJSON(t))
		}
		b.WriteString("]\n\nTo call tools, respond with [TOOL_CALLS] followed by a JSON array of the calls:\n")
		b.WriteString(`[TOOL_CALLS][{"name": <function-name>, "arguments": <args-json-object>}]`)
		return b.String()
	}
	b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n")
	b.WriteString("You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for _, t := range list {
		b.WriteString("\n")
		b.WriteString(pyJSON(t))
	}
	b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n")
	b.WriteString("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	return b.String()
}

// toolList splits a JSON array into its elements; anything else is one
// element, as given.
func toolList(tools json.RawMessage) []json.RawMessage {
	var list []json.RawMessage
	if err := json.Unmarshal(tools, &list); err != nil {
		if t := bytes.TrimSpace(tools); len(t) > 0 {
			return []json.RawMessage{t}
		}
		return nil
	}
	return list
}

// pyJSON writes v on one line as Python's json.dumps (and the templates'
// tojson) does: ", " and ": " between items, key order kept. Text that is
// not valid JSON is returned trimmed.
func pyJSON(v json.RawMessage) string {
	var c bytes.Buffer
	if err := json.Compact(&c, v); err != nil {
		return string(bytes.TrimSpace(v))
	}
	var b strings.Builder
	inStr, esc := false, false
	for _, ch := range c.Bytes() {
		b.WriteByte(ch)
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case ch == '\\':
				esc = true
			case ch == '"':
				inStr = false
			}
		case ch == '"':
			inStr = true
		case ch == ',' || ch == ':':
			b.WriteByte(' ')
		}
	}
	return b.String()
}
