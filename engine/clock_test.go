package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRealClock(t *testing.T) {
	t.Parallel()
	var c RealClock

	before := time.Now()
	require.NoError(t, c.Sleep(t.Context(), 5*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(before), 5*time.Millisecond)
	require.False(t, c.Now().Before(before))

	require.NoError(t, c.Sleep(t.Context(), 0))
	require.NoError(t, c.Sleep(t.Context(), -time.Second))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.Canceled)
	require.ErrorIs(t, c.Sleep(ctx, 0), context.Canceled)

	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	before = time.Now()
	require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.DeadlineExceeded)
	require.Less(t, time.Since(before), time.Minute)
}

func TestVirtualClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	tests := map[string]struct {
		steps []time.Duration
		want  time.Duration
	}{
		"none":     {want: 0},
		"one":      {steps: []time.Duration{time.Hour}, want: time.Hour},
		"several":  {steps: []time.Duration{time.Millisecond, 2 * time.Second, 3 * time.Microsecond}, want: 2*time.Second + time.Millisecond + 3*time.Microsecond},
		"zero":     {steps: []time.Duration{0, 0}, want: 0},
		"negative": {steps: []time.Duration{time.Second, -time.Hour}, want: time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := NewVirtualClock(start)
			wall := time.Now()
			for _, d := range tc.steps {
				require.NoError(t, c.Sleep(t.Context(), d))
			}
			require.Equal(t, start.Add(tc.want), c.Now())
			require.Less(t, time.Since(wall), time.Minute, "a virtual sleep must not wait")
		})
	}
}

func TestVirtualClockAdvance(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c := NewVirtualClock(start)
	c.Advance(time.Minute)
	c.Advance(-time.Hour)
	require.Equal(t, start.Add(time.Minute), c.Now())
}

func TestVirtualClockSleepCancelled(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c := NewVirtualClock(start)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.Canceled)
	require.Equal(t, start, c.Now(), "a cancelled sleep must not move the clock")
}

func TestVirtualClockConcurrent(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	c := NewVirtualClock(start)
	const workers, each = 8, 1000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range each {
				if i%2 == 0 {
					_ = c.Sleep(t.Context(), time.Millisecond)
				} else {
					c.Advance(time.Millisecond)
				}
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	require.Equal(t, start.Add(workers*each*time.Millisecond), c.Now())
}
