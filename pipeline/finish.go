package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/catalog"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/store"
)

// Outcome is how a request ended: everything its one log line and its
// usage row say, built from the Plan and the execution's Result.
type Outcome struct {
	ID, ClientID string
	Endpoint     Endpoint
	Principal    Principal
	// User is the client's end-user tag (the "user" field).
	User string
	Tier string
	// Model is the model that served the request, or the one it asked for
	// when it was refused before one was chosen.
	Model  string
	Stream bool
	Start  time.Time
	// Status is the HTTP status sent (200 once a stream has started), or
	// StatusClientClosed when the client left.
	Status int
	// Finish is the first choice's finish reason, "cancelled" or "error".
	Finish string
	Usage  Usage
	// TTFT is the time to the first token, Queued the time in the engine's
	// queue, ITL the mean inter-token latency.
	TTFT, Queued, ITL time.Duration
	// Route and Degraded are the routing and degradation notes; ServedBy
	// the peer that served the request ("" for this node).
	Route, Degraded, ServedBy string
	// Decision is how the models config chose the model (router/rule,
	// alias/role; "" for a model named directly), Alternatives the models
	// a router's other rules would have chosen.
	Decision     string
	Alternatives []string
	// Safety is the safety check's verdict when it was not a plain allow
	// ("flag:CATEGORY", "block:CATEGORY", "fail_open").
	Safety string
	Err    error
}

// Finish relays the answer of r's execution to sink, then settles the
// request: the final usage row (before the client sees a normal end, and
// refusing that end when the row cannot be written), the reservation
// reconciled, the end or error event, the metrics and the log line. A
// failure before the first output on a peer tries the following targets.
// ctx is the one Start was given. It returns the request's Outcome.
func (p *Pipeline) Finish(ctx context.Context, r *Run, sink Sink) Outcome {
	plan := r.plan
	if plan.shadow != nil {
		sink = teeSink{Sink: sink, buf: &plan.shadow.text}
	}
	checks := p.outputSink(ctx, plan, sink)
	if checks != nil {
		sink = checks
	}
	if plan.Req.Forwarded() {
		// The entry node reads the outcome from the trailer, and may
		// retry elsewhere until the first token.
		sink = &lazySink{Sink: sink}
	} else if err := sink.Begin(); err != nil {
		sink = failingSink{err}
	}
	progress := p.progress(plan)
	res := r.exec.Relay(ctx, sink, progress)
	for res.Retry && ctx.Err() == nil {
		p.targetFailed(plan, plan.targets[r.next-1], res.Err)
		if err := p.startNext(ctx, r); err != nil {
			res = Result{Err: err, Finish: string(engine.FinishError)}
			break
		}
		res = r.exec.Relay(ctx, sink, progress)
	}
	if res.Retry {
		res.Retry, res.ClientGone, res.Finish, res.Err = false, true, string(engine.FinishCancelled), nil
	}
	if checks != nil {
		res = checks.settle(res)
	}
	out := p.outcome(plan, res)
	switch {
	case res.ClientGone:
		plan.settle(out.Usage)
		// Still one terminal event, for whoever reads a stream's log (a
		// DELETE, or a resumed client); a JSON client still waiting gets a
		// 409.
		out.Status = StatusClientClosed
		if st := sink.Fail(ErrRequestCancelled); st >= 400 && st != StatusClientClosed {
			out.Status = st
		}
		p.meter(out)
	case res.Err != nil:
		plan.settle(out.Usage)
		out.Status = sink.Fail(res.Err)
		p.meter(out)
	default:
		out.Status = 200
		if err := p.meter(out); err != nil {
			// Billing must not lose a finished request: without its row the
			// client gets an error rather than a normal end.
			out.Err = err
			plan.settle(out.Usage)
			out.Status = sink.Fail(err)
			break
		}
		plan.settle(out.Usage)
		if err := sink.End(out.Usage); err != nil {
			out.Status, out.Err = StatusClientClosed, err
		}
	}
	p.observe(plan, out, res)
	plan.release()
	plan.endShadow(out)
	p.record(out)
	return out
}

