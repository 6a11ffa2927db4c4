package chat

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const tmplTestTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`

// tmplToolConversation is a turn that calls get_weather (calls times) and
// the tool results. Mistral's template wants call ids of 9 characters.
func tmplToolConversation(calls int, content string) []Message {
	tcs := []ToolCall{
		{ID: "call0abcd", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`},
		{ID: "call1efgh", Name: "get_weather", Arguments: `{"city":"Lyon"}`},
	}[:calls]
	msgs := []Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Content: content, ToolCalls: tcs},
	}
	for _, tc := range tcs {
		msgs = append(msgs, Message{Role: "tool", Content: `{"temperature": 21}`, ToolCallID: tc.ID, Name: tc.Name})
	}
	return msgs
}

// The expected prompts were rendered with Python's jinja2 3.1 as Hugging
// Face's apply_chat_template does, from the same messages as OpenAI-style
// dicts (arguments as dicts).
func TestTemplateToolConversations(t *testing.T) {
	t.Parallel()
	const llamaWant = "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n" +
		"Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\n" +
		"Given the following functions, please respond with a JSON for a function call with its proper arguments " +
		"that best answers the given prompt.\n\n" +
		`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.` +
		"Do not use variables.\n\n" +
		"{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n" +
		"        \"description\": \"Weather for a city.\",\n        \"parameters\": {\n" +
		"            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n" +
		"                    \"type\": \"string\"\n                }\n            },\n" +
		"            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\n" +
		"Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" +
		`{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}<|eot_id|>` +
		"<|start_header_id|>ipython<|end_header_id|>\n\n" + `"{\"temperature\": 21}"<|eot_id|>` +
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	tests := map[string]struct {
		file    string
		calls   int
		content string
		want    string
		// tools, call and result are the parts of want that show the tool
		// definitions, the assistant's call and the tool result.
		tools, call, result string
		// toolsKeyOrder: the tool definitions are written with
		// tojson(indent=4), which ardanlabs/jinja v1.8.0 prints with sorted
		// keys (Python keeps their order), so they are compared as JSON.
		toolsKeyOrder bool
	}{
		"qwen3 (hermes)": {
			file: "qwen3.jinja", calls: 2, content: "Let me check.",
			want: "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", ` +
				`"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
				"\n</tools>\n\nFor each function call, return a json object with function name and arguments within " +
				"<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" +
				"</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
				"<|im_start|>assistant\nLet me check.\n" +
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n" +
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n{\"temperature\": 21}\n</tool_response>\n" +
				"<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
			tools:  `<tools>` + "\n" + `{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", `,
			call:   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>",
			result: "<tool_response>\n{\"temperature\": 21}\n</tool_response>",
		},
		"llama 3.1": {
			file: "llama3.1.jinja", calls: 1, want: llamaWant, toolsKeyOrder: true,
			call:   `<|start_header_id|>assistant<|end_header_id|>` + "\n\n" + `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}<|eot_id|>`,
			result: "<|start_header_id|>ipython<|end_header_id|>\n\n" + `"{\"temperature\": 21}"<|eot_id|>`,
		},
		"llama 3.2": {
			file: "llama3.2.jinja", calls: 1, want: llamaWant, toolsKeyOrder: true,
			call:   `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}<|eot_id|>`,
			result: "<|start_header_id|>ipython<|end_header_id|>\n\n" + `"{\"temperature\": 21}"<|eot_id|>`,
		},
		"mistral v3": {
			file: "mistral-v3.jinja", calls: 2,
			want: `<s>[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", ` +
				`"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}][/AVAILABLE_TOOLS]` +
				`[INST] Weather in Paris?[/INST]` +
				`[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "id": "call0abcd"}, ` +
				`{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "call1efgh"}]</s>` +
				`[TOOL_RESULTS] {"content": {"temperature": 21}, "call_id": "call0abcd"}[/TOOL_RESULTS]` +
				`[TOOL_RESULTS] {"content": {"temperature": 21}, "call_id": "call1efgh"}[/TOOL_RESULTS]`,
			tools:  `[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather", `,
			call:   `[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "id": "call0abcd"}, `,
			result: `[TOOL_RESULTS] {"content": {"temperature": 21}, "call_id": "call1efgh"}[/TOOL_RESULTS]`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(tmplTestTemplate(t, tc.file), Options{
				BOS: "<s>", EOS: "</s>", Timeout: time.Minute,
				Now: func() time.Time { return time.Date(2024, 7, 26, 12, 0, 0, 0, time.UTC) },
			})
			require.NoError(t, err)
			require.NoError(t, ct.Err())

			res, err := ct.RenderRequest(Request{
				Messages:            tmplToolConversation(tc.calls, tc.content),
				Tools:               json.RawMessage(tmplTestTools),
				AddGenerationPrompt: true,
			})
			require.NoError(t, err)
			require.Equal(t, SourceGGUF, res.Source, "%v", res.FallbackReason)

			got, want := res.Prompt, tc.want
			if tc.toolsKeyOrder {
				const start, end = "Do not use variables.\n\n", "\n\nWeather in Paris?"
				gotOut, gotTools := tmplCut(t, got, start, end)
				wantOut, wantTools := tmplCut(t, want, start, end)
				require.JSONEq(t, wantTools, gotTools)
				var def []json.RawMessage
				require.NoError(t, json.Unmarshal([]byte(tmplTestTools), &def))
				require.JSONEq(t, string(def[0]), gotTools, "the tool definition")
				got, want = gotOut, wantOut
			} else {
				require.Contains(t, got, tc.tools)
			}
			require.Equal(t, want, got)
			require.Contains(t, got, tc.call)
			require.Contains(t, got, tc.result)
		})
	}
}

