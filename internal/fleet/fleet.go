package fleet

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/daemon/quota"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/workload"
)

// Routing policies (Config.Route): those of llmd's --route-policy, plus
// least_loaded.
const (
	// RoutePrefix: the longest cached prefix, then the conversation's (or
	// the first block's) owner on the ring, within the load bound, else
	// the least loaded. llmd's default.
	RoutePrefix = "prefix"
	// RouteAffinity: the owner of the conversation (or the prompt's first
	// block) on the ring, whatever the load.
	RouteAffinity = "affinity"
	// RouteRoundRobin: each node in turn.
	RouteRoundRobin = "round_robin"
	// RouteLeastLoaded: the node with the fewest running and waiting
	// sequences.
	RouteLeastLoaded = "least_loaded"
)

// RoutePolicies lists the routing policies.
var RoutePolicies = []string{RoutePrefix, RouteAffinity, RouteRoundRobin, RouteLeastLoaded}

// Config describes a simulated fleet and its traffic. Start from
// DefaultConfig.
type Config struct {
	// Nodes is the number of llmd nodes; each runs one engine on TP GPUs.
	Nodes int
	// Sim configures every node's simulated executor: the GPU and model
	// profiles, the tensor-parallel degree and the cost model's knobs.
	// Its MeanOutputTokens should be 0 so that each answer is as long as
	// the workload says (as benchmarks run with ignore_eos); TimeScale
	// must be 1.
	Sim sim.Config
	// Engine configures every node's engine.
	Engine engine.Config
	// Route is the routing policy: RoutePrefix, RouteAffinity,
	// RouteRoundRobin or RouteLeastLoaded.
	Route string
	// LoadBound and LoadSlack are the router's (cluster.RouteRequest); 0
	// means the cluster's defaults.
	LoadBound float64
	LoadSlack int
	// SummaryInterval is how often each node's prefix summary, as the
	// router sees it, is refreshed (the gossip state interval). 0 means
	// cluster.DefaultStateInterval.
	SummaryInterval time.Duration
	// Quota, when not nil, limits every tenant with one fleet-wide
	// in-memory limiter on the virtual clock (what the Redis backend gives
	// a real cluster). A refused request is counted and not sent.
	Quota *quota.Limits
	// Workload is the traffic; it must be open loop (a Rate). The run
	// lasts Workload.Duration of virtual time, or, without one, until
	// every request has finished.
	Workload workload.Spec
	// Warmup is left out of every measurement: the fleet starts empty and
	// cold. 0 measures from the start.
	Warmup time.Duration
	// Workers is how many goroutines step the nodes between two arrivals;
	// 0 means 1. More help only with idle cores to spare: a window
	// between arrivals holds tens of microseconds of work per node, so
	// waking a worker costs about what it saves on a busy machine. The
	// Report does not depend on it.
	Workers int
}

// DefaultConfig returns four nodes of sim/small on one H100 each, with the
// calibrated cost model (sim.CalibratedConfig), routed by prefix, with
// answers exactly as long as the workload asks; the caller sets the
// Workload.
func DefaultConfig() Config {
	sc := sim.CalibratedConfig()
	sc.MeanOutputTokens = 0
	return Config{Nodes: 4, Sim: sc, Engine: engine.DefaultConfig(), Route: RoutePrefix}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 1024:
		return fmt.Errorf("fleet: nodes must be from 1 to 1024, got %d", c.Nodes)
	case !validRoute(c.Route):
		return fmt.Errorf("fleet: unknown routing policy %q (known: %s)", c.Route, strings.Join(RoutePolicies, ", "))
	case c.Sim.TimeScale != 1:
		return fmt.Errorf("fleet: the sim's time scale must be 1, got %v", c.Sim.TimeScale)
	case c.SummaryInterval < 0:
		return fmt.Errorf("fleet: summary interval must not be negative, got %s", c.SummaryInterval)
	case c.Workers < 0:
		return fmt.Errorf("fleet: workers must not be negative, got %d", c.Workers)
	case c.Warmup < 0:
		return fmt.Errorf("fleet: warm-up must not be negative, got %s", c.Warmup)
	case c.Workload.Rate <= 0:
		return errors.New("fleet: the workload needs a rate (the simulation is open loop)")
	case c.Workload.Duration > 0 && c.Warmup >= c.Workload.Duration:
		return fmt.Errorf("fleet: warm-up %s must be shorter than the duration %s", c.Warmup, c.Workload.Duration)
	}
	if err := c.Sim.Validate(); err != nil {
		return err
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if err := c.Workload.Validate(); err != nil {
		return fmt.Errorf("fleet: workload: %w", err)
	}
	return nil
}

func validRoute(r string) bool {
	for _, p := range RoutePolicies {
		if r == p {
			return true
		}
	}
	return false
}

