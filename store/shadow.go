package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ShadowStatus is how one side of a shadow comparison ended.
type ShadowStatus string

// The statuses of a shadow comparison's sides.
const (
	// ShadowFinished: the answer ended normally (stop or length).
	ShadowFinished ShadowStatus = "finished"
	// ShadowError: the request failed.
	ShadowError ShadowStatus = "error"
	// ShadowCancelled: the request was cancelled (the client went away,
	// or the shadow was cut short).
	ShadowCancelled ShadowStatus = "cancelled"
	// ShadowSkipped: the request was not run (the shadow model was busy
	// or not loaded).
	ShadowSkipped ShadowStatus = "skipped"
)

// valid reports whether st is one of the statuses above.
func (st ShadowStatus) valid() bool {
	switch st {
	case ShadowFinished, ShadowError, ShadowCancelled, ShadowSkipped:
		return true
	}
	return false
}

// ShadowResult is one row of shadow_results: a request served by
// PrimaryModel and copied to ShadowModel, whose answer was discarded, with
// what each side measured. Durations are stored to the nanosecond as
// fractional milliseconds; 0 means not measured (a side that did not
// finish).
type ShadowResult struct {
	// ID is the row's id, set by [Store.ShadowResults]; RecordShadow
	// ignores it.
	ID int64
	// RequestID is the primary request's id (its usage row's key).
	RequestID string
	// Alias is the name the client asked for; PrimaryModel served the
	// answer and ShadowModel ran the copy.
	Alias, PrimaryModel, ShadowModel string
	// Started is when the primary request started (to the millisecond,
	// read back in UTC); RecordShadow takes zero as now.
	Started                         time.Time
	PrimaryStatus, ShadowStatus     ShadowStatus
	PrimaryTTFT, ShadowTTFT         time.Duration
	PrimaryITL, ShadowITL           time.Duration // mean inter-token latency
	PrimaryDuration, ShadowDuration time.Duration
	PrimaryTokens, ShadowTokens     int64 // output tokens
	// Greedy says both answers were decoded greedily (temperature 0), so
	// that they can be compared token by token.
	Greedy bool
	// ExactMatch says the two answers' tokens are equal; nil unless
	// Greedy and both answers were compared.
	ExactMatch *bool
	// EditDistance is the token-level Levenshtein distance between the
	// two answers; nil unless Greedy and both answers were compared.
	EditDistance *int64
	// Score is the scorer's value for the shadow answer; nil without a
	// scorer or when it failed, then ScorerError says why.
	Score       *float64
	ScorerError string
}

// check returns an error wrapping ErrInvalid unless r can be stored.
func (r ShadowResult) check() error {
	switch {
	case r.RequestID == "":
		return fmt.Errorf("%w: shadow result without a request id", ErrInvalid)
	case r.PrimaryModel == "" || r.ShadowModel == "":
		return fmt.Errorf("%w: shadow result %q: primary and shadow models are required", ErrInvalid, r.RequestID)
	case !r.PrimaryStatus.valid() || !r.ShadowStatus.valid():
		return fmt.Errorf("%w: shadow result %q: statuses %q and %q: want finished, error, cancelled or skipped",
			ErrInvalid, r.RequestID, string(r.PrimaryStatus), string(r.ShadowStatus))
	case r.PrimaryTokens < 0 || r.ShadowTokens < 0:
		return fmt.Errorf("%w: shadow result %q: negative token count", ErrInvalid, r.RequestID)
	case r.PrimaryTTFT < 0 || r.ShadowTTFT < 0 || r.PrimaryITL < 0 || r.ShadowITL < 0 ||
		r.PrimaryDuration < 0 || r.ShadowDuration < 0:
		return fmt.Errorf("%w: shadow result %q: negative duration", ErrInvalid, r.RequestID)
	case !r.Greedy && (r.ExactMatch != nil || r.EditDistance != nil):
		return fmt.Errorf("%w: shadow result %q: exact match and edit distance need greedy answers",
			ErrInvalid, r.RequestID)
	case r.EditDistance != nil && *r.EditDistance < 0:
		return fmt.Errorf("%w: shadow result %q: negative edit distance", ErrInvalid, r.RequestID)
	case r.Score != nil && (math.IsNaN(*r.Score) || math.IsInf(*r.Score, 0)):
		return fmt.Errorf("%w: shadow result %q: score %v is not a finite number", ErrInvalid, r.RequestID, *r.Score)
	}
	return nil
}

