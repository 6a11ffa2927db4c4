package store

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

const (
	// touchInterval is how often at most a key's last-used time is
	// written: it is a hint for operators, not an audit log.
	touchInterval = time.Minute
	// touchQueue bounds the touches waiting to be written; past it a use
	// is not recorded (a later one will be).
	touchQueue = 1024
	// touchBatch is the most touches written in one transaction.
	touchBatch = 256
)

// touchQuery records a use (time, id, time less touchInterval): its WHERE
// clause applies touchInterval to the uses that other Stores and processes
// record too.
const touchQuery = `UPDATE api_keys SET last_used = ?
	WHERE id = ? AND (last_used IS NULL OR last_used <= ?)`

// touch is one key's use to record, or, with flushed set, a marker whose
// channel is closed once every touch queued before it is written.
type touch struct {
	id      string
	at      time.Time
	flushed chan struct{}
}

// toucher writes keys' last-used times on its own goroutine, in batches, so
// that Authenticate never waits for the write lock or a WAL checkpoint and
// never fails because of a write. The goroutine is started by Open and
// stopped by Close, which waits for it.
type toucher struct {
	s     *Store
	stmt  *sql.Stmt
	queue chan touch
	done  chan struct{} // closed when run returns

	mu     sync.Mutex
	closed bool                 // guarded by mu; no sends on queue once set
	last   map[string]time.Time // guarded by mu; each key's last queued use
}

// start prepares the statement and starts the goroutine.
func (t *toucher) start(ctx context.Context, s *Store) error {
	stmt, err := s.db.PrepareContext(ctx, touchQuery)
	if err != nil {
		return err
	}
	t.s = s
	t.stmt = stmt
	t.queue = make(chan touch, touchQueue)
	t.done = make(chan struct{})
	t.last = make(map[string]time.Time)
	go t.run()
	return nil
}

// stop writes what is queued, waits for the goroutine and reports whether
// this call stopped it (false: it was stopped before).
func (t *toucher) stop() bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.closed = true
	close(t.queue)
	t.mu.Unlock()

	<-t.done
	t.stmt.Close()
	return true
}

// use notes that key id, whose stored last-used time is stored (zero:
// never), is used at now, and reports whether the use is queued to be
// recorded: not when the key's last recorded or queued use is less than
// touchInterval ago, nor when the queue is full. It never blocks.
func (t *toucher) use(id string, stored, now time.Time) bool {
	if !stored.IsZero() && now.Sub(stored) < touchInterval {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if last, ok := t.last[id]; ok && now.Sub(last) < touchInterval {
		return false
	}
	select {
	case t.queue <- touch{id: id, at: now}:
		t.last[id] = now
		return true
	default:
		return false
	}
}

// flush waits until the uses queued before it are written (or the write
// failed), so that a listing shows them. It does not wait when the queue is
// full or the Store is closing.
func (t *toucher) flush(ctx context.Context) error {
	flushed := make(chan struct{})
	t.mu.Lock()
	queued := false
	if !t.closed {
		select {
		case t.queue <- touch{flushed: flushed}:
			queued = true
		default:
		}
	}
	t.mu.Unlock()
	if !queued {
		return nil
	}
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run writes the queued touches until stop closes the queue.
func (t *toucher) run() {
	defer close(t.done)
	batch := make([]touch, 0, touchBatch)
	for first := range t.queue {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < cap(batch) {
			select {
			case next, ok := <-t.queue:
				if !ok {
					break fill
				}
				batch = append(batch, next)
			default:
				break fill
			}
		}
		t.write(batch)
	}
}

// write records a batch in one transaction. A failed write is ignored but
// forgotten, so that the keys' next uses try again.
func (t *toucher) write(batch []touch) {
	n := 0
	for _, u := range batch {
		if u.flushed == nil {
			n++
		}
	}
	if n > 0 {
		// Not cancellable: the busy timeout bounds the wait, and Close
		// waits for this write.
		err := t.s.write(context.Background(), func(tx *sql.Tx) error {
			stmt := tx.Stmt(t.stmt)
			for _, u := range batch {
				if u.flushed != nil {
					continue
				}
				if _, err := stmt.Exec(millis(u.at), u.id, millis(u.at.Add(-touchInterval))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.forget(batch)
		}
	}
	for _, u := range batch {
		if u.flushed != nil {
			close(u.flushed)
		}
	}
}

// forget drops the batch's uses from last, unless a key was queued again
// since.
func (t *toucher) forget(batch []touch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, u := range batch {
		if last, ok := t.last[u.id]; ok && u.flushed == nil && last.Equal(u.at) {
			delete(t.last, u.id)
		}
	}
}
