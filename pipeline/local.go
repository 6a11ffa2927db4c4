package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/toolcall"
)

// LocalTarget runs jobs on this node's engines.
type LocalTarget struct {
	// Stall ends a request that produced no new token for this long after
	// its first; 0 never.
	Stall time.Duration
}

// Name implements Target.
func (LocalTarget) Name() string { return "local" }

// Start submits job to its model's engine. Its errors are the engine's
// refusals (queue full, closed, too long).
func (t LocalTarget) Start(ctx context.Context, job *Job) (Execution, error) {
	// sub is the engine request's context: it also ends when stop strings
	// have ended every choice.
	sub, cancel := context.WithCancel(ctx)
	st, err := job.Model.Replica.Submit(sub, job.EngineRequest())
	if err != nil {
		cancel()
		return nil, submitError(err)
	}
	return &localRun{job: job, st: st, cancel: cancel, stall: t.Stall}, nil
}

// localRun is a job in this node's engine.
type localRun struct {
	job    *Job
	st     EventStream
	cancel context.CancelFunc
	stall  time.Duration
}

// drainTimeout bounds the wait for a cancelled request's final event (and
// its usage) after its client went away.
const drainTimeout = 2 * time.Second

// choiceState is one choice's progress.
type choiceState struct {
	ts     textStream
	done   bool
	reason string
	// lps are the log-probabilities of tokens whose text is held back.
	lps []api.TokenLogprob
	// tools parses the text into tool calls in format (nil: the text is
	// sent as is); ids are the ids of the calls so far.
	tools  *toolcall.Parser
	format toolcall.Format
	ids    []string
	// think splits the text into reasoning and content (nil: no split);
	// inThink reports whether the last send was part of the reasoning
	// section, reasoningTokens counts the tokens that were.
	think           *reasoningSplit
	inThink         bool
	reasoningTokens int
}

// send passes text of choice i to sink: its reasoning section as
// reasoning when the job splits it, the rest through the tool-call parser
// when the job has tools: content goes out as text (with the
// log-probabilities held), calls as tool-call deltas.
func (c *choiceState) send(sink Sink, i int, text string) error {
	lps := c.lps
	c.lps = nil
	if c.think != nil {
		reasoning, content, in := c.think.push(text)
		c.inThink = in
		return c.split(sink, i, reasoning, content, lps)
	}
	return c.content(sink, i, text, lps)
}

// split sends reasoning, then content; with neither, the
// log-probabilities stay held.
func (c *choiceState) split(sink Sink, i int, reasoning, content string, lps []api.TokenLogprob) error {
	if reasoning != "" {
		if err := sendReasoning(sink, i, reasoning, lps); err != nil {
			return err
		}
		lps = nil
	}
	if content != "" {
		return c.content(sink, i, content, lps)
	}
	c.lps = append(lps, c.lps...)
	return nil
}

// content passes content to sink, through the tool-call parser when the
// job has tools.
func (c *choiceState) content(sink Sink, i int, text string, lps []api.TokenLogprob) error {
	if c.tools == nil {
		return sink.Text(i, text, lps)
	}
	return c.toolEvents(sink, i, c.tools.Push(text), lps)
}

// flushText ends choice i's reasoning split and tool-call parsing and
// sends what they held.
func (c *choiceState) flushText(sink Sink, i int) error {
	if c.think != nil {
		lps := c.lps
		c.lps = nil
		reasoning, content := c.think.flush()
		if err := c.split(sink, i, reasoning, content, lps); err != nil {
			return err
		}
	}
	if c.tools == nil {
		return nil
	}
	lps := c.lps
	c.lps = nil
	return c.toolEvents(sink, i, c.tools.Finish(), lps)
}

func (c *choiceState) toolEvents(sink Sink, i int, evs []toolcall.Event, lps []api.TokenLogprob) error {
	for _, ev := range evs {
		var err error
		switch {
		case ev.Content != "":
			err = sink.Text(i, ev.Content, lps)
			lps = nil
		case ev.Name != "":
			id := NewToolCallID(c.format)
			c.ids = append(c.ids, id)
			err = sink.ToolCall(i, api.ToolCallDelta{Index: ev.Index, ID: id, Type: "function",
				Function: api.FunctionCallDelta{Name: ev.Name}})
		case ev.Args != "":
			err = sink.ToolCall(i, api.ToolCallDelta{Index: ev.Index, Function: api.FunctionCallDelta{Arguments: ev.Args}})
		}
		if err != nil {
			return err
		}
	}
	c.lps = append(lps, c.lps...) // the log-probabilities of text still held
	return nil
}

// finishReason is the reason a choice that ended with reason gives: a
// choice that made tool calls and stopped ends with "tool_calls".
func (c *choiceState) finishReason(reason string) string {
	if reason == string(engine.FinishStop) && len(c.ids) > 0 {
		return "tool_calls"
	}
	return reason
}

