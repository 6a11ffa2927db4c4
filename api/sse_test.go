package api_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// readAll reads events until an error and returns them with that error.
func readAll(r io.Reader) ([]api.SSEEvent, error) {
	return readEvents(api.NewSSEReader(r))
}

// readEvents reads events from sr until an error.
func readEvents(sr *api.SSEReader) ([]api.SSEEvent, error) {
	var evs []api.SSEEvent
	for {
		ev, err := sr.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func msg(data string) api.SSEEvent { return api.SSEEvent{Event: "message", Data: data} }

func TestSSEReader(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []api.SSEEvent
	}{
		"empty":           {in: "", want: nil},
		"one event LF":    {in: "data: hello\n\n", want: []api.SSEEvent{msg("hello")}},
		"one event CRLF":  {in: "data: hello\r\n\r\n", want: []api.SSEEvent{msg("hello")}},
		"one event CR":    {in: "data: hello\r\r", want: []api.SSEEvent{msg("hello")}},
		"mixed endings":   {in: "data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r", want: []api.SSEEvent{msg("a\nb\nc"), msg("d")}},
		"two events":      {in: "data: a\n\ndata: b\n\n", want: []api.SSEEvent{msg("a"), msg("b")}},
		"multi-line data": {in: "data: line1\ndata: line2\ndata:\n\n", want: []api.SSEEvent{msg("line1\nline2\n")}},
		"heartbeats between events": {
			in:   ": ping\n\ndata: a\n\n: ping\n\n:\n\n: ping\ndata: b\n: ping\n\n",
			want: []api.SSEEvent{msg("a"), msg("b")},
		},
		"only heartbeats": {in: ": ping\n\n: ping\n\n", want: nil},
		"only one leading space stripped": {
			in:   "data:x\n\ndata:  y\n\ndata:\tz\n\n",
			want: []api.SSEEvent{msg("x"), msg(" y"), msg("\tz")},
		},
		"colon in value kept": {in: "data: {\"a\": \"b:c\"}\n\n", want: []api.SSEEvent{msg(`{"a": "b:c"}`)}},
		"field without colon": {in: "data\n\ndata\ndata\n\n", want: []api.SSEEvent{msg(""), msg("\n")}},
		"empty data dispatched": {
			in:   "data:\n\n",
			want: []api.SSEEvent{msg("")},
		},
		"event type": {
			in:   "event: done\ndata: {}\n\ndata: x\n\n",
			want: []api.SSEEvent{{Event: "done", Data: "{}"}, msg("x")},
		},
		"event without data not dispatched and reset": {
			in:   "event: foo\n\ndata: x\n\n",
			want: []api.SSEEvent{msg("x")},
		},
		"last event field wins": {
			in:   "event: a\nevent: b\ndata: x\n\n",
			want: []api.SSEEvent{{Event: "b", Data: "x"}},
		},
		"id persists and resets": {
			in: "id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\nid\ndata: d\n\n",
			want: []api.SSEEvent{
				{Event: "message", Data: "a", ID: "1"},
				{Event: "message", Data: "b", ID: "1"},
				{Event: "message", Data: "c", ID: "2"},
				{Event: "message", Data: "d"},
			},
		},
		"id without data sets buffer": {
			in:   "id: 7\n\ndata: a\n\n",
			want: []api.SSEEvent{{Event: "message", Data: "a", ID: "7"}},
		},
		"id with NUL ignored": {
			in:   "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
			want: []api.SSEEvent{{Event: "message", Data: "a", ID: "1"}, {Event: "message", Data: "b", ID: "1"}},
		},
		"retry and unknown fields ignored": {
			in:   "retry: 3000\nfoo: bar\ndata: a\n\nretry: 10\n\n",
			want: []api.SSEEvent{msg("a")},
		},
		"field names are case-sensitive": {in: "Data: a\n\ndata: b\n\n", want: []api.SSEEvent{msg("b")}},
		"BOM skipped":                    {in: "\xef\xbb\xbfdata: a\n\n", want: []api.SSEEvent{msg("a")}},
		"BOM only at start":              {in: "data: a\n\n\xef\xbb\xbfdata: b\n\n", want: []api.SSEEvent{msg("a")}},
		"unterminated final event discarded": {
			in:   "data: a\n\ndata: b\n",
			want: []api.SSEEvent{msg("a")},
		},
		"unterminated final line discarded": {
			in:   "data: a\n\ndata: b",
			want: []api.SSEEvent{msg("a")},
		},
		"native stream": {
			in: "id: 1\ndata: {\"delta\":\"He\",\"index\":0}\n\n: ping\n\nid: 2\ndata: {\"delta\":\"llo\",\"index\":0}\n\n" +
				"event: done\ndata: {\"id\":\"r1\"}\n\n",
			want: []api.SSEEvent{
				{Event: "message", Data: `{"delta":"He","index":0}`, ID: "1"},
				{Event: "message", Data: `{"delta":"llo","index":0}`, ID: "2"},
				{Event: "done", Data: `{"id":"r1"}`, ID: "2"},
			},
		},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
	}
	for name, tc := range tests {
		for rname, mk := range readers {
			t.Run(name+"/"+rname, func(t *testing.T) {
				got, err := readAll(mk(tc.in))
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, tc.want, got)
			})
		}
	}
}

