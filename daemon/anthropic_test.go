package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// The tests in this file drive llmd's Anthropic Messages API with
// Anthropic's official Go SDK, against a real llmd over the simulated
// model.

func anthropicClient(t *testing.T, base, key string) anthropic.Client {
	return anthropic.NewClient(
		option.WithBaseURL(base),
		option.WithAPIKey(key),
		option.WithHTTPClient(testClient(t)),
		option.WithMaxRetries(0),
	)
}

func TestAnthropicSDKMessages(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := anthropicClient(t, base, "unused")
	params := anthropic.MessageNewParams{
		Model:     "sim/small",
		MaxTokens: 40,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Tell me about paged attention."))},
	}
	msg, err := client.Messages.New(t.Context(), params)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
	require.Equal(t, "sim/small", string(msg.Model))
	require.Len(t, msg.Content, 1)
	require.Equal(t, "text", msg.Content[0].Type)
	text := msg.Content[0].Text
	require.NotEmpty(t, text)
	require.Contains(t, []anthropic.StopReason{anthropic.StopReasonEndTurn, anthropic.StopReasonMaxTokens}, msg.StopReason)
	require.Positive(t, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens)
	require.Positive(t, msg.Usage.OutputTokens)
	require.LessOrEqual(t, msg.Usage.OutputTokens, int64(40))

	// Streamed: the SDK's accumulator rebuilds the same message from
	// Anthropic's event sequence.
	stream := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		require.NoError(t, acc.Accumulate(ev))
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.GreaterOrEqual(t, len(types), 6)
	assert.Equal(t, []string{"message_start", "content_block_start"}, types[:2])
	assert.Equal(t, []string{"content_block_stop", "message_delta", "message_stop"}, types[len(types)-3:])
	require.Len(t, acc.Content, 1)
	assert.Equal(t, text, acc.Content[0].Text, "the seed comes from the prompt")
	assert.Equal(t, msg.StopReason, acc.StopReason)
	assert.Equal(t, msg.Usage.OutputTokens, acc.Usage.OutputTokens)
	assert.Equal(t, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens, acc.Usage.InputTokens+acc.Usage.CacheReadInputTokens)

	// count_tokens renders the same prompt with the model's template.
	count, err := client.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model:    "sim/small",
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
		Messages: params.Messages,
	})
	require.NoError(t, err)
	assert.Equal(t, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens, count.InputTokens)
}

