package pipeline

import (
	"context"
	"fmt"
	"net/http"

	"github.com/llmd/llmd/safety"
)

// The safety check: the request's input goes to the operator's classifier
// (package safety) as soon as it is decoded, and its verdict is awaited
// only once the model is chosen and the prompt rendered and tokenized, so
// the check runs alongside that work. A block is refused before any token
// and before admission (nothing is reserved); a flag is served and
// recorded in the usage row and the log.

// startSafety starts the input check of req, nil without a checker.
func (p *Pipeline) startSafety(ctx context.Context, req *Request) *safety.Pending {
	if p.safety == nil || req.Forwarded() {
		return nil // the entry node checked a forwarded request
	}
	return p.safety.Start(ctx, safety.Input{RequestID: req.ID, Tenant: req.Principal.Tenant, Model: req.Model,
		Stage: safety.StageInput, Text: promptText(req)})
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
