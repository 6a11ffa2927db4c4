package engine

import (
	"fmt"
	"time"
)

// DegradeLevel is a step of the degradation ladder: how far a replica under
// overload has gone in giving up lower tiers' service to keep the higher
// tiers' latency. Each level includes the ones below it.
type DegradeLevel int

// The ladder's steps, in the order they are taken.
const (
	// DegradeNone: normal service.
	DegradeNone DegradeLevel = iota
	// DegradePauseBatch: the scheduler admits no batch-tier or shadow work
	// (it stays queued).
	DegradePauseBatch
	// DegradeLimitFree: the request pipeline caps free-tier max_tokens and
	// routes the free tier to its configured smaller model.
	DegradeLimitFree
	// DegradeShedFree: the request pipeline refuses new free-tier requests
	// with 429 and Retry-After.
	DegradeShedFree
	// DegradeQueuePaid: nothing is left to shed; paid tiers queue longer.
	DegradeQueuePaid
)

var degradeNames = [...]string{"none", "pause_batch", "limit_free", "shed_free", "queue_paid"}

func (l DegradeLevel) String() string {
	if l >= 0 && int(l) < len(degradeNames) {
		return degradeNames[l]
	}
	return fmt.Sprintf("DegradeLevel(%d)", int(l))
}

// LadderConfig sets when the ladder climbs and descends. Pressure is a
// queue wait (the oldest waiting non-batch request) or a KV-cache use
// above the high marks; calm is both below the low marks. Under pressure
// the ladder climbs one level per Hold; when calm it descends one level
// per Hold; in between it stays.
type LadderConfig struct {
	// Disabled keeps the ladder at DegradeNone.
	Disabled      bool
	QueueWaitHigh time.Duration
	QueueWaitLow  time.Duration
	// KVHigh and KVLow are fractions of the KV blocks in use.
	KVHigh float64
	KVLow  float64
	Hold   time.Duration
}

// DefaultLadderConfig returns the documented defaults: pressure at a 2 s
// queue wait or 97% of the KV cache in use, calm below 0.5 s and 85%, one
// level per second.
func DefaultLadderConfig() LadderConfig {
	return LadderConfig{QueueWaitHigh: 2 * time.Second, QueueWaitLow: 500 * time.Millisecond,
		KVHigh: 0.97, KVLow: 0.85, Hold: time.Second}
}

// Validate reports the first invalid field.
func (c LadderConfig) Validate() error {
	switch {
	case c.Disabled:
		return nil
	case c.QueueWaitHigh <= 0 || c.QueueWaitLow < 0 || c.QueueWaitLow > c.QueueWaitHigh:
		return fmt.Errorf("engine: ladder queue wait marks must satisfy 0 <= low <= high, 0 < high; got low %v, high %v",
			c.QueueWaitLow, c.QueueWaitHigh)
	case !(c.KVHigh > 0 && c.KVHigh <= 1) || !(c.KVLow >= 0 && c.KVLow <= c.KVHigh):
		return fmt.Errorf("engine: ladder KV marks must satisfy 0 <= low <= high <= 1, 0 < high; got low %g, high %g",
			c.KVLow, c.KVHigh)
	case c.Hold <= 0:
		return fmt.Errorf("engine: ladder hold must be positive, got %v", c.Hold)
	}
	return nil
}

// ladder is the degradation state machine. It reads no clock: the engine
// feeds it the time with each observation.
type ladder struct {
	cfg   LadderConfig
	level DegradeLevel
	// cond is the last reading's condition (-1 calm, 0 between the marks,
	// +1 pressure) and since when it has held, or since the last change
	// of level, whichever is later.
	cond  int
	since time.Time
}

// observe takes one reading and returns the level before it; the new level
// is l.level.
func (l *ladder) observe(now time.Time, wait time.Duration, kv float64) DegradeLevel {
	prev := l.level
	if l.cfg.Disabled {
		return prev
	}
	cond := 0
	switch {
	case wait > l.cfg.QueueWaitHigh || kv > l.cfg.KVHigh:
		cond = 1
	case wait < l.cfg.QueueWaitLow && kv < l.cfg.KVLow:
		cond = -1
	}
	if cond != l.cond || l.since.IsZero() {
		l.cond, l.since = cond, now
	}
	held := now.Sub(l.since)
	if held < l.cfg.Hold {
		return prev
	}
	switch {
	case cond > 0 && l.level < DegradeQueuePaid:
		l.level++
		l.since = now
	case cond < 0 && l.level > DegradeNone:
		// A long calm (an idle engine is observed rarely) descends as many
		// levels as holds have passed.
		l.level = max(DegradeNone, l.level-DegradeLevel(held/l.cfg.Hold))
		l.since = now
	}
	return prev
}

// Ladder is the degradation ladder for a queue the engine does not hold
// (an upstream engine's, in front of which llmd queues): the same state
// machine the engine runs, fed by its owner.
type Ladder struct{ l ladder }

// NewLadder returns a ladder at DegradeNone.
func NewLadder(cfg LadderConfig) *Ladder { return &Ladder{l: ladder{cfg: cfg}} }

// Observe takes one reading (the oldest waiting non-batch request's wait,
// the KV-cache use from 0 to 1) at now and returns the level after it.
func (l *Ladder) Observe(now time.Time, wait time.Duration, kv float64) DegradeLevel {
	l.l.observe(now, wait, kv)
	return l.l.level
}
