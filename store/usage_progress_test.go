package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// progressed is admitted(id) checkpointed with output tokens sent.
func progressed(id string, output int64) UsageEvent {
	ev := admitted(id)
	ev.OutputTokens = output
	return ev
}

// TestUsageProgressCoalesces: the queue holds at most one checkpoint per
// request, the one with the most output tokens, and they are written with
// the other events.
func TestUsageProgressCoalesces(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()

	// Queued before Run, so nothing is taken into a batch meanwhile.
	require.NoError(t, w.Begin(ctx, admitted("r1")))
	for i := range int64(100) {
		require.NoError(t, w.Progress(progressed("r1", i+1)))
	}
	require.NoError(t, w.Progress(progressed("r1", 40)), "an older count is taken and ignored")
	for i := range int64(3) {
		require.NoError(t, w.Progress(progressed("r2", i+1)))
	}
	st := w.Stats()
	assert.Equal(t, 3, st.Queued, "r1's Begin, one checkpoint of r1 and one of r2")
	assert.EqualValues(t, 99+1+2, st.ProgressCoalesced)
	assert.Zero(t, st.ProgressDropped)

	runWriter(t, w)
	require.NoError(t, w.Record(ctx, done("other"))) // flushes what was queued
	for id, want := range map[string]int64{"r1": 100, "r2": 3} {
		got, err := s.UsageEvent(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, progressed(id, want), got, id)
	}

	// A later checkpoint, with more tokens, replaces the in-flight row;
	// one with fewer (or the admission's) does not.
	require.NoError(t, w.Progress(progressed("r1", 150)))
	require.NoError(t, w.Record(ctx, done("other2")))
	require.NoError(t, w.Progress(progressed("r1", 120)))
	require.NoError(t, w.Begin(ctx, admitted("r1")))
	require.NoError(t, w.Record(ctx, done("other3")))
	got, err := s.UsageEvent(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, progressed("r1", 150), got)
	assert.Equal(t, 1, countUsage(t, s, "r1"))
}

// TestUsageProgressNeverBlocks: with the queue full, a checkpoint of a
// request without one queued is dropped and counted, at once; one with a
// checkpoint queued still replaces it.
func TestUsageProgressNeverBlocks(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{QueueLen: 2})
	require.NoError(t, err)
	ctx := t.Context()

	require.NoError(t, w.Progress(progressed("a", 1)))
	require.NoError(t, w.Progress(progressed("b", 1)))
	start := time.Now()
	require.NoError(t, w.Progress(progressed("c", 1)))
	require.NoError(t, w.Progress(progressed("a", 5)))
	assert.Less(t, time.Since(start), time.Second)
	st := w.Stats()
	assert.EqualValues(t, 1, st.ProgressDropped)
	assert.EqualValues(t, 1, st.ProgressCoalesced)
	assert.Equal(t, 2, st.Queued)

	runWriter(t, w)
	require.NoError(t, w.Record(ctx, done("other")))
	got, err := s.UsageEvent(ctx, "a")
	require.NoError(t, err)
	assert.EqualValues(t, 5, got.OutputTokens)
	assert.Equal(t, 1, countUsage(t, s, "b"))
	assert.Zero(t, countUsage(t, s, "c"))
}

// TestUsageFinalRowWins: a checkpoint never replaces a final row, whether
// it commits after the final event or was queued before it.
func TestUsageFinalRowWins(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()

	// Queued before the final event: superseded, not written.
	require.NoError(t, w.Begin(ctx, admitted("r1")))
	require.NoError(t, w.Progress(progressed("r1", 500)))
	require.NoError(t, w.RecordAsync(ctx, done("r1")))
	runWriter(t, w)
	require.NoError(t, w.Record(ctx, done("other")))
	got, err := s.UsageEvent(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, done("r1"), got)
	assert.EqualValues(t, 3, w.Stats().Committed, "r1's Begin and final, other's final")

	// A stale checkpoint committed after the final event (its request
	// ended while it was queued elsewhere, or it is replayed from a
	// spool): ignored.
	require.NoError(t, w.Progress(progressed("r1", 999)))
	require.NoError(t, w.Record(ctx, done("other2")))
	got, err = s.UsageEvent(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, done("r1"), got)

	// In one batch, in either order.
	path := filepath.Join(t.TempDir(), "spool.jsonl")
	var lines []byte
	for _, ev := range []UsageEvent{progressed("r2", 7), done("r2"), done("r3"), progressed("r3", 7)} {
		lines, err = appendSpoolLine(lines, ev)
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(path, lines, 0o600))
	_, err = s.ReplayUsageSpool(ctx, path)
	require.NoError(t, err)
	for _, id := range []string{"r2", "r3"} {
		got, err = s.UsageEvent(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, done(id), got, id)
	}
}

// TestRecoverUsageKeepsProgress: an interrupted request keeps the output
// tokens of its last checkpoint, committed or spooled.
func TestRecoverUsageKeepsProgress(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w, err := s.NewUsageWriter(UsageWriterConfig{})
	require.NoError(t, err)
	stop := runWriter(t, w)
	ctx := t.Context()

	require.NoError(t, w.Begin(ctx, admitted("a1")))
	require.NoError(t, w.Progress(progressed("a1", 42)))
	require.NoError(t, w.Begin(ctx, admitted("a2")))
	require.NoError(t, stop())
	require.ErrorIs(t, w.Progress(progressed("a1", 50)), ErrClosed)

	// a2's last checkpoint went to the spool (SQLite was failing).
	line, err := appendSpoolLine(nil, progressed("a2", 17))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(s.path), spoolName), line, 0o600))

	now := t0.Add(time.Minute)
	replayed, interrupted, err := s.RecoverUsage(ctx, "n1", now)
	require.NoError(t, err)
	assert.Equal(t, 1, replayed)
	assert.Equal(t, 2, interrupted)
	for id, output := range map[string]int64{"a1": 42, "a2": 17} {
		got, err := s.UsageEvent(ctx, id)
		require.NoError(t, err)
		want := progressed(id, output)
		want.Status, want.Reason = UsageInterrupted, interruptedReason
		want.Ended, want.Duration = now, time.Minute
		assert.Equal(t, want, got, id)
	}
	rows, err := s.UsageReport(ctx, UsageQuery{By: "tenant"})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.EqualValues(t, 2, rows[0].Interrupted)
	assert.EqualValues(t, 42+17, rows[0].OutputTokens, "billed what was sent")
}

// TestUsageProgressInvalid: Progress takes in-flight events only.
func TestUsageProgressInvalid(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	w := startWriter(t, s, UsageWriterConfig{}, writerHooks{})
	require.ErrorIs(t, w.Progress(done("r1")), ErrInvalid)
	ended := progressed("r1", 3)
	ended.Ended = t0
	require.ErrorIs(t, w.Progress(ended), ErrInvalid)
	require.ErrorIs(t, w.Progress(progressed("", 3)), ErrInvalid)
	require.ErrorIs(t, w.Progress(progressed("r1", -1)), ErrInvalid)
	noStatus := progressed("r1", 3)
	noStatus.Status = ""
	require.NoError(t, w.Progress(noStatus))
}