// Report is what a run measured, over the window from Config.Warmup to
// the end. Token and request counts are of that window; latencies are of
// the requests that arrived in it.
type Report struct {
	// Nodes has one entry per node, in order; Fleet sums them (its
	// percentiles are over every node's samples).
	Nodes []NodeReport `json:"nodes"`
	Fleet NodeReport   `json:"fleet"`
	// Simulated is the virtual time simulated; Window the part measured
	// (Simulated less the warm-up).
	Simulated time.Duration `json:"-"`
	Window    time.Duration `json:"-"`
	// Wall is the real time the run took.
	Wall time.Duration `json:"-"`
	// Arrived counts the requests that arrived in the window (every turn
	// of a conversation counts); OfferedOutputTokens is the sum of their
	// output lengths.
	Arrived             int   `json:"arrived"`
	OfferedOutputTokens int64 `json:"offered_output_tokens"`
	// Refused counts requests never sent, by reason: "quota" (the
	// limiter said no), "queue_full" (the node's queue was full) and
	// "context_length" (prompt and output exceed what one sequence can
	// hold: a conversation outgrew the context).
	Refused map[string]int `json:"refused"`
	// Unfinished counts requests still queued or running at the end.
	Unfinished int `json:"unfinished"`
	// Routed counts routing decisions by rule ("prefix", "affinity",
	// "least_loaded", "overloaded_skipped" or "round_robin"); PrefixRouted
	// is the share placed for a cached prefix.
	Routed       map[string]int `json:"routed"`
	PrefixRouted float64        `json:"prefix_routed"`
	// Steps is the number of engine steps run on all nodes.
	Steps uint64 `json:"steps"`
}

