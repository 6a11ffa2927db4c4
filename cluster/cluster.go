package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmd/llmd/engine/kvcache"
)

// Cluster is this node's membership in a cluster. Its lifecycle: [New]
// creates and joins it, [Cluster.Run] runs it until its ctx ends and then
// leaves the cluster, [Cluster.Kill] stops it without leaving (a crash).
// The query methods (Addr, Members, Route, NumAlive, MarkFailed and the
// others) work from New's return on, also after Run has returned (the
// table then keeps the last view). Its methods are safe for concurrent
// use.
type Cluster struct {
	cfg   Config
	id    string
	log   *slog.Logger
	meta  []byte
	ml    *memberlist.Memberlist // set once New's memberlist.Create returns
	tr    *transport             // ml's transport
	addr  string                 // the advertised gossip address, set with ml
	queue *memberlist.TransmitLimitedQueue

	// awaitingJoin is set while this node has Join addresses and has not
	// yet been in touch with another member (see retryJoin).
	awaitingJoin atomic.Bool
	// numLive counts nodes memberlist has not reported gone, for the
	// queue's retransmit limit; atomic so the queue reads it lock-free.
	numLive atomic.Int64
	// badMsgs counts undecodable messages and metadata.
	badMsgs atomic.Uint64
	// turn counts PolicyRoundRobin routes.
	turn atomic.Uint64

	// ctl is the replicated control state (control.go), with its own lock.
	ctl controlState

	// Locking: mu guards everything below. Delegates hold it only to merge
	// decoded data; nothing does I/O or blocks under it.
	mu    sync.RWMutex
	nodes map[string]*entry
	ring  *ring
	// ver is the version of the latest local publication; refuteEpoch, when
	// above ver.Epoch, is the epoch the next one must use.
	ver         version
	refuteEpoch uint64
	last        State     // the last published local state
	lastSent    time.Time // when a local state was last gossiped
	left        bool      // memberlist Leave done

	leaving bool // set by leave: every later publication says so

	// lost holds the members memberlist declared dead (not left), by id,
	// for the reconnect loop; it outlives the table's entries. peak is the
	// most members alive at once, lowered when one leaves or is given up.
	lost map[string]lost
	peak int

	// Lifecycle. lifeMu guards ran (Run was called) and killed (Kill
	// was). kill is closed by Kill. stopOnce shuts memberlist down once
	// (at the end of Run, or in Kill when Run never started), sets stopErr
	// and closes stopped. leaveOnce leaves once; leaveErr is its result.
	// joins tracks the Join goroutines of reconnect rounds, which the
	// shutdown waits for.
	lifeMu    sync.Mutex
	ran       bool
	killed    bool
	kill      chan struct{}
	stopOnce  sync.Once
	stopped   chan struct{}
	stopErr   error
	leaveOnce sync.Once
	leaveErr  error
	joins     sync.WaitGroup
}

// entry is the table's record of one node.
type entry struct {
	id      string
	meta    *nodeMeta // nil until memberlist reports the node
	addr    string    // its gossip host:port, as memberlist reports it
	local   bool
	gone    bool      // memberlist reported it dead or left
	created time.Time // when the entry was made
	seen    time.Time // last join or metadata update
	goneAt  time.Time

	evictedUntil time.Time

	// The state register: load, flags, the gossiped keys.
	stateVer version
	flags    byte
	load     map[string]ModelLoad
	hot      map[string][]uint64
	heard    time.Time // when a newer state arrived
	// The summary register: every key.
	sumVer version
	full   map[string][]uint64

	// Derived on each change: the union of hot and full per model, and
	// the same as hashes for Member.State. localHashes keeps the local
	// node's full 128-bit hashes.
	keys        map[string]map[uint64]struct{}
	prefixes    map[string][]kvcache.Hash
	localHashes map[string][]kvcache.Hash
}

