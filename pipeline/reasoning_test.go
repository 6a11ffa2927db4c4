package pipeline

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/model/toolcall"
)

// splitAll feeds pieces to a split and returns all the reasoning and
// content it gave, and how many pieces it counted as reasoning.
func splitAll(open bool, pieces []string) (reasoning, content string, inReasoning int) {
	s := newReasoningSplit(&ReasoningPlan{Open: open})
	var r, c strings.Builder
	for _, p := range pieces {
		a, b, in := s.push(p)
		r.WriteString(a)
		c.WriteString(b)
		if in {
			inReasoning++
		}
	}
	a, b := s.flush()
	r.WriteString(a)
	c.WriteString(b)
	return r.String(), c.String(), inReasoning
}

func TestReasoningSplit(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		open               bool
		text               string
		reasoning, content string
	}{
		"qwen3 thinking":           {false, "<think>\nLet me see.\n</think>\n\nHello!", "\nLet me see.\n", "\n\nHello!"},
		"blanks before the tag":    {false, "\n <think>a</think>b", "a", "b"},
		"no section":               {false, "Hello <think>not a section</think>", "", "Hello <think>not a section</think>"},
		"enable_thinking false":    {false, "Hi.", "", "Hi."},
		"only blanks":              {false, "\n\n", "", "\n\n"},
		"a partial tag at the end": {false, "<thi", "", "<thi"},
		"opened by the prompt":     {true, "reason\n</think>\n\nanswer", "reason\n", "\n\nanswer"},
		"never closed":             {true, "still thinking </thi", "still thinking </thi", ""},
		"closed once":              {false, "<think>a</think>b</think>c<think>d", "a", "b</think>c<think>d"},
		"empty section":            {false, "<think>\n\n</think>\n\nx", "\n\n", "\n\nx"},
		"multibyte":                {true, "é思考</think>答え", "é思考", "答え"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, c, _ := splitAll(tc.open, []string{tc.text})
			require.Equal(t, tc.reasoning, r)
			require.Equal(t, tc.content, c)
			// The same text in every two- and three-piece chunking,
			// and byte by byte: the tags may arrive split anywhere.
			for i := 0; i <= len(tc.text); i++ {
				r, c, _ := splitAll(tc.open, []string{tc.text[:i], tc.text[i:]})
				require.Equal(t, tc.reasoning, r, "split at %d", i)
				require.Equal(t, tc.content, c, "split at %d", i)
				for j := i; j <= len(tc.text); j++ {
					r, c, _ := splitAll(tc.open, []string{tc.text[:i], tc.text[i:j], tc.text[j:]})
					require.Equal(t, tc.reasoning+"|"+tc.content, r+"|"+c, "split at %d, %d", i, j)
				}
			}
			bytes := make([]string, len(tc.text))
			for i := 0; i < len(tc.text); i++ {
				bytes[i] = tc.text[i : i+1]
			}
			r, c, _ = splitAll(tc.open, bytes)
			require.Equal(t, tc.reasoning+"|"+tc.content, r+"|"+c)
		})
	}
}

func TestReasoningSplitCounts(t *testing.T) {
	t.Parallel()
	_, _, n := splitAll(false, []string{"<think>", "\n", "a", "</", "think>", "\n\n", "b"})
	require.Equal(t, 5, n, "the tags and the section's pieces")
	_, _, n = splitAll(false, []string{"Hello", " <think>"})
	require.Zero(t, n)
	_, _, n = splitAll(true, []string{"a", "</think>b", "c"})
	require.Equal(t, 2, n)
}