// Record records a request answered without an execution: refused before
// its answer started (by decoding, Prepare or Start) with err, or a
// tokenizer call; status is what the client got. It settles an admitted
// request's reservation and writes its final usage row, and logs it. plan
// is nil when the request was refused before Prepare.
func (p *Pipeline) Record(req *Request, plan *Plan, status int, err error) Outcome {
	if plan == nil {
		plan = &Plan{Req: req, Model: capText(req.Model, maxLoggedModelLen)}
	}
	out := p.outcome(plan, Result{})
	out.Status, out.Err = status, err
	if plan.metered {
		plan.settle(out.Usage)
		p.meter(out)
		p.observe(plan, out, Result{})
	}
	plan.release()
	plan.endShadow(out)
	p.record(out)
	return out
}

// outcome is the Outcome of plan with res.
func (p *Pipeline) outcome(plan *Plan, res Result) Outcome {
	req := plan.Req
	out := Outcome{ID: req.ID, ClientID: req.ClientID, Endpoint: req.Endpoint, Principal: req.Principal, User: req.User,
		Tier: string(plan.Tenant.Tier), Model: plan.Model, Stream: req.Stream, Start: req.Start, Finish: res.Finish,
		Usage: res.Usage, Queued: res.Queued, ITL: res.MeanITL(), TTFT: res.TTFT, Route: plan.route,
		Degraded: plan.degraded, ServedBy: res.ServedBy, Err: res.Err, Decision: choiceNote(plan.Choice), Safety: plan.safety}
	if plan.Choice != nil {
		out.Alternatives = plan.Choice.Alternatives
	}
	if !res.FirstToken.IsZero() {
		out.TTFT = res.FirstToken.Sub(req.Start)
	}
	out.Route = appendNote(out.Route, res.Note)
	if id := res.ServedBy; id != "" && !strings.HasPrefix(out.Route, id+" ") && !strings.Contains(out.Route, "; "+id+" ") {
		// Not the router's first choice (which failed).
		out.Route = appendNote(out.Route, "served by "+id)
	}
	return out
}

// recordTimeout bounds the wait for a usage row to become durable.
const recordTimeout = 10 * time.Second

// usageStatus classifies a metered request's end.
func usageStatus(out Outcome) store.UsageStatus {
	switch {
	case out.Status == StatusClientClosed || out.Finish == string(engine.FinishCancelled):
		return store.UsageCancelled
	case out.Err != nil || out.Finish == string(engine.FinishError) || out.Finish == "":
		return store.UsageError
	}
	return store.UsageFinished
}

// usageEvent is out's row in the ledger with the given status.
func (p *Pipeline) usageEvent(out Outcome, status store.UsageStatus) store.UsageEvent {
	ev := store.UsageEvent{
		RequestID: out.ID, Tenant: out.Principal.Tenant, KeyID: out.Principal.KeyID, Model: out.Model, Tier: out.Tier,
		Node: p.cfg.NodeID, Endpoint: string(out.Endpoint), Status: status, FinishReason: out.Finish,
		InputTokens: int64(out.Usage.InputTokens), CachedTokens: int64(out.Usage.CachedTokens),
		OutputTokens: int64(out.Usage.OutputTokens),
		QueueTime:    out.Queued, TTFT: out.TTFT, MeanITL: out.ITL, Duration: time.Since(out.Start),
		Route: appendNote(out.Route, out.Degraded), User: out.User, Started: out.Start,
		Decision: out.Decision, Safety: out.Safety,
	}
	if status != store.UsageInFlight {
		ev.Ended = time.Now()
	}
	if out.Err != nil && status != store.UsageFinished {
		ev.Reason = capText(out.Err.Error(), 200)
	}
	return ev
}

// beginRow writes the in-flight row of an admitted request (queued, not
// awaited): if llmd dies before the request ends, the next start marks it
// interrupted. A forwarded request is billed by the node it entered.
func (p *Pipeline) beginRow(ctx context.Context, plan *Plan) {
	if p.ledger == nil || plan.Req.Forwarded() {
		return
	}
	out := p.outcome(plan, Result{})
	if err := p.ledger.Begin(ctx, p.usageEvent(out, store.UsageInFlight)); err != nil {
		p.log.Warn("usage begin not queued", "request_id", out.ID, "err", err)
	}
}

