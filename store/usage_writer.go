package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by a [UsageWriter]'s Begin, Record and RecordAsync
// once the context of its [UsageWriter.Run] has ended.
var ErrClosed = errors.New("store: usage writer closed")

// errRunTwice is returned by a second call of [UsageWriter.Run].
var errRunTwice = errors.New("store: usage writer: Run called twice")

// The defaults of UsageWriterConfig.
const (
	defaultMaxBatch        = 512
	defaultMaxDelay        = 5 * time.Millisecond
	defaultQueueLen        = 8192
	defaultCheckpointPages = 4096
	defaultCheckpointWait  = time.Second
	defaultFlushTimeout    = 30 * time.Second
)

const (
	// minBackoff and maxBackoff bound how long the writer sends batches
	// straight to the spool after a failed commit before it tries SQLite
	// again; the backoff doubles per failure and resets on a success.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// batchQuiet is how long the writer waits for the next event of a
	// batch before it commits what it has (within MaxDelay): when every
	// producer is waiting in Record, none is coming.
	batchQuiet = 200 * time.Microsecond
	// checkpointRetry is the least time between two checkpoints that
	// do not wait for readers, after one found readers in the way.
	checkpointRetry = 10 * time.Millisecond
	// walHeader and walFrameHeader are the sizes of the WAL file's header
	// and of each frame's header, in bytes.
	walHeader      = 32
	walFrameHeader = 24
)

// UsageWriterConfig configures a [UsageWriter]. The zero value holds the
// defaults.
type UsageWriterConfig struct {
	// MaxBatch is the most events written in one transaction; default
	// 512.
	MaxBatch int
	// MaxDelay is the longest an event waits for more events to share its
	// commit; default 5 ms, negative for no wait (events that arrive
	// during a commit still share the next one). The writer stops waiting
	// sooner when no event has come for 200 µs.
	MaxDelay time.Duration
	// QueueLen bounds the events queued and being written; producers
	// block while it is full (backpressure). Default 8192.
	QueueLen int
	// SpoolPath is the append-only JSON-lines file that takes the events
	// that SQLite could not; default dir/usage-spool.jsonl, which
	// [Store.RecoverUsage] replays. One writer at a time may use a spool.
	SpoolPath string
	// CheckpointPages is the WAL size, in pages, past which the writer
	// checkpoints it with wal_checkpoint(TRUNCATE); default 4096 (16 MiB
	// of 4 KiB pages). SQLite's own checkpoints keep the WAL near 1000
	// pages unless readers hold long transactions, which stop them from
	// starting the WAL over: then the writer's checkpoints, first without
	// waiting, then, past twice CheckpointPages, waiting up to
	// CheckpointWait for the readers, bound it.
	CheckpointPages int
	// CheckpointWait is the longest a checkpoint stops the writer to wait
	// for readers once the WAL is past twice CheckpointPages; default 1 s.
	// The checkpoint waits for the read transactions begun before it, and
	// then for those begun while it waited: it needs about twice the
	// longest read transaction.
	CheckpointWait time.Duration
	// FlushTimeout bounds Run's final flush, from the end of Run's
	// context: past it, the events still queued go to the spool instead
	// of waiting for SQLite, and Run returns an error; default 30 s.
	FlushTimeout time.Duration
	// Logger receives the writer's warnings (spooling, failures); nil
	// discards them.
	Logger *slog.Logger
}

