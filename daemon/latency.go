package daemon

import (
	"slices"
	"sync"
	"time"
)

// latencyWindow keeps the TTFT and mean inter-token latency of a model's
// recently finished requests, for the percentiles of the last minute.
//
// Locking: mu guards all fields.
type latencyWindow struct {
	mu      sync.Mutex
	samples []latencySample // oldest first, bounded
}

type latencySample struct {
	at       time.Time
	ttft     time.Duration
	itl      time.Duration // 0: fewer than two tokens
	finished bool
}

const maxLatencySamples = 4096

func (w *latencyWindow) add(at time.Time, ttft, itl time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) >= maxLatencySamples {
		w.samples = append(w.samples[:0], w.samples[len(w.samples)/2:]...)
	}
	w.samples = append(w.samples, latencySample{at: at, ttft: ttft, itl: itl})
}

// percentiles returns the p50 and p95 of the TTFT and ITL samples taken
// since now-span, in seconds (0 without samples).
func (w *latencyWindow) percentiles(now time.Time, span time.Duration) (ttft50, ttft95, itl50, itl95 float64) {
	w.mu.Lock()
	cutoff := now.Add(-span)
	i := 0
	for i < len(w.samples) && w.samples[i].at.Before(cutoff) {
		i++
	}
	w.samples = w.samples[i:]
	var ttfts, itls []time.Duration
	for _, s := range w.samples {
		ttfts = append(ttfts, s.ttft)
		if s.itl > 0 {
			itls = append(itls, s.itl)
		}
	}
	w.mu.Unlock()
	ttft50, ttft95 = pct(ttfts, 0.5), pct(ttfts, 0.95)
	itl50, itl95 = pct(itls, 0.5), pct(itls, 0.95)
	return
}

// pct is the nearest-rank percentile q of ds, in seconds.
func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)].Seconds()
}
