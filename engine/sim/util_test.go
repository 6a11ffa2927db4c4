package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUtilization: back-to-back steps read 100%, steps with idle time
// between them their busy share, and an idle GPU 0.
func TestUtilization(t *testing.T) {
	t.Parallel()
	e, clock := newTestExecutor(t, testConfig(t, "h100", "small", 1))
	require.Zero(t, e.Utilization(), "no step yet")

	b := decodeBatch(32, 512)
	step := e.StepTime(b)
	require.Positive(t, step)
	// Busy for more than a window: 100%.
	for start := clock.Now(); clock.Now().Sub(start) < 2*UtilizationWindow; {
		_, err := e.Forward(t.Context(), b)
		require.NoError(t, err)
	}
	require.InDelta(t, 1, e.Utilization(), 0.01)

	// One step, then as long again idle, over two windows: about half.
	for start := clock.Now(); clock.Now().Sub(start) < 2*UtilizationWindow; {
		_, err := e.Forward(t.Context(), b)
		require.NoError(t, err)
		clock.Advance(step)
	}
	require.InDelta(t, 0.5, e.Utilization(), 0.1)

	// Idle for a window: 0.
	clock.Advance(UtilizationWindow + time.Millisecond)
	require.Zero(t, e.Utilization())
}

func TestUtilMeterSpansBuckets(t *testing.T) {
	t.Parallel()
	var u utilMeter
	t0 := time.Unix(1000, 0)
	u.add(t0, 350*time.Millisecond) // over four buckets
	require.InDelta(t, 0.35, u.fraction(t0.Add(UtilizationWindow-time.Nanosecond)), 0.001)
	// Half a second in, the window is still a second long (idle before t0)
	// less the current bucket's unrun part.
	require.InDelta(t, 0.35/0.9, u.fraction(t0.Add(500*time.Millisecond)), 0.001)
	require.Zero(t, u.fraction(t0.Add(3*UtilizationWindow)))
}
