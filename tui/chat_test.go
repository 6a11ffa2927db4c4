package tui

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// fakeChat is a ChatClient: reply answers each request (nil streams
// "Hello world" in two deltas); every request is recorded.
type fakeChat struct {
	reply func(ctx context.Context, req api.NativeChatRequest, fn func(api.NativeDelta) error) (*api.NativeDone, error)

	mu   sync.Mutex
	reqs []api.NativeChatRequest
}

func (f *fakeChat) Chat(ctx context.Context, req api.NativeChatRequest, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.reply != nil {
		return f.reply(ctx, req, fn)
	}
	for _, d := range []string{"Hello", " world"} {
		if err := fn(api.NativeDelta{Delta: d}); err != nil {
			return nil, err
		}
	}
	return &api.NativeDone{Model: req.Model, FinishReason: "stop", Usage: api.NativeUsage{OutputTokens: 2}}, nil
}

func (f *fakeChat) requests() []api.NativeChatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.NativeChatRequest(nil), f.reqs...)
}

func newTestChat(t *testing.T, f *fakeChat, o ChatOptions, width, height int) *Chat {
	t.Helper()
	if o.Request.Model == "" {
		o.Request.Model = "sim/small"
	}
	m := NewChat(f, o, testStyles(), DefaultKeyMap())
	t.Cleanup(m.Close)
	send(m, tea.WindowSizeMsg{Width: width, Height: height})
	return m
}

// TestChatView draws a finished streamed answer and one being streamed.
func TestChatView(t *testing.T) {
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("%dx%d", sz.w, sz.h), func(t *testing.T) {
			now := t0
			m := newTestChat(t, &fakeChat{}, ChatOptions{Tenant: "acme", Now: func() time.Time { return now }}, sz.w, sz.h)

			// The answer streams in three batches; the commands that would
			// run the stream are not run: the test delivers its messages.
			press(m, "Why is the sky blue?", "enter")
			require.True(t, m.Streaming())
			id := m.stream
			send(m, streamMsg{id: id, text: "Sunlight is scattered by the molecules of the air, ", first: t0.Add(150 * time.Millisecond)})
			send(m, streamMsg{id: id, text: "and blue light, with its short wavelength, is scattered the most; "})
			send(m, streamMsg{id: id, text: "so the sky looks blue from every direction.", end: true, at: t0.Add(2150 * time.Millisecond),
				done: &api.NativeDone{FinishReason: "stop", Usage: api.NativeUsage{OutputTokens: 41}}})
			require.False(t, m.Streaming())

			now = t0.Add(time.Minute)
			press(m, "And at sunset?", "enter")
			send(m, streamMsg{id: m.stream, text: "At sunset the light crosses more air", first: now.Add(time.Second)})
			requireScreen(t, m.View(), sz.w, sz.h)
		})
	}
}

func TestChatConversation(t *testing.T) {
	f := &fakeChat{}
	m := newTestChat(t, f, ChatOptions{System: "Be terse.", Request: api.NativeChatRequest{Model: "sim/small", MaxTokens: new(64)}}, 80, 24)
	l := newLoop(t, m)

	l.run(press(m, "hi", "enter"))
	l.until(func() bool { return !m.Streaming() })
	l.run(press(m, "/model sim/mid", "enter"))
	l.run(press(m, "/system Be kind.", "enter"))
	l.run(press(m, "again", "enter"))
	l.until(func() bool { return !m.Streaming() })

	reqs := f.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "sim/small", reqs[0].Model)
	require.Equal(t, 64, *reqs[0].MaxTokens, "the template's options are kept")
	require.Equal(t, []api.Message{
		{Role: "system", Content: api.Content("Be terse.")},
		{Role: "user", Content: api.Content("hi")},
	}, reqs[0].Messages)
	require.Equal(t, "sim/mid", reqs[1].Model)
	require.Equal(t, []api.Message{
		{Role: "system", Content: api.Content("Be kind.")},
		{Role: "user", Content: api.Content("hi")},
		{Role: "assistant", Content: api.Content("Hello world")},
		{Role: "user", Content: api.Content("again")},
	}, reqs[1].Messages)
	require.Equal(t, "sim/mid", m.Model())
	require.Contains(t, m.View(), "model sim/mid  tenant local  last answer: TTFT")
	require.Equal(t, ">>> hi\nHello world\n\n>>> again\nHello world\n\n", m.Transcript())

	// /clear forgets; an unknown command is said so.
	press(m, "/clear", "enter")
	require.Empty(t, m.History())
	press(m, "/nope", "enter")
	require.Contains(t, m.View(), "Unknown command /nope")
}

