package cluster

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ControlVersion orders the records about one thing: a hybrid logical
// clock timestamp (Wall in Unix milliseconds, Logical) and the node that
// made it, compared in that order.
type ControlVersion struct {
	Wall    int64
	Logical uint32
	Node    string
}

// After reports whether v is newer than o.
func (v ControlVersion) After(o ControlVersion) bool {
	if v.Wall != o.Wall {
		return v.Wall > o.Wall
	}
	if v.Logical != o.Logical {
		return v.Logical > o.Logical
	}
	return v.Node > o.Node
}

// ControlRecord is one replicated piece of control state (a tenant, an API
// key by its secret's hash, a tenant's quota limits, a tier's limits), as
// the ControlStore defines it: the cluster only carries it and compares
// versions.
type ControlRecord struct {
	// Kind and ID name the thing: at most 16 and 128 bytes.
	Kind, ID string
	Version  ControlVersion
	// Deleted marks a tombstone.
	Deleted bool
	// Payload is the state, opaque here; at most 16 KiB.
	Payload []byte
}

// ControlStore holds the replicated control state on this node (package
// store, adapted by the daemon). Its methods are called from Run's control
// goroutine and from New, never from a memberlist delegate.
type ControlStore interface {
	// ControlRecords returns every record held.
	ControlRecords(ctx context.Context) ([]ControlRecord, error)
	// ApplyControl merges records received from peers and returns those
	// whose state changed here, as now held (which may be a new version
	// the store made to merge two), to be passed on. It must be
	// idempotent. An error may come with the records it did apply.
	ApplyControl(ctx context.Context, recs []ControlRecord) ([]ControlRecord, error)
}

// ControlStats counts the control records of this node.
type ControlStats struct {
	// Held is how many records the node holds.
	Held int
	// Applied counts received records that changed the node's state;
	// Dropped those not handed to the store because its queue was full
	// (a later push/pull brings them again).
	Applied, Dropped uint64
}

// controlQueue bounds the batches of received records waiting for the
// store; past it they are dropped (push/pull repairs).
const controlQueue = 256

// controlBatch is the most records applied in one store transaction.
const controlBatch = 512

type controlKey struct{ kind, id string }

// controlState is the cluster's side of control replication: an in-memory
// copy of the store's records (so that delegates answer push/pull and
// drop stale news without I/O), and the queue of received records for
// the control goroutine to apply.
type controlState struct {
	store ControlStore
	in    chan []ControlRecord

	applied, dropped atomic.Uint64

	// Locking: mu guards held and cursor; nothing blocks under it but the
	// (non-blocking) queueing of broadcasts.
	mu     sync.Mutex
	held   map[controlKey]ControlRecord
	cursor controlKey // the last record of the previous push/pull page
}

func newControlState(s ControlStore) controlState {
	return controlState{store: s, in: make(chan []ControlRecord, controlQueue), held: map[controlKey]ControlRecord{}}
}

func keyOf(r *ControlRecord) controlKey { return controlKey{r.Kind, r.ID} }

// ControlStats returns the counts of control replication.
func (c *Cluster) ControlStats() ControlStats {
	c.ctl.mu.Lock()
	n := len(c.ctl.held)
	c.ctl.mu.Unlock()
	return ControlStats{Held: n, Applied: c.ctl.applied.Load(), Dropped: c.ctl.dropped.Load()}
}

// PublishControl gossips records of local changes, just committed to the
// ControlStore, to every node at once. It never blocks; records older than
// those held are ignored. Without Config.Control it does nothing.
func (c *Cluster) PublishControl(recs []ControlRecord) {
	if c.ctl.store == nil {
		return
	}
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	for i := range recs {
		c.holdLocked(recs[i], true)
	}
}

// holdLocked keeps r when it is newer than the record held about the same
// thing, and gossips it when told to; it reports whether r was kept.
func (c *Cluster) holdLocked(r ControlRecord, gossip bool) bool {
	k := keyOf(&r)
	if old, ok := c.ctl.held[k]; ok && !r.Version.After(old.Version) {
		return false
	}
	c.ctl.held[k] = r
	if gossip {
		if msg := encodeControlMsg(&r); msg != nil {
			// Queued under ctl.mu, so an older record about the same
			// thing never replaces a newer one in the queue.
			c.queue.QueueBroadcast(&broadcast{node: "\x00ctl/" + r.Kind + "/" + r.ID, msg: msg})
		}
	}
	return true
}

