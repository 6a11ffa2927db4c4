package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/internal/textdiff"
	"github.com/llmd/llmd/store"
)

// Shadow traffic: a request whose alias has a shadow version is copied to
// that version, here, at the engine's lowest priority (after batch, never
// preempting anything), with no reservation and no usage row; its output
// is discarded. Once both answers are in, they are compared (latency,
// length, and for greedy answers exact match and token edit distance, plus
// the alias's scorer command) and the comparison goes to the shadow
// ledger.

// ShadowLedger stores shadow comparisons; *store.Store implements it.
type ShadowLedger interface {
	RecordShadow(ctx context.Context, r store.ShadowResult) error
}

// shadowTimeout bounds a shadow run and the wait for its primary.
const shadowTimeout = 10 * time.Minute

// scorerTimeout bounds a scorer command.
const scorerTimeout = 30 * time.Second

// shadowRun is one request's shadow: its primary's side arrives on
// primary when the primary ends.
type shadowRun struct {
	primary chan primarySide
	// text collects the primary's first choice (Finish's tee).
	text strings.Builder
}

// primarySide is how the primary request ended.
type primarySide struct {
	status         store.ShadowStatus
	text           string
	ttft, itl, dur time.Duration
	tokens         int
}

// startShadow copies plan's request to its alias's shadow version when the
// models config drew it. It returns at once.
func (p *Pipeline) startShadow(plan *Plan) {
	d := plan.Choice
	if d == nil || d.Shadow == "" || plan.Job == nil || plan.Req.Forwarded() || p.shadowCtx == nil {
		return
	}
	req := plan.Req
	row := store.ShadowResult{RequestID: req.ID, Alias: d.Alias, PrimaryModel: plan.Model, ShadowModel: d.Shadow,
		Started: req.Start}
	sm := p.models.Get(d.Shadow)
	if sm == nil || sm.Draining() {
		row.PrimaryStatus, row.ShadowStatus, row.ScorerError = store.ShadowFinished, store.ShadowSkipped,
			"the shadow version is not loaded on this node"
		p.recordShadow(row)
		return
	}
	job, err := p.prepare(req, plan.Tenant, choice{id: sm.ID, model: sm})
	if err != nil {
		row.PrimaryStatus, row.ShadowStatus, row.ScorerError = store.ShadowFinished, store.ShadowSkipped, capText(err.Error(), 200)
		p.recordShadow(row)
		return
	}
	job.ID, job.Priority, job.Stream, job.Forward = req.ID+"-shadow", engine.PriorityShadow, false, Forward{}
	job.MaxTokens = plan.Job.MaxTokens
	if job.MaxTokens+len(job.Prompt) > sm.Limit {
		job.MaxTokens = max(sm.Limit-len(job.Prompt), 1)
	}
	sr := &shadowRun{primary: make(chan primarySide, 1)}
	plan.shadow = sr
	scorer := d.ShadowScorer
	greedy := req.Sampling.Temperature != nil && *req.Sampling.Temperature == 0
	prompt := promptText(req)
	primaryModel := plan.Job.Model
	p.shadows.Go(func() {
		ctx, cancel := context.WithTimeout(p.shadowCtx, shadowTimeout)
		defer cancel()
		side, text := p.runShadow(ctx, job)
		row.ShadowStatus, row.ShadowTTFT, row.ShadowITL, row.ShadowDuration, row.ShadowTokens =
			side.status, side.ttft, side.itl, side.dur, int64(side.tokens)
		var prim primarySide
		select {
		case prim = <-sr.primary:
		case <-ctx.Done():
			prim.status = store.ShadowCancelled
		}
		row.PrimaryStatus, row.PrimaryTTFT, row.PrimaryITL, row.PrimaryDuration, row.PrimaryTokens =
			prim.status, prim.ttft, prim.itl, prim.dur, int64(prim.tokens)
		both := prim.status == store.ShadowFinished && side.status == store.ShadowFinished
		if greedy && both && primaryModel != nil && primaryModel.Text != nil {
			row.Greedy = true
			a, b := primaryModel.Text.Prompt(prim.text, false), primaryModel.Text.Prompt(text, false)
			same := slices.Equal(a, b)
			dist := int64(textdiff.EditDistanceMax(a, b, 4096))
			row.ExactMatch, row.EditDistance = &same, &dist
		}
		if scorer != "" && both {
			if v, err := runScorer(ctx, scorer, prompt, prim.text, text); err != nil {
				row.ScorerError = capText(err.Error(), 200)
			} else {
				row.Score = &v
			}
		}
		p.recordShadow(row)
	})
}

