package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/fixtures"
)

// The fixtures of the architectures issue 23 added, written by llama.cpp's
// tools (see ../shared/fixtures/README-set2.md): random weights, real
// vocabularies; only qwen3 has a chat template (Qwen3's, with <think>).
var familyFixtures = []string{"qwen3-d64-q8_0", "gemma3-d64-q8_0", "phi3-d64-q8_0", "qwen3moe-d64-q8_0"}

// startFamilies serves the four fixtures from one daemon.
func startFamilies(t *testing.T) (*Daemon, string) {
	t.Helper()
	dir := fixtures.Dir(t)
	cfg := testConfig()
	cfg.Models = nil
	for _, name := range familyFixtures {
		cfg.ModelFiles = append(cfg.ModelFiles, filepath.Join(dir, name+".gguf"))
	}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	var ids []string
	for _, m := range s.models.List() {
		ids = append(ids, m.ID)
	}
	require.ElementsMatch(t, familyFixtures, ids)
	return s, base
}

// familyChat posts a non-streamed chat completion and decodes it.
func familyChat(t *testing.T, c *http.Client, base, body string) api.ChatCompletion {
	t.Helper()
	resp, b := post(t, c, base+"/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(b, &cc))
	require.Len(t, cc.Choices, 1)
	require.NotNil(t, cc.Usage)
	require.Equal(t, cc.Usage.PromptTokens+cc.Usage.CompletionTokens, cc.Usage.TotalTokens)
	return cc
}

// streamedChat is a streamed chat completion put together.
type streamedChat struct {
	content, reasoning string
	finish             string
	usage              *api.Usage
	calls              map[int]*api.ToolCall
}

func familyStream(t *testing.T, c *http.Client, base, body string) streamedChat {
	t.Helper()
	resp, b := post(t, c, base+"/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
	evs := dataEvents(parseSSE(t, b))
	require.NotEmpty(t, evs)
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)
	out := streamedChat{calls: map[int]*api.ToolCall{}}
	for k, ev := range evs[:len(evs)-1] {
		var ch api.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(ev.data), &ch), ev.data)
		require.Equal(t, "chat.completion.chunk", ch.Object)
		if ch.Usage != nil {
			out.usage = ch.Usage
			continue
		}
		require.Len(t, ch.Choices, 1)
		d := ch.Choices[0].Delta
		if k == 0 {
			require.Equal(t, "assistant", d.Role)
		}
		if d.Content != nil {
			out.content += *d.Content
		}
		if d.ReasoningContent != nil {
			out.reasoning += *d.ReasoningContent
		}
		for _, tc := range d.ToolCalls {
			if tc.ID != "" {
				out.calls[tc.Index] = &api.ToolCall{ID: tc.ID, Type: tc.Type, Function: api.FunctionCall{Name: tc.Function.Name}}
			}
			require.Contains(t, out.calls, tc.Index)
			out.calls[tc.Index].Function.Arguments += tc.Function.Arguments
		}
		if f := ch.Choices[0].FinishReason; f != nil {
			out.finish = *f
		}
	}
	return out
}

