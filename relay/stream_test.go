package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamDropsWhatItsOnlyReaderRead: a stream that is not resumable
// frees the events its one reader has read; a resumable one keeps them
// for a later reader.
func TestStreamDropsWhatItsOnlyReaderRead(t *testing.T) {
	t.Parallel()
	for _, resumable := range []bool{false, true} {
		l := NewStream("r", "t", resumable, resumable, Limits{MaxEvents: 100, MaxBytes: 1 << 20}, func() {})
		for range 3 {
			l.Push([]byte("data: x\n\n"))
		}
		evs, next, _, gone, _ := l.Read(0)
		require.Len(t, evs, 3)
		require.False(t, gone)
		l.Push([]byte("data: y\n\n"))
		evs, next, _, gone, _ = l.Read(next)
		require.Len(t, evs, 1)
		require.Equal(t, "data: y\n\n", string(evs[0]))
		require.False(t, gone)
		require.Equal(t, 4, next)
		require.Equal(t, 4, l.Next(), "numbering goes on")
		l.mu.Lock()
		kept, bytes := len(l.events), l.bytes
		l.mu.Unlock()
		if resumable {
			require.Equal(t, 4, kept)
			require.Equal(t, 36, bytes)
		} else {
			require.Equal(t, 1, kept, "only what the reader has not passed yet")
			require.Equal(t, 9, bytes)
		}
	}
}

// TestStreamIDs: with ids on, events that carry JSON are numbered by their
// place in the log; raw data ([DONE]) never gets an id.
func TestStreamIDs(t *testing.T) {
	t.Parallel()
	s := NewStream("r", "t", true, true, Limits{MaxEvents: 100, MaxBytes: 1 << 20}, func() {})
	require.NoError(t, s.Data("", map[string]string{"delta": "a<b"}))
	require.NoError(t, s.Final("done", []byte("[DONE]")))
	require.True(t, s.Terminated())
	evs, _, _, _, _ := s.Read(0)
	require.Equal(t, "id: 0\ndata: {\"delta\":\"a<b\"}\n\n", string(evs[0]))
	require.Equal(t, "event: done\ndata: [DONE]\n\n", string(evs[1]))
}

// TestBehind: a reader's lag in time is the age of the oldest event it has
// not read; none left, none behind.
func TestBehind(t *testing.T) {
	t.Parallel()
	s := NewStream("r", "t", true, false, Limits{MaxEvents: 100, MaxBytes: 1 << 20}, func() {})
	s.Push([]byte("data: a\n\n"))
	time.Sleep(20 * time.Millisecond)
	s.Push([]byte("data: b\n\n"))
	now := time.Now()
	require.GreaterOrEqual(t, s.Behind(0, now), 20*time.Millisecond)
	require.Less(t, s.Behind(1, now), 20*time.Millisecond)
	require.Zero(t, s.Behind(2, now))
}
