package fleet

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/hashmix"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/workload"
	"github.com/llmd/llmd/quota"
)

// Run simulates cfg's fleet under cfg's workload and returns what it
// measured. It returns ctx's error if ctx ends first.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	items, err := workload.Generate(cfg.Workload)
	if err != nil {
		return nil, fmt.Errorf("fleet: workload: %w", err)
	}
	wall := time.Now()
	d, err := newDriver(cfg, items)
	if err != nil {
		return nil, err
	}
	if err := d.run(ctx); err != nil {
		return nil, err
	}
	r := d.report()
	r.Wall = time.Since(wall)
	return r, nil
}

// epoch is where virtual time starts: a fixed instant, so runs are
// reproducible, at a UTC midnight so a quota's day starts with the run.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// never is later than any event.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// driver is one run's discrete-event loop (see the package doc).
//
// Locking: the loop's goroutine owns the driver. Between two arrivals the
// nodes are stepped, possibly by several workers at once; a node's step
// touches only the node and the driver's immutable fields (cfg, warm,
// horizon, interval, noWait), and leaves what concerns others (finished
// requests) in the node's outbox, which the loop takes in afterwards.
type driver struct {
	cfg      Config
	warm     time.Time // measurements start
	horizon  time.Time // the end, zero for "until everything finished"
	interval time.Duration
	noWait   context.Context // already cancelled: reads a stream without waiting

	now     time.Time // the loop's now: the last arrival handled
	model   string
	nodes   []*node
	pool    *cluster.RoutePool
	prompts *prompts
	limiter *quota.Memory
	quotaAt time.Time // the limiter's clock
	tenants []string

	items      []workload.Item
	next       int       // the next item to arrive
	deferred   turnQueue // later turns waiting for their time
	convs      map[int]*conversation
	reconciles finishQueue // quota reservations to settle, by finish time
	seq        int         // request ids
	rr         int         // round-robin position
	pushes     uint64      // order of equal-time queue entries

	arrived int
	offered int64
	refused map[string]int
	routed  map[string]int
	// crossZone counts requests routed out of their zone, in the window.
	crossZone int

	workers []chan time.Time // to workers 1.. (worker 0 is the loop)
	done    chan error
}

// node is one simulated llmd.
type node struct {
	// zone is the node's zone ("" with one).
	zone  string
	index int
	id    string
	eng   *engine.Engine
	clock *nodeClock
	// minStep is the shortest step the node can take (the weights read
	// once, plus the fixed overhead): how far its next finish is at least
	// beyond the end of the step in flight.
	minStep time.Duration
	// busy is set while a step runs, until end.
	busy bool
	end  time.Time
	// view is the node as the router sees it: its stats as of the end of
	// its last finished step, plus sinceView requests (of sinceTokens
	// prompt tokens) routed to it since. inStep and inStepTokens count
	// those routed since the current step started.
	view                      engine.Stats
	sinceView, inStep         int
	sinceTokens, inStepTokens int
	// after is the node's stats after the step in flight.
	after engine.Stats
	// summary is the prefix summary taken at summaryAt; fresh until the
	// router has it.
	summary   []kvcache.Hash
	summaryAt time.Time
	fresh     bool
	// The requests sent to the node and not yet seen finished: started
	// holds those whose first token was read, queued the others in order
	// of arrival (the engine admits them roughly in that order), urgent
	// those to read after every step (to be cancelled at their first
	// token). watched counts the requests whose conversation's next turn
	// waits for them.
	started, queued, urgent []*flight
	watched                 int
	// finishedRead counts the finished requests read, to compare with the
	// engine's Completed; sinceFull counts the steps since every stream
	// was read.
	finishedRead uint64
	sinceFull    int
	// outbox holds the requests seen finished since the loop last looked.
	outbox []finish
	err    error

	// Measurements.
	warmed    bool
	preempt0  uint64
	steps0    uint64
	kvAt      time.Time
	kvUsage   float64
	kvSeconds float64 // usage x seconds over the window
	kvMax     float64
	ttft, itl hist
	requests  int
	completed int
	input     int64
	cached    int64
	output    int64
}