// withDefaults fills in the defaults, the spool under dir, and checks the
// values.
func (c UsageWriterConfig) withDefaults(dir string) (UsageWriterConfig, error) {
	if c.MaxBatch < 0 || c.QueueLen < 0 || c.CheckpointPages < 0 || c.CheckpointWait < 0 || c.FlushTimeout < 0 {
		return c, fmt.Errorf("%w: usage writer: negative MaxBatch, QueueLen, CheckpointPages, CheckpointWait or FlushTimeout",
			ErrInvalid)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaultMaxBatch
	}
	switch {
	case c.MaxDelay == 0:
		c.MaxDelay = defaultMaxDelay
	case c.MaxDelay < 0:
		c.MaxDelay = 0
	}
	if c.QueueLen == 0 {
		c.QueueLen = defaultQueueLen
	}
	if c.SpoolPath == "" {
		c.SpoolPath = filepath.Join(dir, spoolName)
	}
	path, err := filepath.Abs(c.SpoolPath)
	if err != nil {
		return c, err
	}
	c.SpoolPath = path
	if c.CheckpointPages == 0 {
		c.CheckpointPages = defaultCheckpointPages
	}
	if c.CheckpointWait == 0 {
		c.CheckpointWait = defaultCheckpointWait
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = defaultFlushTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// UsageWriterStats is a snapshot of a writer's counters.
type UsageWriterStats struct {
	// Queued counts the events queued or being written, and the progress
	// checkpoints queued.
	Queued int
	// Committed, Spooled and Failed count the events written to SQLite,
	// to the spool (SQLite failed), and to neither (both failed: Record
	// returned an error; a Begin or RecordAsync event is lost and logged).
	Committed, Spooled, Failed uint64
	// Commits counts the transactions that wrote events.
	Commits uint64
	// LastCommitDuration is the last commit's time, from BEGIN to the
	// end of COMMIT (its fsyncs).
	LastCommitDuration time.Duration
	// Lag is the age of the oldest queued event, 0 when none is.
	Lag time.Duration
	// BlockedProducers counts the calls that waited for room in a full
	// queue.
	BlockedProducers uint64
	// ProgressCoalesced counts the progress checkpoints that replaced one
	// of the same request still queued; ProgressDropped those left out
	// because the queue was full.
	ProgressCoalesced, ProgressDropped uint64
	// Replayed counts the spooled events that the writer wrote to SQLite
	// once it could again.
	Replayed uint64
	// Checkpoints counts the WAL checkpoints (TRUNCATE) that the writer
	// completed; WALBytes is the WAL file's size at the last look.
	Checkpoints uint64
	WALBytes    int64
}

// usageItem is one queued event; done, for Record, takes the outcome.
type usageItem struct {
	ev     UsageEvent
	queued time.Time
	done   chan error // nil for Begin, Progress and RecordAsync; buffered
	// superseded marks a progress checkpoint whose request's final event
	// was queued after it: it need not be written. Guarded by mu.
	superseded bool
}

// writerHooks replace a writer's parts in tests.
type writerHooks struct {
	// db is the database the writer writes to; default the Store's.
	db *sql.DB
	// onCommit is called on Run's goroutine after each commit.
	onCommit func(events int, d time.Duration)
}

// UsageWriter writes usage events to the ledger from its Run loop, in
// group commits: it takes up to MaxBatch queued events, waiting at most
// MaxDelay after the first (less when events stop coming), writes them in
// one transaction, and then wakes the batch's Record calls. The database runs with synchronous=FULL, so a
// commit is on disk when it returns.
//
// When a commit fails (the database busy past its timeout, a full disk, an
// I/O error), the batch is appended to the spool and fsynced instead, and
// for a backoff (100 ms doubling to 5 s) later batches go straight to the
// spool; after the next successful commit the writer replays the spool into
// the database and empties it. Only when the spool fails too is an event
// lost: Record returns the error and Stats counts it in Failed.
//
// The writer also bounds the WAL (see [UsageWriterConfig.CheckpointPages]).
// It is safe for concurrent use.
//
// Lifecycle: [Store.NewUsageWriter] prepares the writer and starts no
// goroutine; the caller owns the one that calls [UsageWriter.Run], once,
// which writes until its context ends, then stops accepting events, flushes
// the queue (bounded by FlushTimeout) and releases the spool. Events may be
// queued before Run starts (Record then waits for Run, or its context).
// Run must have returned before the Store is closed.
type UsageWriter struct {
	s        *Store
	db       *sql.DB
	cfg      UsageWriterConfig
	log      *slog.Logger
	upsert   *sql.Stmt
	pageSize int64
	onCommit func(events int, d time.Duration)

	started atomic.Bool   // Run was called
	wake    chan struct{} // a token when an event is queued or the writer is closed

	mu      sync.Mutex
	queue   []*usageItem  // guarded by mu; oldest first, removed once handled
	space   chan struct{} // guarded by mu; closed (and replaced) when items are removed
	closing chan struct{} // closed by shutdown
	closed  bool          // guarded by mu
	// progress holds the progress checkpoints not yet taken into a batch,
	// oldest first, and pending each of them by request id: a request has
	// at most one there (Progress replaces it).
	progress []*usageItem          // guarded by mu
	pending  map[string]*usageItem // guarded by mu

	committed, spooled, failed, commits atomic.Uint64
	blocked, replayed, checkpoints      atomic.Uint64
	coalesced, dropped                  atomic.Uint64
	lastCommit, walBytes                atomic.Int64

	// Only Run's loop uses these.
	sp             spool
	spoolPending   bool      // the spool may hold events to replay
	retryAt        time.Time // no commits before it (backoff)
	backoff        time.Duration
	lastErr        error     // the last commit's error, while backing off
	nextCheckpoint time.Time // no checkpoint without waiting before it
}

// NewUsageWriter prepares a usage writer on the Store's database: it
// claims the spool and prepares its statement, and starts no goroutine;
// the caller runs [UsageWriter.Run]. Call [Store.RecoverUsage] first. It
// fails with ErrInvalid for a negative setting, and when another writer of
// this process uses the same spool (the claim lasts until Run returns: a
// writer that will not be run is released by Run with an ended context).
func (s *Store) NewUsageWriter(cfg UsageWriterConfig) (*UsageWriter, error) {
	return s.newUsageWriter(cfg, writerHooks{})
}

// newUsageWriter is NewUsageWriter with parts replaced.
func (s *Store) newUsageWriter(cfg UsageWriterConfig, hooks writerHooks) (*UsageWriter, error) {
	cfg, err := cfg.withDefaults(filepath.Dir(s.path))
	if err != nil {
		return nil, err
	}
	db := hooks.db
	if db == nil {
		db = s.db
	}
	w := &UsageWriter{
		s:        s,
		db:       db,
		cfg:      cfg,
		log:      cfg.Logger.With("component", "usage"),
		onCommit: hooks.onCommit,
		wake:     make(chan struct{}, 1),
		pending:  make(map[string]*usageItem),
		space:    make(chan struct{}),
		closing:  make(chan struct{}),
		sp:       spool{path: cfg.SpoolPath},
	}
	ctx := context.Background()
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&w.pageSize); err != nil {
		return nil, fmt.Errorf("store: start usage writer: %w", err)
	}
	if err := claimSpool(cfg.SpoolPath); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(cfg.SpoolPath); err == nil && fi.Size() > 0 {
		w.spoolPending = true // left by an earlier run, not yet recovered
	}
	if w.upsert, err = db.PrepareContext(ctx, upsertUsage); err != nil {
		releaseSpool(cfg.SpoolPath)
		return nil, fmt.Errorf("store: start usage writer: %w", err)
	}
	return w, nil
}

// Begin queues the in-flight row of an admitted request (Status "" is
// taken as in_flight; Started zero is now) and returns once it is queued,
// not committed. It blocks while the queue is full, until ctx ends. Events
// that are not valid give ErrInvalid; once Run's context has ended,
// ErrClosed.
func (w *UsageWriter) Begin(ctx context.Context, ev UsageEvent) error {
	if ev.Status == "" {
		ev.Status = UsageInFlight
	}
	if ev.Status != UsageInFlight || !ev.Ended.IsZero() {
		return fmt.Errorf("%w: usage event %q: Begin takes an in-flight event (no status, no end)",
			ErrInvalid, ev.RequestID)
	}
	if ev.Started.IsZero() {
		ev.Started = w.s.now()
	}
	if err := checkEvent(ev, true); err != nil {
		return err
	}
	return w.enqueue(ctx, &usageItem{ev: ev})
}

// Progress queues a progress checkpoint of a running request: its
// in-flight row (Status "" is taken as in_flight; Started zero is now)
// with the tokens counted so far, so that if llmd dies before the request
// ends, [Store.RecoverUsage] marks the row interrupted with these counts.
// It never blocks: a checkpoint replaces the one of the same request still
// queued (the queue holds at most one per request), and when the queue is
// full it is dropped (counted in Stats; a later checkpoint or the final
// event carries the counts). The row takes a checkpoint only while it is
// in flight and only when it counts more output tokens than the row: a
// final event always wins, even over a checkpoint that commits after it.
// Events that are not valid give ErrInvalid; once Run's context has ended,
// ErrClosed.
func (w *UsageWriter) Progress(ev UsageEvent) error {
	if ev.Status == "" {
		ev.Status = UsageInFlight
	}
	if ev.Status != UsageInFlight || !ev.Ended.IsZero() {
		return fmt.Errorf("%w: usage event %q: Progress takes an in-flight event (no status, no end)",
			ErrInvalid, ev.RequestID)
	}
	if ev.Started.IsZero() {
		ev.Started = w.s.now()
	}
	if err := checkEvent(ev, true); err != nil {
		return err
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if it := w.pending[ev.RequestID]; it != nil {
		if ev.OutputTokens >= it.ev.OutputTokens {
			it.ev = ev
		}
		w.mu.Unlock()
		w.coalesced.Add(1)
		return nil
	}
	if len(w.progress) >= w.cfg.QueueLen || len(w.queue) >= w.cfg.QueueLen {
		w.mu.Unlock()
		w.dropped.Add(1)
		return nil
	}
	it := &usageItem{ev: ev, queued: time.Now()}
	w.progress = append(w.progress, it)
	w.pending[ev.RequestID] = it
	w.mu.Unlock()
	w.notify()
	return nil
}

// Record queues a final event (finished, cancelled, error or rejected;
// Ended zero is now, Started zero is Ended) and waits until it is durable:
// committed to SQLite, or, when SQLite fails, appended to the spool and
// fsynced; before Run starts, it waits for Run. It returns an error only
// when neither worked, or ctx ended first, or the event is not valid
// (ErrInvalid), or the writer is closed (ErrClosed): then the event must be
// taken as not recorded (recording it again is harmless: the first final
// event of a request wins).
func (w *UsageWriter) Record(ctx context.Context, ev UsageEvent) error {
	ev, err := w.final(ev)
	if err != nil {
		return err
	}
	it := &usageItem{ev: ev, done: make(chan error, 1)}
	if err := w.enqueue(ctx, it); err != nil {
		return err
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("store: record usage %q: %w", ev.RequestID, ctx.Err())
	}
}

// RecordAsync queues a final event, as Record does, without waiting for it
// to be written (for rejected requests). It blocks while the queue is full,
// until ctx ends.
func (w *UsageWriter) RecordAsync(ctx context.Context, ev UsageEvent) error {
	ev, err := w.final(ev)
	if err != nil {
		return err
	}
	return w.enqueue(ctx, &usageItem{ev: ev})
}

// final checks a final event and fills in its times.
func (w *UsageWriter) final(ev UsageEvent) (UsageEvent, error) {
	if err := checkEvent(ev, false); err != nil {
		return ev, err
	}
	if ev.Ended.IsZero() {
		ev.Ended = w.s.now()
	}
	if ev.Started.IsZero() {
		ev.Started = ev.Ended
	}
	return ev, nil
}

// enqueue adds it to the queue, waiting for room until ctx ends.
func (w *UsageWriter) enqueue(ctx context.Context, it *usageItem) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: queue usage %q: %w", it.ev.RequestID, err)
	}
	w.mu.Lock()
	waited := false
	for !w.closed && len(w.queue) >= w.cfg.QueueLen {
		if !waited {
			w.blocked.Add(1)
			waited = true
		}
		space := w.space
		w.mu.Unlock()
		select {
		case <-space:
		case <-w.closing:
		case <-ctx.Done():
			return fmt.Errorf("store: queue usage %q: %w", it.ev.RequestID, ctx.Err())
		}
		w.mu.Lock()
	}
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	it.queued = time.Now()
	w.queue = append(w.queue, it)
	if p := w.pending[it.ev.RequestID]; p != nil && it.ev.Status != UsageInFlight {
		// The final event wins anyway; the checkpoint need not be written.
		p.superseded = true
		delete(w.pending, it.ev.RequestID)
	}
	w.mu.Unlock()
	w.notify()
	return nil
}