// New validates cfg, creates this node's memberlist (bound to BindAddr,
// with memberlist's own goroutines running), publishes the first local
// state (one call of cfg.LocalState) and joins cfg.Join. It starts none of
// the Cluster's goroutines: [Cluster.Run] republishes the local state,
// reconnects to lost members and, when its ctx ends, leaves the cluster and
// shuts memberlist down. The query methods work as soon as New returns.
// Until Run starts, the local state is not republished (peers see the node
// suspect after their SuspectAfter) and lost members are not retried, so
// call Run soon; a Cluster whose Run is never called must be released with
// [Cluster.Kill].
//
// New returns an error, never panics, on a bad Config (see
// Config.Validate), when the address cannot be bound, or when none of
// cfg.Join can be joined (joining some is fine); memberlist is then shut
// down and nothing is left running.
func New(cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	meta, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := newCluster(cfg, meta)
	mc, err := cfg.memberlistConfig(c.log)
	if err != nil {
		return nil, err
	}
	c.queue.RetransmitMult = mc.RetransmitMult
	mc.Delegate = &delegate{c}
	mc.Events = &eventDelegate{c}
	if cfg.tune != nil {
		cfg.tune(mc)
	}
	tr, err := newTransport(mc)
	if err != nil {
		return nil, fmt.Errorf("cluster: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	mc.Transport = tr
	c.tr = tr
	logger := c.log

	// The first state is published before anyone can ask for it.
	c.tick(time.Now())
	if cfg.Control != nil {
		if err := c.loadControl(context.Background()); err != nil {
			_ = tr.Shutdown()
			return nil, fmt.Errorf("cluster: read control records: %w", err)
		}
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("cluster: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	c.ml = ml
	c.addr = ml.LocalNode().Address()
	joined := false
	if len(cfg.Join) > 0 {
		n, err := ml.Join(cfg.Join)
		switch {
		case n == 0 && cfg.RetryJoinMax < 0:
			_ = ml.Shutdown()
			return nil, fmt.Errorf("%w %v: %w", ErrJoin, cfg.Join, err)
		case n == 0:
			logger.Warn("no member to join yet; serving alone and retrying", "join", cfg.Join, "err", err)
		case err != nil:
			logger.Warn("some join addresses failed", "joined", n, "err", err)
		}
		joined = n > 0
	}
	c.awaitingJoin.Store(len(cfg.Join) > 0 && !joined)
	logger.Info("cluster started", "addr", c.Addr(), "joined", joined, "insecure", len(cfg.Key) == 0)
	return c, nil
}

// newCluster builds the Cluster of a validated cfg, without memberlist.
func newCluster(cfg Config, meta []byte) *Cluster {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "cluster", "node", cfg.NodeID)
	epoch := cfg.epoch
	if epoch == 0 {
		epoch = uint64(time.Now().UnixNano())
	}
	c := &Cluster{
		cfg:   cfg,
		id:    cfg.NodeID,
		log:   logger,
		meta:  meta,
		nodes: make(map[string]*entry),
		ver:   version{Epoch: epoch},
		lost:  make(map[string]lost),
		peak:  1,

		ctl:     newControlState(cfg.Control),
		kill:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	c.nodes[c.id] = &entry{
		id:    c.id,
		local: true,
		meta: &nodeMeta{ID: c.id, APIAddr: cfg.APIAddr, Version: cfg.Version, Models: slices.Clone(cfg.Models), Zone: cfg.Zone,
			Role: cfg.Role},
		seen: time.Now(),
	}
	c.ring = newRing([]string{c.id})
	c.numLive.Store(1)
	c.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(c.numLive.Load()) },
		RetransmitMult: memberlist.DefaultLANConfig().RetransmitMult,
	}
	return c
}

// ID returns this node's id.
func (c *Cluster) ID() string { return c.id }

// Addr returns the gossip host:port this node advertises (with the port
// memberlist picked when BindAddr had port 0).
func (c *Cluster) Addr() string {
	return c.addr
}

// Run runs this node until ctx ends: it publishes the local state every
// StateInterval (gossiped when it changed, and every 4 intervals as a
// heartbeat) and, unless ReconnectInterval is negative, tries to join
// again the members it lost every ReconnectInterval (see the package doc).
//
// When ctx ends, Run stops both and leaves the cluster gracefully: it
// gossips a final state marked leaving and draining (routers stop picking
// this node at once), waits for it to go out (at most half of
// Config.LeaveTimeout, and only while other members are alive), then leaves
// memberlist, waiting at most the rest of LeaveTimeout for the leave to be
// broadcast. Peers then see the node "left", not failed, and do not try to
// reconnect to it. Last it shuts memberlist down and waits for the
// reconnect dials in flight. A daemon cancels ctx when it starts draining.
//
// Run returns nil after a clean stop, or the error of leaving or of
// shutting memberlist down (the node is shut down either way). When Kill
// is called during Run, or before it (so the result does not depend on
// which goroutine came first), Run returns without leaving: nil, or the
// shutdown's error. A Cluster runs once: Run returns ErrClosed when Run
// was already called.
func (c *Cluster) Run(ctx context.Context) error {
	c.lifeMu.Lock()
	if c.ran {
		c.lifeMu.Unlock()
		return ErrClosed
	}
	c.ran = true
	killed := c.killed
	c.lifeMu.Unlock()
	if killed {
		return c.shutdown()
	}

	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { c.run(loopCtx) })
	if c.cfg.ReconnectInterval > 0 {
		loops.Go(func() { c.reconnectLoop(loopCtx) })
	}
	if c.ctl.store != nil {
		loops.Go(func() { c.controlLoop(loopCtx) })
	}
	joinErr := make(chan error, 1)
	if c.awaitingJoin.Load() {
		loops.Go(func() {
			if err := c.retryJoin(loopCtx); err != nil {
				joinErr <- err
			}
		})
	}
	var runErr error
	select {
	case <-ctx.Done():
	case <-c.kill:
	case runErr = <-joinErr:
	}
	stopLoops()
	loops.Wait()
	if runErr != nil {
		return errors.Join(runErr, c.shutdown())
	}

	var leaveErr error
	select {
	case <-c.kill:
	default:
		leaveErr = c.leave(c.cfg.LeaveTimeout)
	}
	return errors.Join(leaveErr, c.shutdown())
}

// Kill stops this node without leaving, as a crash would: peers see it
// fail (suspect, then dead) and keep trying to reconnect to it. It stops
// Run's loops (Run then returns without leaving; a Run called later
// returns at once), shuts memberlist down, which ends any reconnect dial
// in flight, and waits for all of it. It is for tests that simulate a
// crash and for releasing a Cluster whose Run was never called (an error
// between New and Run); a node that stops normally cancels Run's ctx
// instead, and leaves. Kill after Run has returned does nothing more; Kill
// while Run is leaving waits for the leave (at most LeaveTimeout). Kill is
// idempotent; it returns the error of shutting memberlist down, if any.
func (c *Cluster) Kill() error {
	c.lifeMu.Lock()
	if !c.killed {
		c.killed = true
		close(c.kill)
	}
	ran := c.ran
	c.lifeMu.Unlock()
	if !ran {
		// A Run starting now finds the node killed and starts nothing:
		// the shutdown is Kill's.
		return c.shutdown()
	}
	<-c.stopped
	return c.stopErr
}

// shutdown shuts memberlist down and waits for the reconnect rounds' joins,
// once; every call returns the first one's error after it is done.
func (c *Cluster) shutdown() error {
	c.stopOnce.Do(func() {
		err := c.ml.Shutdown()
		c.joins.Wait()
		if err != nil {
			c.stopErr = fmt.Errorf("cluster: shutdown: %w", err)
		}
		close(c.stopped)
	})
	<-c.stopped
	return c.stopErr
}

// run publishes the local state every StateInterval until ctx ends.
func (c *Cluster) run(ctx context.Context) {
	t := time.NewTicker(c.cfg.StateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.tick(now)
		}
	}
}