// RecordShadow stores one shadow comparison. It returns an error wrapping
// ErrInvalid when r has no request id, no primary or shadow model, an
// unknown status, a negative count or duration, an exact match or edit
// distance without Greedy, or a score that is not finite. Recording a
// request twice stores two rows. It writes one row per call, in its own
// transaction: shadow traffic is sampled, not the request path's volume.
func (s *Store) RecordShadow(ctx context.Context, r ShadowResult) error {
	if err := r.check(); err != nil {
		return err
	}
	if r.Started.IsZero() {
		r.Started = s.now()
	}
	var exact, dist sql.NullInt64
	if r.ExactMatch != nil {
		exact = sql.NullInt64{Int64: boolInt(*r.ExactMatch), Valid: true}
	}
	if r.EditDistance != nil {
		dist = sql.NullInt64{Int64: *r.EditDistance, Valid: true}
	}
	var score sql.NullFloat64
	if r.Score != nil {
		score = sql.NullFloat64{Float64: *r.Score, Valid: true}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO shadow_results (request_id, alias,
			primary_model, shadow_model, started, primary_status, shadow_status,
			primary_ttft_ms, shadow_ttft_ms, primary_itl_ms, shadow_itl_ms,
			primary_duration_ms, shadow_duration_ms, primary_tokens, shadow_tokens,
			greedy, exact_match, edit_distance, score, scorer_error)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.RequestID, r.Alias, r.PrimaryModel, r.ShadowModel, millis(r.Started),
			string(r.PrimaryStatus), string(r.ShadowStatus),
			toMs(r.PrimaryTTFT), toMs(r.ShadowTTFT), toMs(r.PrimaryITL), toMs(r.ShadowITL),
			toMs(r.PrimaryDuration), toMs(r.ShadowDuration), r.PrimaryTokens, r.ShadowTokens,
			boolInt(r.Greedy), exact, dist, score, r.ScorerError)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: record shadow result %q: %w", r.RequestID, err)
	}
	return nil
}

// boolInt is b as stored: 1 or 0.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ShadowQuery selects shadow results for [Store.ShadowReport] and
// [Store.ShadowResults].
type ShadowQuery struct {
	// Alias and ShadowModel filter the rows; "" selects all.
	Alias, ShadowModel string
	// Since and Until select rows by Started in [Since, Until), to the
	// millisecond; a zero time is no bound.
	Since, Until time.Time
}

