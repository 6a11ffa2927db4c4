package engine

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrClosed is returned by Submit once the engine has stopped.
	ErrClosed = errors.New("engine: closed")
	// ErrQueueFull is returned by Submit when the waiting queue is at its limit.
	ErrQueueFull = errors.New("engine: queue full")
	// ErrDuplicateID is returned by Submit when a request with the same id is live.
	ErrDuplicateID = errors.New("engine: duplicate request id")
)

// ContextLengthError reports a request that can never fit: its prompt plus
// max_tokens exceed the model's context or the KV pool.
type ContextLengthError struct {
	PromptTokens int
	MaxTokens    int
	// Limit is the most tokens one sequence may hold.
	Limit int
}

func (e *ContextLengthError) Error() string {
	return "engine: request of " + strconv.Itoa(e.PromptTokens) + " prompt tokens plus " + strconv.Itoa(e.MaxTokens) +
		" output tokens exceeds the limit of " + strconv.Itoa(e.Limit) + " tokens"
}

// InvalidRequestError reports a request the engine refuses as malformed.
type InvalidRequestError struct{ Reason string }

func (e *InvalidRequestError) Error() string { return "engine: invalid request: " + e.Reason }

// Priority orders requests: a higher value is served first and is never
// preempted for a lower one. The values are the engine's own: they index
// its per-class arrays and may change when a class is added, so every
// external format (wire, metrics, storage) names a class by its String.
type Priority int

// Priority classes, lowest first.
const (
	// PriorityShadow is shadow traffic (a copy of a real request run to
	// compare a model, its output discarded). It runs only on capacity
	// no other class wants: it is admitted and scheduled only while no
	// sequence of a higher class waits, it is the first preemption victim,
	// it is never swapped to host memory, and the degradation ladder
	// pauses it from its first level (see [Scheduler.Step]).
	PriorityShadow Priority = iota
	PriorityBatch
	PriorityFree
	PriorityPaid
	PriorityEnterprise
	// NumPriorities is the number of priority classes.
	NumPriorities = 5
)

var priorityNames = [NumPriorities]string{"shadow", "batch", "free", "paid", "enterprise"}

// String names the class as the tiers do: shadow, batch, free, paid,
// enterprise.
func (p Priority) String() string {
	if p >= 0 && int(p) < NumPriorities {
		return priorityNames[p]
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

// Request is one generation submitted to the engine.
type Request struct {
	// ID is the server-generated request id; unique among live requests.
	ID string
	// Tenant owns the request.
	Tenant string
	// Prompt is the tokenized prompt; never empty.
	Prompt []int32
	// MaxTokens is the most output tokens per choice (>= 1).
	MaxTokens int
	// N is the number of choices (>= 1).
	N int
	// Priority is the request's class. The zero value is PriorityShadow,
	// the lowest: a real request sets its class.
	Priority Priority
	// Seed seeds sampling.
	Seed uint64
	// Sampling holds the sampling parameters.
	Sampling SamplingParams
	// Logprobs asks for each output token's log-probability and the
	// TopLogprobs most likely alternatives (Event.Logprobs). The executor
	// must support it (ExecutorInfo.Logprobs).
	Logprobs    bool
	TopLogprobs int
	// Constraint, when set, restricts every choice to the tokens it allows
	// (structured output); choices after the first get clones of it. The
	// engine advances it over each sampled token and ends a choice with
	// FinishStop once it is Done.
	Constraint Constraint
	// MinTokens is the fewest output tokens per choice: until then no
	// end-of-generation or stop token is sampled.
	MinTokens int
	// IgnoreEOS keeps generating past the end-of-generation tokens (they
	// are delivered like any other token); StopTokens still stop, and a
	// Constraint that is Done still ends the choice.
	IgnoreEOS bool
	// StopTokens are token ids that end a choice as EOS does (not
	// delivered).
	StopTokens []int32
	// ReservedTPS is the output tokens per second reserved for Tenant on
	// this engine (provisioned throughput; 0: none). The newest submitted
	// request's value is the tenant's reservation: while the tenant is
	// delivered less, its waiting sequences are admitted ahead of the
	// weighted-fair order (see ReservationWindow).
	ReservedTPS float64
}

// FinishReason says why a choice ended.
type FinishReason string

// Finish reasons, as in the OpenAI API plus cancel and error.
const (
	FinishStop      FinishReason = "stop"
	FinishLength    FinishReason = "length"
	FinishCancelled FinishReason = "cancelled"
	FinishError     FinishReason = "error"
)

// Usage counts a request's tokens.
type Usage struct {
	InputTokens  int
	CachedTokens int
	OutputTokens int
}

// EventKind tells a token event from a finish event.
type EventKind uint8

// Event kinds.
const (
	EventToken EventKind = iota + 1
	EventFinish
)

// Event is one thing that happened to a request: a token for one choice, a
// choice finishing, or (Kind EventFinish with Index -1) the whole request
// finishing with its usage.
type Event struct {
	Kind  EventKind
	Index int
	Token int32
	// Finish is set on EventFinish.
	Finish FinishReason
	// Usage is set on the request's last event (Index -1).
	Usage Usage
	// Err is set when Finish is FinishError.
	Err error
	// Logprobs is set on token events of a request that asked for them.
	Logprobs *Logprobs
	// Time is the engine clock when the event was produced.
	Time time.Time
	// Queued is set on the request's last event: how long it waited from
	// submission to the start of the step that first ran it (0 if it never
	// ran or was submitted without a time).
	Queued time.Duration
}

// Last reports whether e is the request's final event.
func (e Event) Last() bool { return e.Kind == EventFinish && e.Index < 0 }

// Stream carries a request's events from the engine to its consumer. The
// engine appends without ever blocking; the consumer reads with Next.
//
// Locking: safe for one producer (the step goroutine) and one consumer.
type Stream struct {
	mu     sync.Mutex
	events []Event
	closed bool
	notify chan struct{}
	id     string
	// stop releases the request context's AfterFunc; owned by the engine.
	stop func() bool
}

func newStream(id string) *Stream {
	return &Stream{notify: make(chan struct{}, 1), id: id}
}

// ID is the request id.
func (s *Stream) ID() string { return s.id }

// push appends ev; it never blocks.
func (s *Stream) push(ev Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.events = append(s.events, ev)
	if ev.Last() {
		s.closed = true
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the next event. After the final event it returns io.EOF. It
// returns ctx's error if ctx ends first.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.events) > 0 {
			ev := s.events[0]
			s.events[0] = Event{}
			s.events = s.events[1:]
			if len(s.events) == 0 {
				s.events = nil
			}
			s.mu.Unlock()
			return ev, nil
		}
		done := s.closed
		s.mu.Unlock()
		if done {
			return Event{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}