func TestAnthropicStreamEventSequence(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	resp, b := post(t, testClient(t), base+"/v1/messages",
		`{"model":"sim/small","max_tokens":6,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var names []string
	for _, ev := range dataEvents(parseSSE(t, b)) {
		m := jsonMap(t, ev.data)
		require.Equal(t, ev.event, m["type"], "each event's name is its data's type")
		names = append(names, ev.event)
		switch ev.event {
		case "message_start":
			msg := m["message"].(map[string]any)
			assert.Nil(t, msg["stop_reason"])
			assert.Equal(t, []any{}, msg["content"])
			assert.Positive(t, msg["usage"].(map[string]any)["input_tokens"])
		case "content_block_delta":
			assert.Equal(t, "text_delta", m["delta"].(map[string]any)["type"])
		case "message_delta":
			assert.Equal(t, "max_tokens", m["delta"].(map[string]any)["stop_reason"])
			assert.EqualValues(t, 6, m["usage"].(map[string]any)["output_tokens"])
		}
	}
	want := []string{"message_start", "ping", "content_block_start"}
	for range 6 {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	require.Equal(t, want, names)
}

func TestAnthropicStopSequence(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := anthropicClient(t, base, "unused")
	params := anthropic.MessageNewParams{Model: "sim/small", MaxTokens: 30,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Count sheep."))}}
	free, err := client.Messages.New(t.Context(), params)
	require.NoError(t, err)
	words := strings.Fields(free.Content[0].Text)
	require.GreaterOrEqual(t, len(words), 3, free.Content[0].Text)
	stop := words[2]
	params.StopSequences = []string{stop}
	msg, err := client.Messages.New(t.Context(), params)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonStopSequence, msg.StopReason)
	require.Equal(t, stop, msg.StopSequence)
	want, _, _ := strings.Cut(free.Content[0].Text, stop)
	require.Equal(t, want, msg.Content[0].Text, "the text up to the stop sequence, without it")

	stream := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Equal(t, anthropic.StopReasonStopSequence, acc.StopReason)
	require.Equal(t, stop, acc.StopSequence)
}

var weatherInput = anthropic.ToolInputSchemaParam{
	Properties: map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 20},
		"unit": map[string]any{"enum": []string{"celsius", "fahrenheit"}},
	},
	Required: []string{"city", "unit"},
}

// TestAnthropicToolRoundTrip: a forced tool call comes back as a tool_use
// block (whole, and streamed as input_json_delta), its tool_result goes
// back in, and the model answers in text.
func TestAnthropicToolRoundTrip(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := anthropicClient(t, base, "unused")
	tool := anthropic.ToolUnionParamOfTool(weatherInput, "get_weather")
	tool.OfTool.Description = anthropic.String("The weather in a city")
	params := anthropic.MessageNewParams{
		Model: "sim/small", MaxTokens: 200,
		Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Lyon?"))},
		Tools:      []anthropic.ToolUnionParam{tool},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}},
	}
	msg, err := client.Messages.New(t.Context(), params)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonToolUse, msg.StopReason)
	var use anthropic.ToolUseBlock
	for _, b := range msg.Content {
		if b.Type == "tool_use" {
			use = b.AsToolUse()
		}
	}
	require.Equal(t, "get_weather", use.Name)
	require.NotEmpty(t, use.ID)
	var args struct{ City, Unit string }
	require.NoError(t, json.Unmarshal(use.Input, &args), "%s", use.Input)
	require.Contains(t, []string{"celsius", "fahrenheit"}, args.Unit)

	stream := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	sawJSONDelta := false
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "content_block_delta" && ev.Delta.Type == "input_json_delta" {
			sawJSONDelta = true
		}
		require.NoError(t, acc.Accumulate(ev))
	}
	require.NoError(t, stream.Err())
	require.True(t, sawJSONDelta, "the input streams as input_json_delta")
	require.Equal(t, anthropic.StopReasonToolUse, acc.StopReason)
	streamed := acc.Content[len(acc.Content)-1].AsToolUse()
	require.Equal(t, "get_weather", streamed.Name)
	require.JSONEq(t, string(use.Input), string(streamed.Input), "the same prompt gives the same call")

	// The result goes back; the model, free to answer, writes text.
	params.Messages = append(params.Messages, msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, `{"temperature": 21, "sky": "clear"}`, false)))
	params.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
	params.MaxTokens = 20
	final, err := client.Messages.New(t.Context(), params)
	require.NoError(t, err)
	require.NotEmpty(t, final.Content)
	require.Equal(t, "text", final.Content[0].Type)
	require.Greater(t, final.Usage.InputTokens+final.Usage.CacheReadInputTokens, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens,
		"the history holds the call and its result")

	// count_tokens counts the tools too.
	withTools, err := client.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{Model: "sim/small",
		Messages: params.Messages[:1], Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: tool.OfTool}}})
	require.NoError(t, err)
	without, err := client.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{Model: "sim/small",
		Messages: params.Messages[:1]})
	require.NoError(t, err)
	require.Greater(t, withTools.InputTokens, without.InputTokens)
}

// anthropicError unwraps the SDK's error and its type.
func anthropicError(t *testing.T, err error) (*anthropic.Error, string) {
	t.Helper()
	var ae *anthropic.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	var body struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(ae.RawJSON()), &body), ae.RawJSON())
	require.Equal(t, "error", body.Type)
	require.NotEmpty(t, body.Error.Message)
	return ae, body.Error.Type
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := anthropicClient(t, base, "unused")
	user := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}
	_, err := client.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "no-such-model", MaxTokens: 5, Messages: user})
	ae, typ := anthropicError(t, err)
	assert.Equal(t, http.StatusNotFound, ae.StatusCode)
	assert.Equal(t, "not_found_error", typ)

	_, err = client.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "sim/small", MaxTokens: 5, Messages: user},
		option.WithJSONSet("temperature", 7))
	ae, typ = anthropicError(t, err)
	assert.Equal(t, http.StatusBadRequest, ae.StatusCode)
	assert.Equal(t, "invalid_request_error", typ)

	c := testClient(t)
	for name, body := range map[string]string{
		"no max_tokens":   `{"model":"sim/small","messages":[{"role":"user","content":"hi"}]}`,
		"system role":     `{"model":"sim/small","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`,
		"image block":     `{"model":"sim/small","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`,
		"server tool":     `{"model":"sim/small","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`,
		"thinking":        `{"model":"sim/small","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`,
		"unknown field":   `{"model":"sim/small","max_tokens":5,"bogus":1,"messages":[{"role":"user","content":"hi"}]}`,
		"bad tool_choice": `{"model":"sim/small","max_tokens":5,"tool_choice":{"type":"maybe"},"messages":[{"role":"user","content":"hi"}]}`,
		"not json":        `{"model":`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := post(t, c, base+"/v1/messages", body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
			m := jsonMap(t, string(b))
			require.Equal(t, "error", m["type"], "%s", b)
			require.Equal(t, "invalid_request_error", m["error"].(map[string]any)["type"], "%s", b)
		})
	}
	// metadata, service_tier, cache_control and anthropic-version are accepted.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/messages", strings.NewReader(
		`{"model":"sim/small","max_tokens":3,"metadata":{"user_id":"u1"},"service_tier":"auto",`+
			`"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],`+
			`"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestAnthropicAuthAndQuota: with keys, x-api-key (the SDK's header)
// authenticates; a missing or wrong key is a 401 authentication_error
// and a tenant over its requests per minute a 429 rate_limit_error, both
// in Anthropic's shape.
func TestAnthropicAuthAndQuota(t *testing.T) {
	s := newStoreServer(t, nil)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{RPM: i64(1)})
	base := startServer(t, s)
	user := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}
	params := anthropic.MessageNewParams{Model: "sim/small", MaxTokens: 3, Messages: user}

	bad := anthropicClient(t, base, "llmd-not-a-real-key")
	_, err := bad.Messages.New(t.Context(), params)
	ae, typ := anthropicError(t, err)
	assert.Equal(t, http.StatusUnauthorized, ae.StatusCode)
	assert.Equal(t, "authentication_error", typ)
	resp, b := post(t, testClient(t), base+"/v1/messages", `{"model":"sim/small","max_tokens":3,"messages":[]}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, string(b), "x-api-key")

	client := anthropicClient(t, base, key)
	_, err = client.Messages.New(t.Context(), params)
	require.NoError(t, err, "x-api-key authenticates")
	_, err = client.Messages.New(t.Context(), params)
	ae, typ = anthropicError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, ae.StatusCode)
	assert.Equal(t, "rate_limit_error", typ)
	assert.NotEmpty(t, ae.Response.Header.Get("Retry-After"))
}

