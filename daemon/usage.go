package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/store"
)

// recordTimeout bounds the wait for a usage row to become durable.
const recordTimeout = 10 * time.Second

// errUsageNotRecorded ends a request whose usage row could not be written
// (database and spool both failing): billing fails closed.
var errUsageNotRecorded = errors.New("daemon: the request's usage could not be recorded")

// tokenTimes follows one choice's token times (engine clock) for the
// inter-token latency.
type tokenTimes struct {
	first, last time.Time
	n           int
	// gaps are the inter-token gaps, for the histogram; capped.
	gaps []time.Duration
}

const maxGaps = 4096

func (t *tokenTimes) token(at time.Time) {
	if t.n == 0 {
		t.first = at
	} else if len(t.gaps) < maxGaps {
		t.gaps = append(t.gaps, at.Sub(t.last))
	}
	t.last = at
	t.n++
}

// meanGap is the mean inter-token latency, 0 with fewer than 2 tokens.
func (t *tokenTimes) meanGap() time.Duration {
	if t.n < 2 {
		return 0
	}
	return t.last.Sub(t.first) / time.Duration(t.n-1)
}

// meanITL is the request's mean inter-token latency: measured here, or
// reported by the peer that served it.
func (rl *reqLog) meanITL() time.Duration {
	if rl.times.n >= 2 {
		return rl.times.meanGap()
	}
	return rl.itl
}

// usageEvent is rl's row in the ledger with the given status.
func (s *Server) usageEvent(rl *reqLog, j *job, status store.UsageStatus) store.UsageEvent {
	ev := store.UsageEvent{
		RequestID: rl.id, Tenant: rl.tenant, KeyID: rl.keyID, Model: j.model.id, Tier: rl.tier, Node: s.cfg.NodeID,
		Endpoint: rl.endpoint, Status: status, FinishReason: rl.finish,
		InputTokens: int64(rl.usage.InputTokens), CachedTokens: int64(rl.usage.CachedTokens),
		OutputTokens: int64(rl.usage.OutputTokens),
		QueueTime:    rl.queued, TTFT: rl.ttft, MeanITL: rl.meanITL(), Duration: time.Since(rl.start),
		Route: appendNote(rl.route, rl.degraded), Started: rl.start,
	}
	if status != store.UsageInFlight {
		ev.Ended = time.Now()
	}
	if rl.err != nil && status != store.UsageFinished {
		ev.Reason = truncate(rl.err.Error(), 200)
	}
	return ev
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// beginUsage writes the in_flight row of an admitted request (queued, not
// awaited): if llmd dies before the request ends, the next start marks it
// interrupted.
func (s *Server) beginUsage(ctx context.Context, rl *reqLog, j *job) {
	rl.metered = true
	if s.usage == nil || rl.peer != "" {
		return
	}
	if err := s.usage.Begin(ctx, s.usageEvent(rl, j, store.UsageInFlight)); err != nil {
		s.log.Warn("usage begin not queued", "request_id", rl.id, "err", err)
	}
}

// finalStatus classifies a metered request's end.
func finalStatus(rl *reqLog) store.UsageStatus {
	switch {
	case rl.status == statusClientClosed || rl.finish == string(engine.FinishCancelled):
		return store.UsageCancelled
	case rl.err != nil || rl.finish == string(engine.FinishError) || rl.finish == "":
		return store.UsageError
	}
	return store.UsageFinished
}

// recordUsage writes a metered request's final row and waits until it is
// durable. The normal path calls it before the client sees the end.
func (s *Server) recordUsage(ctx context.Context, rl *reqLog, j *job) error {
	rl.recorded = true
	if s.usage == nil || rl.peer != "" { // a forwarded request is billed by the node it entered
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := s.usage.Record(ctx, s.usageEvent(rl, j, finalStatus(rl))); err != nil {
		s.log.Error("usage not recorded", "request_id", rl.id, "tenant", rl.tenant, "err", err)
		return fmt.Errorf("%w: %v", errUsageNotRecorded, err)
	}
	return nil
}

// endUsage finishes a metered request's accounting however it ended: its
// final row (unless the normal path wrote it) and its metrics.
func (s *Server) endUsage(rl *reqLog, j *job) {
	if !rl.metered {
		return
	}
	if !rl.recorded {
		_ = s.recordUsage(context.Background(), rl, j)
	}
	if rl.ttft > 0 {
		j.model.lat.add(time.Now(), rl.ttft, rl.meanITL())
	}
	if s.metrics == nil || rl.servedBy != "" {
		return // the engine metrics are the serving node's
	}
	reason := rl.finish
	switch finalStatus(rl) {
	case store.UsageCancelled, store.UsageError:
		reason = "abort"
	}
	var prefill, decode time.Duration
	if rl.times.n > 0 {
		decode = rl.times.last.Sub(rl.times.first)
		prefill = max(0, rl.ttft-rl.queued)
	}
	s.metrics.ObserveRequest(metrics.RequestObservation{
		Model: j.model.id, FinishedReason: reason,
		PromptTokens: rl.usage.InputTokens, GenerationTokens: rl.usage.OutputTokens, CachedTokens: rl.usage.CachedTokens,
		MaxTokens: j.maxTokens, N: j.n,
		TTFT: rl.ttft, MeanITL: rl.times.meanGap(), ITLs: rl.times.gaps,
		E2E: time.Since(rl.start), Queue: rl.queued, Prefill: prefill, Decode: decode,
	})
}

// recordRejected writes the row of a request refused before any compute
// (quota or load shedding), without waiting, and counts it.
func (s *Server) recordRejected(rl *reqLog, j *job, cause error) {
	reason := "quota"
	var qe *quotaError
	var oe *overloadError
	switch {
	case errors.As(cause, &qe):
		reason = "quota_" + string(qe.d.Reason)
	case errors.As(cause, &oe):
		reason = "overload"
	}
	if s.metrics != nil {
		s.metrics.ObserveRejected(j.model.id, reason)
	}
	if s.usage == nil {
		return
	}
	ev := s.usageEvent(rl, j, store.UsageRejected)
	ev.Reason = reason
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if err := s.usage.RecordAsync(ctx, ev); err != nil {
		s.log.Warn("rejected request's usage not queued", "request_id", rl.id, "err", err)
	}
}