// tmplCut returns s without the text between start and end, and that text.
func tmplCut(t *testing.T, s, start, end string) (outside, inside string) {
	t.Helper()
	i := strings.Index(s, start)
	require.GreaterOrEqual(t, i, 0, "%q not in %q", start, s)
	i += len(start)
	j := strings.Index(s[i:], end)
	require.GreaterOrEqual(t, j, 0, "%q not in %q", end, s[i:])
	return s[:i] + s[i+j:], s[i : i+j]
}

// Messages reach templates as Hugging Face gives OpenAI messages:
// tool_calls, tool_call_id and name only when set, arguments as a dict
// when they are a JSON object.
func TestTemplateToolMessageValues(t *testing.T) {
	t.Parallel()
	const src = `{% for m in messages %}{{ m.role }}|{{ m.content is string }}:{{ m.content }}` +
		`|{{ 'tool_calls' in m }}|{{ m.tool_calls is defined }}|{{ m.tool_call_id is defined }}|{{ m.name is defined }}` +
		`{% if m.tool_calls %}{% for tc in m.tool_calls %}|{{ tc.id }},{{ tc.type }},{{ tc.function.name }},` +
		`{{ tc.function.arguments is mapping }},{{ tc.function.arguments is string }},{{ tc.function.arguments|tojson }}{% endfor %}{% endif %}` +
		`{% if m.tool_call_id %}|{{ m.tool_call_id }},{{ m.name }}{% endif %};{% endfor %}`
	msgs := []Message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []ToolCall{
			{ID: "a", Name: "f", Arguments: ` {"z": 1, "a": {"b": [1.5, "x", null]}} `},
			{ID: "b", Name: "g", Arguments: `not json`},
			{ID: "c", Name: "h", Arguments: `[1, 2]`},
			{ID: "d", Name: "i", Arguments: `{"a": 1} trailing`},
			{ID: "e", Name: "j", Arguments: ``},
		}},
		{Role: "tool", Content: "result", ToolCallID: "a", Name: "f"},
		{Role: "tool", Content: "anonymous", ToolCallID: "b"},
	}
	ct, err := NewTemplate(src, Options{Timeout: time.Minute})
	require.NoError(t, err)
	res, err := ct.RenderRequest(Request{Messages: msgs})
	require.NoError(t, err)
	require.Equal(t, SourceGGUF, res.Source, "%v", res.FallbackReason)
	require.Equal(t, "user|True:hi|False|False|False|False;"+
		"assistant|True:|True|True|False|False"+
		`|a,function,f,True,False,{"z": 1, "a": {"b": [1.5, "x", null]}}`+
		`|b,function,g,False,True,"not json"`+
		`|c,function,h,False,True,"[1, 2]"`+
		`|d,function,i,False,True,"{\"a\": 1} trailing"`+
		`|e,function,j,False,True,"";`+
		"tool|True:result|False|False|True|True|a,f;"+
		"tool|True:anonymous|False|False|True|False|b,;", res.Prompt)
}

