package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tmplGoldenCase is one case of testdata/golden/cases.json: a conversation
// rendered with one of the templates in testdata/templates. The expected
// prompt, NAME.txt (or the template's exception, NAME.error), was written by
// testdata/golden/render_hf.py, which renders with Python's jinja2 in the
// environment Hugging Face transformers' apply_chat_template sets up.
type tmplGoldenCase struct {
	Name                string          `json:"name"`
	Template            string          `json:"template"`
	BOS                 string          `json:"bos"`
	EOS                 string          `json:"eos"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Tools               json.RawMessage `json:"tools"`
	Kwargs              json.RawMessage `json:"kwargs"`
	Error               bool            `json:"error"`
	Messages            []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		Name       string `json:"name"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
}

func (c *tmplGoldenCase) request() Request {
	req := Request{AddGenerationPrompt: c.AddGenerationPrompt, Kwargs: c.Kwargs}
	if len(c.Tools) > 0 && string(c.Tools) != "null" {
		req.Tools = c.Tools
	}
	for _, m := range c.Messages {
		msg := Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)})
		}
		req.Messages = append(req.Messages, msg)
	}
	return req
}

// The chat templates of the Qwen3, Gemma 3, Phi-3.5, Phi-4 and Phi-4-mini
// families render as transformers renders them: system prompts,
// multi-turn conversations, tools, add_generation_prompt on and off,
// Qwen3's enable_thinking and its reasoning-stripped history.
func TestTemplateFamiliesGolden(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "golden")
	b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	require.NoError(t, err)
	var cases []tmplGoldenCase
	require.NoError(t, json.Unmarshal(b, &cases))
	require.NotEmpty(t, cases)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(tmplTestTemplate(t, tc.Template), Options{BOS: tc.BOS, EOS: tc.EOS, Timeout: time.Minute})
			require.NoError(t, err)
			require.NoError(t, ct.Err())
			res, err := ct.RenderRequest(tc.request())
			if tc.Error {
				want, rerr := os.ReadFile(filepath.Join(dir, tc.Name+".error"))
				require.NoError(t, rerr)
				var exc *ExceptionError
				require.ErrorAs(t, err, &exc)
				require.Equal(t, string(want), exc.Message)
				return
			}
			require.NoError(t, err)
			require.Equal(t, SourceGGUF, res.Source, "%v", res.FallbackReason)
			want, err := os.ReadFile(filepath.Join(dir, tc.Name+".txt"))
			require.NoError(t, err)
			require.Equal(t, string(want), res.Prompt)
		})
	}
}

func TestTemplateReasoning(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]bool{
		"qwen3.jinja": true, "gemma3.jinja": false, "phi3.5-mini.jinja": false, "phi4.jinja": false,
		"phi4-mini.jinja": false, "llama3.1.jinja": false,
	} {
		ct, err := NewTemplate(tmplTestTemplate(t, file), Options{})
		require.NoError(t, err)
		require.Equal(t, want, ct.Reasoning(), file)
	}
	// Read from the text even when the template does not compile.
	ct, err := NewTemplate("{% if %}<think>{{ x }}</think>", Options{})
	require.NoError(t, err)
	require.Error(t, ct.Err())
	require.True(t, ct.Reasoning())
}

func TestTemplateKwargs(t *testing.T) {
	t.Parallel()
	ct, err := NewTemplate("{% if flag is defined and flag is false %}off {% endif %}{{ greeting }}, {{ messages[0].content }}"+
		"{{ nested.list[1] }}", Options{Timeout: time.Minute})
	require.NoError(t, err)
	msgs := []Message{{Role: "user", Content: "Hi"}}

	res, err := ct.RenderRequest(Request{Messages: msgs, Kwargs: json.RawMessage(`{"greeting": "Hello", "flag": false, "nested": {"list": [1, 2]}}`)})
	require.NoError(t, err)
	require.Equal(t, SourceGGUF, res.Source, "%v", res.FallbackReason)
	require.Equal(t, "off Hello, Hi2", res.Prompt)

	for name, tc := range map[string]struct {
		kwargs string
		bad    string
	}{
		"not an object":         {`[1]`, ""},
		"a string":              {`"x"`, ""},
		"trailing data":         {`{"a": 1} {}`, ""},
		"messages":              {`{"messages": []}`, "messages"},
		"add_generation_prompt": {`{"add_generation_prompt": false}`, "add_generation_prompt"},
		"a global":              {`{"raise_exception": 1}`, "raise_exception"},
		"a hook":                {`{"__llmd_tick": 1}`, "__llmd_tick"},
		"not a name":            {`{"a b": 1}`, "a b"},
		"too long":              {`{"` + strings.Repeat("a", 65) + `": 1}`, strings.Repeat("a", 65)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ct.RenderRequest(Request{Messages: msgs, Kwargs: json.RawMessage(tc.kwargs)})
			var ke *KwargsError
			require.ErrorAs(t, err, &ke)
			require.Equal(t, tc.bad, ke.Name)
			require.ErrorAs(t, CheckKwargs(json.RawMessage(tc.kwargs)), &ke)
		})
	}
	require.NoError(t, CheckKwargs(nil))
	require.NoError(t, CheckKwargs(json.RawMessage(" null ")))
}
