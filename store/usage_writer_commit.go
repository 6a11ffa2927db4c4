package store

// The writer's commit path: SQLite first, the spool when SQLite fails,
// the replay of the spool, and WAL checkpoints.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"time"
)

// write writes a batch to SQLite, or else to the spool, and reports whether
// SQLite took it, and the error for the batch's Record calls: nil unless
// the spool failed too.
func (w *UsageWriter) write(ctx context.Context, batch []*usageItem) (committed bool, err error) {
	n := uint64(len(batch))
	var dbErr error
	switch {
	case ctx.Err() != nil:
		dbErr = ctx.Err()
	case time.Now().Before(w.retryAt):
		dbErr = fmt.Errorf("backing off after: %w", w.lastErr)
	default:
		start := time.Now()
		dbErr = w.commit(ctx, batch)
		d := time.Since(start)
		if dbErr == nil {
			w.commits.Add(1)
			w.committed.Add(n)
			w.lastCommit.Store(int64(d))
			if w.onCommit != nil {
				w.onCommit(len(batch), d)
			}
			w.backoff, w.lastErr = 0, nil
			return true, nil
		}
		w.failedCommit(dbErr)
		w.log.Warn("usage commit failed: spooling", "events", n, "spool", w.sp.path,
			"retry_in", w.backoff, "err", dbErr)
	}

	if err := w.spoolBatch(batch); err != nil {
		w.failed.Add(n)
		w.log.Error("usage events not recorded", "events", n, "spool", w.sp.path,
			"db_err", dbErr, "err", err)
		return false, fmt.Errorf("store: usage not recorded: database: %w; spool: %w", dbErr, err)
	}
	w.spooled.Add(n)
	w.spoolPending = true
	return false, nil
}

// failedCommit starts or doubles the backoff after a failed write.
func (w *UsageWriter) failedCommit(err error) {
	w.backoff = min(max(2*w.backoff, minBackoff), maxBackoff)
	w.retryAt = time.Now().Add(w.backoff)
	w.lastErr = err
}

// writeTx runs fn in a write transaction on the writer's database, queued
// behind the Store's other writes.
func (w *UsageWriter) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return w.s.writeOn(ctx, w.db, fn)
}

// commit writes the batch in one transaction.
func (w *UsageWriter) commit(ctx context.Context, batch []*usageItem) error {
	return w.writeTx(ctx, func(tx *sql.Tx) error {
		st := tx.StmtContext(ctx, w.upsert)
		for _, it := range batch {
			if _, err := st.ExecContext(ctx, usageArgs(it.ev)...); err != nil {
				return fmt.Errorf("write usage event %q: %w", it.ev.RequestID, err)
			}
		}
		return nil
	})
}

// spoolBatch appends the batch to the spool and fsyncs it.
func (w *UsageWriter) spoolBatch(batch []*usageItem) error {
	var buf []byte
	for _, it := range batch {
		var err error
		if buf, err = appendSpoolLine(buf, it.ev); err != nil {
			return err
		}
	}
	return w.sp.append(buf)
}

// afterCommit replays the spool, if it may hold events, and checkpoints
// the WAL if it has grown past its bound.
func (w *UsageWriter) afterCommit(ctx context.Context) {
	if w.spoolPending {
		w.replay(ctx)
	}
	w.checkpoint(ctx)
}

// replay writes the spool's events to SQLite in one transaction and
// empties the spool.
func (w *UsageWriter) replay(ctx context.Context) {
	data, err := w.sp.contents()
	if err != nil {
		w.log.Error("read usage spool", "path", w.sp.path, "err", err)
		return
	}
	evs, err := parseSpool(data)
	if err != nil {
		// Leave it to RecoverUsage, which reports the line, at the next
		// start; retry when more events are spooled.
		w.spoolPending = false
		w.log.Error("usage spool unreadable: replay it with RecoverUsage", "path", w.sp.path, "err", err)
		return
	}
	if len(evs) > 0 {
		err := w.writeTx(ctx, func(tx *sql.Tx) error { return upsertEvents(ctx, tx, w.upsert, evs) })
		if err != nil {
			w.failedCommit(err)
			w.log.Warn("replay usage spool", "path", w.sp.path, "events", len(evs), "err", err)
			return
		}
	}
	if err := w.sp.clear(); err != nil {
		// The events are in the database; replaying them again is
		// harmless.
		w.log.Error("empty usage spool", "path", w.sp.path, "err", err)
		return
	}
	w.spoolPending = false
	w.replayed.Add(uint64(len(evs)))
	if len(evs) > 0 {
		w.log.Info("usage spool replayed", "path", w.sp.path, "events", len(evs))
	}
}

// checkpoint bounds the WAL. Past CheckpointPages it runs
// wal_checkpoint(TRUNCATE) without waiting (at most every 10 ms): that
// succeeds unless a reader holds a transaction begun before the last
// commit. Past twice CheckpointPages, every checkpoint (one after each
// commit) waits up to CheckpointWait for such readers; meanwhile it holds
// the write lock, so readers that start anew see the latest commit and,
// once the WAL is copied back, no longer pin it. Readers that hold their
// transactions for longer than CheckpointWait, one after another, leave the
// writer one commit per CheckpointWait: the WAL is bounded before the
// throughput.
func (w *UsageWriter) checkpoint(ctx context.Context) {
	fi, err := os.Stat(w.s.path + "-wal")
	if err != nil {
		return
	}
	w.walBytes.Store(fi.Size())
	pages := (fi.Size() - walHeader) / (w.pageSize + walFrameHeader)
	limit := int64(w.cfg.CheckpointPages)
	if pages <= limit {
		return
	}
	now := time.Now()
	var wait time.Duration
	switch {
	case pages > 2*limit:
		wait = w.cfg.CheckpointWait
	case now.Before(w.nextCheckpoint):
		return
	}
	busy, err := w.walCheckpoint(ctx, wait)
	switch {
	case err != nil:
		w.log.Warn("wal checkpoint", "wal_bytes", fi.Size(), "err", err)
		w.nextCheckpoint = now.Add(checkpointRetry)
	case busy:
		w.nextCheckpoint = now.Add(checkpointRetry)
		if wait > 0 {
			w.log.Warn("wal checkpoint: readers outlasted the wait", "wal_bytes", fi.Size(), "waited", wait)
		}
	default:
		w.checkpoints.Add(1)
		if fi, err := os.Stat(w.s.path + "-wal"); err == nil {
			w.walBytes.Store(fi.Size())
		}
	}
}

// walCheckpoint runs wal_checkpoint(TRUNCATE) on a connection whose busy
// timeout is wait for the while, and reports whether readers (or another
// writer) kept it from completing.
func (w *UsageWriter) walCheckpoint(ctx context.Context, wait time.Duration) (busy bool, err error) {
	select {
	case w.s.writer <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-w.s.writer }()
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()

	var timeout int64
	if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&timeout); err != nil {
		return false, err
	}
	defer func() {
		_, rerr := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf(`PRAGMA busy_timeout = %d`, timeout))
		if rerr != nil {
			// Do not return a connection with the wrong timeout to
			// the pool.
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, wait.Milliseconds())); err != nil {
		return false, err
	}
	var blocked, logPages, done int64
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&blocked, &logPages, &done); err != nil {
		return false, err
	}
	return blocked != 0, nil
}
