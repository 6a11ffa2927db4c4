package pipeline

import (
	"context"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
)

// Sink is where an answer goes, in an API's format: a JSON body, or
// events in a stream's log. The codecs implement it. Finish calls Begin
// once, then Text and Finish for each choice, then End or Fail, from one
// goroutine.
type Sink interface {
	// Begin starts the answer (a stream's opening events).
	Begin() error
	// Text adds text to choice i with the log-probabilities of the tokens
	// it completes (nil unless asked for). The text is empty only for
	// tokens that have none of their own (control tokens), and then only
	// to carry their log-probabilities (never when lps is nil).
	Text(i int, text string, lps []api.TokenLogprob) error
	// ToolCall adds a fragment of a tool call to choice i: the first of
	// call d.Index carries its ID, Type and Function.Name, the following
	// ones pieces of its arguments (OpenAI's stream delta).
	ToolCall(i int, d api.ToolCallDelta) error
	// Finish ends choice i normally ("stop", "length" or "tool_calls"),
	// with the log-probabilities not sent yet.
	Finish(i int, reason string, lps []api.TokenLogprob) error
	// End ends the answer after every choice finished; u is what it used.
	// An error means the client could not be written to.
	End(u Usage) error
	// Fail ends the answer with err instead, and returns the status the
	// client sees: a stream's is 200; StatusClientClosed when nothing
	// could be written.
	Fail(err error) int
}

// Target is a place a Job can run: this node's engine (LocalTarget), a
// peer (package peer), later an upstream engine.
type Target interface {
	// Name identifies the target in route notes: "local" or a node id.
	Name() string
	// Start hands job to the target and returns once the target has
	// accepted it. An error means it did not run it: an *Error is the
	// client's to see (a peer refused the request as sent); any other
	// error from a peer lets the next target be tried. ctx bounds the
	// whole execution: when it ends, the execution stops.
	Start(ctx context.Context, job *Job) (Execution, error)
}

// Execution is a Job running on a Target.
type Execution interface {
	// Relay writes the answer's text and each choice's normal end to sink
	// (never Begin, End or Fail) until the request ends, and reports how
	// it ended. ctx is the one Start was given. As it writes, it reports
	// to progress (which may be nil) the output tokens, of every choice,
	// passed to sink so far.
	Relay(ctx context.Context, sink Sink, progress *Progress) Result
}

// Progress follows the output tokens an execution has passed to its sink,
// and checkpoints them into the request's in-flight usage row at most
// once per interval, so that a request cut short by a crash is billed what
// its client was sent, less at most the tokens of the last interval. A nil
// *Progress ignores every call.
//
// Locking: only the relaying goroutine calls Delivered.
type Progress struct {
	every time.Duration
	// next is the earliest time of the next checkpoint.
	next time.Time
	// save checkpoints the count; it must not block.
	save func(outputTokens int)
}

// NewProgress returns a Progress that calls save with the output tokens
// delivered at most once per every (at the first delivery, then once
// every has passed since the last call). save runs on the relaying
// goroutine and must not block.
func NewProgress(every time.Duration, save func(outputTokens int)) *Progress {
	return &Progress{every: every, save: save}
}

// Delivered reports that outputTokens tokens (every choice's) have been
// passed to the sink so far, at at: the engine's time of the latest token,
// or now; zero means now. It costs a comparison unless a checkpoint is
// due: call it for every token.
func (p *Progress) Delivered(outputTokens int, at time.Time) {
	if p == nil {
		return
	}
	if at.IsZero() {
		at = time.Now()
	}
	if at.Before(p.next) {
		return
	}
	p.next = at.Add(p.every)
	p.save(outputTokens)
}

// Usage counts a request's tokens: its prompt, the part of the prompt
// served from the prefix cache, and its output (every choice's).
type Usage struct {
	InputTokens  int
	CachedTokens int
	OutputTokens int
	// ReasoningTokens are the output tokens of the choices' reasoning
	// sections, counted when the answer is split (Job.Reasoning); 0
	// otherwise.
	ReasoningTokens int
}

