package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/model/toolcall"
)

func testTools(t *testing.T) []api.Tool {
	var tools []api.Tool
	require.NoError(t, json.Unmarshal([]byte(`[
		{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
			"properties": {"city": {"type": "string"}}, "required": ["city"]}}},
		{"type": "function", "function": {"name": "get_time"}}]`), &tools))
	return tools
}

// The grammars of tool use: a forced call of any tool, of a named one, and
// with tool_choice auto and a JSON response_format, a call or that JSON.
func TestToolGrammars(t *testing.T) {
	call := func(name, args string) string {
		return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"
	}
	weather, tm := call("get_weather", `{"city": "Lyon"}`), call("get_time", `{}`)
	tests := map[string]struct {
		choice     api.ToolChoice
		parallel   bool
		structured *Structured
		accept     []string
		reject     []string
	}{
		"required": {choice: api.ToolChoice{Mode: api.ToolChoiceRequired},
			accept: []string{weather, tm}, reject: []string{"hello", weather + "\n" + tm, call("get_weather", `{}`)}},
		"required parallel": {choice: api.ToolChoice{Mode: api.ToolChoiceRequired}, parallel: true,
			accept: []string{weather, weather + "\n" + tm}},
		"named": {choice: api.ToolChoice{Mode: api.ToolChoiceFunction, Name: "get_time"}, parallel: true,
			accept: []string{tm}, reject: []string{weather, tm + "\n" + tm}},
		"auto with a schema": {choice: api.ToolChoice{Mode: api.ToolChoiceAuto},
			structured: &Structured{Kind: StructuredJSONSchema, Param: "response_format",
				Schema: json.RawMessage(`{"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}`)},
			accept: []string{weather, `{"answer": "sunny"}`}, reject: []string{"sunny", `{"other": 1}`}},
		"auto with json_object": {choice: api.ToolChoice{Mode: api.ToolChoiceAuto},
			structured: &Structured{Kind: StructuredJSONObject, Param: "response_format"},
			accept:     []string{tm, `{"anything": [1, 2]}`}, reject: []string{"[1]"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := &Request{Endpoint: EndpointChatCompletions, Tools: testTools(t), ToolChoice: tc.choice,
				ParallelToolCalls: tc.parallel, Structured: tc.structured}
			require.NoError(t, validateTools(req))
			src, err := grammarSource(req, &ToolPlan{Format: toolcall.Hermes})
			require.NoError(t, err)
			g, err := grammar.Compile(src)
			require.NoError(t, err, src)
			for _, s := range tc.accept {
				require.True(t, g.Match(s), "should match %q\n%s", s, src)
			}
			for _, s := range tc.reject {
				require.False(t, g.Match(s), "should not match %q", s)
			}
		})
	}
}

func TestValidateTools(t *testing.T) {
	tests := map[string]struct {
		edit  func(r *Request)
		param string
	}{
		"fine":              {edit: func(*Request) {}},
		"duplicate name":    {edit: func(r *Request) { r.Tools[1].Function.Name = "get_weather" }, param: "tools[1].function.name"},
		"bad name":          {edit: func(r *Request) { r.Tools[0].Function.Name = "get weather" }, param: "tools[0].function.name"},
		"bad type":          {edit: func(r *Request) { r.Tools[0].Type = "code_interpreter" }, param: "tools[0].type"},
		"parameters array":  {edit: func(r *Request) { r.Tools[0].Function.Parameters = json.RawMessage(`[1]`) }, param: "tools[0].function.parameters"},
		"required no tools": {edit: func(r *Request) { r.Tools, r.ToolChoice = nil, api.ToolChoice{Mode: api.ToolChoiceRequired} }, param: "tool_choice"},
		"unknown named":     {edit: func(r *Request) { r.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceFunction, Name: "nope"} }, param: "tool_choice"},
		"regex with tools": {edit: func(r *Request) {
			r.Structured = &Structured{Kind: StructuredRegex, Param: "guided_regex", Text: "a+"}
		}, param: "guided_regex"},
		"regex with tools none": {edit: func(r *Request) {
			r.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceNone}
			r.Structured = &Structured{Kind: StructuredRegex, Param: "guided_regex", Text: "a+"}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := &Request{Endpoint: EndpointChatCompletions, Tools: testTools(t)}
			tc.edit(req)
			err := validateTools(req)
			if tc.param == "" {
				require.NoError(t, err)
				return
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.param, e.Param, e.Message)
		})
	}
}

func TestWithSystemPrompt(t *testing.T) {
	msgs := []api.Message{{Role: "user", Content: "hi"}}
	out := withSystemPrompt(msgs, "TOOLS")
	require.Equal(t, []api.Message{{Role: "system", Content: "TOOLS"}, {Role: "user", Content: "hi"}}, out)
	msgs = []api.Message{{Role: "system", Content: "Be terse.\n"}, {Role: "user", Content: "hi"}}
	out = withSystemPrompt(msgs, "TOOLS")
	require.Equal(t, api.Content("Be terse.\n\nTOOLS"), out[0].Content)
	require.Equal(t, api.Content("Be terse.\n"), msgs[0].Content, "the request's messages are not changed")
}

func TestNewToolCallID(t *testing.T) {
	id := NewToolCallID(toolcall.Hermes)
	require.True(t, strings.HasPrefix(id, "call_"))
	require.Len(t, id, 29)
	require.NotEqual(t, id, NewToolCallID(toolcall.Hermes))
	m := NewToolCallID(toolcall.Mistral)
	require.Len(t, m, 9, "Mistral's templates want nine letters and digits")
}
