package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/safety"
)

// The safety check: the request's input goes to the operator's classifier
// (package safety) as soon as it is decoded, and its verdict is awaited
// only once the model is chosen and the prompt rendered and tokenized, so
// the check runs alongside that work. A block is refused before any token
// and before admission (nothing is reserved); a flag is served and
// recorded in the usage row and the log.

// checkerFor is the safety checker of model: its own (the models
// config's override), else llmd's; nil for none.
func (p *Pipeline) checkerFor(model string) *safety.Checker {
	if p.safetyFor != nil {
		if c, ok := p.safetyFor(model); ok {
			return c
		}
	}
	return p.safety
}

// startSafety starts the input check of plan's request, whose input is
// text, with model's checker (and makes it the plan's); nil without one.
func (p *Pipeline) startSafety(ctx context.Context, plan *Plan, model, text string) *safety.Pending {
	req := plan.Req
	plan.checker = p.checkerFor(model)
	if plan.checker == nil || req.Forwarded() {
		plan.checker = nil
		return nil // the entry node checked a forwarded request
	}
	return plan.checker.Start(ctx, safety.Input{RequestID: req.ID, Tenant: req.Principal.Tenant, Model: model,
		Stage: safety.StageInput, Text: text})
}

// abandon stops a check whose verdict is no longer wanted.
func abandon(ctx context.Context, pending *safety.Pending) {
	if pending == nil {
		return
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	pending.Wait(done)
}

// safetyVerdict waits for the input check and applies it to plan: an
// error for a block (or a failure under the fail-closed policy), else the
// note for the usage row.
func (p *Pipeline) safetyVerdict(ctx context.Context, plan *Plan, pending *safety.Pending) error {
	if pending == nil {
		return nil
	}
	res := pending.Wait(ctx)
	if p.metrics != nil {
		p.metrics.ObserveSafety(string(res.Verdict), res.Failed, res.Latency)
	}
	switch {
	case res.Failed && res.Verdict == safety.Block:
		plan.safety = "fail_closed"
		p.log.Warn("safety check unavailable; the request is refused (fail-closed)", "request_id", plan.Req.ID, "err", res.Err)
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: "safety_unavailable",
			Message: "the safety check is unavailable and llmd is set to refuse requests without it; please retry"}
	case res.Failed:
		plan.safety = "fail_open"
		p.log.Warn("safety check unavailable; the request is served (fail-open)", "request_id", plan.Req.ID, "err", res.Err)
	case res.Verdict == safety.Block:
		plan.safety = "block:" + capText(res.Category, 64)
		msg := "The request was blocked by the content safety check"
		if res.Category != "" {
			msg += fmt.Sprintf(" (%s)", capText(res.Category, 64))
		}
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "content_filter", Message: msg + "."}
	case res.Verdict == safety.Flag:
		plan.safety = "flag:" + capText(res.Category, 64)
	}
	return nil
}

// errOutputBlocked stops an answer whose output the safety check blocked.
var errOutputBlocked = errors.New("pipeline: the answer was blocked by the safety check")

// safetySink checks an answer's output with the classifier as it streams:
// every Config.OutputEvery tokens of the first choice (in the background:
// the answer goes on meanwhile, and a block ends every choice with
// finish_reason "content_filter" at the next token), and once at the end,
// before the choices' normal ends are sent (so a block at the end still
// turns them into "content_filter").
//
// Locking: used by the relaying goroutine only.
type safetySink struct {
	Sink
	p       *Pipeline
	plan    *Plan
	ctx     context.Context
	mon     *safety.OutputMonitor
	text    strings.Builder // the first choice's text so far
	tokens  int
	pending *safety.Pending
	// held are the choices' normal ends, sent once the final check has
	// spoken; finished marks the choices ended.
	held     []heldFinish
	blocked  bool
	verdicts []string
}

type heldFinish struct {
	reason string
	lps    []api.TokenLogprob
	done   bool
}

// outputSink wraps sink with the output checks of plan's answer, or
// returns nil when there are none.
func (p *Pipeline) outputSink(ctx context.Context, plan *Plan, sink Sink) *safetySink {
	if plan.checker == nil || plan.Req.Forwarded() || plan.Job == nil {
		return nil
	}
	mon := plan.checker.NewOutputMonitor()
	if !mon.Enabled() {
		return nil
	}
	return &safetySink{Sink: sink, p: p, plan: plan, ctx: ctx, mon: mon, held: make([]heldFinish, plan.Job.N)}
}

