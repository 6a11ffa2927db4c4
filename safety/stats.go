package safety

import (
	"slices"
	"sync"
	"time"
)

// latencyWindow is the number of recent checks the latency percentiles are
// computed over.
const latencyWindow = 1024

// Stats counts a Checker's checks since New, for /metrics and `llmctl
// top`. Checks = Allowed + Flagged + Blocked + Failures + Canceled.
type Stats struct {
	// Checks is the number of checks run.
	Checks uint64
	// Allowed, Flagged and Blocked count the classifier's verdicts
	// (failures, whatever the policy made of them, are not among them).
	Allowed, Flagged, Blocked uint64
	// Failures counts checks the classifier gave no usable answer to;
	// TimedOut counts those of them that timed out.
	Failures, TimedOut uint64
	// Canceled counts checks abandoned because the caller's context
	// ended (the client went away, or Wait gave up).
	Canceled uint64
	// LatencyP50 and LatencyP95 are percentiles of the latency of the
	// last 1024 checks that were not abandoned (failures included);
	// 0 before the first.
	LatencyP50, LatencyP95 time.Duration
}

// Stats returns the counts so far. A nil Checker has none.
func (c *Checker) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return c.stats.snapshot()
}

// stats is a Checker's counters and latency window.
//
// Locking: mu guards every field.
type stats struct {
	mu        sync.Mutex
	counts    Stats // percentiles unset
	latencies []time.Duration
	next      int // where the next latency goes once the window is full
}

func (s *stats) record(v Verdict, out outcome, latency time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts.Checks++
	switch out {
	case answered:
		switch v {
		case Allow:
			s.counts.Allowed++
		case Flag:
			s.counts.Flagged++
		case Block:
			s.counts.Blocked++
		}
	case timedOut:
		s.counts.TimedOut++
		s.counts.Failures++
	case failed:
		s.counts.Failures++
	case canceled:
		s.counts.Canceled++
		return // its latency is the caller's, not the classifier's
	}
	if len(s.latencies) < latencyWindow {
		s.latencies = append(s.latencies, latency)
		return
	}
	s.latencies[s.next] = latency
	s.next = (s.next + 1) % latencyWindow
}

func (s *stats) snapshot() Stats {
	s.mu.Lock()
	st := s.counts
	sorted := slices.Clone(s.latencies)
	s.mu.Unlock()
	slices.Sort(sorted)
	st.LatencyP50 = percentile(sorted, 50)
	st.LatencyP95 = percentile(sorted, 95)
	return st
}

// percentile returns the p-th percentile (nearest rank) of sorted, 0 if it
// is empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n), at least 1 for p > 0
	return sorted[max(rank, 1)-1]
}
