package toolcall

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/chat"
)

// readTemplate reads a real chat template from model/chat's test data
// (see its SOURCES.md).
func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "chat", "testdata", "templates", name))
	require.NoError(t, err)
	return string(b)
}

func TestDetectRealTemplates(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		want         Format
		rendersTools bool
	}{
		"qwen3.jinja":      {Hermes, true},
		"llama3.jinja":     {Hermes, false}, // Llama 3.0: no tool support, so the fallback
		"llama3.1.jinja":   {Llama3, true},  // <|python_tag|>
		"llama3.2.jinja":   {Llama3, true},  // headers and tools, no <|python_tag|>
		"mistral-v3.jinja": {Mistral, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := readTemplate(t, name)
			require.Equal(t, tc.want, Detect(src))
			require.Equal(t, tc.rendersTools, tc.want.RendersTools(src))
		})
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		src  string
		want Format
	}{
		"empty":                       {"", Hermes},
		"chatml without tools":        {"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", Hermes},
		"hermes wins over the others": {"{{ '<tool_call>' }}{{ '[TOOL_CALLS]' }}<|python_tag|>", Hermes},
		"mistral":                     {"{{ '[TOOL_CALLS] [' }}", Mistral},
		"python tag":                  {"{{ '<|python_tag|>' }}", Llama3},
		"llama headers and tools":     {"{% if tools %}{{ tools|tojson }}{% endif %}<|start_header_id|>", Llama3},
		"llama headers, no tools":     {"<|start_header_id|>{{ m.role }}<|end_header_id|> tools are nice", Hermes},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Detect(tc.src))
		})
	}
}

func TestRendersTools(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"{% if tools %}x{% endif %}":                     true,
		"{%- for t in tools -%}{{ t }}{%- endfor %}":     true,
		"{{ tools|length }}":                             true,
		"{{tools}}":                                      true,
		"{% set x = custom_tools or tools %}":            true,
		"{{ message.tools }}":                            false,
		"{{ message . tools }}":                          false,
		"{{ builtin_tools }}{{ tools_in_user_message }}": false,
		"{{ 'tools' }}{{ \"tools\" }}":                   false,
		`{% set x = "a\"tools" %}`:                       false,
		"# Tools and tools outside tags":                 false,
		"{# tools in a comment #}":                       false,
		"{{ unclosed tools":                              true,
		"{":                                              false,
		"{ tools }":                                      false,
	}
	for src, want := range tests {
		t.Run(src, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, want, Hermes.RendersTools(src))
		})
	}
}

const testTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather for a <city> & more.",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
	{"type":"function","function":{"name":"get_time","parameters":{}}}]`

// The Hermes prompt is Qwen's: the same text Qwen3's template writes for
// the same tools.
func TestSystemPromptHermesIsQwens(t *testing.T) {
	t.Parallel()
	ct, err := chat.NewTemplate(readTemplate(t, "qwen3.jinja"), chat.Options{Timeout: time.Minute})
	require.NoError(t, err)
	res, err := ct.RenderRequest(chat.Request{
		Messages: []chat.Message{{Role: "user", Content: "hi"}},
		Tools:    json.RawMessage(testTools),
	})
	require.NoError(t, err)
	require.Equal(t, chat.SourceGGUF, res.Source, "%v", res.FallbackReason)
	system, ok := strings.CutPrefix(res.Prompt, "<|im_start|>system\n")
	require.True(t, ok, res.Prompt)
	system, _, ok = strings.Cut(system, "<|im_end|>")
	require.True(t, ok)
	require.Equal(t, system, SystemPrompt(Hermes, json.RawMessage(testTools)))
}

func TestSystemPrompt(t *testing.T) {
	t.Parallel()
	const weather = `{"type": "function", "function": {"name": "get_weather", "description": "Weather for a <city> & more.", ` +
		`"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`
	const clock = `{"type": "function", "function": {"name": "get_time", "parameters": {}}}`
	tests := map[string]struct {
		f     Format
		tools string
		want  string
	}{
		"llama3": {Llama3, testTools, "You have access to the following functions. To call a function, please respond with JSON for a function call. " +
			`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. ` +
			"Do not use variables.\n\n" +
			"{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n" +
			"        \"description\": \"Weather for a <city> & more.\",\n        \"parameters\": {\n" +
			"            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n" +
			"                    \"type\": \"string\"\n                }\n            },\n" +
			"            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\n" +
			"{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_time\",\n        \"parameters\": {}\n    }\n}"},
		"mistral": {Mistral, testTools, "You have access to the following tools:\n[" + weather + ", " + clock + "]\n\n" +
			"To call tools, respond with [TOOL_CALLS] followed by a JSON array of the calls:\n" +
			`[TOOL_CALLS][{"name": <function-name>, "arguments": <args-json-object>}]`},
		"hermes": {Hermes, testTools, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
			"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + weather + "\n" + clock +
			"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
			"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"},
		"unknown formats are hermes": {Format("other"), `[{"a":"b,c:d"}]`, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
			"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + `{"a": "b,c:d"}` +
			"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
			"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"},
		"tools that are not an array are written as given": {Mistral, ` {"not": "an array"} `, "You have access to the following tools:\n" +
			`[{"not": "an array"}]` + "\n\nTo call tools, respond with [TOOL_CALLS] followed by a JSON array of the calls:\n" +
			`[TOOL_CALLS][{"name": <function-name>, "arguments": <args-json-object>}]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, SystemPrompt(tc.f, json.RawMessage(tc.tools)))
		})
	}
}

func TestGBNF(t *testing.T) {
	t.Parallel()
	names := []string{"get_weather", "we\"ird\\name\n"}
	rules := []string{"get-weather-args", "weird-args"}
	const (
		weather = `"{\"name\": \"get_weather\", `
		weird   = `"{\"name\": \"we\\\"ird\\\\name\\n\", `
	)
	tests := map[string]struct {
		f        Format
		parallel bool
		want     string
	}{
		"hermes": {Hermes, false, `root ::= "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " get-weather-args "}\n</tool_call>" | ` +
			`"<tool_call>\n{\"name\": \"we\\\"ird\\\\name\\n\", \"arguments\": " weird-args "}\n</tool_call>"` + "\n"},
		"hermes parallel": {Hermes, true, `root ::= root-call ( "\n" root-call )*` + "\n" +
			`root-call ::= "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " get-weather-args "}\n</tool_call>" | ` +
			`"<tool_call>\n{\"name\": \"we\\\"ird\\\\name\\n\", \"arguments\": " weird-args "}\n</tool_call>"` + "\n"},
		"llama3": {Llama3, false, `root ::= ` + weather + `\"parameters\": " get-weather-args "}" | ` +
			weird + `\"parameters\": " weird-args "}"` + "\n"},
		"llama3 parallel": {Llama3, true, `root ::= root-call ( "; " root-call )*` + "\n" +
			`root-call ::= ` + weather + `\"parameters\": " get-weather-args "}" | ` + weird + `\"parameters\": " weird-args "}"` + "\n"},
		"mistral": {Mistral, false, `root ::= "[TOOL_CALLS]" " "? "[" ( ` + weather + `\"arguments\": " get-weather-args "}" | ` +
			weird + `\"arguments\": " weird-args "}" ) "]"` + "\n"},
		"mistral parallel": {Mistral, true, `root ::= "[TOOL_CALLS]" " "? "[" root-call ( ", " root-call )* "]"` + "\n" +
			`root-call ::= ` + weather + `\"arguments\": " get-weather-args "}" | ` + weird + `\"arguments\": " weird-args "}"` + "\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.f.GBNF("root", names, rules, tc.parallel))
		})
	}

	require.Empty(t, Hermes.GBNF("root", nil, nil, true))
	require.Equal(t, Hermes.GBNF("tc", names[:1], rules[:1], false), Hermes.GBNF("tc", names, rules[:1], false),
		"unpaired names are ignored")
	require.True(t, strings.HasPrefix(Llama3.GBNF("tc", names, rules, true), "tc ::= tc-call ( "))
}

// What each format's grammar forces, with the arguments filled in, is a
// call the Parser reads back.
func TestGBNFTextParses(t *testing.T) {
	t.Parallel()
	const args = `{"city": "Paris"}`
	tests := map[string]struct {
		f    Format
		text string // the literals of the grammar with args for the rule
	}{
		"hermes":  {Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>"},
		"llama3":  {Llama3, `{"name": "get_weather", "parameters": ` + args + `}; {"name": "get_weather", "parameters": ` + args + `}`},
		"mistral": {Mistral, `[TOOL_CALLS] [{"name": "get_weather", "arguments": ` + args + `}, {"name": "get_weather", "arguments": ` + args + `}]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The text is made of the grammar's own literals.
			g := tc.f.GBNF("root", []string{"get_weather"}, []string{"args"}, true)
			for _, lit := range gbnfLiterals(t, g) {
				require.Contains(t, tc.text, lit)
			}
			content, calls := Parse(tc.f, tc.text)
			require.Empty(t, content)
			require.Equal(t, []Call{{"get_weather", args}, {"get_weather", args}}, calls)
		})
	}
}

// gbnfLiterals returns the string literals of GBNF rules, unescaped.
func gbnfLiterals(t *testing.T, g string) []string {
	t.Helper()
	var lits []string
	for i := 0; i < len(g); i++ {
		if g[i] != '"' {
			continue
		}
		var b strings.Builder
		for i++; g[i] != '"'; i++ {
			if g[i] != '\\' {
				b.WriteByte(g[i])
				continue
			}
			i++
			switch g[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '"', '\\':
				b.WriteByte(g[i])
			default:
				t.Fatalf("unexpected escape \\%c in %q", g[i], g)
			}
		}
		lits = append(lits, b.String())
	}
	return lits
}

func TestGBNFLiteral(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"plain":       `"plain"`,
		`q"b\`:        `"q\"b\\"`,
		"nl\n\r\t":    `"nl\n\r\t"`,
		"ctl\x01\x7f": `"ctl\x01\x7F"`,
		"héllo 日本 🌍":  `"héllo 日本 🌍"`,
	}
	for in, want := range tests {
		require.Equal(t, want, gbnfLiteral(in), "%q", in)
	}
}
