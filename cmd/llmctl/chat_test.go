package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newTestChatter returns a chatter of model on the llmd at url, writing to
// out and errOut.
func newTestChatter(t *testing.T, url string, out, errOut io.Writer) *chatter {
	t.Helper()
	c, err := api.NewClient(url, nil)
	require.NoError(t, err)
	a := &app{addr: url, base: url, client: c}
	return &chatter{
		client: c,
		req:    api.NativeChatRequest{Model: "sim/small"},
		out:    out,
		errOut: errOut,
		report: a.apiError,
	}
}

// runInteractive runs c.interactive in a goroutine and returns the channel
// its result arrives on.
func runInteractive(t *testing.T, c *chatter, in io.Reader, interrupts <-chan os.Signal) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- c.interactive(t.Context(), in, interrupts) }()
	return errc
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

const banner = "Chatting with sim/small. Type /? for help, /bye or Ctrl-D to quit.\n"

func TestInteractiveConversation(t *testing.T) {
	f := &fakeLLMD{}
	srv := newFakeLLMD(t, f)
	var out, errOut syncBuffer
	c := newTestChatter(t, srv.URL, &out, &errOut)
	c.system = "be terse"

	in := strings.NewReader("hello\n\n  again  \n/?\n/nope x\n/clear\nthird\n/bye\nnever read\n")
	err := wait(t, runInteractive(t, c, in, nil), "the loop to end")
	require.NoError(t, err)
	require.Empty(t, errOut.String())
	require.Equal(t, banner+
		">>> Hello world\n\n"+
		">>> >>> Hello world\n\n"+
		">>> "+helpText+
		">>> Unknown command /nope. Type /? for help.\n"+
		">>> Cleared the conversation.\n"+
		">>> Hello world\n\n"+
		">>> ", out.String())

	sys := api.Message{Role: "system", Content: "be terse"}
	user := func(s string) api.Message { return api.Message{Role: "user", Content: api.Content(s)} }
	assistant := api.Message{Role: "assistant", Content: "Hello world"}
	require.Equal(t, []api.Message{sys, user("hello")}, (<-f.reqs).Messages)
	require.Equal(t, []api.Message{sys, user("hello"), assistant, user("again")}, (<-f.reqs).Messages)
	require.Equal(t, []api.Message{sys, user("third")}, (<-f.reqs).Messages)
	require.Empty(t, f.reqs)
}

func TestInteractiveEOFQuits(t *testing.T) {
	srv := newFakeLLMD(t, &fakeLLMD{})
	var out syncBuffer
	c := newTestChatter(t, srv.URL, &out, io.Discard)
	err := wait(t, runInteractive(t, c, strings.NewReader("hi"), nil), "the loop to end")
	require.NoError(t, err)
	require.Equal(t, banner+">>> Hello world\n\n>>> \n", out.String())
}

func TestInteractiveInterruptAtPrompt(t *testing.T) {
	srv := newFakeLLMD(t, &fakeLLMD{})
	var out syncBuffer
	c := newTestChatter(t, srv.URL, &out, io.Discard)
	pr, pw := io.Pipe()
	interrupts := make(chan os.Signal) // unbuffered: a send returns once the loop took it
	errc := runInteractive(t, c, pr, interrupts)

	interrupts <- os.Interrupt
	interrupts <- os.Interrupt
	_, err := io.WriteString(pw, "/bye\n")
	require.NoError(t, err)
	require.NoError(t, wait(t, errc, "the loop to end"))
	require.Equal(t, banner+">>> "+
		"\nuse /bye or Ctrl-D to quit\n>>> "+
		"\nuse /bye or Ctrl-D to quit\n>>> ", out.String())
	require.NoError(t, pw.Close())
}

func TestInteractiveInterruptCancelsAnswer(t *testing.T) {
	var calls atomic.Int32
	streaming := make(chan struct{})
	gone := make(chan struct{})
	f := &fakeLLMD{reply: func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest) {
		if calls.Add(1) > 1 {
			streamTokens(w, req.Model, "Hello", " world")
			return
		}
		startSSE(w)
		writeSSE(w, tokenEvent(1, "partial"))
		close(streaming)
		<-r.Context().Done() // the client went away: llmd would free the sequence
		close(gone)
	}}
	srv := newFakeLLMD(t, f)
	var out, errOut syncBuffer
	c := newTestChatter(t, srv.URL, &out, &errOut)
	pr, pw := io.Pipe()
	interrupts := make(chan os.Signal)
	errc := runInteractive(t, c, pr, interrupts)

	_, err := io.WriteString(pw, "first question\n")
	require.NoError(t, err)
	wait(t, streaming, "the first answer to stream")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "partial") },
		10*time.Second, time.Millisecond, "the first token is shown")
	interrupts <- os.Interrupt
	wait(t, gone, "the server to see the request cancelled")

	_, err = io.WriteString(pw, "second question\n")
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, wait(t, errc, "the loop to end"))

	require.Empty(t, errOut.String())
	require.Equal(t, banner+
		">>> partial\n^C (cancelled)\n"+
		">>> Hello world\n\n"+
		">>> \n", out.String())
	<-f.reqs
	// The cancelled turn is not part of the conversation.
	require.Equal(t, []api.Message{{Role: "user", Content: "second question"}}, (<-f.reqs).Messages)
}

func TestInteractiveServerErrorContinues(t *testing.T) {
	var calls atomic.Int32
	f := &fakeLLMD{reply: func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest) {
		if calls.Add(1) == 1 {
			writeAPIError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "too many requests, retry in 2s")
			return
		}
		streamTokens(w, req.Model, "ok")
	}}
	srv := newFakeLLMD(t, f)
	var out, errOut syncBuffer
	c := newTestChatter(t, srv.URL, &out, &errOut)
	err := wait(t, runInteractive(t, c, strings.NewReader("a\nb\n"), nil), "the loop to end")
	require.NoError(t, err)
	require.Equal(t, "llmctl: too many requests, retry in 2s\n", errOut.String())
	require.Equal(t, banner+">>> >>> ok\n\n>>> \n", out.String())
	<-f.reqs
	require.Equal(t, []api.Message{{Role: "user", Content: "b"}}, (<-f.reqs).Messages)
}