func TestTemplateToolsCountTowardsTheSizeLimit(t *testing.T) {
	t.Parallel()
	big := `{"q": "` + strings.Repeat("y", 1000) + `"}`
	tests := map[string]Message{
		"arguments":    {Role: "assistant", ToolCalls: []ToolCall{{ID: "a", Name: "f", Arguments: big}}},
		"call name":    {Role: "assistant", ToolCalls: []ToolCall{{ID: "a", Name: strings.Repeat("f", 1001)}}},
		"call id":      {Role: "assistant", ToolCalls: []ToolCall{{ID: strings.Repeat("i", 1001), Name: "f"}}},
		"tool call id": {Role: "tool", ToolCallID: strings.Repeat("i", 1001)},
		"tool name":    {Role: "tool", Name: strings.Repeat("n", 1001)},
	}
	for name, m := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate("{{ 'x' }}", Options{MaxOutputBytes: 1000, Timeout: time.Minute})
			require.NoError(t, err)
			_, err = ct.RenderRequest(Request{Messages: []Message{m}})
			require.ErrorIs(t, err, ErrOutputTooLarge)
		})
	}
}

// The built-in formats write tool calls in the Hermes form and tool
// results as tool messages, so a fallback loses neither.
func TestTemplateFallbackToolCalls(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{Role: "user", Content: "Weather?"},
		{Role: "assistant", Content: " Checking. ", ToolCalls: []ToolCall{
			{ID: "a", Name: "get_weather", Arguments: `{"city": "Paris"}`},
			{ID: "b", Name: `odd"name<>`, Arguments: ""},
		}},
		{Role: "tool", Content: "21 C", ToolCallID: "a", Name: "get_weather"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c", Name: "f", Arguments: `{}`}}},
	}
	const calls = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
		"<tool_call>\n{\"name\": \"odd\\\"name<>\", \"arguments\": {}}\n</tool_call>"
	const call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"
	tests := map[string]struct {
		format string
		want   string
	}{
		"llama3": {FallbackLlama3, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nChecking.\n" + calls + "<|eot_id|>" +
			"<|start_header_id|>tool<|end_header_id|>\n\n21 C<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n" + call + "<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		"chatml": {FallbackChatML, "<|im_start|>user\nWeather?<|im_end|>\n" +
			"<|im_start|>assistant\n Checking. \n" + calls + "<|im_end|>\n" +
			"<|im_start|>tool\n21 C<|im_end|>\n" +
			"<|im_start|>assistant\n" + call + "<|im_end|>\n<|im_start|>assistant\n"},
		"plain": {FallbackPlain, "user: Weather?\nassistant:  Checking. \n" + calls + "\ntool: 21 C\nassistant: " + call + "\nassistant:"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate("", Options{Fallback: tc.format})
			require.NoError(t, err)
			res, err := ct.RenderRequest(Request{Messages: msgs, Tools: json.RawMessage(tmplTestTools), AddGenerationPrompt: true})
			require.NoError(t, err)
			require.Equal(t, tc.format, res.Source)
			require.Equal(t, tc.want, res.Prompt)
		})
	}
}
