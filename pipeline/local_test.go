package pipeline

import (
	"context"
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