func TestThinkOpen(t *testing.T) {
	t.Parallel()
	require.True(t, thinkOpen("<|Assistant|><think>\n"))
	require.False(t, thinkOpen("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
	require.False(t, thinkOpen("<|im_start|>assistant\n"))
	require.True(t, thinkOpen("</think> then <think>"))
}

// reasoningText is a TextModel whose tokens are the strings of pieces.
type reasoningText struct {
	pieces    []string
	reasoning bool
}

func (m reasoningText) ChatPrompt(ChatInput) ([]int32, error) { return nil, nil }
func (m reasoningText) Vocabulary() *grammar.Vocabulary       { return nil }
func (m reasoningText) ToolFormat() (toolcall.Format, bool)   { return toolcall.Hermes, true }
func (m reasoningText) Prompt(string, bool) []int32           { return nil }
func (m reasoningText) DecodeToken(t int32) string            { return m.pieces[t] }
func (m reasoningText) TokenText(t int32) string              { return m.pieces[t] }
func (m reasoningText) VocabSize() int                        { return len(m.pieces) }
func (m reasoningText) Reasoning() bool                       { return m.reasoning }
func (m reasoningText) Decode(toks []int32) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString(m.pieces[t])
	}
	return b.String()
}

// scriptStream delivers each token of choice 0, its finish and the last
// event.
type scriptStream struct{ evs []engine.Event }