// usageOf is the engine's count as a Usage.
func usageOf(u engine.Usage) Usage {
	return Usage{InputTokens: u.InputTokens, CachedTokens: u.CachedTokens, OutputTokens: u.OutputTokens}
}

// Result is how an Execution ended.
type Result struct {
	Usage Usage
	// Finish is the first choice's finish reason when every choice
	// finished, "cancelled" or "error" otherwise.
	Finish string
	// Err is why the request failed; nil when every choice finished, or
	// when the client left.
	Err error
	// ClientGone reports that the client left, was cancelled, or could
	// not be written to: the answer stops there.
	ClientGone bool
	// Retry reports a failure before anything reached the sink: the next
	// target may serve the request.
	Retry bool
	// ServedBy names the peer that served the request, "" for this node.
	ServedBy string
	// Queued is the time in the engine's queue.
	Queued time.Duration
	// FirstToken is when the first token reached this node (zero if none);
	// TTFT is the time to the first token a peer reported, for an answer
	// that came whole.
	FirstToken time.Time
	TTFT       time.Duration
	// Times are choice 0's token times, when served here; ITL is the mean
	// inter-token latency a peer reported.
	Times TokenTimes
	ITL   time.Duration
	// Note is added to the request's route note (an upstream's usage
	// estimated, say).
	Note string
}

// MeanITL is the mean inter-token latency: measured here, or reported by
// the peer that served the request.
func (r *Result) MeanITL() time.Duration {
	if r.Times.N >= 2 {
		return r.Times.MeanGap()
	}
	return r.ITL
}

// TokenTimes follows one choice's token times (engine clock) for the
// inter-token latency.
type TokenTimes struct {
	First, Last time.Time
	N           int
	// Gaps are the inter-token gaps, for the histogram; capped.
	Gaps []time.Duration
}

const maxGaps = 4096

// Token records a token at at.
func (t *TokenTimes) Token(at time.Time) {
	if t.N == 0 {
		t.First = at
	} else if len(t.Gaps) < maxGaps {
		t.Gaps = append(t.Gaps, at.Sub(t.Last))
	}
	t.Last = at
	t.N++
}

// MeanGap is the mean inter-token latency, 0 with fewer than 2 tokens.
func (t *TokenTimes) MeanGap() time.Duration {
	if t.N < 2 {
		return 0
	}
	return t.Last.Sub(t.First) / time.Duration(t.N-1)
}

// lazySink delays Begin to the first output: a request forwarded to this
// node opens its stream with its first token, so that the entry node may
// still try it elsewhere until then.
type lazySink struct {
	Sink
	begun bool
}

func (s *lazySink) Begin() error { return nil }

func (s *lazySink) start() error {
	if s.begun {
		return nil
	}
	s.begun = true
	return s.Sink.Begin()
}

func (s *lazySink) Text(i int, text string, lps []api.TokenLogprob) error {
	if err := s.start(); err != nil {
		return err
	}
	return s.Sink.Text(i, text, lps)
}

// Reasoning implements ReasoningSink.
func (s *lazySink) Reasoning(i int, text string, lps []api.TokenLogprob) error {
	if err := s.start(); err != nil {
		return err
	}
	return sendReasoning(s.Sink, i, text, lps)
}

func (s *lazySink) ToolCall(i int, d api.ToolCallDelta) error {
	if err := s.start(); err != nil {
		return err
	}
	return s.Sink.ToolCall(i, d)
}

func (s *lazySink) Finish(i int, reason string, lps []api.TokenLogprob) error {
	if err := s.start(); err != nil {
		return err
	}
	return s.Sink.Finish(i, reason, lps)
}

func (s *lazySink) End(u Usage) error {
	if err := s.start(); err != nil {
		return err
	}
	return s.Sink.End(u)
}

func (s *lazySink) Fail(err error) int {
	if serr := s.start(); serr != nil {
		return StatusClientClosed
	}
	return s.Sink.Fail(err)
}
