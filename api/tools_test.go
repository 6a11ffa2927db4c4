package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestToolChoice(t *testing.T) {
	tests := map[string]struct {
		in   string
		want ToolChoice
		err  bool
	}{
		"none":      {in: `"none"`, want: ToolChoice{Mode: ToolChoiceNone}},
		"auto":      {in: `"auto"`, want: ToolChoice{Mode: ToolChoiceAuto}},
		"required":  {in: `"required"`, want: ToolChoice{Mode: ToolChoiceRequired}},
		"named":     {in: `{"type": "function", "function": {"name": "get_weather"}}`, want: ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}},
		"bad mode":  {in: `"always"`, err: true},
		"no name":   {in: `{"type": "function", "function": {}}`, err: true},
		"bad type":  {in: `{"type": "tool", "function": {"name": "x"}}`, err: true},
		"extra key": {in: `{"type": "function", "function": {"name": "x"}, "x": 1}`, err: true},
		"number":    {in: `3`, err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var c ToolChoice
			err := json.Unmarshal([]byte(tc.in), &c)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c)
			out, err := json.Marshal(c)
			require.NoError(t, err)
			require.JSONEq(t, tc.in, string(out))
		})
	}
}

func TestResponseMessageContentNullWithToolCalls(t *testing.T) {
	b, err := json.Marshal(ResponseMessage{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Type: "function",
		Function: FunctionCall{Name: "f", Arguments: `{"a":1}`}}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`, string(b))
	b, err = json.Marshal(ResponseMessage{Role: "assistant", Content: "hi"})
	require.NoError(t, err)
	require.JSONEq(t, `{"role":"assistant","content":"hi","refusal":null}`, string(b))
}
