package sim

import (
	"sync"
	"time"
)

// UtilizationWindow is the span [Executor.Utilization] averages over, as
// NVML's utilisation rate covers its last sample period.
const UtilizationWindow = time.Second

// utilBuckets splits UtilizationWindow into buckets of busy time.
const utilBuckets = 10

// utilMeter records the time the simulated GPUs spend running steps, in
// buckets of UtilizationWindow/utilBuckets keyed by their number since the
// Unix epoch, so a reading needs no list of steps however short they are.
//
// Locking: its own mutex; Forward holds the executor's for a whole step, and
// a reading must not wait for one.
type utilMeter struct {
	mu   sync.Mutex
	busy [utilBuckets]time.Duration
	num  [utilBuckets]int64 // the bucket each slot holds
}

const utilBucket = UtilizationWindow / utilBuckets

// add records busy time from start for d.
func (u *utilMeter) add(start time.Time, d time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := start.UnixNano()
	for d > 0 {
		b := t / int64(utilBucket)
		part := min(d, time.Duration((b+1)*int64(utilBucket)-t))
		slot := b % utilBuckets
		if u.num[slot] != b {
			u.num[slot], u.busy[slot] = b, 0
		}
		u.busy[slot] += part
		t += int64(part)
		d -= part
	}
}

// fraction is the busy share of the window that ends at now, 0 to 1.
func (u *utilMeter) fraction(now time.Time) float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := now.UnixNano()
	cur := t / int64(utilBucket)
	var busy time.Duration
	for b := cur - utilBuckets + 1; b <= cur; b++ {
		if slot := b % utilBuckets; b >= 0 && u.num[slot] == b {
			busy += u.busy[slot]
		}
	}
	// The current bucket has only run until now.
	window := time.Duration((utilBuckets-1)*int64(utilBucket) + t - cur*int64(utilBucket))
	if window <= 0 {
		return 0
	}
	return min(1, max(0, float64(busy)/float64(window)))
}

// Utilization is the share of the last [UtilizationWindow] the simulated
// GPUs spent running steps (0 to 1): what NVML would report as the GPU
// utilisation of a GPU busy for the step times the cost model gives. A
// step counts once it has ended. Safe for concurrent use.
func (e *Executor) Utilization() float64 {
	return e.util.fraction(e.clock.Now())
}
