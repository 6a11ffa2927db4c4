package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// eventLog holds a streamed request's SSE events, already formatted, so
// that readers (the client's connection, or a later one resuming it) copy
// them at their own pace while generation goes on: the step loop and the
// relay never wait on a socket. Events are numbered from 0 in the order
// they were written; the log keeps the most recent ones within its bounds.
//
// Locking: mu guards everything; one producer (the relay) appends, any
// number of readers read.
type eventLog struct {
	id     string
	tenant string
	// resumable logs may be read again (GET /v1/requests/{id}/stream) and
	// outlive their client; the others are cancelled when it leaves.
	resumable bool
	maxEvents int
	maxBytes  int

	mu     sync.Mutex
	events [][]byte
	first  int // the number of events[0]; earlier ones were evicted
	bytes  int
	done   bool
	ended  time.Time
	// changed is closed (and replaced) whenever an event is added or the
	// log ends.
	changed chan struct{}
	// readers counts attached readers; detached is when the last left.
	readers  int
	detached time.Time
	// cancel ends the request (DELETE, or no reader for too long).
	cancel context.CancelFunc

	// For inspection (the snapshot): set before the log is registered,
	// then read-only, except firstToken (Unix nanoseconds, 0 before it).
	model, tier string
	start       time.Time
	firstToken  atomic.Int64
}

func newEventLog(id, tenant string, resumable bool, maxEvents, maxBytes int, cancel context.CancelFunc) *eventLog {
	return &eventLog{id: id, tenant: tenant, resumable: resumable, maxEvents: maxEvents, maxBytes: maxBytes,
		changed: make(chan struct{}), cancel: cancel}
}

// next is the number the next event will get.
func (l *eventLog) next() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first + len(l.events)
}

// push appends one formatted event, evicting the oldest past the bounds.
func (l *eventLog) push(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, b)
	l.bytes += len(b)
	for len(l.events) > 1 && (len(l.events) > l.maxEvents || l.bytes > l.maxBytes) {
		l.bytes -= len(l.events[0])
		l.events[0] = nil
		l.events = l.events[1:]
		l.first++
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// end marks the log complete: no event follows.
func (l *eventLog) end(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done, l.ended = true, now
	close(l.changed)
	l.changed = make(chan struct{})
}

// read returns the events numbered from, and whether the log has ended
// after them. gone reports that some of them were already evicted. wait is
// closed when there is more to read.
//
// A log that is not resumable has one reader, its client's connection:
// reading from n lets it drop the events before n, which that reader has
// written, so a long stream does not keep every event until it ends.
func (l *eventLog) read(from int) (evs [][]byte, next int, done, gone bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.resumable && from > l.first {
		drop := min(from-l.first, len(l.events))
		for k := range drop {
			l.bytes -= len(l.events[k])
			l.events[k] = nil
		}
		l.events = l.events[drop:]
		l.first += drop
	}
	if from < l.first {
		return nil, from, l.done, true, l.changed
	}
	i := from - l.first
	if i < len(l.events) {
		evs = l.events[i:len(l.events):len(l.events)]
	}
	return evs, l.first + len(l.events), l.done, false, l.changed
}

// lag is how many bytes of events numbered from on are not yet read.
func (l *eventLog) lag(from int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := max(from-l.first, 0); i < len(l.events); i++ {
		n += len(l.events[i])
	}
	return n
}

// attach and detach count readers.
func (l *eventLog) attach() {
	l.mu.Lock()
	l.readers++
	l.mu.Unlock()
}

func (l *eventLog) detach(now time.Time) {
	l.mu.Lock()
	l.readers--
	if l.readers == 0 {
		l.detached = now
	}
	l.mu.Unlock()
}

// orphaned reports whether a live log has had no reader since before
// cutoff.
func (l *eventLog) orphaned(cutoff time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.done && l.readers == 0 && !l.detached.IsZero() && l.detached.Before(cutoff)
}

// expired reports whether an ended log ended before cutoff.
func (l *eventLog) expired(cutoff time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done && l.ended.Before(cutoff)
}

// isDone reports whether the log has ended.
func (l *eventLog) isDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// logRegistry finds live and recently ended streams by request id.
//
// Locking: mu guards logs.
type logRegistry struct {
	mu   sync.Mutex
	logs map[string]*eventLog
}

func (r *logRegistry) add(l *eventLog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs == nil {
		r.logs = make(map[string]*eventLog)
	}
	r.logs[l.id] = l
}

// get returns the log of request id if tenant owns it; nil otherwise, so a
// request of another tenant looks exactly like a missing one.
func (r *logRegistry) get(id, tenant string) *eventLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.logs[id]
	if l == nil || l.tenant != tenant {
		return nil
	}
	return l
}

// lookup returns the log of request id whoever owns it (the snapshot is
// an admin view).
func (r *logRegistry) lookup(id string) *eventLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs[id]
}

func (r *logRegistry) remove(id string) {
	r.mu.Lock()
	delete(r.logs, id)
	r.mu.Unlock()
}

// sweep cancels live streams without a reader since before orphanCutoff
// and forgets ended ones that ended before expireCutoff.
func (r *logRegistry) sweep(orphanCutoff, expireCutoff time.Time) {
	r.mu.Lock()
	var cancel []*eventLog
	for id, l := range r.logs {
		switch {
		case l.expired(expireCutoff):
			delete(r.logs, id)
		case l.orphaned(orphanCutoff):
			cancel = append(cancel, l)
		}
	}
	r.mu.Unlock()
	for _, l := range cancel {
		l.cancel()
	}
}

func (r *logRegistry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.logs)
}