// tick samples the local state, gossips it when it changed or is due as a
// heartbeat, and prunes the table.
func (c *Cluster) tick(now time.Time) {
	var st State
	if c.cfg.LocalState != nil {
		st = c.cfg.LocalState()
	}
	c.publish(now, st, false)
	c.prune(now)
}

// publish records st as the local state and queues it for gossip when it
// changed, when leaving, or when the last one is a heartbeat old.
func (c *Cluster) publish(now time.Time, st State, leaving bool) *broadcast {
	c.mu.Lock()
	if leaving {
		c.leaving = true
	}
	if c.leaving {
		st.Draining = true
	}
	e := c.nodes[c.id]
	due := now.Sub(c.lastSent) >= heartbeatIntervals*c.cfg.StateInterval
	if !leaving && !due && c.refuteEpoch <= c.ver.Epoch && c.ver.Seq > 0 && sameState(st, c.last) {
		e.heard = now
		c.mu.Unlock()
		return nil
	}
	if c.refuteEpoch > c.ver.Epoch {
		c.ver = version{Epoch: c.refuteEpoch}
	}
	c.ver.Seq++
	v := c.ver
	c.last = cloneState(st)
	c.lastSent = now
	stRec, sumRec := stateRecords(c.id, v, st, BroadcastPrefixKeys)
	if c.leaving {
		stRec.Flags |= flagLeaving | flagDraining
	}
	e.stateVer, e.sumVer = v, v
	e.flags = stRec.Flags
	e.heard = now
	e.load = make(map[string]ModelLoad, len(stRec.Models))
	e.hot = make(map[string][]uint64, len(stRec.Models))
	e.full = make(map[string][]uint64, len(sumRec.Models))
	e.localHashes = make(map[string][]kvcache.Hash, len(sumRec.Models))
	for i, m := range stRec.Models {
		e.load[m.Name] = m.Load
		e.hot[m.Name] = m.Keys
		keys := sumRec.Models[i].Keys
		e.full[m.Name] = keys
		e.localHashes[m.Name] = slices.Clone(st.Prefixes[m.Name][:len(keys)])
	}
	e.derive()
	// Queued under mu, so a newer version is never queued before an older
	// one (a queued broadcast replaces any other about the same node).
	b := &broadcast{node: c.id, msg: encodeGossip(stRec), notify: make(chan struct{}, 1)}
	c.queue.QueueBroadcast(b)
	c.mu.Unlock()
	return b
}