func (s *scriptStream) Next(ctx context.Context) (engine.Event, error) {
	if len(s.evs) == 0 {
		return engine.Event{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

// recordSink records what a relay sends, reasoning apart.
type recordSink struct {
	reasoning, text []string
	calls           []api.ToolCallDelta
	finish          string
}

func (s *recordSink) Begin() error { return nil }
func (s *recordSink) Text(_ int, text string, _ []api.TokenLogprob) error {
	s.text = append(s.text, text)
	return nil
}
func (s *recordSink) Reasoning(_ int, text string, _ []api.TokenLogprob) error {
	s.reasoning = append(s.reasoning, text)
	return nil
}
func (s *recordSink) ToolCall(_ int, d api.ToolCallDelta) error {
	s.calls = append(s.calls, d)
	return nil
}
func (s *recordSink) Finish(_ int, reason string, _ []api.TokenLogprob) error {
	s.finish = reason
	return nil
}
func (s *recordSink) End(Usage) error { return nil }
func (s *recordSink) Fail(error) int  { return 500 }

// relayPieces runs a relay of a job whose one choice generates pieces.
func relayPieces(t *testing.T, pieces []string, plan *ReasoningPlan, tools bool) (*recordSink, Result) {
	t.Helper()
	tm := reasoningText{pieces: pieces, reasoning: true}
	job := &Job{N: 1, Model: &Model{Text: tm, EOS: map[int32]bool{}}, Reasoning: plan}
	if tools {
		job.Tools = &ToolPlan{Format: toolcall.Hermes}
	}
	var evs []engine.Event
	for i := range pieces {
		evs = append(evs, engine.Event{Kind: engine.EventToken, Token: int32(i)})
	}
	evs = append(evs, engine.Event{Kind: engine.EventFinish, Finish: engine.FinishStop},
		engine.Event{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: 3, OutputTokens: len(pieces)}})
	_, cancel := context.WithCancel(t.Context())
	run := &localRun{job: job, st: &scriptStream{evs: evs}, cancel: cancel}
	sink := &recordSink{}
	res := run.Relay(t.Context(), sink, nil)
	require.NoError(t, res.Err)
	return sink, res
}

// The relay sends a reasoning model's section as reasoning, counts its
// tokens, and finds a </think> split across tokens.
func TestRelayReasoning(t *testing.T) {
	t.Parallel()
	sink, res := relayPieces(t, []string{"<think>", "\nI should", " greet.\n</", "think", ">\n\n", "Hello", "!"}, &ReasoningPlan{}, false)
	require.Equal(t, "\nI should greet.\n", strings.Join(sink.reasoning, ""))
	require.Equal(t, "\n\nHello!", strings.Join(sink.text, ""))
	require.Equal(t, "stop", sink.finish)
	require.Equal(t, 5, res.Usage.ReasoningTokens, "<think> through the token that ends </think>")
	require.Equal(t, 7, res.Usage.OutputTokens)

	// Without a plan nothing is split or counted.
	sink, res = relayPieces(t, []string{"<think>", "a", "</think>", "b"}, nil, false)
	require.Empty(t, sink.reasoning)
	require.Equal(t, "<think>a</think>b", strings.Join(sink.text, ""))
	require.Zero(t, res.Usage.ReasoningTokens)

	// A prompt that opened the section: the answer starts in it, and an
	// answer that never closes it is all reasoning.
	sink, res = relayPieces(t, []string{"still", " thinking"}, &ReasoningPlan{Open: true}, false)
	require.Equal(t, "still thinking", strings.Join(sink.reasoning, ""))
	require.Empty(t, sink.text)
	require.Equal(t, 2, res.Usage.ReasoningTokens)
}

// The tool-call parser sees only the content: a call written inside the
// reasoning section stays reasoning text.
func TestRelayReasoningToolCalls(t *testing.T) {
	t.Parallel()
	sink, _ := relayPieces(t, []string{"<think>", "maybe <tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n</tool_call>", "</think>",
		"\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}, &ReasoningPlan{}, true)
	require.Equal(t, "maybe <tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n</tool_call>", strings.Join(sink.reasoning, ""))
	require.NotEmpty(t, sink.calls)
	require.Equal(t, "get_weather", sink.calls[0].Function.Name)
	var args strings.Builder
	for _, c := range sink.calls {
		args.WriteString(c.Function.Arguments)
	}
	require.JSONEq(t, `{"city": "Paris"}`, args.String())
	require.Equal(t, "tool_calls", sink.finish)
}

func TestReasoningPlan(t *testing.T) {
	t.Parallel()
	pieces := []string{"<|im_start|>assistant\n", "<think>\n", "\n</think>\n\n"}
	m := &Model{Text: reasoningText{pieces: pieces, reasoning: true}}
	req := &Request{Endpoint: EndpointChatCompletions, Reasoning: true}
	require.Equal(t, &ReasoningPlan{}, reasoningPlan(req, m, []int32{0}))
	require.Equal(t, &ReasoningPlan{Open: true}, reasoningPlan(req, m, []int32{0, 1}))
	require.Equal(t, &ReasoningPlan{}, reasoningPlan(req, m, []int32{0, 1, 2}), "enable_thinking false closes it")

	require.Nil(t, reasoningPlan(&Request{Endpoint: EndpointChatCompletions}, m, []int32{0}), "not asked for")
	fwd := &Request{Endpoint: EndpointChatCompletions, Reasoning: true, Principal: Principal{Peer: "n2"}}
	require.Nil(t, reasoningPlan(fwd, m, []int32{0}), "forwarded: the entry node relays it as content")
	plain := &Model{Text: reasoningText{pieces: pieces}}
	require.Nil(t, reasoningPlan(req, plain, []int32{0}), "no <think> in the template")
}

// A sink that does not take reasoning apart gets it as text: nothing is
// lost.
func TestSendReasoningFallsBackToText(t *testing.T) {
	t.Parallel()
	var s textOnlySink
	require.NoError(t, sendReasoning(&s, 0, "why", nil))
	require.Equal(t, "why", s.text)
}

// textOnlySink is a Sink without Reasoning.
type textOnlySink struct{ text string }

func (s *textOnlySink) Begin() error { return nil }
func (s *textOnlySink) Text(_ int, text string, _ []api.TokenLogprob) error {
	s.text += text
	return nil
}
func (s *textOnlySink) ToolCall(int, api.ToolCallDelta) error        { return nil }
func (s *textOnlySink) Finish(int, string, []api.TokenLogprob) error { return nil }
func (s *textOnlySink) End(Usage) error                              { return nil }
func (s *textOnlySink) Fail(error) int                               { return 500 }
