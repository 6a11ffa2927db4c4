package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/fixtures"
)

// schemaGen generates random JSON Schemas of the kinds structured-output
// callers send: objects with required and optional properties, strings,
// bounded integers, numbers, booleans, enums, nested objects and arrays.
// Strings and arrays are bounded, so every constrained answer can end
// within a few hundred tokens whatever the model's weights.
type schemaGen struct{ r *rand.Rand }

func (g schemaGen) schema(depth int) map[string]any {
	kinds := []string{"string", "integer", "number", "boolean", "enum", "array"}
	if depth < 2 {
		kinds = append(kinds, "object", "object")
	}
	switch kinds[g.r.IntN(len(kinds))] {
	case "string":
		return map[string]any{"type": "string", "maxLength": 1 + g.r.IntN(12)}
	case "integer":
		lo := g.r.IntN(200) - 100
		return map[string]any{"type": "integer", "minimum": lo, "maximum": lo + g.r.IntN(1000)}
	case "number":
		return map[string]any{"type": "number"}
	case "boolean":
		return map[string]any{"type": "boolean"}
	case "enum":
		return map[string]any{"enum": []any{"red", "green", "blue", 7, nil}[:2+g.r.IntN(3)]}
	case "array":
		return map[string]any{"type": "array", "items": g.schema(depth + 1), "maxItems": 1 + g.r.IntN(3)}
	}
	return g.object(depth + 1)
}

