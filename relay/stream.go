package relay

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
)

// Limits bound the events a Stream keeps: past either, the oldest go (and
// resuming before them is refused).
type Limits struct {
	MaxEvents int
	MaxBytes  int
}

// Stream holds a streamed request's Server-Sent Events, already formatted,
// so that readers (the client's connection, or a later one resuming it)
// copy them at their own pace while generation goes on: the step loop and
// the producer never wait on a socket. Events are numbered from 0 in the
// order they were written; the stream keeps the most recent ones within
// its Limits.
//
// Events that carry JSON data get an "id:" line with their number when ids
// are on (native streams always, OpenAI streams when resumable); raw data
// ("[DONE]") never does, since the official SDKs choke on an id without
// JSON.
//
// Locking: mu guards the log; one producer appends (Data, Final), any
// number of readers read.
type Stream struct {
	// ID and Tenant identify the request: only Tenant may resume or cancel
	// it (see Registry.Get).
	ID, Tenant string
	// Resumable streams may be read again (GET /v1/requests/{id}/stream)
	// and outlive their client; the others are cancelled when it leaves.
	Resumable bool
	// Model, Tier and Start describe the request for inspection (the
	// snapshot); set before the stream is registered, then read-only.
	Model, Tier string
	Start       time.Time

	ids    bool
	limits Limits
	// firstToken is when the first token came (Unix nanoseconds, 0 before).
	firstToken atomic.Int64

	// buf is the producer's formatting buffer; terminated is set once a
	// terminal event is written. Producer only.
	buf        bytes.Buffer
	terminated bool

	mu     sync.Mutex
	events [][]byte
	// at is when each event was pushed (Unix nanoseconds), beside events.
	at    []int64
	first int // the number of events[0]; earlier ones were evicted
	bytes int
	done  bool
	ended time.Time
	// changed is closed (and replaced) whenever an event is added or the
	// stream ends.
	changed chan struct{}
	// readers counts attached readers; detached is when the last left.
	readers  int
	detached time.Time
	// cancel ends the request (DELETE, no reader for too long, shutdown).
	cancel func()
	// mirror copies the events elsewhere as they come (nil: nowhere).
	mirror Mirror
}

// Mirror copies a resumable stream's events elsewhere as they are written
// (a Redis stream), so that another node can resume the stream once this
// one is gone. Its methods are called by the stream's producer and must
// not block.
type Mirror interface {
	// Append records event number n (formatted, as a reader gets it).
	Append(n int, ev []byte)
	// End records that no event follows.
	End()
}

// Recording is what a Mirror kept of a stream: its events from number
// First, without a gap, and whether the stream had ended.
type Recording struct {
	Tenant string
	// Style is the API the events are formatted for ("openai", "native").
	Style  string
	First  int
	Events [][]byte
	Done   bool
}

// Restore returns a resumable stream holding rec's events (numbered from
// rec.First), not yet ended: the caller may add a terminal event and ends
// it. It belongs to no registry and cancels nothing.
func Restore(id string, rec Recording, limits Limits) *Stream {
	s := NewStream(id, rec.Tenant, true, true, Limits{MaxEvents: max(limits.MaxEvents, len(rec.Events)+2),
		MaxBytes: max(limits.MaxBytes, 1<<30)}, func() {})
	s.first = rec.First
	now := time.Now().UnixNano()
	for _, ev := range rec.Events {
		s.events = append(s.events, ev)
		s.at = append(s.at, now)
		s.bytes += len(ev)
	}
	return s
}

// SetMirror makes the stream copy its events to m; call it before the
// first event.
func (s *Stream) SetMirror(m Mirror) { s.mirror = m }

// NewStream returns the log of request id of tenant. ids numbers the
// events that carry JSON; cancel ends the request (it may be called more
// than once, from any goroutine).
func NewStream(id, tenant string, resumable, ids bool, limits Limits, cancel func()) *Stream {
	return &Stream{ID: id, Tenant: tenant, Resumable: resumable, ids: ids, limits: limits,
		changed: make(chan struct{}), cancel: cancel}
}

