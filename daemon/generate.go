package daemon

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
)

// job is a validated request, ready for its model's engine.
type job struct {
	model     *model
	prompt    []int32
	maxTokens int
	n         int
	stops     []string
	seed      uint64
	sampling  engine.SamplingParams
	priority  engine.Priority
	// requested is the priority the request asked for (native API), nil
	// for its tenant's tier.
	requested *engine.Priority
	// degrade is the degradation level of the model the client asked for
	// (which may differ from model: see degradedLookup).
	degrade engine.DegradeLevel
	// logprobs asks for each token's log-probability and topLogprobs
	// alternatives (chat completions).
	logprobs    bool
	topLogprobs int
	// user is the request's "user" field: the session affinity key when
	// no conversation header is sent.
	user string
}

// logprobSink is an emitter that reports logprobs: each token's entry is
// added before its text, and goes out with the next text or finish.
type logprobSink interface {
	addLogprob(i int, lp api.TokenLogprob)
}

// emitter writes a generation's output in one response format. The relay
// calls begin once, then text and finish per choice, then end or fail.
type emitter interface {
	// begin is called once the engine has accepted the request.
	begin() error
	// text is called with new text (never empty) for choice i.
	text(i int, s string) error
	// finish is called once per choice that ends normally.
	finish(i int, reason string) error
	// end is called when every choice has finished.
	end(u engine.Usage) error
	// fail is called instead of end when the request failed after begin.
	fail(err error) error
	// sse returns the stream writer, or nil for a JSON response.
	sse() *sseWriter
}

// choiceState is one choice's progress in the relay.
type choiceState struct {
	ts     textStream
	done   bool
	reason string
}

// drainTimeout bounds the wait for a cancelled request's final event (and
// its usage) after its client went away.
const drainTimeout = 2 * time.Second

// generate submits j and relays its events to em. All errors are handled
// here: before the engine accepts the request as an HTTP error, after it
// through em.fail.
//
// A JSON answer is relayed in the handler, and the client leaving cancels
// it. A stream is relayed by its own goroutine into the request's event
// log while the handler copies the log to the client (follow), so nothing
// waits on the socket; a resumable stream outlives its connection (see
// Config.ResumeGrace) and others are cancelled when their client leaves.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, rl *reqLog, j *job, em emitter) {
	s.active.Add(1)
	defer s.active.Add(-1)
	if s.state.Load() == stateDraining {
		rl.fail(writeError(w, rl.id, errDraining), errDraining)
		return
	}
	if rl.peer != "" {
		// Forwarded here: the entry node reads the outcome from the
		// trailer, and may retry elsewhere until the first token.
		w.Header().Set("Trailer", trailerUsage)
		em = &lazyBegin{emitter: em}
	}
	settle, err := s.admit(w, r, rl, j)
	if err != nil {
		if isQuotaDenial(err) {
			s.recordRejected(rl, j, err)
		} else {
			var re *requestError
			if !errors.As(err, &re) {
				s.log.Error("admission failed", "request_id", rl.id, "err", err)
			}
		}
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	// From here the request is metered: an in_flight row now, its final
	// row when it ends (before the client sees the end, on the normal
	// path), and the reservation settled with the same token counts.
	s.beginUsage(r.Context(), rl, j)
	finish := func() {
		settle(rl.usage)
		s.endUsage(rl, j)
	}
	sw := em.sse()
	// ctx is the request's lifetime. subCtx, the engine request's, also
	// ends when stop strings have ended every choice.
	parent := r.Context()
	if sw != nil {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancel(parent)
	subCtx, subCancel := context.WithCancel(ctx)
	submit := func() (eventStream, error) {
		return j.model.eng.Submit(subCtx, engine.Request{
			ID:          rl.id,
			Tenant:      principalFrom(r.Context()).tenant,
			Prompt:      j.prompt,
			MaxTokens:   j.maxTokens,
			N:           j.n,
			Priority:    j.priority,
			Seed:        j.seed,
			Sampling:    j.sampling,
			Logprobs:    j.logprobs,
			TopLogprobs: j.topLogprobs,
		})
	}
	peers := s.peerTargets(r, rl, j)
	if sw == nil && len(peers) > 0 {
		for _, c := range peers {
			ok, err := s.forwardJSON(ctx, w, r, rl, j, c, settle)
			if ok {
				subCancel()
				cancel()
				finish()
				return
			}
			s.peerFailed(c, rl, err)
			if ctx.Err() != nil {
				break
			}
		}
		rl.route = appendNote(rl.route, "served locally")
	}
	if sw != nil && len(peers) > 0 {
		s.stream(w, r, rl, j, em, ctx, cancel, subCancel, finish, func() {
			for _, c := range peers {
				ok, err := s.forwardStream(ctx, r, rl, j, em, c, settle)
				if ok || ctx.Err() != nil {
					return
				}
				s.peerFailed(c, rl, err)
			}
			rl.route = appendNote(rl.route, "served locally")
			st, err := submit()
			if err != nil {
				rl.err, rl.finish = err, string(engine.FinishError)
				_ = em.fail(err)
				return
			}
			s.relay(ctx, subCancel, st, rl, j, em, settle)
		})
		return
	}
	st, err := submit()
	if err != nil {
		subCancel()
		cancel()
		rl.fail(writeError(w, rl.id, err), err)
		finish()
		return
	}
	if sw == nil {
		if rl.peer != "" {
			w.WriteHeader(http.StatusEarlyHints) // accepted: the entry node stops its forward timeout
		}
		l := newEventLog(rl.id, rl.tenant, false, 0, 0, cancel)
		l.model, l.tier, l.start = j.model.id, rl.tier, rl.start
		rl.live = l
		s.logs.add(l) // for DELETE /v1/requests/{id} and the snapshot
		defer func() {
			l.end(time.Now())
			s.logs.remove(rl.id)
			subCancel()
			cancel()
			finish()
			if rl.peer != "" {
				setUsageTrailer(w, rl)
			}
		}()
		s.relay(ctx, subCancel, st, rl, j, em, settle)
		if ctx.Err() != nil && r.Context().Err() == nil && rl.status == statusClientClosed {
			// Cancelled by DELETE /v1/requests/{id} while its client waits.
			rl.status = writeError(w, rl.id, errCancelledJSON)
		}
		return
	}
	s.stream(w, r, rl, j, em, ctx, cancel, subCancel, finish, func() {
		s.relay(ctx, subCancel, st, rl, j, em, settle)
	})
}

// stream serves a streamed request: serve (the engine's relay, or a
// forward to a peer) runs in its own goroutine and writes the request's
// event log, while the handler copies the log to the client (follow).
//
//nolint:revive // ctx belongs with its cancel functions here
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rl *reqLog, j *job, em emitter, ctx context.Context,
	cancel, subCancel context.CancelFunc, finish func(), serve func()) {
	sw := em.sse()
	l := sw.log
	l.cancel = cancel
	l.model, l.tier, l.start = j.model.id, rl.tier, rl.start
	rl.live = l
	s.logs.add(l)
	rl.detached = true // the relay writes the log line, not the handler
	rl.status = http.StatusOK
	s.active.Add(1)
	go func() {
		defer s.active.Add(-1)
		serve()
		if !sw.terminated {
			// Cancelled (DELETE, no reader, shutdown): still one terminal
			// event for whoever reads the log.
			_ = em.fail(errRequestCancelled)
		}
		subCancel()
		cancel()
		finish()
		l.end(time.Now())
		if !l.resumable {
			s.logs.remove(rl.id)
		}
		s.logRequest(rl)
	}()
	s.follow(w, r, l, 0)
	if !l.resumable {
		cancel() // the client left, or the stream is over
	}
	if rl.peer != "" && l.isDone() {
		setUsageTrailer(w, rl)
	}
}