// loadControl fills the copy from the store.
func (c *Cluster) loadControl(ctx context.Context) error {
	recs, err := c.ctl.store.ControlRecords(ctx)
	if err != nil {
		return err
	}
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	for _, r := range recs {
		c.holdLocked(r, false)
	}
	return nil
}

// receiveControl queues received records that differ from those held:
// newer ones, and older ones too, which the store may merge (a key
// revocation is never lost). Equal versions are the same write: dropped.
func (c *Cluster) receiveControl(recs []ControlRecord) {
	if c.ctl.store == nil || len(recs) == 0 {
		return
	}
	c.ctl.mu.Lock()
	news := recs[:0]
	for _, r := range recs {
		if old, ok := c.ctl.held[keyOf(&r)]; ok && old.Version == r.Version {
			continue
		}
		news = append(news, r)
	}
	c.ctl.mu.Unlock()
	for len(news) > 0 {
		n := min(len(news), controlBatch)
		select {
		case c.ctl.in <- news[:n:n]:
		default:
			c.ctl.dropped.Add(uint64(len(news)))
			return
		}
		news = news[n:]
	}
}

// controlPage returns the next page of held records for a push/pull
// state, each encoded with its length, and their count: every record when
// they fit maxControlPageBytes, else the records after the last page's, in
// (kind, id) order, wrapping round, so that successive push/pulls carry
// them all.
func (c *Cluster) controlPage() (int, []byte) {
	if c.ctl.store == nil {
		return 0, nil
	}
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(c.ctl.held), func(a, b controlKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.id, b.id))
	})
	start, _ := slices.BinarySearchFunc(keys, c.ctl.cursor, func(a, b controlKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.id, b.id))
	})
	if start < len(keys) && keys[start] == c.ctl.cursor {
		start++
	}
	var page, scratch []byte
	n := 0
	for i := range keys {
		k := keys[(start+i)%len(keys)]
		r := c.ctl.held[k]
		scratch = appendControlRecord(scratch[:0], &r)
		if n == maxControlRecords || len(page)+len(scratch)+binaryMaxVarint > maxControlPageBytes {
			break
		}
		page = appendSized(page, scratch)
		c.ctl.cursor = k
		n++
	}
	if n == len(keys) {
		c.ctl.cursor = controlKey{}
	}
	return n, page
}

const binaryMaxVarint = 10

// controlLoop applies received records until ctx ends, and every refresh
// reads the store again for changes this node was not told of (an offline
// llmctl writing the same database, a change made before Run).
func (c *Cluster) controlLoop(ctx context.Context) {
	refresh := 10 * c.cfg.StateInterval
	t := time.NewTicker(refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.refreshControl(ctx)
		case recs := <-c.ctl.in:
			// Take what else is queued into the same transaction.
		more:
			for len(recs) < controlBatch {
				select {
				case r := <-c.ctl.in:
					recs = append(recs, r...)
				default:
					break more
				}
			}
			c.applyControl(ctx, recs)
		}
	}
}

// applyControl hands received records to the store and passes on those
// that changed its state.
func (c *Cluster) applyControl(ctx context.Context, recs []ControlRecord) {
	changed, err := c.ctl.store.ApplyControl(ctx, recs)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("control records not applied", "records", len(recs), "applied", len(changed), "err", err)
	}
	c.ctl.applied.Add(uint64(len(changed)))
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	for _, r := range changed {
		c.holdLocked(r, true)
	}
	if len(changed) > 0 {
		c.log.Debug("control records applied", "received", len(recs), "changed", len(changed))
	}
}

// refreshControl gossips the store's records newer than those held.
func (c *Cluster) refreshControl(ctx context.Context) {
	recs, err := c.ctl.store.ControlRecords(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("control records not read", "err", err)
		}
		return
	}
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	for _, r := range recs {
		c.holdLocked(r, true)
	}
}
