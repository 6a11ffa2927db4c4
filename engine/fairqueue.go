package engine

import (
	"container/heap"
	"slices"
	"sort"
	"time"
)

// fairQueue holds the waiting sequences and decides which is admitted next,
// fairly in tokens at two levels:
//
//   - across priority classes, weighted fair queuing (stride scheduling): a
//     class's pass grows by the tokens it is admitted divided by its weight,
//     and the active class with the smallest pass goes next, so under load a
//     class with twice the weight gets twice the tokens and no class with
//     waiting work starves. The shadow class is the exception: it is
//     strictly below the others, offered only when no other class has a
//     sequence waiting (paused or not), so it may starve by design;
//   - across tenants inside a class, the same with equal weights: each
//     tenant's pass grows by the tokens it is admitted, and the tenant with
//     the smallest pass goes next. This is deficit round-robin with an
//     arbitrarily small quantum: one heavy tenant cannot fill its class's
//     share, and a tenant that goes idle keeps no credit.
//
// Within a tenant, sequences keep arrival order; a preempted sequence goes
// back to its place by arrival, ahead of later work.
//
// Locking: none; the scheduler owns it.
type fairQueue struct {
	classes [NumPriorities]classQueue
	n       int
	// tokens sums the waiting sequences' backlogs (set before push, kept
	// while they wait).
	tokens int
	// vtime is the pass of the class admitted last: a class that becomes
	// active starts from it, so idle time earns no credit.
	vtime float64
	// cost is the tokens a sequence is charged when admitted.
	cost func(*sequence) int
	// paused classes are skipped by peek (the degradation ladder).
	paused [NumPriorities]bool
	// resv puts the tenants under their reserved output rate first (see
	// reserve.go).
	resv *reservations
}

type classQueue struct {
	weight  float64
	pass    float64
	n       int
	tenants map[string]*tenantQueue
	heap    tenantHeap // tenants with waiting work, by pass
	// vtime is the pass of the tenant admitted last in this class.
	vtime int64
}

type tenantQueue struct {
	name  string
	seqs  []*sequence // by arrival
	pass  int64       // tokens admitted, offset by when it became active
	index int         // in the class heap
}

// defaultTierWeights weights shadow, batch, free, paid and enterprise, in
// Priority order. Shadow's weight only orders its own admissions (it never
// competes with the other classes), but it stays the smallest.
var defaultTierWeights = [NumPriorities]float64{0.5, 1, 2, 4, 8}

func newFairQueue(weights [NumPriorities]float64, cost func(*sequence) int) *fairQueue {
	q := &fairQueue{cost: cost, resv: newReservations()}
	for p := range q.classes {
		w := weights[p]
		if w <= 0 {
			w = defaultTierWeights[p]
		}
		q.classes[p] = classQueue{weight: w, tenants: make(map[string]*tenantQueue)}
	}
	return q
}

// Len is the number of waiting sequences.
func (q *fairQueue) Len() int { return q.n }

// Tokens is the sum of the waiting sequences' backlogs (their prompt
// tokens not cached when queued).
func (q *fairQueue) Tokens() int { return q.tokens }

// ClassLen is the number of waiting sequences of priority p.
func (q *fairQueue) ClassLen(p Priority) int { return q.classes[p].n }

func classOf(seq *sequence) Priority {
	return min(max(seq.r.req.Priority, 0), NumPriorities-1)
}

// push adds seq in arrival order among its tenant's sequences.
func (q *fairQueue) push(seq *sequence) {
	c := &q.classes[classOf(seq)]
	if c.n == 0 {
		c.pass = max(c.pass, q.vtime)
	}
	t, ok := c.tenants[seq.r.req.Tenant]
	if !ok {
		t = &tenantQueue{name: seq.r.req.Tenant, pass: c.vtime}
		c.tenants[t.name] = t
	}
	i := sort.Search(len(t.seqs), func(i int) bool { return seqBefore(seq, t.seqs[i]) })
	t.seqs = slices.Insert(t.seqs, i, seq)
	if len(t.seqs) == 1 {
		heap.Push(&c.heap, t)
	} else if i == 0 {
		heap.Fix(&c.heap, t.index) // a new head: ties break by its arrival
	}
	c.n++
	q.n++
	q.tokens += seq.backlog
	q.resv.queued(seq.r, 1)
}

// seqBefore orders sequences of one tenant by arrival, then choice index.
func seqBefore(a, b *sequence) bool {
	if a.r.arrival != b.r.arrival {
		return a.r.arrival < b.r.arrival
	}
	return a.index < b.index
}