// runShadow runs job on this node's engine and collects its first
// choice's text and figures.
func (p *Pipeline) runShadow(ctx context.Context, job *Job) (primarySide, string) {
	start := time.Now()
	side := primarySide{status: store.ShadowError}
	ex, err := p.local.Start(ctx, job)
	if err != nil {
		return side, ""
	}
	sink := &captureSink{}
	res := ex.Relay(ctx, sink, nil)
	side.dur, side.tokens, side.itl = time.Since(start), res.Usage.OutputTokens, res.MeanITL()
	if !res.FirstToken.IsZero() {
		side.ttft = res.FirstToken.Sub(start)
	}
	switch {
	case res.Err == nil && !res.ClientGone:
		side.status = store.ShadowFinished
	case ctx.Err() != nil || res.ClientGone:
		side.status = store.ShadowCancelled
	}
	return side, sink.text.String()
}

// endShadow hands the primary's side to its shadow, if it has one.
func (plan *Plan) endShadow(out Outcome) {
	if plan.shadow == nil {
		return
	}
	side := primarySide{status: store.ShadowFinished, text: plan.shadow.text.String(), ttft: out.TTFT, itl: out.ITL,
		dur: time.Since(out.Start), tokens: out.Usage.OutputTokens}
	switch usageStatus(out) {
	case store.UsageCancelled:
		side.status = store.ShadowCancelled
	case store.UsageError:
		side.status = store.ShadowError
	}
	plan.shadow.primary <- side
	plan.shadow = nil
}

// recordShadow writes a comparison, logging a failure.
func (p *Pipeline) recordShadow(r store.ShadowResult) {
	if p.shadowLedger == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if err := p.shadowLedger.RecordShadow(ctx, r); err != nil {
		p.log.Warn("shadow comparison not recorded", "request_id", r.RequestID, "err", err)
	}
}

// CloseShadows cancels the shadow runs in progress and waits for them.
func (p *Pipeline) CloseShadows() {
	if p.stopShadows != nil {
		p.stopShadows()
	}
	p.shadows.Wait()
}

// runScorer runs the alias's scorer command (with sh -c), which reads a
// JSON object {"prompt", "primary", "shadow"} on stdin and prints a
// number.
func runScorer(ctx context.Context, command, prompt, primary, shadow string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, scorerTimeout)
	defer cancel()
	in, _ := json.Marshal(map[string]string{"prompt": prompt, "primary": primary, "shadow": shadow})
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return 0, &Error{Message: "scorer: " + err.Error() + ": " + capText(errb.String(), 120)}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
	if err != nil {
		return 0, &Error{Message: "scorer printed " + strconv.Quote(capText(out.String(), 40)) + ", not a number"}
	}
	return v, nil
}

// captureSink keeps a shadow answer's first choice and discards the rest.
type captureSink struct {
	text strings.Builder
}

func (s *captureSink) Begin() error { return nil }
func (s *captureSink) Text(i int, text string, _ []api.TokenLogprob) error {
	if i == 0 {
		s.text.WriteString(text)
	}
	return nil
}
func (s *captureSink) ToolCall(int, api.ToolCallDelta) error        { return nil }
func (s *captureSink) Finish(int, string, []api.TokenLogprob) error { return nil }
func (s *captureSink) End(Usage) error                              { return nil }
func (s *captureSink) Fail(error) int                               { return 0 }

// teeSink copies the first choice's text into a shadow's buffer.
type teeSink struct {
	Sink
	buf *strings.Builder
}

// Reasoning implements ReasoningSink: the shadow compares content only.
func (s teeSink) Reasoning(i int, text string, lps []api.TokenLogprob) error {
	return sendReasoning(s.Sink, i, text, lps)
}

func (s teeSink) Text(i int, text string, lps []api.TokenLogprob) error {
	if i == 0 {
		s.buf.WriteString(text)
	}
	return s.Sink.Text(i, text, lps)
}