// DefaultUsageCheckpoint is the default of Config.UsageCheckpoint.
const DefaultUsageCheckpoint = 50 * time.Millisecond

// progress returns the checkpointer of plan's in-flight usage row while
// its answer streams: each checkpoint is the row beginRow wrote with the
// prompt's tokens and the output tokens sent so far, queued without
// waiting (the usage writer coalesces or drops it when its queue is full:
// the relay never waits on the ledger). It is nil when there is nothing
// to checkpoint: no ledger, checkpoints off, a JSON answer (its client
// gets nothing before the end, which the final row bills), or a request
// forwarded here (its entry node bills it, from what it relays).
func (p *Pipeline) progress(plan *Plan) *Progress {
	if p.ledger == nil || p.cfg.UsageCheckpoint < 0 || !plan.Req.Stream || plan.Req.Forwarded() || !plan.metered {
		return nil
	}
	every := p.cfg.UsageCheckpoint
	if every == 0 {
		every = DefaultUsageCheckpoint
	}
	row := p.usageEvent(p.outcome(plan, Result{}), store.UsageInFlight)
	if plan.Job != nil {
		row.InputTokens = int64(len(plan.Job.Prompt))
	}
	return NewProgress(every, func(outputTokens int) {
		ev := row
		ev.OutputTokens, ev.Duration = int64(outputTokens), time.Since(ev.Started)
		if err := p.ledger.Progress(ev); err != nil {
			p.log.Debug("usage checkpoint not queued", "request_id", ev.RequestID, "err", err)
		}
	})
}

// meter writes a metered request's final row and waits until it is
// durable.
func (p *Pipeline) meter(out Outcome) error {
	if p.ledger == nil || out.Principal.Peer != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if err := p.ledger.Record(ctx, p.usageEvent(out, usageStatus(out))); err != nil {
		p.log.Error("usage not recorded", "request_id", out.ID, "tenant", out.Principal.Tenant, "err", err)
		return fmt.Errorf("%w: %v", ErrUsageNotRecorded, err)
	}
	return nil
}

// rejectedRow counts a request refused before any compute (quota or load
// shedding) and writes its row, without waiting.
func (p *Pipeline) rejectedRow(plan *Plan, reason string) {
	if p.metrics != nil {
		p.metrics.ObserveRejected(plan.Model, reason)
	}
	if p.ledger == nil {
		return
	}
	ev := p.usageEvent(p.outcome(plan, Result{}), store.UsageRejected)
	ev.Reason = reason
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if err := p.ledger.RecordAsync(ctx, ev); err != nil {
		p.log.Warn("rejected request's usage not queued", "request_id", ev.RequestID, "err", err)
	}
}

// observe feeds a finished metered request to the model's latency window
// and, when served here, to the metrics.
func (p *Pipeline) observe(plan *Plan, out Outcome, res Result) {
	m := plan.Job.Model
	if out.TTFT > 0 && m != nil {
		m.Latency.Add(time.Now(), out.TTFT, out.ITL)
	}
	if p.catalog != nil && out.ServedBy == "" && m != nil {
		// The canary comparison and the fallbacks' health: what this
		// node's engine did, not what the client did.
		st := usageStatus(out)
		failed := st == store.UsageError && (p.statusOf == nil || p.statusOf(out.Err) >= 500)
		now := time.Now()
		p.catalog.Observe(catalog.Outcome{Model: m.ID, At: now, TTFT: out.TTFT, ITL: out.ITL, Error: failed,
			Length: out.Finish == string(engine.FinishLength), Cancelled: st == store.UsageCancelled})
		if failed {
			p.catalog.ReportFailure(m.ID, now)
		} else if st == store.UsageFinished {
			p.catalog.ReportSuccess(m.ID, now)
		}
	}
	if p.metrics == nil || out.ServedBy != "" {
		return // the engine metrics are the serving node's
	}
	reason := out.Finish
	switch usageStatus(out) {
	case store.UsageCancelled, store.UsageError:
		reason = "abort"
	}
	var prefill, decode time.Duration
	if res.Times.N > 0 {
		decode = res.Times.Last.Sub(res.Times.First)
		prefill = max(0, out.TTFT-out.Queued)
	}
	p.metrics.ObserveRequest(metrics.RequestObservation{
		Model: out.Model, FinishedReason: reason,
		PromptTokens: out.Usage.InputTokens, GenerationTokens: out.Usage.OutputTokens, CachedTokens: out.Usage.CachedTokens,
		MaxTokens: plan.Job.MaxTokens, N: plan.Job.N,
		TTFT: out.TTFT, MeanITL: res.Times.MeanGap(), ITLs: res.Times.Gaps,
		E2E: time.Since(out.Start), Queue: out.Queued, Prefill: prefill, Decode: decode,
	})
}