// TestAnthropicDisconnectFreesBlocks: a streaming client that leaves
// mid-answer frees its KV blocks at the engine's next step.
func TestAnthropicDisconnectFreesBlocks(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, func(c *Config) { c.Clock = nil })
	testDisconnectFrees(t, s, base+"/v1/messages", fmt.Sprintf(
		`{"model":"sim/small","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":%q}]}`,
		longPrompt(t, base, 400)), "event: content_block_delta")
}

// longPrompt is a user message whose answer by sim/small runs past n
// tokens: the simulated answer's length follows from the seed, which
// follows from the prompt's tokens (there is no seed field to set).
func longPrompt(t *testing.T, base string, n int) string {
	t.Helper()
	exec, err := sim.New(sim.DefaultConfig(), engine.NewVirtualClock(time.Time{}))
	require.NoError(t, err)
	c := testClient(t)
	for i := range 1000 {
		text := fmt.Sprintf("Go on %d", i)
		resp, b := post(t, c, base+"/tokenize", fmt.Sprintf(`{"model":"sim/small","messages":[{"role":"user","content":%q}]}`, text))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		var tr api.TokenizeResponse
		require.NoError(t, json.Unmarshal(b, &tr))
		if l, ok := exec.NaturalLength(pipeline.PromptSeed(tr.Tokens)); !ok || l > n {
			return text
		}
	}
	t.Fatal("no long prompt")
	return ""
}

// testDisconnectFrees streams body to url, reads six lines holding
// marker, then leaves, and checks that the engine frees the request's
// blocks and stops generating.
func testDisconnectFrees(t *testing.T, s *Daemon, url, body, marker string) {
	t.Helper()
	c := testClient(t)
	before := s.Stats()[0]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 6 && sc.Scan(); {
		if strings.Contains(sc.Text(), marker) {
			n++
		}
	}
	st := s.Stats()[0]
	require.Equal(t, 1, st.Running, "still generating")
	require.Positive(t, st.BlocksUsed)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool {
		st := s.Stats()[0]
		return st.Running == 0 && st.BlocksUsed == 0 && st.Completed == before.Completed+1
	}, 5*time.Second, time.Millisecond)
	generated := s.Stats()[0].GeneratedTokens
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, generated, s.Stats()[0].GeneratedTokens, "no tokens after the cancel")
	require.Less(t, generated-before.GeneratedTokens, uint64(1000), "stopped long before the end")
}