// notify wakes Run's loop.
func (w *UsageWriter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Stats returns the writer's counters.
func (w *UsageWriter) Stats() UsageWriterStats {
	w.mu.Lock()
	queued := len(w.queue) + len(w.progress)
	var lag time.Duration
	if oldest, ok := w.oldest(); ok {
		lag = time.Since(oldest)
	}
	w.mu.Unlock()
	return UsageWriterStats{
		Queued:             queued,
		Committed:          w.committed.Load(),
		Spooled:            w.spooled.Load(),
		Failed:             w.failed.Load(),
		Commits:            w.commits.Load(),
		LastCommitDuration: time.Duration(w.lastCommit.Load()),
		Lag:                lag,
		BlockedProducers:   w.blocked.Load(),
		ProgressCoalesced:  w.coalesced.Load(),
		ProgressDropped:    w.dropped.Load(),
		Replayed:           w.replayed.Load(),
		Checkpoints:        w.checkpoints.Load(),
		WALBytes:           w.walBytes.Load(),
	}
}

// oldest is the time the oldest queued event or checkpoint was queued;
// false when there is none. The caller holds mu.
func (w *UsageWriter) oldest() (time.Time, bool) {
	switch {
	case len(w.queue) == 0 && len(w.progress) == 0:
		return time.Time{}, false
	case len(w.progress) == 0:
		return w.queue[0].queued, true
	case len(w.queue) == 0 || w.progress[0].queued.Before(w.queue[0].queued):
		return w.progress[0].queued, true
	}
	return w.queue[0].queued, true
}

// Run is the writer's loop: it writes the queued events, in group commits,
// until ctx ends. Then it stops accepting events (Begin, Progress, Record
// and RecordAsync return ErrClosed, also those waiting for room in a full
// queue), writes everything still queued, releases the spool and returns
// nil. The final flush lasts at most [UsageWriterConfig.FlushTimeout] from
// the end of ctx: past it, the events still queued (and the batch being
// committed) go to the spool instead of waiting for SQLite, and Run returns
// an error wrapping context.DeadlineExceeded once it has stopped. Either
// way no goroutine of the writer is left when Run returns, and the Store
// may be closed.
//
// Run may be called once; another call returns an error at once. Run with
// an ended ctx flushes what was queued and returns: it releases a writer
// that will not be used.
func (w *UsageWriter) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errRunTwice
	}
	// The loop's context outlives ctx by at most FlushTimeout; it keeps
	// ctx's values.
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopped := make(chan struct{})
	var expired bool
	var wg sync.WaitGroup
	wg.Go(func() { expired = w.watch(ctx, cancel, stopped) })
	w.loop(loopCtx)
	close(stopped)
	wg.Wait()
	w.stop()
	if expired {
		return fmt.Errorf("store: usage writer: final flush past FlushTimeout (%v), queued events were spooled: %w",
			w.cfg.FlushTimeout, context.DeadlineExceeded)
	}
	return nil
}

