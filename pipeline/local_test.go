package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

// tickStream delivers a token event after each of its gaps, then blocks.
type tickStream struct{ gaps []time.Duration }

func (s *tickStream) Next(ctx context.Context) (engine.Event, error) {
	if len(s.gaps) == 0 {
		<-ctx.Done()
		return engine.Event{}, ctx.Err()
	}
	t := time.NewTimer(s.gaps[0])
	defer t.Stop()
	select {
	case <-t.C:
		s.gaps = s.gaps[1:]
		return engine.Event{Kind: engine.EventToken}, nil
	case <-ctx.Done():
		return engine.Event{}, ctx.Err()
	}
}

// TestWatchdogRearms: tokens closer together than the stall timeout keep a
// request alive however long it runs; the first gap longer than it ends
// the request with ErrStalled.
func TestWatchdogRearms(t *testing.T) {
	t.Parallel()
	gaps := make([]time.Duration, 12)
	for i := range gaps {
		gaps[i] = 30 * time.Millisecond
	}
	st := &tickStream{gaps: gaps}
	wd := watchdog{stall: 100 * time.Millisecond}
	defer wd.stop()
	start := time.Now()
	for range gaps {
		_, err := wd.next(t.Context(), st)
		require.NoError(t, err)
		wd.progress()
	}
	require.Greater(t, time.Since(start), 300*time.Millisecond, "longer than the stall timeout in all")
	_, err := wd.next(t.Context(), st)
	require.ErrorIs(t, err, ErrStalled)
}

func TestNodeIDs(t *testing.T) {
	t.Parallel()
	a, b := NewNodeID("chatcmpl-", "node-a"), NewNodeID("chatcmpl-", "node-a")
	require.NotEqual(t, a, b)
	require.Len(t, a, len("chatcmpl-")+32)
	require.Equal(t, NodeTag("node-a"), IDTag(a))
	require.Equal(t, IDTag(a), IDTag(b))
	require.NotEqual(t, NodeTag("node-a"), NodeTag("node-b"))
	require.Equal(t, NodeTag("n"), IDTag(NewNodeID("req_", "n")))
	require.Len(t, IDTag(NewID("cmpl-")), 8, "a plain id has a (random) tag too")
	for _, bad := range []string{"", "chatcmpl-", "chatcmpl-xyz", "chatcmpl-" + strings.Repeat("g", 32), "nodash"} {
		require.Empty(t, IDTag(bad), bad)
	}
	require.Equal(t, "chatcmpl-", NewNodeID("chatcmpl-", "")[:9])
}
