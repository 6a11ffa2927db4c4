package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// UsageStatus is where a request's usage row stands.
type UsageStatus string

// The statuses of a usage row. UsageInFlight is the only one that a later
// event replaces; the others are final.
const (
	// UsageInFlight: admitted, not yet ended (written at admission, and
	// checkpointed while the answer streams).
	UsageInFlight UsageStatus = "in_flight"
	// UsageFinished: the request ended normally (finish reason stop or
	// length).
	UsageFinished UsageStatus = "finished"
	// UsageCancelled: the client went away or cancelled.
	UsageCancelled UsageStatus = "cancelled"
	// UsageError: the request failed after admission.
	UsageError UsageStatus = "error"
	// UsageRejected: refused before any compute (quota, overload); its
	// tokens are zero.
	UsageRejected UsageStatus = "rejected"
	// UsageInterrupted: was in flight when llmd died; set only by
	// [Store.RecoverUsage].
	UsageInterrupted UsageStatus = "interrupted"
)

// UsageEvent is one request's usage row: queued by [UsageWriter.Begin] at
// admission (status in_flight), by [UsageWriter.Progress] while it streams
// (in_flight, with the output tokens sent so far) and by
// [UsageWriter.Record] or [UsageWriter.RecordAsync] when the request ends.
//
// Times are stored to the millisecond and read back in UTC; durations are
// stored as (fractional) milliseconds.
type UsageEvent struct {
	// RequestID is unique; it is the row's key.
	RequestID string
	Tenant    string
	KeyID     string
	Model     string
	Tier      string
	Node      string
	Endpoint  string
	Status    UsageStatus
	// FinishReason is stop, length, cancelled or error ("" for rejected).
	FinishReason string
	// Reason says why the request was rejected or failed ("" otherwise).
	Reason       string
	InputTokens  int64
	CachedTokens int64
	OutputTokens int64
	QueueTime    time.Duration
	TTFT         time.Duration
	MeanITL      time.Duration
	Duration     time.Duration
	// Route is the cluster router's decision (where the request ran),
	// free text.
	Route string
	// Decision is the model-choice decision, free text: router/rule for a
	// request to a routed name ("auto/short-chat"), alias/variant for a
	// split alias ("flagship/canary"); "" when the model was named
	// directly.
	Decision string
	// Safety is the safety check's verdict, free text ("flag:self_harm",
	// "block:violence", "fail_open"); "" when nothing was flagged or no
	// check ran.
	Safety string
	// User is the end user the client named (the OpenAI "user" field), ""
	// when none.
	User    string
	Started time.Time
	// Ended is the zero time while the request is in flight.
	Ended time.Time
}

// checkEvent returns an error wrapping ErrInvalid unless ev can be queued:
// it has a request id, no negative token count, and a final status other
// than interrupted (which only RecoverUsage sets), or in_flight where
// inFlight allows it. It checks everything the table's constraints do, so
// that one bad event cannot fail a whole batch.
func checkEvent(ev UsageEvent, inFlight bool) error {
	if ev.RequestID == "" {
		return fmt.Errorf("%w: usage event without a request id", ErrInvalid)
	}
	switch ev.Status {
	case UsageFinished, UsageCancelled, UsageError, UsageRejected:
	case UsageInFlight:
		if !inFlight {
			return fmt.Errorf("%w: usage event %q: status in_flight is for Begin", ErrInvalid, ev.RequestID)
		}
	default:
		return fmt.Errorf("%w: usage event %q: status %q: want finished, cancelled, error or rejected",
			ErrInvalid, ev.RequestID, string(ev.Status))
	}
	if ev.InputTokens < 0 || ev.CachedTokens < 0 || ev.OutputTokens < 0 {
		return fmt.Errorf("%w: usage event %q: negative token count", ErrInvalid, ev.RequestID)
	}
	return nil
}