// nodeClock is a node's clock: the loop sets it, the executor's Sleep
// moves it forward by the step's time.
type nodeClock struct{ now time.Time }

func (c *nodeClock) Now() time.Time { return c.now }

func (c *nodeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return nil
}

// flight is one request sent to a node.
type flight struct {
	id      string
	tenant  string
	item    workload.Item
	node    *node
	stream  *engine.Stream
	arrival time.Time
	last    time.Time // the latest token
	tokens  int
	done    bool
	// urgent: its stream is read after every step (it is to be cancelled
	// at its first token). watched: its conversation's next turn waits for
	// it.
	urgent, watched bool
	// prompt and out are kept for a conversation with a later turn: they
	// become its history.
	prompt []int32
	out    []int32
	keep   bool
	// crossZone: served by a node out of the request's zone.
	crossZone bool
}

// finish is a request seen finished at a time.
type finish struct {
	at     time.Time
	f      *flight
	tokens int // input plus output, for the quota
}

// conversation is a multi-turn conversation's state between turns.
type conversation struct {
	history []int32
	// busy is set while a turn is in flight (flight) or due; doneAt is
	// when the last turn finished (steps run ahead of now, so it may be
	// later than now).
	busy    bool
	flight  *flight
	doneAt  time.Time
	pending []workload.Item // turns that arrived while busy
}

// zoneName is the zone of node (or conversation) i among zones zones; ""
// for one zone.
func zoneName(i, zones int) string {
	if zones <= 1 {
		return ""
	}
	return "zone-" + strconv.Itoa(i%zones+1)
}

// originZone is the zone conversation c comes from: spread evenly by a
// hash of its number (not in turn, which would follow round robin's
// order).
func originZone(c, zones int) string {
	if zones <= 1 {
		return ""
	}
	return zoneName(int(hashmix.Mix64(uint64(c))%uint64(zones)), zones)
}