// relay reads the engine's events for st and writes them to em until the
// request ends. Before the normal end it records the usage and settles the
// quota reservation (settle is idempotent), so that a client that sends its
// next request as soon as it sees the end finds its quota already freed.
func (s *Server) relay(ctx context.Context, cancel context.CancelFunc, st eventStream, rl *reqLog, j *job, em emitter,
	settle func(engine.Usage)) {
	if err := em.begin(); err != nil {
		s.abandon(cancel, st, rl, err)
		return
	}
	wd := watchdog{stall: s.cfg.StallTimeout}
	defer wd.stop()

	choices := make([]choiceState, j.n)
	for i := range choices {
		choices[i].ts.stops = j.stops
	}
	open := j.n
	var failure error
	end := func(i int, reason string) error {
		c := &choices[i]
		c.done, c.reason = true, reason
		open--
		if open == 0 {
			// Stop strings may end choices the engine still generates.
			cancel()
		}
		return em.finish(i, reason)
	}
	for {
		ev, err := wd.next(ctx, st)
		if errors.Is(err, io.EOF) {
			failure = errors.New("daemon: event stream ended before its final event")
			break
		}
		if errors.Is(err, errStalled) {
			failure = err
			cancel()
			s.drainFinal(st, rl)
			break
		}
		if err != nil {
			s.abandon(cancel, st, rl, err)
			return
		}
		if ev.Last() {
			rl.usage, rl.queued = ev.Usage, ev.Queued
			if open > 0 && failure == nil && ctx.Err() != nil {
				rl.status, rl.finish = statusClientClosed, string(engine.FinishCancelled)
				return
			}
			if open > 0 && failure == nil {
				failure = finishError(ev)
			}
			break
		}
		if ev.Index < 0 || ev.Index >= j.n {
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
			if rl.ttft == 0 {
				rl.ttft = time.Since(rl.start)
				rl.live.firstToken.Store(time.Now().UnixNano())
			}
			if ev.Index == 0 {
				rl.times.token(ev.Time)
			}
			if j.model.eos[ev.Token] {
				continue
			}
			if sink, ok := em.(logprobSink); ok && ev.Logprobs != nil {
				sink.addLogprob(ev.Index, tokenLogprob(j.model.text, ev.Token, ev.Logprobs))
			}
			txt, stopped := c.ts.push(j.model.text.DecodeToken(ev.Token))
			if txt != "" {
				werr = em.text(ev.Index, txt)
			}
			if stopped && werr == nil {
				werr = end(ev.Index, "stop")
			}
		case engine.EventFinish:
			switch ev.Finish {
			case engine.FinishStop, engine.FinishLength:
				if txt := c.ts.flush(); txt != "" {
					werr = em.text(ev.Index, txt)
				}
				if werr == nil {
					werr = end(ev.Index, string(ev.Finish))
				}
			default:
				if ctx.Err() != nil {
					// Cancelled because the client went away.
					s.abandon(cancel, st, rl, ctx.Err())
					return
				}
				failure = finishError(ev)
				cancel()
			}
		}
		if werr != nil {
			s.abandon(cancel, st, rl, werr)
			return
		}
	}
	if failure != nil {
		rl.finish = string(engine.FinishError)
		if errors.Is(failure, engine.ErrClosed) {
			rl.finish = string(engine.FinishCancelled)
		}
		rl.err = failure
		settle(rl.usage)
		if err := em.fail(failure); err != nil {
			rl.status = statusClientClosed
		}
		if em.sse() == nil {
			rl.status = apiErrorFor(failure, rl.id).Status
		}
		return
	}
	rl.finish = choices[0].reason
	if err := s.recordUsage(ctx, rl, j); err != nil {
		// Billing must not lose a finished request: without its row the
		// client gets an error rather than a normal end.
		rl.err = err
		if ferr := em.fail(err); ferr != nil {
			rl.status = statusClientClosed
		}
		if em.sse() == nil {
			rl.status = apiErrorFor(err, rl.id).Status
		}
		return
	}
	settle(rl.usage)
	if err := em.end(rl.usage); err != nil {
		rl.status = statusClientClosed
		rl.err = err
		return
	}
	if em.sse() == nil {
		rl.status = http.StatusOK
	}
}