// where returns the SQL condition and arguments that select q's rows, or an
// error wrapping ErrInvalid when Until is before Since.
func (q ShadowQuery) where() (string, []any, error) {
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return "", nil, fmt.Errorf("%w: shadow query: until %s is before since %s", ErrInvalid,
			q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	conds := []string{"1"}
	var args []any
	if q.Alias != "" {
		conds = append(conds, "alias = ?")
		args = append(args, q.Alias)
	}
	if q.ShadowModel != "" {
		conds = append(conds, "shadow_model = ?")
		args = append(args, q.ShadowModel)
	}
	if !q.Since.IsZero() {
		conds = append(conds, "started >= ?")
		args = append(args, millis(q.Since))
	}
	if !q.Until.IsZero() {
		conds = append(conds, "started < ?")
		args = append(args, millis(q.Until))
	}
	return strings.Join(conds, " AND "), args, nil
}

// shadowColumns are the columns of a ShadowResult, in scanShadow's order.
const shadowColumns = `id, request_id, alias, primary_model, shadow_model, started,
	primary_status, shadow_status, primary_ttft_ms, shadow_ttft_ms,
	primary_itl_ms, shadow_itl_ms, primary_duration_ms, shadow_duration_ms,
	primary_tokens, shadow_tokens, greedy, exact_match, edit_distance, score, scorer_error`

// scanShadow reads one row of shadowColumns.
func scanShadow(sc scanner) (ShadowResult, error) {
	var r ShadowResult
	var started int64
	var primary, shadow string
	var pTTFT, sTTFT, pITL, sITL, pDur, sDur float64
	var greedy int64
	var exact, dist sql.NullInt64
	var score sql.NullFloat64
	if err := sc.Scan(&r.ID, &r.RequestID, &r.Alias, &r.PrimaryModel, &r.ShadowModel, &started,
		&primary, &shadow, &pTTFT, &sTTFT, &pITL, &sITL, &pDur, &sDur,
		&r.PrimaryTokens, &r.ShadowTokens, &greedy, &exact, &dist, &score, &r.ScorerError); err != nil {
		return ShadowResult{}, err
	}
	r.Started = fromMillis(started)
	r.PrimaryStatus, r.ShadowStatus = ShadowStatus(primary), ShadowStatus(shadow)
	r.PrimaryTTFT, r.ShadowTTFT = fromMs(pTTFT), fromMs(sTTFT)
	r.PrimaryITL, r.ShadowITL = fromMs(pITL), fromMs(sITL)
	r.PrimaryDuration, r.ShadowDuration = fromMs(pDur), fromMs(sDur)
	r.Greedy = greedy != 0
	if exact.Valid {
		r.ExactMatch = new(exact.Int64 != 0)
	}
	if dist.Valid {
		r.EditDistance = new(dist.Int64)
	}
	if score.Valid {
		r.Score = new(score.Float64)
	}
	return r, nil
}

// ShadowResults returns the rows that q selects, newest first (by Started,
// then by insertion), at most limit of them; limit 0 is no limit. A
// negative limit, or Until before Since, gives ErrInvalid.
func (s *Store) ShadowResults(ctx context.Context, q ShadowQuery, limit int) ([]ShadowResult, error) {
	if limit < 0 {
		return nil, fmt.Errorf("%w: shadow results: negative limit %d", ErrInvalid, limit)
	}
	where, args, err := q.where()
	if err != nil {
		return nil, err
	}
	query := `SELECT ` + shadowColumns + ` FROM shadow_results WHERE ` + where + ` ORDER BY started DESC, id DESC`
	if limit > 0 {
		query += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: shadow results: %w", err)
	}
	defer rows.Close()
	var out []ShadowResult
	for rows.Next() {
		r, err := scanShadow(rows)
		if err != nil {
			return nil, fmt.Errorf("store: shadow results: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: shadow results: %w", err)
	}
	return out, nil
}

// ShadowSummary sums the shadow results of one (Alias, PrimaryModel,
// ShadowModel).
type ShadowSummary struct {
	Alias, PrimaryModel, ShadowModel string
	// Runs counts the results; ShadowErrors and ShadowSkipped those whose
	// shadow side failed or was not run.
	Runs, ShadowErrors, ShadowSkipped int64
	// Greedy counts the results with greedy answers; Compared those among
	// them whose answers were compared (an exact match is known), and
	// ExactMatches those whose answers were equal.
	Greedy, Compared, ExactMatches int64
	// MeanEditDistance is the mean token-level edit distance over the
	// results that have one; 0 when none has.
	MeanEditDistance float64
	// The latency and token figures of each side are over the results
	// whose side finished (0 when none did); the percentiles are
	// nearest-rank.
	PrimaryTTFTp50, ShadowTTFTp50       time.Duration
	PrimaryTTFTp95, ShadowTTFTp95       time.Duration
	PrimaryITLMean, ShadowITLMean       time.Duration
	PrimaryTokensMean, ShadowTokensMean float64
	// Scored counts the results with a score; MeanScore is their mean (0
	// when none).
	Scored    int64
	MeanScore float64
}

// ShadowReport summarises the shadow results that q selects, one
// [ShadowSummary] per (alias, primary model, shadow model), ordered by
// them. It reads the selected rows' figures into memory to compute the
// percentiles: some 50 bytes a row. Until before Since gives ErrInvalid.
func (s *Store) ShadowReport(ctx context.Context, q ShadowQuery) ([]ShadowSummary, error) {
	where, args, err := q.where()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT alias, primary_model, shadow_model,
		primary_status, shadow_status, primary_ttft_ms, shadow_ttft_ms,
		primary_itl_ms, shadow_itl_ms, primary_tokens, shadow_tokens,
		greedy, exact_match, edit_distance, score
		FROM shadow_results WHERE `+where+`
		ORDER BY alias, primary_model, shadow_model`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: shadow report: %w", err)
	}
	defer rows.Close()
	var out []ShadowSummary
	var acc shadowAcc
	for rows.Next() {
		var alias, primaryModel, shadowModel, primary, shadow string
		var pTTFT, sTTFT, pITL, sITL float64
		var pTokens, sTokens, greedy int64
		var exact, dist sql.NullInt64
		var score sql.NullFloat64
		if err := rows.Scan(&alias, &primaryModel, &shadowModel, &primary, &shadow,
			&pTTFT, &sTTFT, &pITL, &sITL, &pTokens, &sTokens, &greedy, &exact, &dist, &score); err != nil {
			return nil, fmt.Errorf("store: shadow report: %w", err)
		}
		if acc.Runs == 0 || alias != acc.Alias || primaryModel != acc.PrimaryModel || shadowModel != acc.ShadowModel {
			if acc.Runs > 0 {
				out = append(out, acc.summary())
			}
			acc = shadowAcc{ShadowSummary: ShadowSummary{Alias: alias, PrimaryModel: primaryModel, ShadowModel: shadowModel}}
		}
		acc.Runs++
		switch ShadowStatus(shadow) {
		case ShadowError:
			acc.ShadowErrors++
		case ShadowSkipped:
			acc.ShadowSkipped++
		}
		if ShadowStatus(primary) == ShadowFinished {
			acc.primary.add(pTTFT, pITL, pTokens)
		}
		if ShadowStatus(shadow) == ShadowFinished {
			acc.shadow.add(sTTFT, sITL, sTokens)
		}
		if greedy != 0 {
			acc.Greedy++
		}
		if exact.Valid {
			acc.Compared++
			acc.ExactMatches += exact.Int64
		}
		if dist.Valid {
			acc.distances++
			acc.distanceSum += float64(dist.Int64)
		}
		if score.Valid {
			acc.Scored++
			acc.scoreSum += score.Float64
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: shadow report: %w", err)
	}
	if acc.Runs > 0 {
		out = append(out, acc.summary())
	}
	return out, nil
}

// shadowAcc gathers one group of ShadowReport.
type shadowAcc struct {
	ShadowSummary
	primary, shadow sideAcc
	distances       int64
	distanceSum     float64
	scoreSum        float64
}

// sideAcc gathers the figures of one side's finished results.
type sideAcc struct {
	ttftMs           []float64
	itlMsSum, tokens float64
}

func (a *sideAcc) add(ttftMs, itlMs float64, tokens int64) {
	a.ttftMs = append(a.ttftMs, ttftMs)
	a.itlMsSum += itlMs
	a.tokens += float64(tokens)
}

// figures returns the side's TTFT p50 and p95, mean ITL and mean tokens.
func (a *sideAcc) figures() (p50, p95, itl time.Duration, tokens float64) {
	n := len(a.ttftMs)
	if n == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(a.ttftMs)
	return fromMs(nearestRank(a.ttftMs, 50)), fromMs(nearestRank(a.ttftMs, 95)),
		fromMs(a.itlMsSum / float64(n)), a.tokens / float64(n)
}

// summary completes the group's means and percentiles.
func (a *shadowAcc) summary() ShadowSummary {
	s := a.ShadowSummary
	s.PrimaryTTFTp50, s.PrimaryTTFTp95, s.PrimaryITLMean, s.PrimaryTokensMean = a.primary.figures()
	s.ShadowTTFTp50, s.ShadowTTFTp95, s.ShadowITLMean, s.ShadowTokensMean = a.shadow.figures()
	if a.distances > 0 {
		s.MeanEditDistance = a.distanceSum / float64(a.distances)
	}
	if s.Scored > 0 {
		s.MeanScore = a.scoreSum / float64(s.Scored)
	}
	return s
}

// nearestRank is the p-th percentile (0 < p <= 100) of sorted, which must
// not be empty, by the nearest-rank method: the smallest value with at
// least p% of the values at or below it.
func nearestRank(sorted []float64, p int) float64 {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n), in integers
	return sorted[max(rank, 1)-1]
}