func newDriver(cfg Config, items []workload.Item) (*driver, error) {
	d := &driver{
		cfg:      cfg,
		now:      epoch,
		warm:     epoch.Add(cfg.Warmup),
		interval: cfg.SummaryInterval,
		model:    cfg.Sim.Model.ID,
		prompts:  newPrompts(cfg.Workload, cfg.Sim.Model.VocabSize),
		items:    items,
		convs:    make(map[int]*conversation),
		refused:  make(map[string]int),
		routed:   make(map[string]int),
		quotaAt:  epoch,
	}
	if cfg.Workload.Duration > 0 {
		d.horizon = epoch.Add(cfg.Workload.Duration)
	}
	if d.interval == 0 {
		d.interval = cluster.DefaultStateInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.noWait = ctx
	d.tenants = cfg.Workload.Tenants
	if len(d.tenants) == 0 {
		d.tenants = []string{"tenant"}
	}
	if cfg.Quota != nil {
		d.limiter = quota.NewMemory(quota.MemoryConfig{Now: func() time.Time { return d.quotaAt }})
	}
	members := make([]cluster.Member, cfg.Nodes)
	for i := range cfg.Nodes {
		clock := &nodeClock{now: epoch}
		exec, err := sim.New(cfg.Sim, clock)
		if err != nil {
			return nil, err
		}
		eng, err := engine.New(exec, clock, cfg.Engine, nil)
		if err != nil {
			return nil, err
		}
		one := engine.Batch{Seqs: []engine.SeqInput{{Tokens: []int32{1}, Context: 1}}}
		n := &node{index: i, id: "node-" + strconv.Itoa(i+1), eng: eng, clock: clock, kvAt: epoch,
			minStep: exec.StepTime(&one)}
		n.view = eng.Stats()
		d.nodes = append(d.nodes, n)
		n.zone = zoneName(i, cfg.Zones)
		members[i] = cluster.Member{ID: n.id, Models: []string{d.model}, Status: cluster.StatusAlive, Zone: n.zone}
	}
	d.pool = cluster.NewRoutePool(members)
	return d, nil
}

// run is the loop: step the nodes up to the next arrival, take in what
// they finished, handle the arrival; until the horizon, or until nothing
// is left to do.
func (d *driver) run(ctx context.Context) error {
	d.startWorkers()
	defer d.stopWorkers()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next, kind := d.nextArrival()
		// Step the nodes up to the arrival, but not past the earliest time
		// a turn that a later turn waits for could finish: that finish is
		// an arrival too.
		until := next
		busy := false
		for _, n := range d.nodes {
			busy = busy || n.busy
			if n.busy && n.watched > 0 {
				until = minTime(until, n.end.Add(n.minStep))
			}
		}
		if kind == evNone && !busy {
			break
		}
		if !d.horizon.IsZero() {
			until = minTime(until, d.horizon)
		}
		if err := d.stepNodes(ctx, until); err != nil {
			return err
		}
		d.takeFinishes()
		if kind == evNone || next.After(until) {
			if !d.horizon.IsZero() && !until.Before(d.horizon) {
				break
			}
			continue
		}
		d.now = next
		d.settle(next)
		var err error
		switch kind {
		case evTurn:
			t := heap.Pop(&d.deferred).(queued[workload.Item])
			err = d.issue(ctx, t.v)
		case evItem:
			it := d.items[d.next]
			d.next++
			err = d.arrive(ctx, it)
		}
		if err != nil {
			return err
		}
		d.takeFinishes()
	}
	if d.horizon.IsZero() {
		d.horizon = d.now
		for _, n := range d.nodes {
			d.horizon = maxTime(d.horizon, n.kvAt)
		}
	}
	// Take in the events no step has read yet: the tokens up to the end.
	for _, n := range d.nodes {
		d.collect(n, n.eng.Stats().Completed, true)
	}
	d.takeFinishes()
	d.settle(d.horizon)
	return nil
}

// Arrival kinds, in the order ties are taken (after step ends).
const (
	evNone = iota
	evTurn
	evItem
)