// finishError is the error behind a final or choice event that did not end
// normally: the engine failed, or it stopped (and cancelled the request)
// while the client was still there.
func finishError(ev engine.Event) error {
	switch ev.Finish {
	case engine.FinishError:
		if ev.Err != nil {
			return fmt.Errorf("daemon: engine failed the request: %w", ev.Err)
		}
		return errors.New("daemon: engine failed the request")
	case engine.FinishCancelled:
		return engine.ErrClosed
	default:
		return fmt.Errorf("daemon: request ended (%s) with choices unfinished", ev.Finish)
	}
}

// abandon gives up on a request whose client went away or could not be
// written to: it cancels the engine request and waits briefly for its final
// event so that the log shows the tokens it really used.
func (s *Server) abandon(cancel context.CancelFunc, st eventStream, rl *reqLog, cause error) {
	cancel()
	rl.status = statusClientClosed
	rl.finish = string(engine.FinishCancelled)
	if !errors.Is(cause, context.Canceled) {
		rl.err = cause
	}
	s.drainFinal(st, rl)
}

// drainFinal waits briefly for a cancelled request's final event, for the
// tokens it really used.
func (s *Server) drainFinal(st eventStream, rl *reqLog) {
	ctx, stop := context.WithTimeout(context.Background(), drainTimeout)
	defer stop()
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			return
		}
		if ev.Last() {
			rl.usage, rl.queued = ev.Usage, ev.Queued
			return
		}
	}
}

// watchdog waits for a request's next event and ends a request that
// stops making progress: once it has produced a token, no new token for
// stall is an error (errStalled), whatever heartbeats the connection sees.
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

func (w *watchdog) next(ctx context.Context, st eventStream) (engine.Event, error) {
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
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(w.ctx), errStalled) {
		return engine.Event{}, errStalled
	}
	return ev, err
}

// check runs on the timer's goroutine.
func (w *watchdog) check() {
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle >= w.stall {
		w.cancel(errStalled)
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

// newID returns prefix followed by 32 random hex digits (128 bits: ids
// are unguessable, and the resume and cancel routes rely on that).
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

// promptSeed derives a seed from the prompt, so that a request without a
// seed still gets output that depends only on its prompt.
func promptSeed(prompt []int32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// capHeader trims a client-supplied header value for logging.
func capHeader(v string, n int) string {
	v = strings.TrimSpace(v)
	if len(v) > n {
		v = v[:n]
	}
	return v
}

// tokenLogprob is the OpenAI form of a token's logprobs: texts of the
// tokens as the vocabulary spells them (special tokens included) and their
// bytes.
func tokenLogprob(tm textModel, tok int32, lp *engine.Logprobs) api.TokenLogprob {
	text := tm.TokenText(tok)
	out := api.TokenLogprob{Token: text, Logprob: lp.Logprob, Bytes: byteInts(text), TopLogprobs: make([]api.TopLogprob, len(lp.Top))}
	for k, t := range lp.Top {
		tt := tm.TokenText(t.Token)
		out.TopLogprobs[k] = api.TopLogprob{Token: tt, Logprob: t.Logprob, Bytes: byteInts(tt)}
	}
	return out
}

func byteInts(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}
