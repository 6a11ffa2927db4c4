package relay

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// producingWriter stands for a client that reads steadily but slower than
// the stream is written: every event it takes, two more arrive.
type producingWriter struct {
	h      http.Header
	s      *Stream
	writes int
}

func (w *producingWriter) Header() http.Header { return w.h }
func (w *producingWriter) WriteHeader(int)     {}
func (w *producingWriter) Flush()              {}
func (w *producingWriter) Write(b []byte) (int, error) {
	w.writes++
	w.s.Push([]byte("data: more\n\n"))
	w.s.Push([]byte("data: more\n\n"))
	return len(b), nil
}

// TestFollowDropsASteadySlowReaderMidWrite: a client that keeps reading,
// too slowly, is closed once what piled up behind it passes MaxLag, even
// in the middle of one long write (a resumed backlog being sent); the
// backlog itself does not count against it.
func TestFollowDropsASteadySlowReaderMidWrite(t *testing.T) {
	t.Parallel()
	s := NewStream("r", "t", true, false, Limits{MaxEvents: 10_000, MaxBytes: 1 << 20}, func() {})
	const backlog = 1000
	for range backlog {
		s.Push([]byte("data: old\n\n"))
	}
	w := &producingWriter{h: http.Header{}, s: s}
	var logs bytes.Buffer
	cfg := FollowConfig{Heartbeat: time.Hour, WriteTimeout: time.Second, MaxLag: 100 * len("data: more\n\n")}
	Follow(context.Background(), w, s, 0, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.Contains(t, logs.String(), "closing a client that fell behind")
	// About 50 events of the backlog went out before 100 new ones piled up:
	// well inside the backlog, which alone (11 KB) is over the limit.
	require.Greater(t, w.writes, 40)
	require.Less(t, w.writes, 60)
	require.Zero(t, s.Readers())
}

// TestFollowKeepsAReaderThatKeepsUp: the same backlog to a client that
// keeps up is sent whole and the stream followed to its end.
func TestFollowKeepsAReaderThatKeepsUp(t *testing.T) {
	t.Parallel()
	s := NewStream("r", "t", true, false, Limits{MaxEvents: 10_000, MaxBytes: 1 << 20}, func() {})
	for range 1000 {
		s.Push([]byte("data: old\n\n"))
	}
	s.End(time.Now())
	rec := &plainWriter{h: http.Header{}}
	var logs bytes.Buffer
	cfg := FollowConfig{Heartbeat: time.Hour, WriteTimeout: time.Second, MaxLag: 100}
	Follow(context.Background(), rec, s, 0, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NotContains(t, logs.String(), "fell behind")
	require.Equal(t, 1000*len("data: old\n\n"), rec.n)
}

type plainWriter struct {
	h http.Header
	n int
}

func (w *plainWriter) Header() http.Header { return w.h }
func (w *plainWriter) WriteHeader(int)     {}
func (w *plainWriter) Flush()              {}
func (w *plainWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return io.Discard.Write(b)
}
