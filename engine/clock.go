package engine

import (
	"context"
	"sync"
	"time"
)

// RealClock is the wall clock: Now is time.Now and Sleep waits for real.
// The zero value is ready to use.
type RealClock struct{}

var _ Clock = RealClock{}

// Now returns the current wall-clock time.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits for d, or returns ctx's error as soon as ctx is done. A
// non-positive d returns at once (nil, unless ctx is already done).
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// VirtualClock is a simulated clock: Sleep advances it instantly, so an
// engine on a virtual clock runs a simulated hour in seconds. It only moves
// when Sleep or Advance moves it.
//
// Locking: safe for concurrent use. Concurrent sleepers do not wait for one
// another: each advances the clock by its own d, one after the other.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Time
}

var _ Clock = (*VirtualClock)(nil)

// NewVirtualClock returns a virtual clock that reads start.
func NewVirtualClock(start time.Time) *VirtualClock {
	return &VirtualClock{now: start}
}

// Now returns the virtual time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep advances the clock by d at once and returns nil. If ctx is already
// done it returns ctx's error and leaves the clock alone. A non-positive d
// leaves the clock alone.
func (c *VirtualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Advance moves the clock forward by d; a non-positive d does nothing (the
// clock never runs backwards).
func (c *VirtualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
