package store

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMigrateDecisionsFrom0003 opens a database left at schema 0003 with a
// usage row in it: Open adds the decision and safety columns (the old row
// reads them as "") and the shadow table, and the store reopens cleanly.
func TestMigrateDecisionsFrom0003(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	ms, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	require.Greater(t, len(ms), 3)
	require.Equal(t, "0003_usage_user.sql", ms[2].name)

	// A database as a build that knew migrations 1 to 3 left it.
	db, err := sql.Open("sqlite3", dsn(filepath.Join(dir, fileName)))
	require.NoError(t, err)
	old := &Store{db: db, now: time.Now, writer: make(chan struct{}, 1)}
	require.NoError(t, old.migrate(ctx, ms[:3]))
	_, err = db.ExecContext(ctx, `INSERT INTO usage_events (request_id, tenant, key_id, model,
		tier, node, endpoint, status, finish_reason, reason, input_tokens, cached_tokens,
		output_tokens, queue_ms, ttft_ms, itl_ms, duration_ms, route, started, ended, end_user)
		VALUES ('old', 'acme', 'k', 'm1', 'paid', 'n1', '/v1/chat/completions', 'finished',
			'stop', '', 10, 0, 5, 1, 100, 10, 200, 'local', ?, ?, 'u')`,
		millis(t0), millis(t0.Add(time.Second)))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	s, err := Open(ctx, dir)
	require.NoError(t, err)
	assert.Len(t, appliedMigrations(t, s), len(ms))
	got, err := s.UsageEvent(ctx, "old")
	require.NoError(t, err)
	assert.Equal(t, UsageEvent{RequestID: "old", Tenant: "acme", KeyID: "k", Model: "m1", Tier: "paid",
		Node: "n1", Endpoint: "/v1/chat/completions", Status: UsageFinished, FinishReason: "stop",
		InputTokens: 10, OutputTokens: 5, QueueTime: time.Millisecond, TTFT: 100 * time.Millisecond,
		MeanITL: 10 * time.Millisecond, Duration: 200 * time.Millisecond, Route: "local", User: "u",
		Started: t0, Ended: t0.Add(time.Second)}, got)
	rows, err := s.UsageReport(ctx, UsageQuery{By: "decision"})
	require.NoError(t, err)
	assert.Equal(t, []UsageRow{{Key: "", Model: "m1", Tier: "paid", Requests: 1, InputTokens: 10, OutputTokens: 5,
		MeanTTFT: 100 * time.Millisecond, MeanITL: 10 * time.Millisecond}}, rows)
	require.NoError(t, s.RecordShadow(ctx, shadowResult("r1", t0)))
	require.NoError(t, s.Close())

	s = openStore(t, dir)
	assert.Len(t, appliedMigrations(t, s), len(ms), "reopening applies nothing")
	got, err = s.UsageEvent(ctx, "old")
	require.NoError(t, err)
	assert.Empty(t, got.Decision)
	results, err := s.ShadowResults(ctx, ShadowQuery{}, 0)
	require.NoError(t, err)
	assert.Len(t, results, 1)
}

// TestUsageDecisionKept: an event without a decision or safety verdict
// keeps the row's, from Begin to Progress to the final event, through the
// writer and through the spool.
func TestUsageDecisionKept(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	ctx := t.Context()

	begin := admitted("r1")
	begin.Safety = ""
	require.NoError(t, w.Begin(ctx, begin))
	progress := admitted("r1")
	progress.Decision, progress.Safety, progress.OutputTokens = "", "", 3
	require.NoError(t, w.Progress(progress))
	final := done("r1")
	final.Decision, final.Safety = "", "block:violence"
	require.NoError(t, w.Record(ctx, final))
	got, err := s.UsageEvent(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, "auto/short-chat", got.Decision, "set at admission")
	assert.Equal(t, "block:violence", got.Safety, "set by the final event")

	// The same from the spool.
	require.NoError(t, w.Begin(ctx, admitted("r2")))
	require.NoError(t, w.Record(ctx, done("flush")))
	final = done("r2")
	final.Decision, final.Safety = "", ""
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	line, err := appendSpoolLine(nil, final)
	require.NoError(t, err)
	require.NotContains(t, string(line), "decision", "empty fields are left out of the spool")
	require.NoError(t, os.WriteFile(path, line, 0o600))
	_, err = s.ReplayUsageSpool(ctx, path)
	require.NoError(t, err)
	got, err = s.UsageEvent(ctx, "r2")
	require.NoError(t, err)
	assert.Equal(t, UsageFinished, got.Status)
	assert.Equal(t, "auto/short-chat", got.Decision)
	assert.Equal(t, "flag:self_harm", got.Safety)
}

