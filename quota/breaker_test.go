package quota

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBreaker(t *testing.T) {
	clock := newFakeClock(t0)
	b := newBreaker(clock.Now, 3, time.Second)

	require.True(t, b.allow())
	require.False(t, b.failure())
	require.False(t, b.failure())
	require.False(t, b.success(), "success while closed recovers nothing")
	_, failures := b.status()
	require.Zero(t, failures, "a success resets the count: failures must be consecutive")

	require.False(t, b.failure())
	require.False(t, b.failure())
	require.True(t, b.failure(), "the third consecutive failure opens")
	require.False(t, b.allow())
	clock.Advance(time.Second - time.Millisecond)
	require.False(t, b.allow(), "still cooling down")

	// After the cooldown exactly one caller probes.
	clock.Advance(time.Millisecond)
	var probes atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if b.allow() {
				probes.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), probes.Load())
	state, _ := b.status()
	require.Equal(t, breakerHalfOpen, state)

	// The probe fails: open for another cooldown.
	require.False(t, b.failure(), "reopening from half-open is not a new opening")
	require.False(t, b.allow())
	clock.Advance(time.Second)
	require.True(t, b.allow())
	require.True(t, b.success(), "the probe's success closes the breaker")
	require.True(t, b.allow())
	assert.Equal(t, "closed", breakerClosed.String())
	assert.Equal(t, "open", breakerOpen.String())
	assert.Equal(t, "half-open", breakerHalfOpen.String())
}

func TestSeenSet(t *testing.T) {
	s := newSeenSet(2)
	now := t0
	assert.False(t, s.observe("a", true, now), "a new tenant is not a loss")
	assert.False(t, s.observe("a", false, now.Add(time.Hour)))
	assert.True(t, s.observe("a", true, now.Add(2*time.Hour)), "created again while seen: lost")
	assert.False(t, s.observe("a", true, now.Add(2*time.Hour+seenFor)), "not seen for a day: the state may have expired")

	s.observe("b", false, now)
	s.observe("c", false, now) // full: forgets a or b
	assert.Len(t, s.at, 2)
}