// upsertUsage writes an event. A final event replaces an in-flight row; an
// in-flight event (a progress checkpoint, see [UsageWriter.Progress])
// replaces an in-flight row only when it counts more output tokens, and
// never a final row; a final event never replaces a final row: the first
// final event wins, whatever checkpoint commits after it, so replaying
// events is harmless. An event whose decision or safety is "" keeps the
// row's (one set at admission survives a final event built without it).
const upsertUsage = `INSERT INTO usage_events (request_id, tenant, key_id, model, tier, node,
	endpoint, status, finish_reason, reason, input_tokens, cached_tokens, output_tokens,
	queue_ms, ttft_ms, itl_ms, duration_ms, route, started, ended, end_user, decision, safety)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (request_id) DO UPDATE SET
		tenant = excluded.tenant, key_id = excluded.key_id, model = excluded.model,
		tier = excluded.tier, node = excluded.node, endpoint = excluded.endpoint,
		status = excluded.status, finish_reason = excluded.finish_reason,
		reason = excluded.reason, input_tokens = excluded.input_tokens,
		cached_tokens = excluded.cached_tokens, output_tokens = excluded.output_tokens,
		queue_ms = excluded.queue_ms, ttft_ms = excluded.ttft_ms, itl_ms = excluded.itl_ms,
		duration_ms = excluded.duration_ms, route = excluded.route,
		started = excluded.started, ended = excluded.ended, end_user = excluded.end_user,
		decision = coalesce(nullif(excluded.decision, ''), usage_events.decision),
		safety = coalesce(nullif(excluded.safety, ''), usage_events.safety)
	WHERE usage_events.status = 'in_flight' AND (excluded.status <> 'in_flight'
		OR excluded.output_tokens > usage_events.output_tokens)`

// usageArgs are ev's arguments to upsertUsage.
func usageArgs(ev UsageEvent) []any {
	var ended sql.NullInt64
	if !ev.Ended.IsZero() {
		ended = sql.NullInt64{Int64: millis(ev.Ended), Valid: true}
	}
	return []any{ev.RequestID, ev.Tenant, ev.KeyID, ev.Model, ev.Tier, ev.Node,
		ev.Endpoint, string(ev.Status), ev.FinishReason, ev.Reason,
		ev.InputTokens, ev.CachedTokens, ev.OutputTokens,
		toMs(ev.QueueTime), toMs(ev.TTFT), toMs(ev.MeanITL), toMs(ev.Duration),
		ev.Route, millis(ev.Started), ended, ev.User, ev.Decision, ev.Safety}
}