// Each new architecture answers on every endpoint: chat completions (JSON
// and streamed, with the same greedy text), completions, the native API
// (JSON and streamed), tokenize and detokenize, structured output valid
// against its schema, and a forced tool call valid against the tool's
// parameters. The weights are random, so the checks are shapes, usage,
// finish reasons and determinism.
func TestFamiliesEveryEndpoint(t *testing.T) {
	t.Parallel()
	s, base := startFamilies(t)
	c := testClient(t)
	for _, model := range familyFixtures {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			msgs := `[{"role":"system","content":"You are terse."},{"role":"user","content":"Name a colour."}]`
			body := fmt.Sprintf(`{"model":%q,"max_tokens":8,"temperature":0,"messages":%s}`, model, msgs)
			cc := familyChat(t, c, base, body)
			require.Equal(t, model, cc.Model)
			require.Equal(t, "chat.completion", cc.Object)
			ch := cc.Choices[0]
			require.Equal(t, "assistant", ch.Message.Role)
			require.Contains(t, []string{"stop", "length"}, ch.FinishReason)
			require.Positive(t, cc.Usage.PromptTokens)
			require.Positive(t, cc.Usage.CompletionTokens)
			require.LessOrEqual(t, cc.Usage.CompletionTokens, 8)
			if ch.FinishReason == "length" {
				require.Equal(t, 8, cc.Usage.CompletionTokens)
			}
			require.Empty(t, ch.Message.ReasoningContent, "not asked for")
			require.Zero(t, cc.Usage.CompletionTokensDetails.ReasoningTokens)

			again := familyChat(t, c, base, body)
			require.Equal(t, ch.Message.Content, again.Choices[0].Message.Content, "greedy decoding is deterministic")
			require.Equal(t, cc.Usage.CompletionTokens, again.Usage.CompletionTokens)

			st := familyStream(t, c, base, strings.Replace(body, `"temperature":0`, `"temperature":0,"stream":true,"stream_options":{"include_usage":true}`, 1))
			require.Equal(t, ch.Message.Content, st.content)
			require.Equal(t, ch.FinishReason, st.finish)
			require.NotNil(t, st.usage)
			require.Equal(t, cc.Usage.PromptTokens, st.usage.PromptTokens)
			require.Equal(t, cc.Usage.CompletionTokens, st.usage.CompletionTokens)

			// Completions.
			resp, b := post(t, c, base+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"The sky is","max_tokens":6,"temperature":0}`, model))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			var cp api.Completion
			require.NoError(t, json.Unmarshal(b, &cp))
			require.Equal(t, "text_completion", cp.Object)
			require.Len(t, cp.Choices, 1)
			require.Contains(t, []string{"stop", "length"}, *cp.Choices[0].FinishReason)
			require.Positive(t, cp.Usage.PromptTokens)
			require.Positive(t, cp.Usage.CompletionTokens)
			require.LessOrEqual(t, cp.Usage.CompletionTokens, 6)

			// The native API: the same greedy answer as the OpenAI one.
			nbody := fmt.Sprintf(`{"model":%q,"max_tokens":8,"temperature":0,"stream":false,"messages":%s}`, model, msgs)
			resp, b = post(t, c, base+"/v1/chat", nbody)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			var nd api.NativeDone
			require.NoError(t, json.Unmarshal(b, &nd))
			require.Equal(t, ch.Message.Content, nd.Text)
			require.Equal(t, ch.FinishReason, nd.FinishReason)
			require.Equal(t, cc.Usage.PromptTokens, nd.Usage.InputTokens)
			require.Equal(t, cc.Usage.CompletionTokens, nd.Usage.OutputTokens)
			resp, b = post(t, c, base+"/v1/chat", strings.Replace(nbody, `"stream":false`, `"stream":true`, 1))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			var text string
			evs := dataEvents(parseSSE(t, b))
			for _, ev := range evs[:len(evs)-1] {
				var d api.NativeDelta
				require.NoError(t, json.Unmarshal([]byte(ev.data), &d))
				text += d.Delta
			}
			last := evs[len(evs)-1]
			require.Equal(t, "done", last.event)
			require.NoError(t, json.Unmarshal([]byte(last.data), &nd))
			require.Equal(t, ch.Message.Content, text)
			require.Equal(t, cc.Usage.CompletionTokens, nd.Usage.OutputTokens)

			// Tokenize and detokenize: the chat prompt's tokens are the
			// ones the completion counted, and text round-trips.
			resp, b = post(t, c, base+"/tokenize", fmt.Sprintf(`{"model":%q,"messages":%s}`, model, msgs))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			var tr api.TokenizeResponse
			require.NoError(t, json.Unmarshal(b, &tr))
			require.Len(t, tr.Tokens, cc.Usage.PromptTokens)
			resp, b = post(t, c, base+"/tokenize", fmt.Sprintf(`{"model":%q,"prompt":"Hello, world!"}`, model))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			require.NoError(t, json.Unmarshal(b, &tr))
			require.NotEmpty(t, tr.Tokens)
			req, err := json.Marshal(api.DetokenizeRequest{Model: model, Tokens: tr.Tokens})
			require.NoError(t, err)
			resp, b = post(t, c, base+"/detokenize", string(req))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			require.JSONEq(t, `{"prompt":"Hello, world!"}`, string(b))

			// Structured output parses and validates against its schema.
			schema := `{"type":"object","properties":{"ok":{"type":"boolean"},"colour":{"enum":["red","green","blue"]}},` +
				`"required":["ok","colour"],"additionalProperties":false}`
			sc := familyChat(t, c, base, fmt.Sprintf(`{"model":%q,"max_tokens":120,"seed":3,"messages":%s,`+
				`"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":%s}}}`, model, msgs, schema))
			require.Equal(t, "stop", sc.Choices[0].FinishReason, "content %q", sc.Choices[0].Message.Content)
			require.NoError(t, validate(t, []byte(schema), sc.Choices[0].Message.Content))

			// A forced tool call: one call of the tool, its arguments valid
			// against the tool's parameters, in JSON and streamed alike.
			params := `{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}`
			tbody := fmt.Sprintf(`{"model":%q,"max_tokens":120,"temperature":0,"messages":[{"role":"user","content":"Weather in Lyon?"}],`+
				`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather for a city.","parameters":%s}}],`+
				`"tool_choice":"required","parallel_tool_calls":false}`, model, params)
			tc := familyChat(t, c, base, tbody)
			require.Equal(t, "tool_calls", tc.Choices[0].FinishReason, "content %q", tc.Choices[0].Message.Content)
			require.Len(t, tc.Choices[0].Message.ToolCalls, 1)
			call := tc.Choices[0].Message.ToolCalls[0]
			require.Equal(t, "get_weather", call.Function.Name)
			require.NotEmpty(t, call.ID)
			require.NoError(t, validate(t, []byte(params), call.Function.Arguments))
			tst := familyStream(t, c, base, strings.Replace(tbody, `"temperature":0`, `"temperature":0,"stream":true`, 1))
			require.Equal(t, "tool_calls", tst.finish)
			require.Len(t, tst.calls, 1)
			require.Equal(t, call.Function.Arguments, tst.calls[0].Function.Arguments)
		})
	}
	t.Cleanup(func() { requireIdle(t, s) })
}