// NodeReport is one node's share of a run (or the fleet's sum).
type NodeReport struct {
	ID string `json:"id"`
	// Requests counts the requests routed to the node; Completed those
	// that finished (for any reason).
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	// InputTokens and CachedTokens are the prompt tokens of the completed
	// requests and how many of them the prefix cache served; CacheHit is
	// their ratio.
	InputTokens  int64   `json:"input_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	CacheHit     float64 `json:"cache_hit"`
	// OutputTokens is the tokens generated; Throughput the same per second
	// of the window.
	OutputTokens int64   `json:"output_tokens"`
	Throughput   float64 `json:"output_tokens_per_s"`
	// KVMean and KVMax are the time-weighted mean and the largest share of
	// KV blocks in use, 0..1 (for the fleet: the mean and the max over the
	// nodes).
	KVMean float64 `json:"kv_mean"`
	KVMax  float64 `json:"kv_max"`
	// Preemptions counts preemptions (swap or recompute).
	Preemptions uint64 `json:"preemptions"`
	// TTFT is the time from a request's arrival to its first token; ITL
	// the time between two tokens of one answer.
	TTFT Percentiles `json:"ttft"`
	ITL  Percentiles `json:"itl"`
	// Steps is the number of engine steps.
	Steps uint64 `json:"steps"`
}

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

	workers []chan time.Time // to workers 1.. (worker 0 is the loop)
	done    chan error
}

// node is one simulated llmd.
type node struct {
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
	// its last finished step, plus sinceView requests routed to it since.
	// inStep counts those routed since the current step started.
	view              engine.Stats
	sinceView, inStep int
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
		members[i] = cluster.Member{ID: n.id, Models: []string{d.model}, Status: cluster.StatusAlive}
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
		n.view, n.sinceView = n.after, n.inStep
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
	n.inStep = 0
	ran, err := n.eng.Step(ctx)
	if err != nil {
		n.err = err
		return
	}
	st := n.eng.Stats()
	if ran {
		n.busy, n.end, n.after = true, n.clock.now, st
	} else {
		n.view, n.sinceView = st, 0
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
			n.ttft.add(ev.Time.Sub(f.arrival))
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

// arrive handles a workload item's arrival: a later turn waits for the
// previous one to finish.
func (d *driver) arrive(ctx context.Context, it workload.Item) error {
	if it.Turn > 0 {
		if c := d.convs[it.Conversation]; c != nil {
			switch {
			case c.busy:
				c.pending = append(c.pending, it)
				if f := c.flight; f != nil && !f.done && !f.watched {
					f.watched = true
					f.node.watched++
				}
				return nil
			case c.doneAt.After(d.now):
				// The previous turn ends in a step already run.
				d.deferTurn(c, c.doneAt, it)
				return nil
			}
		}
	}
	return d.issue(ctx, it)
}

// issue sends one turn now: quota, routing, submission.
func (d *driver) issue(ctx context.Context, it workload.Item) error {
	var conv *conversation
	if it.Turns > 1 {
		conv = d.convs[it.Conversation]
		if conv == nil {
			conv = &conversation{}
			d.convs[it.Conversation] = conv
		}
		conv.busy, conv.flight = true, nil
	}
	var prompt []int32
	if conv != nil && it.Turn > 0 && len(conv.history) > 0 {
		prompt = make([]int32, 0, len(conv.history)+it.InputTokens)
		prompt = d.prompts.user(append(prompt, conv.history...), it)
	} else {
		prompt = d.prompts.first(it)
	}
	inWindow := d.inWindow(d.now)
	if inWindow {
		d.arrived++
		d.offered += int64(it.OutputTokens)
	}
	d.seq++
	f := &flight{id: "r" + strconv.Itoa(d.seq), tenant: d.tenants[it.Tenant%len(d.tenants)], item: it,
		arrival: d.now, keep: conv != nil && it.Turn < it.Turns-1}
	if f.keep {
		f.prompt = prompt
	}
	if d.limiter != nil {
		dec, err := d.limiter.Reserve(ctx, quota.Request{ID: f.id, Tenant: f.tenant, Limits: *d.cfg.Quota,
			Tokens: int64(len(prompt) + it.OutputTokens)})
		if err != nil {
			return fmt.Errorf("fleet: quota: %w", err)
		}
		if !dec.Allowed {
			d.refuse("quota", inWindow)
			d.turnDone(f, d.now)
			return nil
		}
	}
	n, err := d.route(prompt, it)
	if err != nil {
		return err
	}
	// Submit stamps the request with its node's clock: now, even if the
	// node's clock has run ahead to the end of the step in flight.
	ahead := n.clock.now
	n.clock.now = d.now
	st, err := n.eng.Submit(context.Background(), engine.Request{ID: f.id, Tenant: f.tenant, Prompt: prompt,
		MaxTokens: it.OutputTokens, N: 1, Priority: engine.PriorityPaid, Seed: it.Seed})
	n.clock.now = ahead
	var cle *engine.ContextLengthError
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		d.refuse("queue_full", inWindow)
	case errors.As(err, &cle):
		d.refuse("context_length", inWindow)
	case err != nil:
		return fmt.Errorf("fleet: %s: %w", n.id, err)
	}
	if err != nil {
		d.reconcile(f, 0)
		d.turnDone(f, d.now)
		return nil
	}
	f.node, f.stream = n, st
	if conv != nil {
		conv.flight = f
		if len(conv.pending) > 0 {
			f.watched = true
			n.watched++
		}
	}
	n.queued = append(n.queued, f)
	if it.Cancel {
		f.urgent = true
		n.urgent = append(n.urgent, f)
	}
	n.sinceView++
	n.inStep++
	if inWindow {
		n.requests++
	}
	if !n.busy {
		d.startStep(ctx, n, d.now)
		return n.err
	}
	return nil
}

func (d *driver) refuse(reason string, inWindow bool) {
	if inWindow {
		d.refused[reason]++
	}
}

// route picks the node for a prompt by the configured policy.
func (d *driver) route(prompt []int32, it workload.Item) (*node, error) {
	if d.cfg.Route == RouteRoundRobin {
		n := d.nodes[d.rr%len(d.nodes)]
		d.rr++
		d.count(RouteRoundRobin)
		return n, nil
	}
	for _, n := range d.nodes {
		if !n.busy && d.now.Sub(n.summaryAt) >= d.interval {
			n.takeSummary(d.now)
		}
		if n.fresh {
			d.pool.SetPrefixes(n.id, d.model, n.summary)
			n.fresh = false
		}
		d.pool.SetLoad(n.id, d.model, cluster.ModelLoad{
			Running: n.view.Running,
			Waiting: n.view.Waiting + n.view.Swapped + n.sinceView,
			KVUsage: usage(n.view),
		})
	}
	req := cluster.RouteRequest{Model: d.model, LoadBound: d.cfg.LoadBound, LoadSlack: d.cfg.LoadSlack}
	if it.Turns > 1 {
		req.AffinityKey = "conversation-" + strconv.Itoa(it.Conversation)
	}
	bs := d.nodes[0].eng.BlockSize()
	switch d.cfg.Route {
	case RoutePrefix:
		req.Prefix = kvcache.HashChain(prompt, bs)
	case RouteAffinity:
		req.LoadBound = 1e9
		if req.AffinityKey == "" {
			req.Prefix = kvcache.HashChain(prompt[:min(len(prompt), bs)], bs)
		}
	case RouteLeastLoaded:
		req.AffinityKey = ""
	}
	cands := d.pool.Route(req, nil)
	if len(cands) == 0 {
		return nil, errors.New("fleet: the router found no node")
	}
	c := cands[0]
	reason := c.Reason
	if strings.HasPrefix(reason, cluster.ReasonPrefix) {
		reason = "prefix"
	}
	d.count(reason)
	for _, n := range d.nodes {
		if n.id == c.Member.ID {
			return n, nil
		}
	}
	return nil, fmt.Errorf("fleet: the router chose an unknown node %q", c.Member.ID)
}

func (d *driver) count(reason string) {
	if d.inWindow(d.now) {
		d.routed[reason]++
	}
}

func usage(st engine.Stats) float64 {
	if st.BlocksTotal == 0 {
		return 0
	}
	return float64(st.BlocksUsed) / float64(st.BlocksTotal)
}

// turnDone moves f's conversation on at t, when the turn ended: its
// history grows by the turn, and the next turn, if it has already arrived,
// is due at t.
func (d *driver) turnDone(f *flight, t time.Time) {
	it := f.item
	if it.Turns <= 1 {
		return
	}
	c := d.convs[it.Conversation]
	if c == nil {
		return
	}
	c.busy, c.flight, c.doneAt = false, nil, t
	if it.Turn >= it.Turns-1 {
		delete(d.convs, it.Conversation)
		return
	}
	if f.prompt != nil {
		c.history = append(f.prompt, f.out...)
	}
	if len(c.pending) > 0 {
		next := c.pending[0]
		c.pending = c.pending[1:]
		d.deferTurn(c, t, next)
	}
}

// deferTurn schedules the next turn of c at t.
func (d *driver) deferTurn(c *conversation, t time.Time, it workload.Item) {
	c.busy = true
	d.pushes++
	heap.Push(&d.deferred, queued[workload.Item]{at: t, seq: d.pushes, v: it})
}

// report builds the Report once the run is over.
func (d *driver) report() *Report {
	r := &Report{
		Simulated: d.horizon.Sub(epoch),
		Window:    max(d.horizon.Sub(d.warm), 0),
		Arrived:   d.arrived, OfferedOutputTokens: d.offered,
		Refused: d.refused, Routed: d.routed,
	}
	secs := r.Window.Seconds()
	fleet := NodeReport{ID: "fleet"}
	var ttft, itl hist
	for _, n := range d.nodes {
		d.noteKV(n, maxTime(d.horizon, n.kvAt), n.kvUsage)
		st := n.eng.Stats()
		if !n.warmed {
			n.preempt0, n.steps0 = st.Preemptions, st.Steps
		}
		nr := NodeReport{
			ID: n.id, Requests: n.requests, Completed: n.completed,
			InputTokens: n.input, CachedTokens: n.cached, OutputTokens: n.output,
			KVMax: n.kvMax, Preemptions: st.Preemptions - n.preempt0, Steps: st.Steps - n.steps0,
			TTFT: n.ttft.percentiles(), ITL: n.itl.percentiles(),
		}
		if secs > 0 {
			nr.Throughput = float64(n.output) / secs
			nr.KVMean = n.kvSeconds / secs
		}
		if n.input > 0 {
			nr.CacheHit = float64(n.cached) / float64(n.input)
		}
		r.Nodes = append(r.Nodes, nr)
		r.Unfinished += len(n.started) + len(n.queued)
		fleet.Requests += nr.Requests
		fleet.Completed += nr.Completed
		fleet.InputTokens += nr.InputTokens
		fleet.CachedTokens += nr.CachedTokens
		fleet.OutputTokens += nr.OutputTokens
		fleet.Throughput += nr.Throughput
		fleet.KVMean += nr.KVMean / float64(len(d.nodes))
		fleet.KVMax = max(fleet.KVMax, nr.KVMax)
		fleet.Preemptions += nr.Preemptions
		fleet.Steps += nr.Steps
		ttft.merge(&n.ttft)
		itl.merge(&n.itl)
	}
	fleet.TTFT, fleet.ITL = ttft.percentiles(), itl.percentiles()
	if fleet.InputTokens > 0 {
		fleet.CacheHit = float64(fleet.CachedTokens) / float64(fleet.InputTokens)
	}
	r.Fleet = fleet
	r.Steps = fleet.Steps
	total := 0
	for _, c := range r.Routed {
		total += c
	}
	if total > 0 {
		r.PrefixRouted = float64(r.Routed["prefix"]) / float64(total)
	}
	return r
}

// queued is an entry of a time-ordered queue.
type queued[T any] struct {
	at  time.Time
	seq uint64 // ties: first pushed, first out
	v   T
}

// timeQueue is a min-heap by time, then by push order.
type timeQueue[T any] []queued[T]

type (
	turnQueue   = timeQueue[workload.Item]
	finishQueue = timeQueue[finish]
)

func (q timeQueue[T]) Len() int { return len(q) }
func (q timeQueue[T]) Less(i, j int) bool {
	if c := q[i].at.Compare(q[j].at); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}
func (q timeQueue[T]) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *timeQueue[T]) Push(x any)   { *q = append(*q, x.(queued[T])) }
func (q *timeQueue[T]) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = queued[T]{}
	*q = old[:len(old)-1]
	return x
}