// TestParseOldSpool: a spool line written before decisions and safety
// verdicts existed still parses, with both "".
func TestParseOldSpool(t *testing.T) {
	t.Parallel()
	const line = `{"request_id":"r1","tenant":"acme","key_id":"k","model":"m1","tier":"paid",` +
		`"node":"n1","endpoint":"/v1/chat/completions","status":"finished","finish_reason":"stop",` +
		`"input_tokens":10,"cached_tokens":2,"output_tokens":5,"queue_ns":1000000,"ttft_ns":100000000,` +
		`"mean_itl_ns":10000000,"duration_ns":200000000,"route":"local","user":"u",` +
		`"started":"2026-03-01T12:00:00Z","ended":"2026-03-01T12:00:01Z"}` + "\n"
	evs, err := parseSpool([]byte(line))
	require.NoError(t, err)
	assert.Equal(t, []UsageEvent{{RequestID: "r1", Tenant: "acme", KeyID: "k", Model: "m1", Tier: "paid",
		Node: "n1", Endpoint: "/v1/chat/completions", Status: UsageFinished, FinishReason: "stop",
		InputTokens: 10, CachedTokens: 2, OutputTokens: 5, QueueTime: time.Millisecond,
		TTFT: 100 * time.Millisecond, MeanITL: 10 * time.Millisecond, Duration: 200 * time.Millisecond,
		Route: "local", User: "u", Started: t0, Ended: t0.Add(time.Second)}}, evs)
}

// TestUsageReportByDecision checks the groups by decision and the mean
// latencies, which count finished requests only.
func TestUsageReportByDecision(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	ctx := t.Context()

	ev := func(id, decision, model string, status UsageStatus, ttft, itl time.Duration) UsageEvent {
		return UsageEvent{RequestID: id, Tenant: "acme", Model: model, Tier: "paid", Node: "n1",
			Status: status, InputTokens: 10, OutputTokens: 4, TTFT: ttft, MeanITL: itl,
			Decision: decision, Started: t0, Ended: t0.Add(time.Second)}
	}
	ms := time.Millisecond
	for _, e := range []UsageEvent{
		ev("a1", "auto/short-chat", "small", UsageFinished, 100*ms, 10*ms),
		ev("a2", "auto/short-chat", "small", UsageFinished, 300*ms, 20*ms),
		ev("a3", "auto/short-chat", "small", UsageCancelled, 5000*ms, 900*ms), // not in the means
		{RequestID: "a4", Tenant: "acme", Model: "small", Tier: "paid", Status: UsageRejected,
			Decision: "auto/short-chat", Started: t0, Ended: t0},
		ev("b1", "auto/long", "big", UsageFinished, 250500*time.Microsecond, 12500*time.Microsecond),
		ev("b2", "auto/long", "big", UsageError, 0, 0),
		ev("c1", "", "small", UsageFinished, 50*ms, 5*ms),
	} {
		require.NoError(t, w.Record(ctx, e))
	}

	rows, err := s.UsageReport(ctx, UsageQuery{By: "decision"})
	require.NoError(t, err)
	assert.Equal(t, []UsageRow{
		{Key: "", Model: "small", Tier: "paid", Requests: 1, InputTokens: 10, OutputTokens: 4,
			MeanTTFT: 50 * ms, MeanITL: 5 * ms},
		{Key: "auto/long", Model: "big", Tier: "paid", Requests: 2, Errors: 1, InputTokens: 20, OutputTokens: 8,
			MeanTTFT: 250500 * time.Microsecond, MeanITL: 12500 * time.Microsecond},
		{Key: "auto/short-chat", Model: "small", Tier: "paid", Requests: 3, Cancelled: 1, Rejected: 1,
			InputTokens: 30, OutputTokens: 12, MeanTTFT: 200 * ms, MeanITL: 15 * ms},
	}, rows)
	assert.EqualValues(t, 2, rows[2].Finished())
	assert.EqualValues(t, 1, rows[1].Finished())

	rows, err = s.UsageReport(ctx, UsageQuery{By: "model", Model: "big"})
	require.NoError(t, err)
	assert.Equal(t, []UsageRow{{Key: "big", Model: "big", Tier: "paid", Requests: 2, Errors: 1,
		InputTokens: 20, OutputTokens: 8, MeanTTFT: 250500 * time.Microsecond, MeanITL: 12500 * time.Microsecond}}, rows)

	rows, err = s.UsageReport(ctx, UsageQuery{By: "tenant", Model: "none"})
	require.NoError(t, err)
	assert.Empty(t, rows)
}
