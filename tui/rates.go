package tui

import (
	"math"
	"time"

	"github.com/llmd/llmd/api"
)

// rateWindow is how far back the tokens/s sparkline reaches.
const rateWindow = time.Minute

// rateSample is the output rate between two snapshots: rate tokens per
// second over (from, to].
type rateSample struct {
	from, to time.Time
	rate     float64
}

// rateHistory is one model's output rate over the last minute, derived
// from successive snapshots' generated_tokens counters (llmd keeps no
// history itself).
type rateHistory struct {
	primed     bool
	lastAt     time.Time
	lastTokens uint64
	samples    []rateSample // oldest first, all ending within rateWindow of the last
}

// add records the counter tokens read at time at. A snapshot no newer than
// the last one is ignored; a counter that went down (llmd restarted)
// starts the history again.
func (h *rateHistory) add(at time.Time, tokens uint64) {
	if h.primed {
		if !at.After(h.lastAt) {
			return
		}
		if tokens < h.lastTokens {
			h.samples = h.samples[:0]
		} else {
			r := float64(tokens-h.lastTokens) / at.Sub(h.lastAt).Seconds()
			h.samples = append(h.samples, rateSample{from: h.lastAt, to: at, rate: r})
		}
	}
	h.primed, h.lastAt, h.lastTokens = true, at, tokens
	cut := at.Add(-rateWindow)
	i := 0
	for i < len(h.samples) && !h.samples[i].to.After(cut) {
		i++
	}
	h.samples = h.samples[i:]
}

// current is the rate between the last two snapshots; 0 before two.
func (h *rateHistory) current() float64 {
	if len(h.samples) == 0 {
		return 0
	}
	return h.samples[len(h.samples)-1].rate
}

// buckets splits the minute before the last snapshot into n equal buckets
// and returns each one's rate, averaged over the samples that overlap it
// (weighted by the overlap); NaN where no sample reaches.
func (h *rateHistory) buckets(n int) []float64 {
	out := make([]float64, n)
	if n <= 0 {
		return out
	}
	step := rateWindow / time.Duration(n)
	start := h.lastAt.Add(-rateWindow)
	for i := range out {
		bFrom, bTo := start.Add(time.Duration(i)*step), start.Add(time.Duration(i+1)*step)
		var sum, weight float64
		for _, s := range h.samples {
			lo, hi := later(s.from, bFrom), earlier(s.to, bTo)
			if hi.After(lo) {
				w := hi.Sub(lo).Seconds()
				sum += s.rate * w
				weight += w
			}
		}
		if weight == 0 {
			out[i] = math.NaN()
		} else {
			out[i] = sum / weight
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// rateTracker keeps a rateHistory per model.
type rateTracker struct {
	byModel map[string]*rateHistory
}

func newRateTracker() *rateTracker {
	return &rateTracker{byModel: map[string]*rateHistory{}}
}

// observe records snapshot s, taken at time at, and forgets models it no
// longer lists.
func (t *rateTracker) observe(s *api.Snapshot, at time.Time) {
	seen := make(map[string]bool, len(s.Models))
	for _, m := range s.Models {
		seen[m.Model] = true
		h := t.byModel[m.Model]
		if h == nil {
			h = &rateHistory{}
			t.byModel[m.Model] = h
		}
		h.add(at, m.GeneratedTokens)
	}
	for name := range t.byModel {
		if !seen[name] {
			delete(t.byModel, name)
		}
	}
}

// current is model's latest output rate in tokens per second.
func (t *rateTracker) current(model string) float64 {
	if h := t.byModel[model]; h != nil {
		return h.current()
	}
	return 0
}

// spark draws model's last minute of output rate in width cells.
func (t *rateTracker) spark(model string, width int) string {
	h := t.byModel[model]
	if h == nil {
		h = &rateHistory{}
	}
	return sparkline(h.buckets(width))
}