// Relay reads the engine's events and writes each choice's text, with stop
// strings applied and end-of-generation tokens hidden, until the request
// ends. It reports every token of a choice still open to progress (those
// the engine bills: hidden ones and text held back by stop strings too),
// at the engine's time of the token.
func (r *localRun) Relay(ctx context.Context, sink Sink, progress *Progress) (res Result) {
	defer r.cancel()
	j, m := r.job, r.job.Model
	wd := watchdog{stall: r.stall}
	defer wd.stop()

	choices := make([]choiceState, j.N)
	for i := range choices {
		choices[i].ts.stops = j.Stops
		if j.Tools != nil {
			choices[i].tools, choices[i].format = toolcall.NewParser(j.Tools.Format), j.Tools.Format
		}
		if j.Reasoning != nil {
			choices[i].think = newReasoningSplit(j.Reasoning)
		}
	}
	decode := m.Text.DecodeToken
	if j.ShowSpecial {
		decode = m.Text.TokenText
	}
	if j.Echo != "" {
		for i := range choices {
			if err := sink.Text(i, j.Echo, nil); err != nil {
				return r.abandon(res, err)
			}
		}
	}
	open := j.N
	delivered := 0 // token events of open choices, every choice's
	var failure error
	end := func(i int, reason string) error {
		c := &choices[i]
		if err := c.flushText(sink, i); err != nil {
			return err
		}
		reason = c.finishReason(reason)
		c.done, c.reason = true, reason
		open--
		if open == 0 {
			// Stop strings may end choices the engine still generates.
			r.cancel()
		}
		lps := c.lps
		c.lps = nil
		return sink.Finish(i, reason, lps)
	}
	for {
		ev, err := wd.next(ctx, r.st)
		if errors.Is(err, io.EOF) {
			failure = ErrIncomplete
			break
		}
		if errors.Is(err, ErrStalled) {
			failure = err
			r.cancel()
			r.drainFinal(&res)
			break
		}
		if err != nil {
			return r.abandon(res, err)
		}
		if ev.Last() {
			res.Usage, res.Queued = usageOf(ev.Usage), ev.Queued
			if open > 0 && failure == nil && ctx.Err() != nil {
				res.ClientGone, res.Finish = true, string(engine.FinishCancelled)
				return res
			}
			if open > 0 && failure == nil {
				failure = finishError(ev)
			}
			break
		}
		if ev.Index < 0 || ev.Index >= j.N {
			continue
		}
		c := &choices[ev.Index]
		if c.done || failure != nil {
			continue
		}
		var werr error
		switch ev.Kind {
		case engine.EventToken:
			wd.progress()
			delivered++
			progress.Delivered(delivered, ev.Time)
			if res.FirstToken.IsZero() {
				res.FirstToken = time.Now()
			}
			if ev.Index == 0 {
				res.Times.Token(ev.Time)
			}
			if m.EOS[ev.Token] {
				continue
			}
			if ev.Logprobs != nil {
				c.lps = append(c.lps, tokenLogprob(m.Text, ev.Token, ev.Logprobs))
			}
			piece := decode(ev.Token)
			txt, stopped := c.ts.push(piece)
			c.inThink = false
			switch {
			case txt != "":
				werr = c.send(sink, ev.Index, txt)
			case piece == "" && !stopped && c.ts.pending == "" && len(c.lps) > 0 && c.think == nil && c.tools == nil:
				// A token with no text of its own (a control token):
				// its log probability goes out now, with no text, so
				// that a client sees each token as it comes (as
				// OpenAI's and llama.cpp's streams show them).
				lps := c.lps
				c.lps = nil
				werr = sink.Text(ev.Index, "", lps)
			}
			if c.think != nil && (c.inThink || (txt == "" && c.think.state == splitReasoning)) {
				c.reasoningTokens++
			}
			if stopped && werr == nil {
				if j.OnStopString != nil {
					j.OnStopString(ev.Index, c.ts.matched)
				}
				werr = end(ev.Index, "stop")
			}
		case engine.EventFinish:
			switch ev.Finish {
			case engine.FinishStop, engine.FinishLength:
				if txt := c.ts.flush(); txt != "" {
					werr = c.send(sink, ev.Index, txt)
				}
				if werr == nil {
					werr = end(ev.Index, string(ev.Finish))
				}
			default:
				if ctx.Err() != nil {
					// Cancelled because the client went away.
					return r.abandon(res, ctx.Err())
				}
				failure = finishError(ev)
				r.cancel()
			}
		}
		if werr != nil {
			return r.abandon(res, werr)
		}
	}
	for i := range choices {
		res.Usage.ReasoningTokens += choices[i].reasoningTokens
	}
	if failure != nil {
		res.Finish, res.Err = string(engine.FinishError), failure
		if errors.Is(failure, engine.ErrClosed) {
			res.Finish = string(engine.FinishCancelled)
		}
		return res
	}
	res.Finish = choices[0].reason
	return res
}

