package upstream

import (
	"slices"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
)

// waiter is a request waiting for a replica: Run's loop sends it the
// replica on ready, or nil with err set.
type waiter struct {
	id     string
	tenant string
	prio   engine.Priority
	prefix []kvcache.Hash
	since  time.Time
	ready  chan *replica // buffered, one send
	err    error
}

// queue holds the waiting requests: the highest class first, and within a
// class the tenants in turn (one request each per round), each tenant's
// requests in order.
//
// Locking: the Set's mu.
type queue struct {
	classes [engine.NumPriorities]class
	n       int
	// min is the lowest class released (the ladder pauses those below).
	min engine.Priority
}

type class struct {
	tenants  []string // in turn
	next     int
	byTenant map[string][]*waiter
}

func (q *queue) push(w *waiter) {
	p := min(max(int(w.prio), 0), engine.NumPriorities-1)
	c := &q.classes[p]
	if c.byTenant == nil {
		c.byTenant = map[string][]*waiter{}
	}
	if len(c.byTenant[w.tenant]) == 0 {
		c.tenants = append(c.tenants, w.tenant)
	}
	c.byTenant[w.tenant] = append(c.byTenant[w.tenant], w)
	q.n++
}

// top is the class and tenant whose request goes next, -1 when empty;
// classes below q.min are held (the degradation ladder paused them).
func (q *queue) top() (int, string) {
	for p := engine.NumPriorities - 1; p >= int(q.min); p-- {
		c := &q.classes[p]
		if len(c.tenants) > 0 {
			return p, c.tenants[c.next%len(c.tenants)]
		}
	}
	return -1, ""
}

func (q *queue) peek() *waiter {
	p, t := q.top()
	if p < 0 {
		return nil
	}
	return q.classes[p].byTenant[t][0]
}

// pop takes the next request out; its tenant's turn passes.
func (q *queue) pop() *waiter {
	p, t := q.top()
	if p < 0 {
		return nil
	}
	c := &q.classes[p]
	ws := c.byTenant[t]
	w := ws[0]
	c.byTenant[t] = ws[1:]
	i := c.next % len(c.tenants)
	if len(c.byTenant[t]) == 0 {
		delete(c.byTenant, t)
		c.tenants = slices.Delete(c.tenants, i, i+1)
		c.next = i // the next tenant moved into its place
	} else {
		c.next = i + 1
	}
	if len(c.tenants) > 0 {
		c.next %= len(c.tenants)
	} else {
		c.next = 0
	}
	q.n--
	return w
}

// remove takes w out (its client left); false when it was not queued.
func (q *queue) remove(w *waiter) bool {
	p := min(max(int(w.prio), 0), engine.NumPriorities-1)
	c := &q.classes[p]
	ws := c.byTenant[w.tenant]
	i := slices.Index(ws, w)
	if i < 0 {
		return false
	}
	c.byTenant[w.tenant] = slices.Delete(ws, i, i+1)
	if len(c.byTenant[w.tenant]) == 0 {
		delete(c.byTenant, w.tenant)
		k := slices.Index(c.tenants, w.tenant)
		c.tenants = slices.Delete(c.tenants, k, k+1)
		if len(c.tenants) > 0 {
			c.next %= len(c.tenants)
		} else {
			c.next = 0
		}
	}
	q.n--
	return true
}

// failAll ends every waiting request with err.
func (q *queue) failAll(err error) {
	held := q.min
	q.min = 0
	for q.n > 0 {
		w := q.pop()
		w.err = err
		w.ready <- nil
	}
	q.min = held
}

// oldest is when the oldest waiting request of class min or above
// arrived (zero when none waits).
func (q *queue) oldest(min engine.Priority) time.Time {
	var t time.Time
	for p := int(min); p < engine.NumPriorities; p++ {
		for _, ws := range q.classes[p].byTenant {
			if len(ws) > 0 && (t.IsZero() || ws[0].since.Before(t)) {
				t = ws[0].since
			}
		}
	}
	return t
}

// byPriority counts the waiting requests per class.
func (q *queue) byPriority() [engine.NumPriorities]int {
	var out [engine.NumPriorities]int
	for p := range q.classes {
		for _, ws := range q.classes[p].byTenant {
			out[p] += len(ws)
		}
	}
	return out
}

// each calls fn for every waiting request.
func (q *queue) each(fn func(*waiter)) {
	for p := range q.classes {
		for _, ws := range q.classes[p].byTenant {
			for _, w := range ws {
				fn(w)
			}
		}
	}
}
