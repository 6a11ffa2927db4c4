package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProgressInterval: a checkpoint at the first token, then at the first
// token at least an interval after the last checkpoint, with the count so
// far; a nil Progress ignores tokens.
func TestProgressInterval(t *testing.T) {
	t.Parallel()
	var saved []int
	p := NewProgress(100*time.Millisecond, func(n int) { saved = append(saved, n) })
	t0 := time.Unix(1700000000, 0)
	for i := range 50 { // a token every 10 ms
		p.Delivered(i+1, t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	require.Equal(t, []int{1, 11, 21, 31, 41}, saved)

	// A pause: the next token is checkpointed at once.
	p.Delivered(51, t0.Add(5*time.Second))
	require.Equal(t, 51, saved[len(saved)-1])

	var none *Progress
	none.Delivered(1, t0)
}

// TestProgressWithoutTimes: tokens without a time (a fake engine) are
// timed now.
func TestProgressWithoutTimes(t *testing.T) {
	t.Parallel()
	var saved []int
	p := NewProgress(time.Hour, func(n int) { saved = append(saved, n) })
	for i := range 10 {
		p.Delivered(i+1, time.Time{})
	}
	require.Equal(t, []int{1}, saved)
}