func TestChatCtrlCCancelsAnswer(t *testing.T) {
	cancelled := make(chan struct{})
	f := &fakeChat{reply: func(ctx context.Context, req api.NativeChatRequest, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
		if err := fn(api.NativeDelta{Delta: "Once upon"}); err != nil {
			return nil, err
		}
		<-ctx.Done() // api.Client.Chat sends DELETE /v1/requests/{id} here
		close(cancelled)
		return nil, ctx.Err()
	}}
	m := newTestChat(t, f, ChatOptions{}, 80, 24)
	l := newLoop(t, m)
	l.run(press(m, "tell me a story", "enter"))
	l.until(func() bool { return strings.Contains(m.View(), "Once upon") })

	require.Nil(t, press(m, "ctrl+c"))
	<-cancelled
	l.until(func() bool { return !m.Streaming() })
	require.Contains(t, m.View(), "(cancelled)")
	require.Empty(t, m.History(), "a cancelled answer stays out of the conversation")

	// Ctrl-C with nothing streaming clears the line, then hints.
	press(m, "draft")
	press(m, "ctrl+c")
	require.Equal(t, "", m.input.Value())
	press(m, "ctrl+c")
	require.Contains(t, m.View(), "Esc, Ctrl-D or /bye quits")
}

func TestChatError(t *testing.T) {
	f := &fakeChat{reply: func(context.Context, api.NativeChatRequest, func(api.NativeDelta) error) (*api.NativeDone, error) {
		return nil, &api.StatusError{StatusCode: 404, Code: "model_not_found", Message: `model "x" not found`}
	}}
	m := newTestChat(t, f, ChatOptions{ErrorText: func(err error) string { return "mapped: " + err.Error() }}, 80, 24)
	l := newLoop(t, m)
	l.run(press(m, "hi", "enter"))
	l.until(func() bool { return !m.Streaming() })
	require.Contains(t, m.View(), `error: mapped: llmd: 404 model_not_found: model "x" not found`)
	require.Empty(t, m.History())
}

func TestChatQuitKeys(t *testing.T) {
	isQuit := func(cmd tea.Cmd) bool {
		if cmd == nil {
			return false
		}
		_, ok := cmd().(tea.QuitMsg)
		return ok
	}
	m := newTestChat(t, &fakeChat{}, ChatOptions{}, 80, 24)
	require.True(t, isQuit(press(m, "esc")))
	require.True(t, isQuit(press(m, "ctrl+d")))
	require.True(t, isQuit(press(m, "/bye", "enter")))
	// Ctrl-D on a line with text deletes, as in a shell.
	require.False(t, isQuit(press(m, "abc", "ctrl+d")))
	// Enter while an answer streams does not send.
	m2 := newTestChat(t, &fakeChat{}, ChatOptions{}, 80, 24)
	press(m2, "one", "enter")
	require.Nil(t, press(m2, "two", "enter"))
	require.Contains(t, m2.View(), "wait for the answer")
}

// TestChatFlow runs the chat in a real program: open, ask, see the answer
// stream, quit.
func TestChatFlow(t *testing.T) {
	f := &fakeChat{}
	m := NewChat(f, ChatOptions{Request: api.NativeChatRequest{Model: "sim/small"}}, testStyles(), DefaultKeyMap())
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(80, 24))
	waitScreen(t, tm, "Chatting with sim/small")
	tm.Type("hi")
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	waitScreen(t, tm, "Hello world", "last answer: TTFT")
	tm.Send(tea.KeyMsg{Type: tea.KeyEsc})
	final := tm.FinalModel(t, teatest.WithFinalTimeout(10*time.Second)).(*Chat)
	final.Close()
	require.Len(t, final.History(), 2)
}