// submitError is an engine's refusal of a request as the pipeline reports
// it: the request's own problems as an *Error (400).
func submitError(err error) error {
	var (
		cle *engine.ContextLengthError
		ire *engine.InvalidRequestError
	)
	switch {
	case errors.As(err, &cle):
		return &Error{Status: 400, Type: TypeInvalidRequest, Param: "messages", Code: CodeContextLength,
			Message: ContextLengthMessage(cle.Limit, cle.PromptTokens, cle.MaxTokens)}
	case errors.As(err, &ire):
		return &Error{Status: 400, Type: TypeInvalidRequest, Message: ire.Reason}
	}
	return err
}

// finishError is the error behind a final or choice event that did not end
// normally: the engine failed, or it stopped (and cancelled the request)
// while the client was still there.
func finishError(ev engine.Event) error {
	switch ev.Finish {
	case engine.FinishError:
		if ev.Err != nil {
			return fmt.Errorf("pipeline: engine failed the request: %w", ev.Err)
		}
		return errors.New("pipeline: engine failed the request")
	case engine.FinishCancelled:
		return engine.ErrClosed
	default:
		return fmt.Errorf("pipeline: request ended (%s) with choices unfinished", ev.Finish)
	}
}

// abandon gives up on a request whose client went away or could not be
// written to: it cancels the engine request and waits briefly for its final
// event so that the result shows the tokens it really used.
func (r *localRun) abandon(res Result, cause error) Result {
	r.cancel()
	res.ClientGone, res.Finish = true, string(engine.FinishCancelled)
	if !errors.Is(cause, context.Canceled) {
		res.Err = cause
	}
	r.drainFinal(&res)
	return res
}

// drainFinal waits briefly for a cancelled request's final event, for the
// tokens it really used.
func (r *localRun) drainFinal(res *Result) {
	ctx, stop := context.WithTimeout(context.Background(), drainTimeout)
	defer stop()
	for {
		ev, err := r.st.Next(ctx)
		if err != nil {
			return
		}
		if ev.Last() {
			res.Usage, res.Queued = usageOf(ev.Usage), ev.Queued
			return
		}
	}
}

// tokenLogprob is the OpenAI form of a token's logprobs: texts of the
// tokens as the vocabulary spells them (special tokens included) and their
// bytes.
func tokenLogprob(tm TextModel, tok int32, lp *engine.Logprobs) api.TokenLogprob {
	text := tm.TokenText(tok)
	out := api.TokenLogprob{Token: text, Logprob: lp.Logprob, Bytes: TokenBytes(text), TopLogprobs: make([]api.TopLogprob, len(lp.Top))}
	for k, t := range lp.Top {
		tt := tm.TokenText(t.Token)
		out.TopLogprobs[k] = api.TopLogprob{Token: tt, Logprob: t.Logprob, Bytes: TokenBytes(tt)}
	}
	return out
}

// TokenBytes is a token's text as the "bytes" of OpenAI's logprobs: its
// UTF-8 bytes (a token may hold part of a character).
func TokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// watchdog waits for a request's next event and ends a request that
// stops making progress: once it has produced a token, no new token for
// stall is an error (ErrStalled), whatever heartbeats the connection sees.
// Before the first token the wait (queue, a long prefill) is not bounded.
type watchdog struct {
	stall time.Duration
	// last is when the last token came (unix nanoseconds), 0 before the
	// first; written by the relay, read by the timer.
	last atomic.Int64

	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex // guards timer between the relay and the timer's goroutine
	timer  *time.Timer
}

// progress records a token. It is an atomic store: the timer, armed once,
// checks the time of the last token when it fires and re-arms itself for
// the rest of the stall timeout (a timer per token cost a tenth of a
// busy server's CPU).
func (w *watchdog) progress() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) next(ctx context.Context, st EventStream) (engine.Event, error) {
	if w.last.Load() == 0 || w.stall <= 0 {
		return st.Next(ctx)
	}
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancelCause(ctx)
		w.mu.Lock()
		w.timer = time.AfterFunc(w.stall, w.check)
		w.mu.Unlock()
	}
	ev, err := st.Next(w.ctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(w.ctx), ErrStalled) {
		return engine.Event{}, ErrStalled
	}
	return ev, err
}

// check runs on the timer's goroutine.
func (w *watchdog) check() {
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle >= w.stall {
		w.cancel(ErrStalled)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Reset(w.stall - idle)
	}
}

func (w *watchdog) stop() {
	w.mu.Lock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.mu.Unlock()
	if w.cancel != nil {
		w.cancel(nil)
	}
}