// prune forgets nodes gone for longer than memberlist gossips about the
// dead, and records of nodes that never joined.
func (c *Cluster) prune(now time.Time) {
	retain := 30 * time.Second
	if c.cfg.Profile == ProfileLocal {
		retain = 2 * time.Second
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	for id, e := range c.nodes {
		switch {
		case e.local:
		case e.meta == nil && now.Sub(e.created) > retain+c.cfg.SuspectAfter:
			delete(c.nodes, id)
		case e.gone && now.Sub(e.goneAt) > retain:
			delete(c.nodes, id)
			changed = true
		}
	}
	if changed {
		c.rebuildRingLocked()
	}
}

func (c *Cluster) rebuildRingLocked() {
	ids := make([]string, 0, len(c.nodes))
	for id, e := range c.nodes {
		if e.meta != nil {
			ids = append(ids, id)
		}
	}
	c.ring = newRing(ids)
}

// derive rebuilds e's key sets and Member prefixes from hot and full.
func (e *entry) derive() {
	e.keys = make(map[string]map[uint64]struct{}, len(e.full)+len(e.hot))
	e.prefixes = make(map[string][]kvcache.Hash, len(e.full)+len(e.hot))
	add := func(model string, ks []uint64) {
		set := e.keys[model]
		if set == nil {
			set = make(map[uint64]struct{}, len(ks))
			e.keys[model] = set
		}
		for _, k := range ks {
			if _, ok := set[k]; !ok {
				set[k] = struct{}{}
				if !e.local {
					e.prefixes[model] = append(e.prefixes[model], kvcache.Hash{Hi: k})
				}
			}
		}
	}
	for m, ks := range e.hot {
		add(m, ks)
	}
	for m, ks := range e.full {
		add(m, ks)
	}
	if e.local {
		e.prefixes = e.localHashes
	}
}

// statusLocked derives e's status at now.
func (c *Cluster) statusLocked(e *entry, now time.Time) Status {
	switch {
	case e.local && c.left:
		return StatusLeft
	case e.local:
		return StatusAlive
	case e.gone && e.flags&flagLeaving != 0:
		return StatusLeft
	case e.gone:
		return StatusDead
	case now.Before(e.evictedUntil):
		return StatusSuspect
	}
	last := e.seen
	if e.heard.After(last) {
		last = e.heard
	}
	if now.Sub(last) > c.cfg.SuspectAfter {
		return StatusSuspect
	}
	return StatusAlive
}

// memberLocked returns e as a Member at now. The maps are shared.
func (c *Cluster) memberLocked(e *entry, now time.Time) Member {
	m := Member{
		ID:      e.id,
		APIAddr: e.meta.APIAddr,
		Version: e.meta.Version,
		Models:  e.meta.Models,
		Zone:    e.meta.Zone,
		Role:    e.meta.Role,
		Status:  c.statusLocked(e, now),
		Local:   e.local,
	}
	if !e.stateVer.IsZero() || len(e.prefixes) > 0 {
		m.State = State{Load: e.load, Prefixes: e.prefixes, Draining: e.flags&flagDraining != 0}
		m.Updated = e.heard
	}
	return m
}

// Members returns every node memberlist has reported (including this one
// and those dead or left in the last while), sorted by ID. The returned
// Members are copies, but their State maps and slices are shared and must
// not be modified.
func (c *Cluster) Members() []Member {
	now := time.Now()
	c.mu.RLock()
	out := make([]Member, 0, len(c.nodes))
	for _, e := range c.nodes {
		if e.meta != nil {
			out = append(out, c.memberLocked(e, now))
		}
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// NumAlive returns how many nodes, this one included, memberlist has not
// declared dead or left (so suspect ones count): the live_nodes of the
// quota fallback's limit/live_nodes.
func (c *Cluster) NumAlive() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, e := range c.nodes {
		if e.meta != nil && !e.gone && !(e.local && c.left) {
			n++
		}
	}
	return n
}

// MarkFailed marks member id suspect on this node for SuspectAfter, so
// Route skips it at once after a failed forward (local eviction) while
// gossip confirms or refutes. Unknown ids and the local node are ignored.
func (c *Cluster) MarkFailed(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.nodes[id]; e != nil && !e.local {
		e.evictedUntil = time.Now().Add(c.cfg.SuspectAfter)
	}
}

// BadMessages returns how many undecodable messages and metadata this node
// has received and ignored.
func (c *Cluster) BadMessages() uint64 { return c.badMsgs.Load() }

// Route orders the candidates for one request. The pool is the members
// that are alive (not suspect, not draining, not gone) and serve
// req.Model. First comes the member holding the longest prefix of
// req.Prefix (exact for the local node through localPrefix, which returns
// how many leading blocks of the prefix the local cache holds; nil uses the
// local summary; it is called without locks held), ties going to the ring
// order; then the owner on the consistent-hash ring of req.AffinityKey (or,
// with no key, of the first block hash); both skip a member whose load
// (running+waiting of the model) reaches ceil(LoadBound x mean) with the
// mean counting this request. Then every other member, least loaded first
// (KV usage, then ID, breaking ties), the overloaded ones last: the list is
// for retries. An empty pool returns nil. The order is deterministic for a
// given table.
func (c *Cluster) Route(req RouteRequest, localPrefix func([]kvcache.Hash) int) []Candidate {
	now := time.Now()
	c.mu.RLock()
	pool := make([]routeMember, 0, len(c.nodes))
	for _, e := range c.nodes {
		if e.meta == nil || !slices.Contains(e.meta.Models, req.Model) || e.flags&flagDraining != 0 {
			continue
		}
		if c.statusLocked(e, now) != StatusAlive {
			continue
		}
		pool = append(pool, routeMember{Member: c.memberLocked(e, now), keys: e.keys[req.Model]})
	}
	r := c.ring
	c.mu.RUnlock()
	sort.Slice(pool, func(i, j int) bool { return pool[i].Member.ID < pool[j].Member.ID })
	out := route(withoutPrefillNodes(pool), r, req, localPrefix)
	if req.Policy == PolicyRoundRobin {
		out = rotate(out, c.turn.Add(1))
	}
	return out
}

// leave announces that this node is leaving, once: it gossips a final
// state marked leaving and draining, waits for it to go out (at most half
// of timeout), then leaves memberlist, waiting at most the rest of timeout
// for the leave to be broadcast. Afterwards the node is "left" everywhere,
// gets no requests, and reconnects to nobody (reconnectTargets). Later
// calls return the first one's error. Run calls it when its ctx ends,
// after stopping its loops; tests call it while Run runs to leave without
// shutting memberlist down.
func (c *Cluster) leave(timeout time.Duration) error {
	c.leaveOnce.Do(func() { c.leaveErr = c.doLeave(timeout) })
	return c.leaveErr
}

func (c *Cluster) doLeave(timeout time.Duration) error {
	start := time.Now()
	c.mu.RLock()
	last := c.last
	c.mu.RUnlock()
	last.Draining = true
	b := c.publish(start, last, true)
	if c.NumAlive() > 1 {
		t := time.NewTimer(timeout / 2)
		select {
		case <-b.notify:
		case <-t.C:
		}
		t.Stop()
	}
	err := c.ml.Leave(max(timeout-time.Since(start), time.Millisecond))
	c.mu.Lock()
	c.left = true
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	c.log.Info("left the cluster")
	return nil
}

// handleJoin records a node memberlist reports alive (joined or updated).
func (c *Cluster) handleJoin(n *memberlist.Node) {
	if n.Name == c.id {
		return
	}
	meta, err := decodeMeta(n.Name, n.Meta)
	if err != nil {
		c.badMsgs.Add(1)
		c.log.Warn("ignoring node with malformed metadata", "peer", n.Name, "addr", n.Address())
		c.forget(n.Name)
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.nodes[n.Name]
	if e == nil {
		if len(c.nodes) >= maxNodes {
			return
		}
		e = &entry{id: n.Name, created: now}
		c.nodes[n.Name] = e
	}
	if e.gone {
		// Back from dead or left: it may have restarted with any version.
		e.stateVer, e.sumVer = version{}, version{}
		e.flags &^= flagLeaving
	}
	newMember := e.meta == nil
	e.meta = meta
	e.addr = n.Address()
	e.gone = false
	e.seen = now
	delete(c.lost, n.Name)
	if newMember {
		c.rebuildRingLocked()
	}
	c.countLiveLocked()
}

// handleLeave records a node memberlist reports dead or left: one whose
// last state said it was leaving lowers the peak, any other is lost, for
// the reconnect loop.
func (c *Cluster) handleLeave(n *memberlist.Node) {
	if n.Name == c.id {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.nodes[n.Name]
	if e == nil || e.meta == nil || e.gone {
		return
	}
	now := time.Now()
	e.gone = true
	e.goneAt = now
	c.countLiveLocked()
	if e.flags&flagLeaving != 0 {
		c.lowerPeakLocked()
	} else if len(c.lost) < maxNodes {
		c.lost[n.Name] = lost{addr: n.Address(), at: now}
	}
}

// forget removes a node (one with malformed metadata) from the table.
func (c *Cluster) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.nodes[id]; e != nil && !e.local {
		delete(c.nodes, id)
		c.rebuildRingLocked()
		c.countLiveLocked()
	}
}

func (c *Cluster) countLiveLocked() {
	n := 0
	for _, e := range c.nodes {
		if e.meta != nil && !e.gone {
			n++
		}
	}
	c.numLive.Store(int64(n))
	c.peak = max(c.peak, n)
}