// peek returns the sequence to admit next, or nil when none may be (empty,
// or only paused classes wait). A shadow sequence is returned only when no
// other class has a sequence waiting. A tenant delivered less than its
// reserved output rate goes first, whatever its class (see reserve.go).
func (q *fairQueue) peek() *sequence {
	if q.n == 0 {
		return nil
	}
	if name := q.resv.neediest(); name != "" {
		if seq := q.reservedHead(name); seq != nil {
			return seq
		}
	}
	// The active class with the smallest pass; ties go to the higher class.
	var best *classQueue
	for p := NumPriorities - 1; p > int(PriorityShadow); p-- {
		c := &q.classes[p]
		if c.n > 0 && !q.paused[p] && (best == nil || c.pass < best.pass) {
			best = c
		}
	}
	if best == nil {
		if !q.shadowOnly() || q.paused[PriorityShadow] {
			return nil
		}
		best = &q.classes[PriorityShadow]
	}
	return best.heap[0].seqs[0]
}

// shadowOnly reports whether every waiting sequence (if any) is of the
// shadow class.
func (q *fairQueue) shadowOnly() bool { return q.n == q.classes[PriorityShadow].n }

// othersReady reports whether a sequence of a class other than shadow
// waits in a class that is not paused.
func (q *fairQueue) othersReady() bool {
	for p := PriorityShadow + 1; p < NumPriorities; p++ {
		if q.classes[p].n > 0 && !q.paused[p] {
			return true
		}
	}
	return false
}

// oldest returns the earliest submission time among the heads of the
// tenants of class min and above (each tenant's head is its oldest), or
// the zero time.
func (q *fairQueue) oldest(min Priority) time.Time {
	var t time.Time
	for p := max(min, 0); p < NumPriorities; p++ {
		for _, tq := range q.classes[p].heap {
			if at := tq.seqs[0].r.enqueued; !at.IsZero() && (t.IsZero() || at.Before(t)) {
				t = at
			}
		}
	}
	return t
}

// pop removes seq, which peek returned, and charges its cost to its class
// and tenant.
func (q *fairQueue) pop(seq *sequence) {
	p := classOf(seq)
	c := &q.classes[p]
	cost := q.cost(seq)
	c.pass += float64(cost) / c.weight
	if p != PriorityShadow {
		// Shadow admissions compete with no other class: they leave the
		// others' virtual time (and so their order) as it would be
		// without them.
		q.vtime = c.pass
	}
	if t := c.tenants[seq.r.req.Tenant]; t != nil {
		c.vtime = t.pass
		t.pass += int64(cost)
	}
	q.remove(seq)
	q.resv.admitted(seq.r)
}

// remove takes seq out wherever it is (a cancel), without charging it.
func (q *fairQueue) remove(seq *sequence) bool {
	c := &q.classes[classOf(seq)]
	t, ok := c.tenants[seq.r.req.Tenant]
	if !ok {
		return false
	}
	i := slices.Index(t.seqs, seq)
	if i < 0 {
		return false
	}
	if i == 0 {
		t.seqs[0] = nil
		t.seqs = t.seqs[1:] // the usual case: no copy
	} else {
		t.seqs = slices.Delete(t.seqs, i, i+1)
	}
	c.n--
	q.n--
	q.tokens -= seq.backlog
	q.resv.queued(seq.r, -1)
	if len(t.seqs) == 0 {
		heap.Remove(&c.heap, t.index)
		delete(c.tenants, t.name) // an idle tenant keeps no credit
	} else {
		heap.Fix(&c.heap, t.index)
	}
	return true
}

// all returns every waiting sequence, by class (highest first), tenant and
// arrival; for statistics and tests.
func (q *fairQueue) all() []*sequence {
	out := make([]*sequence, 0, q.n)
	for p := NumPriorities - 1; p >= 0; p-- {
		c := &q.classes[p]
		names := make([]string, 0, len(c.tenants))
		for name := range c.tenants {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			out = append(out, c.tenants[name].seqs...)
		}
	}
	return out
}

// tenantHeap orders tenants by pass, then by their head's arrival.
type tenantHeap []*tenantQueue

func (h tenantHeap) Len() int { return len(h) }
func (h tenantHeap) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return h[i].pass < h[j].pass
	}
	return seqBefore(h[i].seqs[0], h[j].seqs[0])
}
func (h tenantHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *tenantHeap) Push(x any) {
	t := x.(*tenantQueue)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *tenantHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