// nextArrival returns the next arrival: a deferred turn, else a workload
// item; never and evNone when none is left.
func (d *driver) nextArrival() (time.Time, int) {
	at, kind := never, evNone
	if len(d.deferred) > 0 {
		at, kind = d.deferred[0].at, evTurn
	}
	if d.next < len(d.items) {
		if t := epoch.Add(d.items[d.next].At); t.Before(at) {
			at, kind = t, evItem
		}
	}
	return at, kind
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stepNodes runs every node's steps that end by until (a step then starts
// right away and runs ahead), on the workers when several nodes have work.
func (d *driver) stepNodes(ctx context.Context, until time.Time) error {
	due := 0
	for _, n := range d.nodes {
		if n.busy && !n.end.After(until) {
			due++
		}
	}
	if due == 0 {
		return nil
	}
	if due == 1 || len(d.workers) == 0 {
		for _, n := range d.nodes {
			d.stepNode(ctx, n, until)
		}
	} else {
		for _, w := range d.workers {
			w <- until
		}
		d.stepShare(ctx, 0, until)
		for range d.workers {
			<-d.done
		}
	}
	for _, n := range d.nodes {
		if n.err != nil {
			return n.err
		}
	}
	return nil
}

// stepShare steps worker w's share of the nodes: every len(workers)+1-th.
func (d *driver) stepShare(ctx context.Context, w int, until time.Time) {
	for i := w; i < len(d.nodes); i += len(d.workers) + 1 {
		d.stepNode(ctx, d.nodes[i], until)
	}
}

func (d *driver) startWorkers() {
	w := min(max(d.cfg.Workers, 1), len(d.nodes))
	d.done = make(chan error, w)
	for i := 1; i < w; i++ {
		ch := make(chan time.Time)
		d.workers = append(d.workers, ch)
		go func() {
			// Each worker has its own context view; the loop checks ctx
			// between windows.
			for until := range ch {
				d.stepShare(context.Background(), i, until)
				d.done <- nil
			}
		}()
	}
}

func (d *driver) stopWorkers() {
	for _, ch := range d.workers {
		close(ch)
	}
	d.workers = nil
}

// stepNode handles n's step ends up to until.
func (d *driver) stepNode(ctx context.Context, n *node, until time.Time) {
	for n.err == nil && n.busy && !n.end.After(until) {
		t := n.end
		n.busy = false
		n.view, n.sinceView, n.sinceTokens = n.after, n.inStep, n.inStepTokens
		if t.Sub(n.summaryAt) >= d.interval {
			n.takeSummary(t)
		}
		d.startStep(ctx, n, t)
	}
}

// takeSummary takes n's prefix summary at t, as a node's gossip does
// every state interval.
func (n *node) takeSummary(t time.Time) {
	n.summary = n.eng.RecentPrefixes(cluster.MaxPrefixKeys)
	n.summaryAt, n.fresh = t, true
}

// startStep runs n's next step at t, if it has one, and takes in its
// events.
func (d *driver) startStep(ctx context.Context, n *node, t time.Time) {
	if !n.warmed && !t.Before(d.warm) {
		n.warmed = true
		st := n.eng.Stats()
		n.preempt0, n.steps0 = st.Preemptions, st.Steps
	}
	n.clock.now = t
	n.inStep, n.inStepTokens = 0, 0
	ran, err := n.eng.Step(ctx)
	if err != nil {
		n.err = err
		return
	}
	st := n.eng.Stats()
	if ran {
		n.busy, n.end, n.after = true, n.clock.now, st
	} else {
		n.view, n.sinceView, n.sinceTokens = st, 0, 0
	}
	d.collect(n, st.Completed, false)
	d.noteKV(n, n.clock.now, usage(st))
}

// fullCollect is how many steps a node may run before its streams are all
// read.
const fullCollect = 64

// noteKV records that n's KV usage became u at t.
func (d *driver) noteKV(n *node, t time.Time, u float64) {
	lo, hi := n.kvAt, t
	if lo.Before(d.warm) {
		lo = d.warm
	}
	if !d.horizon.IsZero() && hi.After(d.horizon) {
		hi = d.horizon
	}
	if hi.After(lo) {
		n.kvSeconds += n.kvUsage * hi.Sub(lo).Seconds()
	}
	n.kvAt, n.kvUsage = t, u
	if d.inWindow(t) {
		n.kvMax = max(n.kvMax, u)
	}
}

// inWindow reports whether t is in the measured window.
func (d *driver) inWindow(t time.Time) bool {
	return !t.Before(d.warm) && (d.horizon.IsZero() || !t.After(d.horizon))
}

// collect takes in the events n's requests have received since the last
// step, as far as they matter now; completed is the engine's count of
// finished requests. A finish matters at once (it may move a conversation
// on or settle a quota), and so does the first token of a request to
// cancel; tokens otherwise can wait, since events carry their times:
// reading late changes no measurement. So after a step collect reads the
// urgent requests, and, while the engine has finished more requests than
// were read, the started ones and then the queued ones in order of arrival
// until every finish is found; every fullCollect steps (or with all set)
// it reads everything, which bounds the events waiting in streams.
func (d *driver) collect(n *node, completed uint64, all bool) {
	urgent := n.urgent[:0]
	for _, f := range n.urgent {
		d.read(f)
		if f.urgent {
			urgent = append(urgent, f)
		}
	}
	clear(n.urgent[len(urgent):])
	n.urgent = urgent

	n.sinceFull++
	if n.sinceFull >= fullCollect {
		all = true
	}
	if all {
		n.sinceFull = 0
	}
	if all || n.finishedRead < completed {
		started := n.started[:0]
		for _, f := range n.started {
			d.read(f)
			if !f.done {
				started = append(started, f)
			}
		}
		clear(n.started[len(started):])
		n.started = started
	}
	if all || n.finishedRead < completed {
		queued := n.queued[:0]
		for _, f := range n.queued {
			if all || n.finishedRead < completed {
				d.read(f)
			}
			switch {
			case f.done:
			case f.tokens > 0:
				n.started = append(n.started, f)
			default:
				queued = append(queued, f)
			}
		}
		clear(n.queued[len(queued):])
		n.queued = queued
	}
}

// read takes in the events f has received.
func (d *driver) read(f *flight) {
	for !f.done {
		ev, err := f.stream.Next(d.noWait)
		if err != nil {
			return
		}
		switch {
		case ev.Kind == engine.EventToken:
			d.token(f, ev)
		case ev.Last():
			d.finished(f, ev)
		}
	}
}

func (d *driver) token(f *flight, ev engine.Event) {
	n := f.node
	in := d.inWindow(ev.Time)
	measured := in && !f.arrival.Before(d.warm)
	if f.tokens == 0 {
		if measured {
			ttft := ev.Time.Sub(f.arrival)
			if f.crossZone {
				ttft += d.cfg.InterZoneLatency
			}
			n.ttft.add(ttft)
		}
		if f.item.Cancel {
			n.eng.Cancel(f.id)
		}
		f.urgent = false
	} else if measured {
		n.itl.add(ev.Time.Sub(f.last))
	}
	f.last = ev.Time
	f.tokens++
	if in {
		n.output++
	}
	if f.keep {
		f.out = append(f.out, ev.Token)
	}
}

func (d *driver) finished(f *flight, ev engine.Event) {
	f.done = true
	n := f.node
	if d.inWindow(ev.Time) {
		n.completed++
		n.input += int64(ev.Usage.InputTokens)
		n.cached += int64(ev.Usage.CachedTokens)
	}
	f.urgent = false
	n.finishedRead++
	n.outbox = append(n.outbox, finish{at: ev.Time, f: f, tokens: ev.Usage.InputTokens + ev.Usage.OutputTokens})
}

// takeFinishes takes in the nodes' outboxes, in order of time (then of
// node): conversations move on, quota reservations wait to be settled at
// their finish times.
func (d *driver) takeFinishes() {
	var all []finish
	for _, n := range d.nodes {
		all = append(all, n.outbox...)
		clear(n.outbox)
		n.outbox = n.outbox[:0]
	}
	if len(all) == 0 {
		return
	}
	slices.SortStableFunc(all, func(a, b finish) int { return a.at.Compare(b.at) })
	for _, fin := range all {
		f := fin.f
		if f.watched {
			f.watched = false
			f.node.watched--
		}
		if d.limiter != nil {
			d.pushes++
			heap.Push(&d.reconciles, queued[finish]{at: fin.at, seq: d.pushes, v: fin})
		}
		d.turnDone(f, fin.at)
	}
}

// settle settles the quota reservations of the requests that finished by
// t.
func (d *driver) settle(t time.Time) {
	for len(d.reconciles) > 0 && !d.reconciles[0].at.After(t) {
		fin := heap.Pop(&d.reconciles).(queued[finish]).v
		d.quotaAt = maxTime(d.quotaAt, fin.at)
		d.reconcile(fin.f, fin.tokens)
	}
	d.quotaAt = maxTime(d.quotaAt, t)
}

func (d *driver) reconcile(f *flight, actual int) {
	if d.limiter != nil {
		// Reconcile fails only on invalid arguments, which Reserve
		// accepted.
		_ = d.limiter.Reconcile(context.Background(), f.tenant, f.id, int64(actual))
	}
}