// record writes the one line of a finished request.
func (p *Pipeline) record(out Outcome) {
	level := slog.LevelInfo
	if out.Err != nil && p.statusOf != nil {
		// A stream's status is 200 whatever happens after it starts: rank
		// by what the error would have been.
		switch st := p.statusOf(out.Err); {
		case st == 503:
			level = slog.LevelWarn
		case st >= 500:
			level = slog.LevelError
		}
	}
	attrs := []slog.Attr{
		slog.String("request_id", out.ID),
		slog.String("endpoint", string(out.Endpoint)),
		slog.String("tenant", out.Principal.Tenant),
		slog.String("tier", out.Tier),
		slog.String("node", p.cfg.NodeID),
		slog.String("model", out.Model),
		slog.Bool("stream", out.Stream),
		slog.Int("status", out.Status),
		slog.String("finish_reason", out.Finish),
		slog.Int("input_tokens", out.Usage.InputTokens),
		slog.Int("cached_tokens", out.Usage.CachedTokens),
		slog.Int("output_tokens", out.Usage.OutputTokens),
		slog.Int64("ttft_ms", out.TTFT.Milliseconds()),
		slog.Int64("queue_ms", out.Queued.Milliseconds()),
		slog.Float64("itl_ms", float64(out.ITL.Microseconds())/1000),
		slog.Int64("duration_ms", time.Since(out.Start).Milliseconds()),
	}
	if out.ClientID != "" {
		attrs = append(attrs, slog.String("client_request_id", out.ClientID))
	}
	if out.Principal.KeyID != "" {
		attrs = append(attrs, slog.String("key_id", out.Principal.KeyID))
	}
	if out.Degraded != "" {
		attrs = append(attrs, slog.String("degraded", out.Degraded))
	}
	if out.Route != "" {
		attrs = append(attrs, slog.String("route", out.Route))
	}
	if out.Decision != "" {
		attrs = append(attrs, slog.String("decision", out.Decision))
	}
	if len(out.Alternatives) > 0 {
		attrs = append(attrs, slog.String("alternatives", strings.Join(out.Alternatives, ",")))
	}
	if out.Safety != "" {
		attrs = append(attrs, slog.String("safety", out.Safety))
	}
	if out.Principal.Peer != "" {
		attrs = append(attrs, slog.String("forwarded_by", out.Principal.Peer))
	}
	if out.Err != nil {
		attrs = append(attrs, slog.String("error", out.Err.Error()))
	}
	p.log.LogAttrs(context.Background(), level, "request", attrs...)
}

// failingSink stands for a sink whose Begin failed: every write fails
// the same way, so the execution stops at once.
type failingSink struct{ err error }

func (s failingSink) Begin() error                                    { return s.err }
func (s failingSink) Text(int, string, []api.TokenLogprob) error      { return s.err }
func (s failingSink) ToolCall(int, api.ToolCallDelta) error           { return s.err }
func (s failingSink) Reasoning(int, string, []api.TokenLogprob) error { return s.err }
func (s failingSink) Finish(int, string, []api.TokenLogprob) error    { return s.err }
func (s failingSink) End(Usage) error                                 { return s.err }
func (s failingSink) Fail(error) int                                  { return StatusClientClosed }
