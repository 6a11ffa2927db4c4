package quota

import (
	"sync"
	"time"
)

// breakerState is the circuit breaker's state.
type breakerState int

const (
	breakerClosed   breakerState = iota // calls go to Redis
	breakerOpen                         // calls skip Redis until the cooldown ends
	breakerHalfOpen                     // one probe call is on its way to Redis
)

func (s breakerState) String() string {
	switch s {
	case breakerClosed:
		return "closed"
	case breakerOpen:
		return "open"
	default:
		return "half-open"
	}
}

// breaker is a consecutive-failure circuit breaker: after threshold
// failures in a row it opens and skips Redis; after cooldown it lets one
// probe through (half-open), which closes it on success and opens it again
// on failure. Every call that allow admits must report success or failure.
//
// Locking: mu guards every field.
type breaker struct {
	now       func() time.Time
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	state    breakerState
	failures int // consecutive
	openedAt time.Time
}

func newBreaker(now func() time.Time, threshold int, cooldown time.Duration) *breaker {
	return &breaker{now: now, threshold: threshold, cooldown: cooldown}
}

// allow reports whether a call may go to Redis.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerClosed:
		return true
	case breakerOpen:
		if b.now().Sub(b.openedAt) >= b.cooldown {
			b.state = breakerHalfOpen
			return true
		}
	}
	return false
}

// success records a call that Redis answered; it reports whether that
// closed an open breaker.
func (b *breaker) success() (recovered bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	recovered = b.state != breakerClosed
	b.state, b.failures = breakerClosed, 0
	return recovered
}

// failure records a failed call; it reports whether that opened the
// breaker from closed.
func (b *breaker) failure() (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	switch b.state {
	case breakerClosed:
		if b.failures < b.threshold {
			return false
		}
		opened = true
	case breakerOpen:
		// A call admitted before the breaker opened failed late: it
		// changes nothing.
		return false
	}
	b.state, b.openedAt = breakerOpen, b.now()
	return opened
}

// status returns the state and the consecutive failures.
func (b *breaker) status() (breakerState, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.failures
}
