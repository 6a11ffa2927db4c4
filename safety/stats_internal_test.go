package safety

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(ns ...int) []time.Duration {
		var d []time.Duration
		for _, n := range ns {
			d = append(d, time.Duration(n)*time.Millisecond)
		}
		return d
	}
	tests := map[string]struct {
		sorted   []time.Duration
		p50, p95 time.Duration
	}{
		"empty": {},
		"one":   {sorted: ms(7), p50: 7 * time.Millisecond, p95: 7 * time.Millisecond},
		"two":   {sorted: ms(1, 9), p50: time.Millisecond, p95: 9 * time.Millisecond},
		"1..100": {
			sorted: ms(func() []int {
				var s []int
				for i := 1; i <= 100; i++ {
					s = append(s, i)
				}
				return s
			}()...),
			p50: 50 * time.Millisecond, p95: 95 * time.Millisecond,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.p50, percentile(tc.sorted, 50))
			require.Equal(t, tc.p95, percentile(tc.sorted, 95))
		})
	}
}

// TestLatencyWindow: the percentiles cover the last latencyWindow checks
// only.
func TestLatencyWindow(t *testing.T) {
	t.Parallel()
	var s stats
	for range latencyWindow {
		s.record(Allow, answered, time.Hour)
	}
	require.Equal(t, time.Hour, s.snapshot().LatencyP50)
	for range latencyWindow {
		s.record(Allow, answered, time.Millisecond)
	}
	st := s.snapshot()
	require.Equal(t, time.Millisecond, st.LatencyP95, "the old hour-long checks left the window")
	require.Equal(t, uint64(2*latencyWindow), st.Checks)
	require.Len(t, s.latencies, latencyWindow)

	s.record(Allow, canceled, 10*time.Hour)
	require.Equal(t, time.Millisecond, s.snapshot().LatencyP95, "abandoned checks are not timed")
}