// TestSSEReaderDispatchesWithoutReadAhead checks that an event is returned
// as soon as its blank line arrives, even with CR line ends (where the
// reader cannot know yet whether an LF follows): a stream must not stall
// until the next heartbeat.
func TestSSEReaderDispatchesWithoutReadAhead(t *testing.T) {
	for name, chunk := range map[string]string{
		"LF":   "data: a\n\n",
		"CR":   "data: a\r\r",
		"CRLF": "data: a\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			pr, pw := io.Pipe()
			t.Cleanup(func() { _ = pr.Close() })
			sr := api.NewSSEReader(pr)
			type result struct {
				ev  api.SSEEvent
				err error
			}
			res := make(chan result, 1)
			go func() {
				ev, err := sr.Next()
				res <- result{ev, err}
			}()
			_, err := pw.Write([]byte(chunk))
			require.NoError(t, err)
			select {
			case r := <-res:
				require.NoError(t, r.err)
				require.Equal(t, msg("a"), r.ev)
			case <-time.After(5 * time.Second):
				t.Fatal("event not dispatched before more input arrived")
			}
			// An LF after the final CR belongs to the previous line, not a
			// new blank line.
			go func() {
				_, _ = pw.Write([]byte("\ndata: b\n\n"))
				_ = pw.Close()
			}()
			evs, err := readEvents(sr)
			require.ErrorIs(t, err, io.EOF)
			require.Equal(t, []api.SSEEvent{msg("b")}, evs)
		})
	}
}

func TestSSEReaderErrors(t *testing.T) {
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		r := io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom))
		evs, err := readAll(r)
		require.ErrorIs(t, err, boom)
		require.Equal(t, []api.SSEEvent{msg("a")}, evs)
	})
	t.Run("line too long", func(t *testing.T) {
		r := strings.NewReader("data: " + strings.Repeat("x", api.MaxSSEEventBytes+1) + "\n\n")
		_, err := readAll(r)
		require.ErrorIs(t, err, api.ErrSSEEventTooLarge)
	})
	t.Run("event too large", func(t *testing.T) {
		line := "data: " + strings.Repeat("x", 1<<16) + "\n"
		r := strings.NewReader(strings.Repeat(line, api.MaxSSEEventBytes/(1<<16)+1) + "\n")
		_, err := readAll(r)
		require.ErrorIs(t, err, api.ErrSSEEventTooLarge)
	})
}

// TestSSEWriterRoundTrip: what AppendSSEEvent writes, SSEReader reads
// back as it was; comments are skipped; multi-line data keeps its lines.
func TestSSEWriterRoundTrip(t *testing.T) {
	t.Parallel()
	var b []byte
	b = api.AppendSSEComment(b, "ping")
	b = api.AppendSSEEvent(b, "0", "", []byte(`{"delta":"a"}`))
	b = api.AppendSSEEvent(b, "", "done", []byte("line 1\nline 2"))
	b = api.AppendSSEEvent(b, "", "", []byte("[DONE]"))
	require.Equal(t, ": ping\n\nid: 0\ndata: {\"delta\":\"a\"}\n\nevent: done\ndata: line 1\ndata: line 2\n\ndata: [DONE]\n\n", string(b))
	r := api.NewSSEReader(bytes.NewReader(b))
	var got []api.SSEEvent
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, ev)
	}
	require.Equal(t, []api.SSEEvent{
		{Event: "message", Data: `{"delta":"a"}`, ID: "0"},
		{Event: "done", Data: "line 1\nline 2", ID: "0"},
		{Event: "message", Data: "[DONE]", ID: "0"},
	}, got)
}
