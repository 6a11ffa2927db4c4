package engine

import (
	"math"
	"slices"
	"sync"
)

// outputEstimator learns how long each tenant's answers are, so admission
// can project a request's memory from its likely output rather than its
// max_tokens (which clients often set far above what they use).
type outputEstimator struct {
	def     int
	tenants map[string]*outputHistory
}

const historyLen = 64

// minSamples is how many finished answers a tenant needs before its own
// history replaces the default.
const minSamples = 8

type outputHistory struct {
	ring [historyLen]int32
	n    int // samples recorded, saturating at historyLen
	next int
	p90  int
}

func newOutputEstimator(def int) *outputEstimator {
	return &outputEstimator{def: def, tenants: make(map[string]*outputHistory)}
}

// expected is the number of output tokens to project for a request of
// tenant with the given max_tokens: the lesser of max_tokens and the p90 of
// the tenant's recent answers (or the default before it has enough).
func (o *outputEstimator) expected(tenant string, maxTokens int) int {
	est := o.def
	if h, ok := o.tenants[tenant]; ok && h.n >= minSamples {
		est = h.p90
	}
	return max(1, min(maxTokens, est))
}

// observe records a finished answer of n output tokens.
func (o *outputEstimator) observe(tenant string, n int) {
	h, ok := o.tenants[tenant]
	if !ok {
		if len(o.tenants) >= 100000 {
			return // bound memory; new tenants use the default
		}
		h = &outputHistory{}
		o.tenants[tenant] = h
	}
	h.ring[h.next] = int32(n)
	h.next = (h.next + 1) % historyLen
	h.n = min(h.n+1, historyLen)
	if h.n >= minSamples {
		var buf [historyLen]int32
		v := buf[:h.n]
		copy(v, h.ring[:h.n])
		slices.Sort(v)
		h.p90 = int(v[(len(v)*9+9)/10-1])
	}
}

// OutputEstimator is the scheduler's per-tenant estimate of answer lengths
// (the p90 of a tenant's last 64 answers once it has 8), safe for
// concurrent use, for callers outside the step loop: the request pipeline
// reserves quota with it.
type OutputEstimator struct {
	mu sync.Mutex
	o  *outputEstimator
}

// NewOutputEstimator returns an estimator that projects max_tokens for a
// tenant without enough history.
func NewOutputEstimator() *OutputEstimator {
	return &OutputEstimator{o: newOutputEstimator(math.MaxInt)}
}

// Expected is the output tokens to expect from one choice of a request of
// tenant with the given max_tokens: the lesser of max_tokens and the
// tenant's p90.
func (e *OutputEstimator) Expected(tenant string, maxTokens int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.o.expected(tenant, maxTokens)
}

// Observe records an answer of n output tokens.
func (e *OutputEstimator) Observe(tenant string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.o.observe(tenant, n)
}