// The qwen3 fixture's template is Qwen3's: enable_thinking false (through
// chat_template_kwargs) closes an empty <think> section in the prompt, and
// with reasoning_format the answer's section comes back as
// reasoning_content. A grammar makes the random model write a section, so
// the split is checked on a real answer, in JSON and streamed, and in the
// native API.
func TestFamiliesQwen3Reasoning(t *testing.T) {
	t.Parallel()
	dir := fixtures.Dir(t)
	cfg := testConfig()
	cfg.Models = nil
	cfg.ModelFiles = []string{filepath.Join(dir, "qwen3-d64-q8_0.gguf")}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	c := testClient(t)
	const msgs = `[{"role":"user","content":"Hi"}]`

	plain := familyChat(t, c, base, `{"model":"qwen3-d64-q8_0","max_tokens":4,"temperature":0,"messages":`+msgs+`}`)
	off := familyChat(t, c, base, `{"model":"qwen3-d64-q8_0","max_tokens":4,"temperature":0,"messages":`+msgs+`,`+
		`"chat_template_kwargs":{"enable_thinking":false}}`)
	resp, b := post(t, c, base+"/tokenize", `{"model":"qwen3-d64-q8_0","prompt":"<think>\n\n</think>\n\n","add_special_tokens":false}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var tr api.TokenizeResponse
	require.NoError(t, json.Unmarshal(b, &tr))
	require.Equal(t, plain.Usage.PromptTokens+len(tr.Tokens), off.Usage.PromptTokens, "the empty section closes the prompt")

	resp, b = post(t, c, base+"/v1/chat/completions", `{"model":"qwen3-d64-q8_0","messages":`+msgs+`,"chat_template_kwargs":{"messages":[]}}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	require.Equal(t, "chat_template_kwargs", errorOf(t, b)["param"])
	resp, b = post(t, c, base+"/v1/chat/completions", `{"model":"qwen3-d64-q8_0","messages":`+msgs+`,"reasoning_format":"hidden"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	require.Equal(t, "reasoning_format", errorOf(t, b)["param"])

	// The grammar's answer: a section, then content.
	const grammar = `root ::= "<think>" [a-z]{2,8} " " [a-z]{2,8} "</think>" [a-z]{2,8}`
	gbody := fmt.Sprintf(`{"model":"qwen3-d64-q8_0","max_tokens":60,"temperature":0,"messages":%s,"grammar":%q`, msgs, grammar)
	raw := familyChat(t, c, base, gbody+`}`)
	require.Equal(t, "stop", raw.Choices[0].FinishReason)
	text := raw.Choices[0].Message.Content
	require.True(t, strings.HasPrefix(text, "<think>"), text)
	wantReasoning, wantContent, ok := strings.Cut(strings.TrimPrefix(text, "<think>"), "</think>")
	require.True(t, ok, text)

	split := familyChat(t, c, base, gbody+`,"reasoning_format":"deepseek"}`)
	m := split.Choices[0].Message
	require.Equal(t, wantReasoning, m.ReasoningContent)
	require.Equal(t, wantContent, m.Content)
	rt := split.Usage.CompletionTokensDetails.ReasoningTokens
	require.Positive(t, rt)
	require.Less(t, rt, split.Usage.CompletionTokens, "the content's tokens are not reasoning")
	require.Equal(t, raw.Usage.CompletionTokens, split.Usage.CompletionTokens)

	st := familyStream(t, c, base, gbody+`,"reasoning_format":"auto","stream":true,"stream_options":{"include_usage":true}}`)
	require.Equal(t, wantReasoning, st.reasoning)
	require.Equal(t, wantContent, st.content)
	require.Equal(t, rt, st.usage.CompletionTokensDetails.ReasoningTokens)

	resp, b = post(t, c, base+"/v1/chat", strings.Replace(gbody, `"max_tokens"`, `"stream":false,"max_tokens"`, 1)+`,"reasoning_format":"deepseek"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var nd api.NativeDone
	require.NoError(t, json.Unmarshal(b, &nd))
	require.Equal(t, wantReasoning, nd.Reasoning)
	require.Equal(t, wantContent, nd.Text)
	require.Equal(t, rt, nd.Usage.ReasoningTokens)
	resp, b = post(t, c, base+"/v1/chat", gbody+`,"reasoning_format":"deepseek"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var reasoning, content string
	evs := dataEvents(parseSSE(t, b))
	for _, ev := range evs[:len(evs)-1] {
		var d api.NativeDelta
		require.NoError(t, json.Unmarshal([]byte(ev.data), &d))
		reasoning += d.Reasoning
		content += d.Delta
	}
	require.Equal(t, wantReasoning, reasoning)
	require.Equal(t, wantContent, content)
	t.Cleanup(func() { requireIdle(t, s) })
}
