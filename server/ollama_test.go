package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// TestOllamaStreamToolCalls: a streamed answer's tool calls come whole,
// in one line with Ollama's shape (arguments an object), before the final
// line, whose reason is "stop".
func TestOllamaStreamToolCalls(t *testing.T) {
	st := relay.NewStream("req_1", "local", false, false, relay.Limits{MaxEvents: 100, MaxBytes: 1 << 20}, func() {})
	f := &ollamaFormat{chat: true, asked: "m:latest", start: time.Now()}
	sink := f.streamSink(st, meta{id: "req_1", model: "m", n: 1})
	require.NoError(t, sink.Begin())
	require.NoError(t, sink.ToolCall(0, api.ToolCallDelta{Index: 0, ID: "call_a", Type: "function",
		Function: api.FunctionCallDelta{Name: "get_weather", Arguments: `{"city":`}}))
	require.NoError(t, sink.ToolCall(0, api.ToolCallDelta{Index: 0, Function: api.FunctionCallDelta{Arguments: `"Lyon"}`}}))
	require.NoError(t, sink.ToolCall(0, api.ToolCallDelta{Index: 1, ID: "call_b", Type: "function",
		Function: api.FunctionCallDelta{Name: "now", Arguments: `{}`}}))
	require.NoError(t, sink.Finish(0, "tool_calls", nil))
	require.NoError(t, sink.End(pipeline.Usage{InputTokens: 10, OutputTokens: 7}))
	evs, _, _, _, _ := st.Read(0)
	require.Len(t, evs, 2)
	require.True(t, strings.HasSuffix(string(evs[0]), "\n"), "one line per object")
	var calls api.OllamaChatResponse
	require.NoError(t, json.Unmarshal(evs[0], &calls))
	require.False(t, calls.Done)
	require.Len(t, calls.Message.ToolCalls, 2)
	require.Equal(t, "get_weather", calls.Message.ToolCalls[0].Function.Name)
	require.JSONEq(t, `{"city":"Lyon"}`, string(calls.Message.ToolCalls[0].Function.Arguments))
	require.Equal(t, 1, calls.Message.ToolCalls[1].Function.Index)
	var last api.OllamaChatResponse
	require.NoError(t, json.Unmarshal(evs[1], &last))
	require.True(t, last.Done)
	require.Equal(t, "stop", last.DoneReason)
	require.Equal(t, 7, last.EvalCount)
	require.Equal(t, "m:latest", last.Model)
}

func TestOllamaMessagesLinkToolResults(t *testing.T) {
	msgs, err := ollamaMessages([]api.OllamaMessage{
		{Role: "user", Content: "weather and time?"},
		{Role: "assistant", ToolCalls: []api.OllamaToolCall{
			{Function: api.OllamaFunctionCall{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Lyon"}`)}},
			{ID: "t1", Function: api.OllamaFunctionCall{Name: "now"}},
		}},
		{Role: "tool", ToolName: "now", Content: "noon"},
		{Role: "tool", ToolName: "get_weather", Content: "sunny"},
	})
	require.NoError(t, err)
	require.Len(t, msgs, 4)
	require.Equal(t, "call_1_0", msgs[1].ToolCalls[0].ID)
	require.Equal(t, "{}", msgs[1].ToolCalls[1].Function.Arguments)
	require.Equal(t, "t1", msgs[2].ToolCallID)
	require.Equal(t, "call_1_0", msgs[3].ToolCallID)

	_, err = ollamaMessages([]api.OllamaMessage{{Role: "user", Images: []string{"aGk="}}})
	require.Error(t, err)
}

func TestParseKeepAlive(t *testing.T) {
	for in, want := range map[string]keepAlive{
		``: {}, `null`: {}, `0`: {set: true}, `"0"`: {set: true}, `300`: {set: true, d: 5 * time.Minute},
		`"5m"`: {set: true, d: 5 * time.Minute}, `-1`: {set: true, d: -time.Second}, `"-1m"`: {set: true, d: -time.Minute},
	} {
		got, err := parseKeepAlive(json.RawMessage(in))
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{`"soon"`, `true`, `{}`, `1e300`} {
		_, err := parseKeepAlive(json.RawMessage(bad))
		require.Error(t, err, bad)
	}
}