// Data writes one event: an optional "event:" line, then the data line. v
// is JSON-encoded unless it is a []byte, which is written as is (and gets
// no id).
func (s *Stream) Data(event string, v any) error {
	s.buf.Reset()
	raw, isRaw := v.([]byte)
	if !isRaw {
		// json.Encoder never emits a raw newline inside a value, so the
		// event stays one data line; Encode appends a newline itself.
		enc := json.NewEncoder(&s.buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		raw = s.buf.Bytes()[:s.buf.Len()-1]
	}
	id := ""
	if s.ids && !isRaw {
		id = strconv.Itoa(s.Next())
	}
	// One allocation: the pushed event is kept, the buffer reused.
	s.Push(api.AppendSSEEvent(make([]byte, 0, len(raw)+len(id)+len(event)+32), id, event, raw))
	return nil
}

// Final writes a terminal event (see Data).
func (s *Stream) Final(event string, v any) error {
	s.terminated = true
	return s.Data(event, v)
}

// Terminated reports whether a terminal event was written. Producer only.
func (s *Stream) Terminated() bool { return s.terminated }

// MarkFirstToken records that the first token came now (for the
// snapshot); later calls do nothing and cost one atomic load.
func (s *Stream) MarkFirstToken() {
	if s.firstToken.Load() == 0 {
		s.firstToken.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// FirstToken is when the first token came, zero before.
func (s *Stream) FirstToken() time.Time {
	if ns := s.firstToken.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Cancel ends the request.
func (s *Stream) Cancel() { s.cancel() }

// Next is the number the next event will get.
func (s *Stream) Next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first + len(s.events)
}

// Push appends one formatted event, evicting the oldest past the limits.
func (s *Stream) Push(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, b)
	s.at = append(s.at, time.Now().UnixNano())
	s.bytes += len(b)
	for len(s.events) > 1 && (len(s.events) > s.limits.MaxEvents || s.bytes > s.limits.MaxBytes) {
		s.bytes -= len(s.events[0])
		s.events[0] = nil
		s.events, s.at = s.events[1:], s.at[1:]
		s.first++
	}
	if s.mirror != nil {
		s.mirror.Append(s.first+len(s.events)-1, b)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// End marks the stream complete: no event follows.
func (s *Stream) End(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	if s.mirror != nil {
		s.mirror.End()
	}
	s.done, s.ended = true, now
	close(s.changed)
	s.changed = make(chan struct{})
}

// Read returns the events numbered from, and whether the stream has ended
// after them. gone reports that some of them were already evicted. wait is
// closed when there is more to read.
//
// A stream that is not resumable has one reader, its client's connection:
// reading from n lets it drop the events before n, which that reader has
// written, so a long stream does not keep every event until it ends.
func (s *Stream) Read(from int) (evs [][]byte, next int, done, gone bool, wait <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Resumable && from > s.first {
		drop := min(from-s.first, len(s.events))
		for k := range drop {
			s.bytes -= len(s.events[k])
			s.events[k] = nil
		}
		s.events, s.at = s.events[drop:], s.at[drop:]
		s.first += drop
	}
	if from < s.first {
		return nil, from, s.done, true, s.changed
	}
	i := from - s.first
	if i < len(s.events) {
		evs = s.events[i:len(s.events):len(s.events)]
	}
	return evs, s.first + len(s.events), s.done, false, s.changed
}

// Lag is how many bytes of events numbered from on are not yet read.
func (s *Stream) Lag(from int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := max(from-s.first, 0); i < len(s.events); i++ {
		n += len(s.events[i])
	}
	return n
}

// Behind is how long ago the oldest event numbered from on was written:
// how far behind a reader at from is (0 when it is not).
func (s *Stream) Behind(from int, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := max(from-s.first, 0)
	if i >= len(s.at) {
		return 0
	}
	return now.Sub(time.Unix(0, s.at[i]))
}

// Readers is how many connections read the stream now.
func (s *Stream) Readers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readers
}

// attach and detach count readers.
func (s *Stream) attach() {
	s.mu.Lock()
	s.readers++
	s.mu.Unlock()
}

func (s *Stream) detach(now time.Time) {
	s.mu.Lock()
	s.readers--
	if s.readers == 0 {
		s.detached = now
	}
	s.mu.Unlock()
}

// orphaned reports whether a live stream has had no reader since before
// cutoff.
func (s *Stream) orphaned(cutoff time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.done && s.readers == 0 && !s.detached.IsZero() && s.detached.Before(cutoff)
}

// expired reports whether an ended stream ended before cutoff.
func (s *Stream) expired(cutoff time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done && s.ended.Before(cutoff)
}

// Done reports whether the stream has ended.
func (s *Stream) Done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}