// toMs is d in milliseconds, as stored.
func toMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fromMs is a stored duration, to the nanosecond.
func fromMs(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

// upsertEvents writes evs in tx.
func upsertEvents(ctx context.Context, tx *sql.Tx, stmt *sql.Stmt, evs []UsageEvent) error {
	st := tx.StmtContext(ctx, stmt)
	for _, ev := range evs {
		if _, err := st.ExecContext(ctx, usageArgs(ev)...); err != nil {
			return fmt.Errorf("write usage event %q: %w", ev.RequestID, err)
		}
	}
	return nil
}

// UsageEvent returns the usage row of request requestID, ErrNotFound when
// there is none.
func (s *Store) UsageEvent(ctx context.Context, requestID string) (UsageEvent, error) {
	var ev UsageEvent
	var status string
	var queue, ttft, itl, dur float64
	var started int64
	var ended sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT request_id, tenant, key_id, model, tier, node,
		endpoint, status, finish_reason, reason, input_tokens, cached_tokens, output_tokens,
		queue_ms, ttft_ms, itl_ms, duration_ms, route, started, ended, end_user, decision, safety
		FROM usage_events WHERE request_id = ?`, requestID).Scan(
		&ev.RequestID, &ev.Tenant, &ev.KeyID, &ev.Model, &ev.Tier, &ev.Node,
		&ev.Endpoint, &status, &ev.FinishReason, &ev.Reason,
		&ev.InputTokens, &ev.CachedTokens, &ev.OutputTokens,
		&queue, &ttft, &itl, &dur, &ev.Route, &started, &ended, &ev.User, &ev.Decision, &ev.Safety)
	if errors.Is(err, sql.ErrNoRows) {
		return UsageEvent{}, fmt.Errorf("%w: usage event %q", ErrNotFound, requestID)
	}
	if err != nil {
		return UsageEvent{}, fmt.Errorf("store: read usage event %q: %w", requestID, err)
	}
	ev.Status = UsageStatus(status)
	ev.QueueTime, ev.TTFT, ev.MeanITL, ev.Duration = fromMs(queue), fromMs(ttft), fromMs(itl), fromMs(dur)
	ev.Started = fromMillis(started)
	ev.Ended = fromNullMillis(ended)
	return ev, nil
}

// interruptedReason is the Reason of a row that RecoverUsage marks
// interrupted.
const interruptedReason = "llmd stopped while the request was in flight"

// RecoverUsage runs at startup, before serving and before
// [Store.NewUsageWriter]: it replays the default spool
// (dir/usage-spool.jsonl) into the database, idempotently, and removes it;
// then it marks every in-flight row of node as interrupted: Ended = now,
// Duration = now - Started, the tokens as last recorded: at admission, or
// by the request's last progress checkpoint ([UsageWriter.Progress]: the
// output tokens its client had been sent). Both happen in one transaction,
// the replay first, so that a final event in the spool is not marked
// interrupted. It returns the events replayed and the rows marked.
//
// A spool line that does not parse (other than a torn last line, which was
// never acknowledged) is an error: the spool is kept for an operator to
// look at. A writer with another SpoolPath needs [Store.ReplayUsageSpool].
func (s *Store) RecoverUsage(ctx context.Context, node string, now time.Time) (replayed, interrupted int, err error) {
	path := filepath.Join(filepath.Dir(s.path), spoolName)
	replayed, interrupted, err = s.replaySpool(ctx, path, &node, now)
	if err != nil {
		return 0, 0, fmt.Errorf("store: recover usage: %w", err)
	}
	return replayed, interrupted, nil
}

// ReplayUsageSpool writes the events of the spool at path (a
// [UsageWriterConfig.SpoolPath]) into the database, idempotently, and
// removes the file. It returns how many events it read; a missing file is
// 0 events. It fails while a [UsageWriter] of this process uses the spool.
func (s *Store) ReplayUsageSpool(ctx context.Context, path string) (int, error) {
	n, _, err := s.replaySpool(ctx, path, nil, time.Time{})
	if err != nil {
		return 0, fmt.Errorf("store: replay usage spool: %w", err)
	}
	return n, nil
}

// replaySpool replays the spool at path and, unless node is nil, marks
// *node's in-flight rows interrupted at now, in one transaction; then it
// removes the spool.
func (s *Store) replaySpool(ctx context.Context, path string, node *string, now time.Time) (replayed, interrupted int, err error) {
	path, err = filepath.Abs(path)
	if err != nil {
		return 0, 0, err
	}
	if err := claimSpool(path); err != nil {
		return 0, 0, err
	}
	defer releaseSpool(path)

	data, err := os.ReadFile(path)
	exists := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	evs, err := parseSpool(data)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	if len(evs) > 0 || node != nil {
		err = s.write(ctx, func(tx *sql.Tx) error {
			stmt, err := tx.PrepareContext(ctx, upsertUsage)
			if err != nil {
				return err
			}
			defer stmt.Close()
			if err := upsertEvents(ctx, tx, stmt, evs); err != nil {
				return err
			}
			if node == nil {
				return nil
			}
			res, err := tx.ExecContext(ctx, `UPDATE usage_events
				SET status = 'interrupted', reason = ?, ended = ?,
					duration_ms = max(0, ? - started)
				WHERE node = ? AND status = 'in_flight'`,
				interruptedReason, millis(now), millis(now), *node)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			interrupted = int(n)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
	}
	if exists {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, 0, err
		}
		if err := syncDir(filepath.Dir(path)); err != nil {
			return 0, 0, err
		}
	}
	return len(evs), interrupted, nil
}

// UsageQuery selects and groups usage rows for [Store.UsageReport].
type UsageQuery struct {
	// Tenant and Model filter the rows; "" selects all.
	Tenant, Model string
	// Since and Until select rows by Started in [Since, Until), to the
	// millisecond; a zero time is no bound.
	Since, Until time.Time
	// By groups the rows: "day" (the UTC date of Started, "2006-01-02"),
	// "tenant", "model", "tier" or "decision" (the rows' Decision, "" for
	// requests without one).
	By string
}

// UsageRow is one group of a usage report: the rows of one (Key, Model,
// Tier), so that the caller can price per model and split by tier.
type UsageRow struct {
	// Key is the group's value of [UsageQuery.By].
	Key, Model, Tier string
	// Requests counts the requests that reached the engine: finished,
	// cancelled, error and interrupted. Cancelled, Errors and Interrupted
	// are among them; Rejected (refused before any compute) is not.
	Requests, Cancelled, Errors, Rejected, Interrupted int64
	InputTokens, CachedTokens, OutputTokens            int64
	// MeanTTFT and MeanITL are the mean time to first token and mean
	// inter-token latency of the group's finished requests (see
	// [UsageRow.Finished]); 0 when it has none.
	MeanTTFT, MeanITL time.Duration
}

// Finished counts the group's requests that ended normally: Requests less
// Cancelled, Errors and Interrupted. The mean latencies are over them.
func (r UsageRow) Finished() int64 {
	return r.Requests - r.Cancelled - r.Errors - r.Interrupted
}

// usageGroups maps UsageQuery.By to the SQL of its group key.
var usageGroups = map[string]string{
	"day":      `strftime('%Y-%m-%d', started / 1000, 'unixepoch')`,
	"tenant":   `tenant`,
	"model":    `model`,
	"tier":     `tier`,
	"decision": `decision`,
}

// UsageReport sums the usage rows that q selects, grouped by (Key, Model,
// Tier) and ordered by them. Rows still in flight are left out: their
// tokens are not known yet. An unknown q.By, or Until before Since, gives
// ErrInvalid.
func (s *Store) UsageReport(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	key, ok := usageGroups[q.By]
	if !ok {
		return nil, fmt.Errorf("%w: usage report by %q: want day, tenant, model, tier or decision", ErrInvalid, q.By)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return nil, fmt.Errorf("%w: usage report: until %s is before since %s", ErrInvalid,
			q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	where := `status <> 'in_flight'`
	var args []any
	if q.Tenant != "" {
		where += ` AND tenant = ?`
		args = append(args, q.Tenant)
	}
	if q.Model != "" {
		where += ` AND model = ?`
		args = append(args, q.Model)
	}
	if !q.Since.IsZero() {
		where += ` AND started >= ?`
		args = append(args, millis(q.Since))
	}
	if !q.Until.IsZero() {
		where += ` AND started < ?`
		args = append(args, millis(q.Until))
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+key+` AS k, model, tier,
		sum(status IN ('finished', 'cancelled', 'error', 'interrupted')),
		sum(status = 'cancelled'), sum(status = 'error'),
		sum(status = 'rejected'), sum(status = 'interrupted'),
		sum(input_tokens), sum(cached_tokens), sum(output_tokens),
		avg(CASE WHEN status = 'finished' THEN ttft_ms END),
		avg(CASE WHEN status = 'finished' THEN itl_ms END)
		FROM usage_events WHERE `+where+`
		GROUP BY k, model, tier ORDER BY k, model, tier`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: usage report: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		var r UsageRow
		var ttft, itl sql.NullFloat64 // NULL without finished rows
		if err := rows.Scan(&r.Key, &r.Model, &r.Tier,
			&r.Requests, &r.Cancelled, &r.Errors, &r.Rejected, &r.Interrupted,
			&r.InputTokens, &r.CachedTokens, &r.OutputTokens, &ttft, &itl); err != nil {
			return nil, fmt.Errorf("store: usage report: %w", err)
		}
		r.MeanTTFT, r.MeanITL = fromMs(ttft.Float64), fromMs(itl.Float64)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: usage report: %w", err)
	}
	return out, nil
}