// watch, on its goroutine owned by Run, closes the writer once ctx ends,
// and cancels the loop's context FlushTimeout later unless the loop has
// stopped by then; it reports whether it cancelled.
func (w *UsageWriter) watch(ctx context.Context, cancel context.CancelFunc, stopped <-chan struct{}) (expired bool) {
	select {
	case <-ctx.Done():
	case <-stopped: // the loop stops only once closed; just in case
		return false
	}
	w.shutdown()
	t := time.NewTimer(w.cfg.FlushTimeout)
	defer t.Stop()
	select {
	case <-stopped:
		return false
	case <-t.C:
		cancel()
		return true
	}
}

// shutdown stops accepting events and wakes the loop and the producers
// waiting for room.
func (w *UsageWriter) shutdown() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.closing)
	}
	w.mu.Unlock()
	w.notify()
}

// loop writes batches until the writer is closed, then writes what is
// left and returns. When ctx ends, the batches go to the spool.
func (w *UsageWriter) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]*usageItem, 0, w.cfg.MaxBatch)
	waited := 0 // the queue's length when the writer last waited for more
	for {
		w.mu.Lock()
		n, closed := len(w.queue)+len(w.progress), w.closed
		oldest, _ := w.oldest()
		w.mu.Unlock()

		if n == 0 {
			if closed {
				return
			}
			waited = 0
			<-w.wake
			continue
		}
		// Wait for more events while they keep coming: until MaxBatch,
		// MaxDelay after the oldest, or batchQuiet without a new one.
		if n < w.cfg.MaxBatch && n != waited && !closed && ctx.Err() == nil {
			if wait := min(time.Until(oldest.Add(w.cfg.MaxDelay)), batchQuiet); wait > 0 {
				waited = n
				timer.Reset(wait)
				select {
				case <-w.wake:
				case <-timer.C:
				case <-ctx.Done():
				}
				timer.Stop()
				continue
			}
		}
		waited = 0

		w.mu.Lock()
		queued := min(len(w.queue), w.cfg.MaxBatch)
		batch = append(batch[:0], w.queue[:queued]...)
		batch = w.takeProgress(batch)
		w.mu.Unlock()
		var (
			committed bool
			err       error
		)
		if len(batch) > 0 {
			committed, err = w.write(ctx, batch)
		}
		w.mu.Lock()
		k := copy(w.queue, w.queue[queued:])
		clear(w.queue[k:])
		w.queue = w.queue[:k]
		close(w.space)
		w.space = make(chan struct{})
		w.mu.Unlock()
		// Out of the queue first, so that Stats after Record does not
		// count the event.
		for _, it := range batch {
			if it.done != nil {
				it.done <- err
			}
		}
		clear(batch)
		if committed {
			w.afterCommit(ctx)
		}
	}
}

// takeProgress appends to batch the oldest progress checkpoints that fit
// in MaxBatch, less those superseded by their request's final event, and
// takes them out of the queue: a later checkpoint of the same request is
// queued anew. The caller holds mu.
func (w *UsageWriter) takeProgress(batch []*usageItem) []*usageItem {
	k := min(len(w.progress), w.cfg.MaxBatch-len(batch))
	for _, it := range w.progress[:k] {
		if it.superseded {
			continue
		}
		delete(w.pending, it.ev.RequestID)
		batch = append(batch, it)
	}
	rest := copy(w.progress, w.progress[k:])
	clear(w.progress[rest:])
	w.progress = w.progress[:rest]
	return batch
}

// stop releases what the writer holds.
func (w *UsageWriter) stop() {
	w.upsert.Close()
	if err := w.sp.close(); err != nil {
		w.log.Error("close usage spool", "path", w.sp.path, "err", err)
	}
	releaseSpool(w.sp.path)
}
