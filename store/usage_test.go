package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startWriter makes a usage writer on s and runs it until the test ends:
// its cleanup (before s's, registered first) ends Run's context, waits for
// Run and checks that it returned nil.
func startWriter(t testing.TB, s *Store, cfg UsageWriterConfig, hooks writerHooks) *UsageWriter {
	t.Helper()
	w, err := s.newUsageWriter(cfg, hooks)
	require.NoError(t, err)
	stop := runWriter(t, w)
	t.Cleanup(func() { assert.NoError(t, stop()) })
	return w
}

// runWriter runs w.Run on a goroutine that the test owns. stop ends Run's
// context, waits for Run and returns its error; calls after the first
// return the same. The test's cleanup calls stop if the test did not.
func runWriter(t testing.TB, w *UsageWriter) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-errc
	})
	t.Cleanup(func() { _ = stop() })
	return stop
}

// openDB opens a second connection pool on the database at path, with a
// busy timeout of busy, closed when the test ends.
func openDB(t testing.TB, path string, busy time.Duration) *sql.DB {
	t.Helper()
	d := dsn(path)
	require.Contains(t, d, "_busy_timeout=5000")
	d = strings.Replace(d, "_busy_timeout=5000", fmt.Sprintf("_busy_timeout=%d", busy.Milliseconds()), 1)
	db, err := sql.Open("sqlite3", d)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// done is a finished request's event, started at t0 and ended 2 s later.
func done(id string) UsageEvent {
	return UsageEvent{
		RequestID: id, Tenant: "acme", KeyID: "llmd-abcdefg", Model: "m1", Tier: "paid",
		Node: "n1", Endpoint: "/v1/chat/completions", Status: UsageFinished, FinishReason: "stop",
		InputTokens: 100, CachedTokens: 40, OutputTokens: 20,
		QueueTime: 1500 * time.Microsecond, TTFT: 120 * time.Millisecond,
		MeanITL: 12345 * time.Microsecond, Duration: 2 * time.Second,
		Route: "local", Decision: "auto/short-chat", Safety: "flag:self_harm", User: "end-user-42",
		Started: t0, Ended: t0.Add(2 * time.Second),
	}
}

// admitted is the in-flight event of done(id).
func admitted(id string) UsageEvent {
	ev := done(id)
	ev.Status, ev.FinishReason = UsageInFlight, ""
	ev.CachedTokens, ev.OutputTokens = 0, 0
	ev.TTFT, ev.MeanITL, ev.Duration = 0, 0, 0
	ev.Ended = time.Time{}
	return ev
}

// countUsage counts the rows of request id.
func countUsage(t *testing.T, s *Store, id string) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM usage_events WHERE request_id = ?`, id).Scan(&n))
	return n
}

// TestUsageIdempotent is ME-2: replaying an event leaves one row, and the
// first final event wins.
func TestUsageIdempotent(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	ctx := t.Context()

	t.Run("the same final event 3 times", func(t *testing.T) {
		first := done("r1")
		for i := range 3 {
			ev := first
			ev.OutputTokens += int64(i) * 100 // a retry that disagrees
			require.NoError(t, w.Record(ctx, ev))
		}
		assert.Equal(t, 1, countUsage(t, s, "r1"))
		got, err := s.UsageEvent(ctx, "r1")
		require.NoError(t, err)
		assert.Equal(t, first, got, "the first wins")
	})
	t.Run("in flight after final is ignored", func(t *testing.T) {
		require.NoError(t, w.Record(ctx, done("r2")))
		require.NoError(t, w.Begin(ctx, admitted("r2")))
		require.NoError(t, w.Record(ctx, done("other"))) // flushes the Begin
		got, err := s.UsageEvent(ctx, "r2")
		require.NoError(t, err)
		assert.Equal(t, done("r2"), got)
	})
	t.Run("final after in flight replaces it", func(t *testing.T) {
		require.NoError(t, w.Begin(ctx, admitted("r3")))
		require.NoError(t, w.Record(ctx, done("other2")))
		got, err := s.UsageEvent(ctx, "r3")
		require.NoError(t, err)
		assert.Equal(t, admitted("r3"), got)

		require.NoError(t, w.Record(ctx, done("r3")))
		got, err = s.UsageEvent(ctx, "r3")
		require.NoError(t, err)
		assert.Equal(t, done("r3"), got)
		assert.Equal(t, 1, countUsage(t, s, "r3"))
	})
	t.Run("a second in flight event is ignored", func(t *testing.T) {
		ev := admitted("r4")
		require.NoError(t, w.Begin(ctx, ev))
		ev.InputTokens = 999
		require.NoError(t, w.Begin(ctx, ev))
		require.NoError(t, w.Record(ctx, done("other3")))
		got, err := s.UsageEvent(ctx, "r4")
		require.NoError(t, err)
		assert.Equal(t, admitted("r4"), got)
	})
}

// TestUsageSpoolReplayIdempotent replays a spool holding one event 3 times
// (a crash after each replay, before the spool was removed): one row.
func TestUsageSpoolReplayIdempotent(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	line, err := appendSpoolLine(nil, done("r1"))
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, os.WriteFile(path, line, 0o600))
		n, err := s.ReplayUsageSpool(t.Context(), path)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.NoFileExists(t, path)
	}
	assert.Equal(t, 1, countUsage(t, s, "r1"))
	got, err := s.UsageEvent(t.Context(), "r1")
	require.NoError(t, err)
	assert.Equal(t, done("r1"), got)

	n, err := s.ReplayUsageSpool(t.Context(), path)
	require.NoError(t, err)
	assert.Zero(t, n, "no spool, nothing to replay")
}

// TestUsageRecordIsDurable checks that Begin then Record leave the final
// row, visible from another Store on the directory as soon as Record
// returns, with every field as recorded (times to the millisecond).
func TestUsageRecordIsDurable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	other := openStore(t, dir)
	ctx := t.Context()

	for i := range 20 {
		id := fmt.Sprintf("r%d", i)
		begin := admitted(id)
		begin.Started = t0.Add(time.Duration(i)*time.Second + 123456789) // sub-millisecond part dropped
		require.NoError(t, w.Begin(ctx, begin))
		final := done(id)
		final.Started = begin.Started
		final.Ended = begin.Started.Add(1500 * time.Millisecond).In(time.FixedZone("x", 3600))
		require.NoError(t, w.Record(ctx, final))

		got, err := other.UsageEvent(ctx, id)
		require.NoError(t, err, "visible once Record returns")
		want := final
		want.Started = final.Started.Truncate(time.Millisecond).UTC()
		want.Ended = final.Ended.Truncate(time.Millisecond).UTC()
		assert.Equal(t, want, got)
	}
	st := w.Stats()
	assert.EqualValues(t, 40, st.Committed)
	assert.Zero(t, st.Spooled+st.Failed)
	assert.NotZero(t, st.Commits)
	assert.Zero(t, st.Queued)
	assert.Zero(t, st.Lag)

	_, err := other.UsageEvent(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

// TestUsageDefaults checks the times that Begin and Record fill in.
func TestUsageDefaults(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	ctx := t.Context()

	require.NoError(t, w.Begin(ctx, UsageEvent{RequestID: "r1", InputTokens: 5}))
	clk.Add(time.Second)
	require.NoError(t, w.Record(ctx, UsageEvent{RequestID: "r2", Status: UsageRejected, Reason: "quota"}))

	got, err := s.UsageEvent(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, UsageEvent{RequestID: "r1", Status: UsageInFlight, InputTokens: 5, Started: t0}, got)
	got, err = s.UsageEvent(ctx, "r2")
	require.NoError(t, err)
	at := t0.Add(time.Second)
	assert.Equal(t, UsageEvent{RequestID: "r2", Status: UsageRejected, Reason: "quota", Started: at, Ended: at}, got)
}

func TestUsageInvalidEvents(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	ctx := t.Context()
	with := func(f func(*UsageEvent)) UsageEvent {
		ev := done("r1")
		f(&ev)
		return ev
	}

	tests := map[string]struct {
		call func() error
	}{
		"record without id":        {func() error { return w.Record(ctx, with(func(e *UsageEvent) { e.RequestID = "" })) }},
		"record in flight":         {func() error { return w.Record(ctx, admitted("r1")) }},
		"record interrupted":       {func() error { return w.Record(ctx, with(func(e *UsageEvent) { e.Status = UsageInterrupted })) }},
		"record unknown status":    {func() error { return w.Record(ctx, with(func(e *UsageEvent) { e.Status = "done" })) }},
		"record no status":         {func() error { return w.Record(ctx, with(func(e *UsageEvent) { e.Status = "" })) }},
		"record negative tokens":   {func() error { return w.Record(ctx, with(func(e *UsageEvent) { e.OutputTokens = -1 })) }},
		"async negative tokens":    {func() error { return w.RecordAsync(ctx, with(func(e *UsageEvent) { e.CachedTokens = -1 })) }},
		"begin a final event":      {func() error { return w.Begin(ctx, done("r1")) }},
		"begin with an end":        {func() error { return w.Begin(ctx, with(func(e *UsageEvent) { e.Status = "" })) }},
		"begin negative tokens":    {func() error { return w.Begin(ctx, UsageEvent{RequestID: "r1", InputTokens: -5}) }},
		"begin without id":         {func() error { return w.Begin(ctx, UsageEvent{}) }},
		"negative queue length":    {func() error { _, err := s.NewUsageWriter(UsageWriterConfig{QueueLen: -1}); return err }},
		"negative checkpoint wait": {func() error { _, err := s.NewUsageWriter(UsageWriterConfig{CheckpointWait: -1}); return err }},
		"negative flush timeout":   {func() error { _, err := s.NewUsageWriter(UsageWriterConfig{FlushTimeout: -1}); return err }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, tc.call(), ErrInvalid)
		})
	}
	assert.Zero(t, countUsage(t, s, "r1"))
	assert.Zero(t, w.Stats().Committed)
}

// TestUsageWriterClosed checks that events queued before Run are written,
// that Run writes what is queued when its context ends and that the writer
// then refuses events, and that Run runs once.
func TestUsageWriterClosed(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, w.RecordAsync(ctx, done("r1")), "queued before Run")
	require.NoError(t, w.Begin(ctx, admitted("r2")))
	stop := runWriter(t, w)
	require.NoError(t, w.Record(ctx, done("r0")))
	require.ErrorIs(t, w.Run(ctx), errRunTwice, "a second Run while running")
	require.NoError(t, stop())
	require.ErrorIs(t, w.Run(ctx), errRunTwice, "a second Run once stopped")

	require.ErrorIs(t, w.Record(ctx, done("r3")), ErrClosed)
	require.ErrorIs(t, w.RecordAsync(ctx, done("r3")), ErrClosed)
	require.ErrorIs(t, w.Begin(ctx, admitted("r3")), ErrClosed)
	assert.Equal(t, 1, countUsage(t, s, "r1"), "Run wrote what was queued")
	assert.Equal(t, 1, countUsage(t, s, "r2"))
	assert.EqualValues(t, 3, w.Stats().Committed)

	// The spool is free again; Run with an ended context releases a
	// writer at once.
	w2, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, w2.Run(ended))
	w3, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	require.NoError(t, w3.Run(ended))
}

// TestUsageRecordBeforeRun checks that Record before Run waits for Run (or
// its context), and that Run then writes what was queued.
func TestUsageRecordBeforeRun(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Record(short, done("r1")), context.DeadlineExceeded, "not durable without Run")
	errc := make(chan error, 1)
	go func() { errc <- w.Record(ctx, done("r2")) }()
	require.Eventually(t, func() bool { return w.Stats().Queued == 2 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, w.Stats().Committed)

	stop := runWriter(t, w)
	require.NoError(t, <-errc)
	assert.Equal(t, 1, countUsage(t, s, "r1"), "written once Run started")
	assert.Equal(t, 1, countUsage(t, s, "r2"))
	require.NoError(t, stop())
}

// TestUsageSpoolInUse checks that one spool has one user at a time.
func TestUsageSpoolInUse(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	_ = w

	_, err := s.NewUsageWriter(UsageWriterConfig{})
	require.ErrorIs(t, err, errSpoolInUse)
	_, _, err = s.RecoverUsage(t.Context(), "n1", t0)
	require.ErrorIs(t, err, errSpoolInUse)
	_, err = s.ReplayUsageSpool(t.Context(), filepath.Join(filepath.Dir(s.Path()), "usage-spool.jsonl"))
	require.ErrorIs(t, err, errSpoolInUse)

	other := filepath.Join(t.TempDir(), "spool.jsonl")
	w2 := startWriter(t, s, UsageWriterConfig{SpoolPath: other}, writerHooks{})
	_ = w2
}

// TestRecoverUsage marks the node's in-flight rows interrupted and leaves
// final rows and other nodes' rows alone.
func TestRecoverUsage(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	stop := runWriter(t, w)
	ctx := t.Context()

	require.NoError(t, w.Begin(ctx, admitted("a1")))
	require.NoError(t, w.Begin(ctx, admitted("a2")))
	require.NoError(t, w.Record(ctx, done("a2")))
	b1 := admitted("b1")
	b1.Node = "n2"
	require.NoError(t, w.Begin(ctx, b1))
	require.NoError(t, stop())

	now := t0.Add(time.Minute)
	replayed, interrupted, err := s.RecoverUsage(ctx, "n1", now)
	require.NoError(t, err)
	assert.Zero(t, replayed)
	assert.Equal(t, 1, interrupted)

	got, err := s.UsageEvent(ctx, "a1")
	require.NoError(t, err)
	want := admitted("a1")
	want.Status, want.Reason = UsageInterrupted, interruptedReason
	want.Ended, want.Duration = now, time.Minute
	assert.Equal(t, want, got)
	got, err = s.UsageEvent(ctx, "a2")
	require.NoError(t, err)
	assert.Equal(t, done("a2"), got)
	got, err = s.UsageEvent(ctx, "b1")
	require.NoError(t, err)
	assert.Equal(t, b1, got, "another node's row is left alone")

	replayed, interrupted, err = s.RecoverUsage(ctx, "n1", now.Add(time.Hour))
	require.NoError(t, err)
	assert.Zero(t, replayed)
	assert.Zero(t, interrupted, "a second recovery changes nothing")

	// A node without a name is a node too.
	w, err = s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	stop = runWriter(t, w)
	c1 := admitted("c1")
	c1.Node = ""
	require.NoError(t, w.Begin(ctx, c1))
	require.NoError(t, stop())
	_, interrupted, err = s.RecoverUsage(ctx, "", now)
	require.NoError(t, err)
	assert.Equal(t, 1, interrupted)
	got, err = s.UsageEvent(ctx, "b1")
	require.NoError(t, err)
	assert.Equal(t, UsageInFlight, got.Status)
}

func TestParseSpool(t *testing.T) {
	t.Parallel()
	line := func(ev UsageEvent) string {
		b, err := appendSpoolLine(nil, ev)
		require.NoError(t, err)
		return string(b)
	}
	bad := done("bad")
	bad.Status = UsageInterrupted
	tests := map[string]struct {
		data    string
		want    []string // request ids; nil with wantErr
		wantErr string
	}{
		"empty":          {data: "", want: nil},
		"two":            {data: line(done("a")) + line(admitted("b")), want: []string{"a", "b"}},
		"torn last line": {data: line(done("a")) + line(done("b"))[:30], want: []string{"a"}},
		"garbage inside": {data: line(done("a")) + "{\"request_id\n" + line(done("b")), wantErr: "line 2"},
		"invalid event":  {data: line(bad), wantErr: "line 1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			evs, err := parseSpool([]byte(tc.data))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, ev := range evs {
				ids = append(ids, ev.RequestID)
			}
			assert.Equal(t, tc.want, ids)
		})
	}

	// Every field survives the spool.
	ev := done("x")
	ev.Reason, ev.Endpoint = "a \"quoted\"\nreason", "/v1/completions"
	evs, err := parseSpool([]byte(line(ev) + line(admitted("y"))))
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, ev, evs[0])
	assert.Equal(t, admitted("y"), evs[1])
}

// TestRecoverUsageKeepsABadSpool checks that a spool with a line that does
// not parse is reported and kept, not dropped.
func TestRecoverUsageKeepsABadSpool(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	path := filepath.Join(filepath.Dir(s.Path()), spoolName)
	good, err := appendSpoolLine(nil, done("r1"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append([]byte("not json\n"), good...), 0o600))

	_, _, err = s.RecoverUsage(t.Context(), "n1", t0)
	require.ErrorContains(t, err, "line 1")
	assert.FileExists(t, path)
	assert.Zero(t, countUsage(t, s, "r1"))
}

// TestUsageBackpressure fills a tiny queue while the writer cannot commit:
// producers block until their context ends, and are counted.
func TestUsageBackpressure(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{QueueLen: 2, MaxDelay: -1}, writerHooks{})
	ctx := t.Context()

	s.writer <- struct{}{} // the writer's commit waits for this Store's write lock
	released := false
	defer func() {
		if !released {
			<-s.writer
		}
	}()
	require.NoError(t, w.Begin(ctx, admitted("r1")))
	require.NoError(t, w.Begin(ctx, admitted("r2")))

	for _, queue := range []func(context.Context) error{
		func(ctx context.Context) error { return w.Begin(ctx, admitted("r3")) },
		func(ctx context.Context) error { return w.RecordAsync(ctx, done("r3")) },
	} {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		require.ErrorIs(t, queue(short), context.DeadlineExceeded)
		cancel()
	}
	st := w.Stats()
	assert.EqualValues(t, 2, st.BlockedProducers)
	assert.Equal(t, 2, st.Queued)
	assert.GreaterOrEqual(t, st.Lag, 50*time.Millisecond)

	// A blocked producer goes on once there is room.
	errc := make(chan error, 1)
	go func() { errc <- w.Record(ctx, done("r4")) }()
	require.Eventually(t, func() bool { return w.Stats().BlockedProducers == 3 }, 10*time.Second, time.Millisecond)
	<-s.writer
	released = true
	require.NoError(t, <-errc)
	assert.Equal(t, 1, countUsage(t, s, "r1"))
	assert.Equal(t, 1, countUsage(t, s, "r2"))
	assert.Equal(t, 0, countUsage(t, s, "r3"))
	assert.Equal(t, 1, countUsage(t, s, "r4"))
}

// TestUsageRecordContext checks that Record gives up when its context
// ends while its batch waits, and that the event is still written later
// (recording it again would be harmless).
func TestUsageRecordContext(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{MaxDelay: -1}, writerHooks{})

	s.writer <- struct{}{}
	short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Record(short, done("r1")), context.DeadlineExceeded)
	<-s.writer
	require.NoError(t, w.Record(t.Context(), done("r1")))
	assert.Equal(t, 1, countUsage(t, s, "r1"))
}

// TestUsageFlushTimeout checks that Run, when its final flush outlasts
// FlushTimeout before the queued events are committed, spools them and
// says so.
func TestUsageFlushTimeout(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{MaxDelay: -1, FlushTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	stop := runWriter(t, w)
	ctx := t.Context()

	s.writer <- struct{}{} // commits wait
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- w.Record(ctx, done(fmt.Sprintf("r%d", i))) }()
	}
	require.Eventually(t, func() bool { return w.Stats().Queued == 3 }, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, stop(), context.DeadlineExceeded)
	<-s.writer
	for range 3 {
		require.NoError(t, <-errs, "spooled is recorded")
	}
	st := w.Stats()
	assert.EqualValues(t, 3, st.Spooled)
	assert.Zero(t, st.Committed)

	replayed, _, err := s.RecoverUsage(ctx, "n1", t0)
	require.NoError(t, err)
	assert.Equal(t, 3, replayed)
	for i := range 3 {
		assert.Equal(t, 1, countUsage(t, s, fmt.Sprintf("r%d", i)))
	}
}

// TestUsageReport checks the report's exact totals on a known ledger.
func TestUsageReport(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	stop := runWriter(t, w)
	ctx := t.Context()

	day1 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	day2 := day1.AddDate(0, 0, 1)
	ev := func(id, tenant, model, tier string, started time.Time, status UsageStatus, in, cached, out int64) UsageEvent {
		return UsageEvent{RequestID: id, Tenant: tenant, Model: model, Tier: tier, Node: "n1",
			Status: status, InputTokens: in, CachedTokens: cached, OutputTokens: out,
			Started: started, Ended: started.Add(time.Second)}
	}
	final := []UsageEvent{
		ev("r1", "acme", "m1", "paid", day1.Add(10*time.Hour), UsageFinished, 100, 20, 50),
		ev("r2", "acme", "m1", "paid", day1.Add(11*time.Hour), UsageCancelled, 30, 0, 5),
		ev("r3", "acme", "m2", "paid", day2.Add(-time.Millisecond), UsageError, 10, 0, 0),
		ev("r4", "beta", "m1", "free", day1.Add(12*time.Hour), UsageRejected, 0, 0, 0),
		ev("r5", "beta", "m1", "free", day2, UsageFinished, 40, 10, 60),
		ev("r7", "acme", "m1", "paid", day2.Add(9*time.Hour), UsageFinished, 5, 0, 5),
		ev("r9", "acme", "m1", "free", day2.Add(10*time.Hour), UsageFinished, 1, 0, 2),
	}
	for _, e := range final {
		require.NoError(t, w.Record(ctx, e))
	}
	// r6 is interrupted by recovery; r8 is still in flight on another
	// node and left out.
	r6 := ev("r6", "beta", "m2", "free", day2.Add(8*time.Hour), "", 70, 0, 0)
	r6.Ended = time.Time{}
	r8 := ev("r8", "acme", "m1", "paid", day2.Add(9*time.Hour+30*time.Minute), "", 1000, 0, 0)
	r8.Ended, r8.Node = time.Time{}, "n2"
	require.NoError(t, w.Begin(ctx, r6))
	require.NoError(t, w.Begin(ctx, r8))
	require.NoError(t, stop())
	_, interrupted, err := s.RecoverUsage(ctx, "n1", day2.Add(20*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, interrupted)

	type R = UsageRow
	tests := map[string]struct {
		q    UsageQuery
		want []UsageRow
	}{
		"by day": {q: UsageQuery{By: "day"}, want: []R{
			{Key: "2026-03-01", Model: "m1", Tier: "free", Rejected: 1},
			{Key: "2026-03-01", Model: "m1", Tier: "paid", Requests: 2, Cancelled: 1, InputTokens: 130, CachedTokens: 20, OutputTokens: 55},
			{Key: "2026-03-01", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
			{Key: "2026-03-02", Model: "m1", Tier: "free", Requests: 2, InputTokens: 41, CachedTokens: 10, OutputTokens: 62},
			{Key: "2026-03-02", Model: "m1", Tier: "paid", Requests: 1, InputTokens: 5, OutputTokens: 5},
			{Key: "2026-03-02", Model: "m2", Tier: "free", Requests: 1, Interrupted: 1, InputTokens: 70},
		}},
		"by tenant": {q: UsageQuery{By: "tenant"}, want: []R{
			{Key: "acme", Model: "m1", Tier: "free", Requests: 1, InputTokens: 1, OutputTokens: 2},
			{Key: "acme", Model: "m1", Tier: "paid", Requests: 3, Cancelled: 1, InputTokens: 135, CachedTokens: 20, OutputTokens: 60},
			{Key: "acme", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
			{Key: "beta", Model: "m1", Tier: "free", Requests: 1, Rejected: 1, InputTokens: 40, CachedTokens: 10, OutputTokens: 60},
			{Key: "beta", Model: "m2", Tier: "free", Requests: 1, Interrupted: 1, InputTokens: 70},
		}},
		"by model": {q: UsageQuery{By: "model"}, want: []R{
			{Key: "m1", Model: "m1", Tier: "free", Requests: 2, Rejected: 1, InputTokens: 41, CachedTokens: 10, OutputTokens: 62},
			{Key: "m1", Model: "m1", Tier: "paid", Requests: 3, Cancelled: 1, InputTokens: 135, CachedTokens: 20, OutputTokens: 60},
			{Key: "m2", Model: "m2", Tier: "free", Requests: 1, Interrupted: 1, InputTokens: 70},
			{Key: "m2", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
		}},
		"by tier": {q: UsageQuery{By: "tier"}, want: []R{
			{Key: "free", Model: "m1", Tier: "free", Requests: 2, Rejected: 1, InputTokens: 41, CachedTokens: 10, OutputTokens: 62},
			{Key: "free", Model: "m2", Tier: "free", Requests: 1, Interrupted: 1, InputTokens: 70},
			{Key: "paid", Model: "m1", Tier: "paid", Requests: 3, Cancelled: 1, InputTokens: 135, CachedTokens: 20, OutputTokens: 60},
			{Key: "paid", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
		}},
		"one tenant": {q: UsageQuery{By: "model", Tenant: "acme"}, want: []R{
			{Key: "m1", Model: "m1", Tier: "free", Requests: 1, InputTokens: 1, OutputTokens: 2},
			{Key: "m1", Model: "m1", Tier: "paid", Requests: 3, Cancelled: 1, InputTokens: 135, CachedTokens: 20, OutputTokens: 60},
			{Key: "m2", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
		}},
		"one model": {q: UsageQuery{By: "tenant", Model: "m2"}, want: []R{
			{Key: "acme", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
			{Key: "beta", Model: "m2", Tier: "free", Requests: 1, Interrupted: 1, InputTokens: 70},
		}},
		"tenant and model": {q: UsageQuery{By: "day", Tenant: "beta", Model: "m1"}, want: []R{
			{Key: "2026-03-01", Model: "m1", Tier: "free", Rejected: 1},
			{Key: "2026-03-02", Model: "m1", Tier: "free", Requests: 1, InputTokens: 40, CachedTokens: 10, OutputTokens: 60},
		}},
		"since is inclusive, until exclusive": {q: UsageQuery{By: "tenant", Since: day2, Until: day2.Add(9 * time.Hour)}, want: []R{
			{Key: "beta", Model: "m1", Tier: "free", Requests: 1, InputTokens: 40, CachedTokens: 10, OutputTokens: 60},
			{Key: "beta", Model: "m2", Tier: "free", Requests: 1, Interrupted: 1, InputTokens: 70},
		}},
		"the last millisecond of a day": {q: UsageQuery{By: "day", Since: day2.Add(-time.Millisecond), Until: day2}, want: []R{
			{Key: "2026-03-01", Model: "m2", Tier: "paid", Requests: 1, Errors: 1, InputTokens: 10},
		}},
		"since only": {q: UsageQuery{By: "tier", Since: day2.Add(9 * time.Hour)}, want: []R{
			{Key: "free", Model: "m1", Tier: "free", Requests: 1, InputTokens: 1, OutputTokens: 2},
			{Key: "paid", Model: "m1", Tier: "paid", Requests: 1, InputTokens: 5, OutputTokens: 5},
		}},
		"until only": {q: UsageQuery{By: "tier", Until: day1.Add(11 * time.Hour)}, want: []R{
			{Key: "paid", Model: "m1", Tier: "paid", Requests: 1, InputTokens: 100, CachedTokens: 20, OutputTokens: 50},
		}},
		"empty window":   {q: UsageQuery{By: "day", Since: day1, Until: day1}, want: nil},
		"no such tenant": {q: UsageQuery{By: "day", Tenant: "gamma"}, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := s.UsageReport(ctx, tc.q)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	for _, q := range []UsageQuery{{By: ""}, {By: "week"}, {By: "Day"}, {By: "day", Since: day2, Until: day1}} {
		_, err := s.UsageReport(ctx, q)
		require.ErrorIs(t, err, ErrInvalid, "%+v", q)
	}
}