func (s *safetySink) input(final bool) safety.Input {
	req := s.plan.Req
	return safety.Input{RequestID: req.ID, Tenant: req.Principal.Tenant, Model: s.plan.Model, Stage: safety.StageOutput,
		Text: s.text.String(), Final: final}
}

func (s *safetySink) Text(i int, text string, lps []api.TokenLogprob) error {
	if err := s.check(i, text); err != nil {
		return err
	}
	return s.Sink.Text(i, text, lps)
}

// Reasoning implements ReasoningSink: reasoning is output the client sees,
// checked as text is.
func (s *safetySink) Reasoning(i int, text string, lps []api.TokenLogprob) error {
	if err := s.check(i, text); err != nil {
		return err
	}
	return sendReasoning(s.Sink, i, text, lps)
}

// check adds choice i's output text to what the checks read, applies a
// verdict that came in, and starts a check when one is due.
func (s *safetySink) check(i int, text string) error {
	if s.blocked {
		return errOutputBlocked
	}
	if s.pending != nil {
		select {
		case <-s.pending.Done():
			if s.apply(s.pending.Wait(s.ctx)) {
				return s.block()
			}
			s.pending = nil
		default:
		}
	}
	if i == 0 {
		s.text.WriteString(text)
		s.tokens++
		if s.mon.Due(s.tokens) && s.pending == nil {
			s.pending = s.plan.checker.Start(s.ctx, s.input(false))
		}
	}
	return nil
}

func (s *safetySink) Finish(i int, reason string, lps []api.TokenLogprob) error {
	if i >= 0 && i < len(s.held) {
		s.held[i] = heldFinish{reason: reason, lps: lps}
		return nil
	}
	return s.Sink.Finish(i, reason, lps)
}

// apply records a check's verdict and reports whether it blocks.
func (s *safetySink) apply(res safety.Result) bool {
	if s.p.metrics != nil {
		s.p.metrics.ObserveSafety(string(res.Verdict), res.Failed, res.Latency)
	}
	switch {
	case res.Failed && res.Verdict == safety.Block:
		s.verdicts = append(s.verdicts, "output_fail_closed")
		return true
	case res.Failed:
		s.verdicts = append(s.verdicts, "output_fail_open")
	case res.Verdict == safety.Block:
		s.verdicts = append(s.verdicts, "output_block:"+capText(res.Category, 64))
		return true
	case res.Verdict == safety.Flag:
		s.verdicts = append(s.verdicts, "output_flag:"+capText(res.Category, 64))
	}
	return false
}

// block ends every choice not ended yet with "content_filter".
func (s *safetySink) block() error {
	s.blocked = true
	for i := range s.held {
		s.held[i].reason, s.held[i].lps = "content_filter", nil
	}
	return errOutputBlocked
}

// settle ends the answer's output checks once its execution returned res:
// it waits for a check still running, runs the final check of an answer
// that ended normally, sends the choices' ends and returns res as the
// checks leave it.
func (s *safetySink) settle(res Result) Result {
	if s.pending != nil && !s.blocked {
		if s.apply(s.pending.Wait(s.ctx)) {
			_ = s.block()
		}
		s.pending = nil
	}
	normal := res.Err == nil && !res.ClientGone
	if normal && !s.blocked && s.mon.Final() {
		if s.apply(s.plan.checker.Check(s.ctx, s.input(true))) {
			_ = s.block()
		}
	}
	if s.blocked && (normal || errors.Is(res.Err, errOutputBlocked)) {
		res.Err, res.ClientGone, res.Finish = nil, false, "content_filter"
		normal = true
	}
	if normal {
		for i, h := range s.held {
			if h.reason == "" {
				continue
			}
			if err := s.Sink.Finish(i, h.reason, h.lps); err != nil {
				res.Err, res.ClientGone = err, true
				break
			}
		}
	}
	if len(s.verdicts) > 0 {
		s.plan.safety = appendNote(s.plan.safety, strings.Join(s.verdicts, "; "))
	}
	return res
}