func (g schemaGen) object(depth int) map[string]any {
	props := map[string]any{}
	var required []string
	for i := range 1 + g.r.IntN(4) {
		name := fmt.Sprintf("p%d_%c", i, 'a'+rune(g.r.IntN(26)))
		props[name] = g.schema(depth)
		if g.r.IntN(3) > 0 {
			required = append(required, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// validate checks text against schema with a JSON Schema validator.
func validate(t *testing.T, schema []byte, text string) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	sch, err := c.Compile("schema.json")
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// TestStructuredOutputValidates is the property test: answers
// constrained by random schemas parse and validate, streamed or not, on
// the simulator and on a random-weight GGUF model on the CPU executor.
func TestStructuredOutputValidates(t *testing.T) {
	t.Parallel()
	// The check can fail: the validator refuses what breaks a schema.
	strict := []byte(`{"type": "object", "properties": {"a": {"type": "integer", "maximum": 3}}, "required": ["a"]}`)
	require.NoError(t, validate(t, strict, `{"a": 2}`))
	require.Error(t, validate(t, strict, `{"a": 4}`))
	require.Error(t, validate(t, strict, `{}`))
	require.Error(t, validate(t, strict, `{"a": 2`))

	_, simBase := startSim(t, nil)
	_, _, ggufBase := startTestGGUF(t)

	for _, target := range []struct {
		name, base, model string
		schemas           int
	}{{"sim", simBase, "sim/small", 200}, {"gguf", ggufBase, "tiny", 120}} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			c := testClient(t)
			gen := schemaGen{rand.New(rand.NewPCG(19, uint64(len(target.name))))}
			var mu sync.Mutex
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i := range target.schemas {
				schema, err := json.Marshal(gen.object(0))
				require.NoError(t, err)
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					stream := i%2 == 1
					body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "case %d"}], "max_tokens": 400,
						"seed": %d, "stream": %v, "temperature": 1,
						"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": %s}}}`,
						target.model, i, i, stream, schema)
					text, finish, status := chatText(t, c, target.base, body, stream)
					mu.Lock()
					defer mu.Unlock()
					if !assert.Equal(t, http.StatusOK, status, "schema %s: %s", schema, text) {
						return
					}
					assert.Equal(t, "stop", finish, "schema %s: the grammar ends well within max_tokens: %q", schema, text)
					assert.NoError(t, validate(t, schema, text), "schema %s\nanswer %s", schema, text)
					if i < 2 {
						t.Logf("schema %s\nanswer %s", schema, text)
					}
				})
			}
			wg.Wait()
		})
	}
}

// chatText posts a chat completion and returns its first choice's text
// and finish reason (a stream's accumulated), or the error body.
func chatText(t *testing.T, c *http.Client, base, body string, stream bool) (text, finish string, status int) {
	t.Helper()
	resp, raw := post(t, c, base+"/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		return string(raw), "", resp.StatusCode
	}
	if !stream {
		var cc api.ChatCompletion
		require.NoError(t, json.Unmarshal(raw, &cc))
		return cc.Choices[0].Message.Content, cc.Choices[0].FinishReason, resp.StatusCode
	}
	var sb strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch api.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(data), &ch), data)
		for _, choice := range ch.Choices {
			if choice.Delta.Content != nil {
				sb.WriteString(*choice.Delta.Content)
			}
			if choice.FinishReason != nil {
				finish = *choice.FinishReason
			}
		}
	}
	return sb.String(), finish, resp.StatusCode
}

// weatherTool is the tool of the agent-loop tests.
var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("The weather in a city."),
	Parameters: shared.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string", "maxLength": 24},
			"unit": map[string]any{"enum": []string{"celsius", "fahrenheit"}},
		},
		"required": []string{"city", "unit"},
	},
})

// TestSDKToolAgentLoop runs the agent loop with the official
// OpenAI Go SDK: the model calls a tool (forced, so even placeholder text
// makes a valid call), the tool's answer comes back as a tool message, the
// model answers. The streamed call, accumulated by the SDK, is the
// non-streamed one.
func TestSDKToolAgentLoop(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := sdkClient(t, base)
	params := openai.ChatCompletionNewParams{
		Model:      "sim/small",
		Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Lyon?")},
		Tools:      []openai.ChatCompletionToolUnionParam{weatherTool},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		Seed:       openai.Int(42),
	}
	resp, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	ch := resp.Choices[0]
	require.Equal(t, "tool_calls", ch.FinishReason)
	require.Len(t, ch.Message.ToolCalls, 1)
	call := ch.Message.ToolCalls[0]
	require.Equal(t, "get_weather", call.Function.Name)
	require.True(t, strings.HasPrefix(call.ID, "call_"), call.ID)
	var args struct{ City, Unit string }
	require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args), call.Function.Arguments)
	require.Contains(t, []string{"celsius", "fahrenheit"}, args.Unit)

	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		require.True(t, acc.AddChunk(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Choices, 1)
	require.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	streamed := acc.Choices[0].Message.ToolCalls[0]
	require.Equal(t, call.Function.Name, streamed.Function.Name)
	require.Equal(t, call.Function.Arguments, streamed.Function.Arguments, "the same seed gives the same call, streamed or not")
	require.NotEmpty(t, streamed.ID)

	// The tool answers; the model, free to answer now, writes text.
	params.Messages = append(params.Messages, ch.Message.ToParam(),
		openai.ToolMessage(`{"temperature": 21, "sky": "clear"}`, call.ID))
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	params.MaxTokens = openai.Int(30)
	final, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, final.Choices, 1)
	require.Empty(t, final.Choices[0].Message.ToolCalls)
	require.NotEmpty(t, final.Choices[0].Message.Content)
	require.Contains(t, []string{"stop", "length"}, final.Choices[0].FinishReason)
	require.Greater(t, final.Usage.PromptTokens, resp.Usage.PromptTokens, "the history holds the call and its result")
}

// TestToolCallShapes checks the wire shapes the openai npm package and the
// SDKs read: a named tool_choice, parallel calls, and the stream's
// delta.tool_calls fragments (index, id and name first, then arguments).
func TestToolCallShapes(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)
	tools := `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
			"properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}},
		{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]`

	resp, raw := post(t, c, base+"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "time?"}],
		"tools": `+tools+`, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(raw, &cc))
	require.Len(t, cc.Choices[0].Message.ToolCalls, 1)
	require.Equal(t, "get_time", cc.Choices[0].Message.ToolCalls[0].Function.Name)
	require.JSONEq(t, `{}`, cc.Choices[0].Message.ToolCalls[0].Function.Arguments)
	require.Contains(t, string(raw), `"content":null`, "a message of tool calls only has null content")

	resp, raw = post(t, c, base+"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "weather?"}],
		"tools": `+tools+`, "tool_choice": "required", "stream": true, "seed": 3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	type frag struct {
		index    int
		id, name string
	}
	var frags []frag
	args := map[int]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch api.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(data), &ch))
		for _, choice := range ch.Choices {
			for _, d := range choice.Delta.ToolCalls {
				if d.ID != "" {
					require.Equal(t, "function", d.Type)
					require.NotEmpty(t, d.Function.Name)
					frags = append(frags, frag{d.Index, d.ID, d.Function.Name})
				} else {
					require.Empty(t, d.Function.Name, "only the first fragment names the function")
				}
				args[d.Index] += d.Function.Arguments
			}
		}
	}
	require.NotEmpty(t, frags)
	for k, f := range frags {
		require.Equal(t, k, f.index, "calls are numbered from 0")
		require.True(t, json.Valid([]byte(args[k])), "call %d arguments %q", k, args[k])
	}

	// Refusals: a named function that is not a tool, tools on completions,
	// a structured format forced alongside a tool.
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}], "tools": ` + tools + `,
			"tool_choice": {"type": "function", "function": {"name": "nope"}}}`, "tool_choice"},
		{"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}`, "tool_choice"},
		{"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}], "tools": ` + tools + `,
			"tool_choice": "required", "response_format": {"type": "json_object"}}`, "response_format"},
		{"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}],
			"tools": [{"type": "function", "function": {"name": "bad name"}}]}`, "tools[0].function.name"},
		{"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}],
			"tools": [{"type": "retrieval", "function": {"name": "x"}}]}`, "tools[0].type"},
	} {
		resp, raw := post(t, c, base+tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(raw))
		var eb api.ErrorBody
		require.NoError(t, json.Unmarshal(raw, &eb))
		require.NotNil(t, eb.Error.Param, string(raw))
		require.Equal(t, tc.param, *eb.Error.Param, string(raw))
	}
}

// TestGenerationControls checks vLLM's controls and echo through the
// HTTP API on the simulator, whose answers end at a natural length.
func TestGenerationControls(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)
	usage := func(body string) (api.Usage, string, string) {
		t.Helper()
		resp, raw := post(t, c, base+"/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
		var cc api.ChatCompletion
		require.NoError(t, json.Unmarshal(raw, &cc))
		return *cc.Usage, cc.Choices[0].FinishReason, cc.Choices[0].Message.Content
	}
	natural, ignored := 0, 0
	for seed := range 8 {
		msg := fmt.Sprintf(`{"model": "sim/small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 600, "seed": %d`, seed)
		u, finish, _ := usage(msg + `}`)
		if finish == "stop" {
			natural++
		}
		u2, finish2, _ := usage(msg + `, "ignore_eos": true}`)
		require.Equal(t, "length", finish2, "ignore_eos runs to max_tokens")
		require.Equal(t, 600, u2.CompletionTokens)
		if u.CompletionTokens < 600 {
			ignored++
		}
		u3, _, _ := usage(msg + `, "min_tokens": 550}`)
		require.GreaterOrEqual(t, u3.CompletionTokens, 550, "min_tokens")
	}
	require.Positive(t, natural, "some answers end on their own, so the controls are seen to act")
	require.Positive(t, ignored)

	// A stop token id ends the answer before it, unsent.
	resp, raw := post(t, c, base+"/tokenize", `{"model": "sim/small", "prompt": "."}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var tr api.TokenizeResponse
	require.NoError(t, json.Unmarshal(raw, &tr))
	require.Len(t, tr.Tokens, 1)
	_, finish, text := usage(fmt.Sprintf(`{"model": "sim/small", "messages": [{"role": "user", "content": "hi"}],
		"max_tokens": 300, "seed": 1, "stop_token_ids": [%d]}`, tr.Tokens[0]))
	require.Equal(t, "stop", finish)
	require.NotContains(t, text, ".")
	require.NotEmpty(t, text)

	// echo starts the completion with its prompt.
	resp, raw = post(t, c, base+"/v1/completions", `{"model": "sim/small", "prompt": "Once upon a time", "max_tokens": 4, "echo": true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var cmpl api.Completion
	require.NoError(t, json.Unmarshal(raw, &cmpl))
	require.True(t, strings.HasPrefix(cmpl.Choices[0].Text, "Once upon a time"), cmpl.Choices[0].Text)
	require.Greater(t, len(cmpl.Choices[0].Text), len("Once upon a time"))
	require.Equal(t, 4, cmpl.Usage.CompletionTokens, "the echoed prompt is not billed as output")

	// best_of equal to n is fine.
	resp, raw = post(t, c, base+"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}],
		"max_tokens": 2, "n": 2, "best_of": 2}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
}

// TestNativeToolCalls: the native API takes tools and structured output
// too, and streams a call as tool_call events.
func TestNativeToolCalls(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)
	body := `{"model": "sim/small", "messages": [{"role": "user", "content": "weather?"}], "tool_choice": "required",
		"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
			"properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}]`
	resp, raw := post(t, c, base+"/v1/chat", body+`, "stream": false}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var done api.NativeDone
	require.NoError(t, json.Unmarshal(raw, &done))
	require.Equal(t, "tool_calls", done.FinishReason)
	require.Len(t, done.ToolCalls, 1)
	require.Equal(t, "get_weather", done.ToolCalls[0].Function.Name)
	require.True(t, json.Valid([]byte(done.ToolCalls[0].Function.Arguments)))

	resp, raw = post(t, c, base+"/v1/chat", body+`}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var name, args, finish string
	for _, ev := range parseSSE(t, raw) {
		switch ev.event {
		case "done":
			var d api.NativeDone
			require.NoError(t, json.Unmarshal([]byte(ev.data), &d))
			finish = d.FinishReason
		case "":
			var d api.NativeDelta
			require.NoError(t, json.Unmarshal([]byte(ev.data), &d))
			if d.ToolCall != nil {
				name += d.ToolCall.Function.Name
				args += d.ToolCall.Function.Arguments
			}
		}
	}
	require.Equal(t, "tool_calls", finish)
	require.Equal(t, "get_weather", name)
	require.True(t, json.Valid([]byte(args)), args)

	resp, raw = post(t, c, base+"/v1/chat", `{"model": "sim/small", "messages": [{"role": "user", "content": "pick"}],
		"guided_choice": ["alpha", "beta", "gamma"], "stream": false}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	require.NoError(t, json.Unmarshal(raw, &done))
	require.Contains(t, []string{"alpha", "beta", "gamma"}, done.Text)
}

// TestUsageRowKeepsUser: the user field lands in the request's usage row.
func TestUsageRowKeepsUser(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, nil)
	base := startServer(t, s)
	c := testClient(t)
	resp, raw := post(t, c, base+"/v1/chat/completions", `{"model": "sim/small", "messages": [{"role": "user", "content": "x"}],
		"max_tokens": 3, "user": "end-user-7"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	id := resp.Header.Get("X-Request-Id")
	require.Eventually(t, func() bool {
		ev, err := s.deps.Store.UsageEvent(t.Context(), id)
		return err == nil && ev.User == "end-user-7" && !ev.Ended.IsZero()
	}, 10*time.Second, 10*time.Millisecond)
}

// TestSDKToolAgentLoopQwen2 runs the agent loop on a real GGUF file: the
// qwen2 fixture (random weights, Qwen's 151,936-token vocabulary and chat
// template), so the template renders the tools and the history's call and
// result, the call is parsed in the Hermes format the template names, and
// the forced call is valid however random the weights.
func TestSDKToolAgentLoopQwen2(t *testing.T) {
	t.Parallel()
	path := filepath.Join(fixtures.Dir(t), "qwen2-d64-q8_0.gguf")
	cfg := testConfig()
	cfg.Models = nil
	cfg.ModelFiles = []string{path}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	client := sdkClient(t, base)
	model := s.models.List()[0].ID
	params := openai.ChatCompletionNewParams{
		Model:      model,
		Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Lyon?")},
		Tools:      []openai.ChatCompletionToolUnionParam{weatherTool},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		Seed:       openai.Int(5),
		MaxTokens:  openai.Int(200),
		// Random weights would go on making calls until max_tokens.
		ParallelToolCalls: openai.Bool(false),
	}
	resp, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	ch := resp.Choices[0]
	require.Equal(t, "tool_calls", ch.FinishReason, "content %q", ch.Message.Content)
	require.Len(t, ch.Message.ToolCalls, 1)
	call := ch.Message.ToolCalls[0]
	require.Equal(t, "get_weather", call.Function.Name)
	require.NoError(t, validate(t, []byte(`{"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
		"unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}`),
		call.Function.Arguments))

	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		require.True(t, acc.AddChunk(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	require.Equal(t, call.Function.Arguments, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)

	params.Messages = append(params.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"temperature": 21}`, call.ID))
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	params.MaxTokens = openai.Int(16)
	final, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.Contains(t, []string{"stop", "length", "tool_calls"}, final.Choices[0].FinishReason)
	require.Greater(t, final.Usage.PromptTokens, resp.Usage.PromptTokens, "the template rendered the call and its result")
}
