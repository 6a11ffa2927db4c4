package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// Config configures an Engine. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// MaxBatchTokens is the most tokens processed in one step (decode
	// tokens plus prefill chunks). Default 2048.
	MaxBatchTokens int
	// MaxRunning caps the sequences in the running set. Default 256.
	MaxRunning int
	// MaxWaiting caps the waiting queue; Submit returns ErrQueueFull past
	// it. Default 10000.
	MaxWaiting int
	// WatermarkFraction of the KV blocks is kept free at admission (the
	// headroom) so that running sequences can grow before anything is
	// preempted. Default 0.01.
	WatermarkFraction float64
	// ExpectedOutputTokens is the output length admission projects for a
	// tenant with too little history (after that: the p90 of its last 64
	// answers), capped by each request's max_tokens. Zero projects
	// max_tokens. Default 256.
	ExpectedOutputTokens int
	// DisablePrefixCache turns prefix reuse off (for comparison runs).
	DisablePrefixCache bool
	// Ladder sets the degradation ladder (see DegradeLevel). Default
	// DefaultLadderConfig().
	Ladder LadderConfig
	// TierWeights are the weighted-fair-queuing weights of the priority
	// classes, indexed by Priority; zero entries take the defaults (shadow
	// 0.5, batch 1, free 2, paid 4, enterprise 8). Shadow work runs only
	// when no other class waits, whatever the weights.
	TierWeights [NumPriorities]float64
	// Spec configures speculative decoding; off without a Drafter.
	Spec SpecConfig
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MaxBatchTokens: 2048, MaxRunning: 256, MaxWaiting: 10000, WatermarkFraction: 0.01, ExpectedOutputTokens: 256,
		Ladder: DefaultLadderConfig(), Spec: SpecConfig{MaxTokens: DefaultSpecTokens, MaxBatch: DefaultSpecMaxBatch}}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxBatchTokens < 1:
		return fmt.Errorf("engine: max batch tokens must be positive, got %d", c.MaxBatchTokens)
	case c.MaxRunning < 1:
		return fmt.Errorf("engine: max running sequences must be positive, got %d", c.MaxRunning)
	case c.MaxWaiting < 1:
		return fmt.Errorf("engine: max waiting requests must be positive, got %d", c.MaxWaiting)
	case c.WatermarkFraction < 0 || c.WatermarkFraction >= 1:
		return fmt.Errorf("engine: watermark fraction must be in [0, 1), got %g", c.WatermarkFraction)
	case c.ExpectedOutputTokens < 0:
		return fmt.Errorf("engine: expected output tokens must not be negative, got %d", c.ExpectedOutputTokens)
	}
	for p, w := range c.TierWeights {
		if w < 0 {
			return fmt.Errorf("engine: tier weight of %s must not be negative, got %g", Priority(p), w)
		}
	}
	if err := c.Spec.Validate(); err != nil {
		return err
	}
	return c.Ladder.Validate()
}

// Stats is a snapshot of the engine for metrics and the TUI: the
// scheduler's counters plus the state of its queues and KV blocks.
type Stats struct {
	SchedStats
	Model string
	// BlocksTotal, BlocksUsed and BlocksCached count KV blocks; cached
	// blocks are free but still hold a reusable prefix. BlockSize is in
	// tokens.
	BlocksTotal  int
	BlocksUsed   int
	BlocksCached int
	BlockSize    int
	Running      int
	Waiting      int
	// Evictions counts cached blocks reclaimed for new work.
	Evictions uint64
	// Swapped is the number of sequences in host swap space, using
	// SwapBlocksUsed of SwapBlocksTotal blocks.
	Swapped         int
	SwapBlocksUsed  int
	SwapBlocksTotal int
	// WaitingByPriority counts queued sequences per class, indexed by
	// Priority.
	WaitingByPriority [NumPriorities]int
	// Degrade is the degradation ladder's level.
	Degrade DegradeLevel
	// QueuedPromptTokens is the prompt tokens still to prefill: the
	// waiting sequences' tokens less what the prefix cache held when they
	// were queued, plus the rest of the running sequences' prompts.
	QueuedPromptTokens int
	// PrefillTokensPerSecond is the measured cost of batch tokens on the
	// executor, as tokens per second: the slope of recent step times
	// against their batch sizes, without the fixed cost of a step (see
	// stepFit). 0 until the steps have varied enough in size to tell.
	PrefillTokensPerSecond float64
}

// Engine runs one model replica: the step loop of a Scheduler over an
// Executor. Build it with New, start it with Run.
//
// Locking: the step goroutine (Run) owns the scheduler and the block pool;
// other goroutines reach it only through the inbox (Submit, Cancel), the
// stats snapshot and the prefix directory (CachedPrefix, RecentPrefixes),
// each under its own lock.
type Engine struct {
	exec   Executor
	info   ExecutorInfo
	clock  Clock
	cfg    Config
	logger *slog.Logger
	sched  *Scheduler

	// inbox, guarded by mu: submissions and cancellations for the loop.
	mu        sync.Mutex
	submitted []submission
	cancelled []string
	queries   []chan []RequestState
	ops       []func() // run on the step goroutine (KV export and import)
	closed    bool
	wake      chan struct{}

	pending atomic.Int64 // submitted but not yet finished
	streams map[string]*Stream

	statsMu sync.Mutex
	stats   Stats

	// dir mirrors the pool's prefix index for other goroutines; it has its
	// own lock.
	dir *prefixDir

	// drafter proposes drafts for speculative decoding; nil when off.
	drafter Drafter
	// gate turns speculation off where it does not pay (step goroutine).
	gate specGate

	// Owned by the step goroutine.
	ladder      ladder
	lastObserve time.Time
	fit         stepFit
}

type submission struct {
	req    Request
	at     time.Time // submission time, by the engine's clock
	stream *Stream
	stop   func() bool // releases the context.AfterFunc
}

// New returns an engine over exec. logger may be nil.
func New(exec Executor, clock Clock, cfg Config, logger *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	info := exec.Info()
	pool, err := kvcache.NewPool(info.NumBlocks, info.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: %w", info.Model, err)
	}
	dir := newPrefixDir(info.NumBlocks, recentPrefixCap)
	pool.SetIndexHook(dir)
	e := &Engine{
		exec:    exec,
		info:    info,
		clock:   clock,
		cfg:     cfg,
		logger:  logger.With("component", "engine", "model", info.Model),
		wake:    make(chan struct{}, 1),
		streams: make(map[string]*Stream),
		ladder:  ladder{cfg: cfg.Ladder},
		dir:     dir,
	}
	sc := SchedulerConfig{
		MaxBatchTokens:        cfg.MaxBatchTokens,
		MaxRunning:            cfg.MaxRunning,
		ContextLength:         info.ContextLength,
		EOS:                   info.EOS,
		WatermarkBlocks:       int(cfg.WatermarkFraction * float64(info.NumBlocks)),
		DisablePrefixCache:    cfg.DisablePrefixCache,
		DefaultExpectedOutput: cfg.ExpectedOutputTokens,
		Logprobs:              info.Logprobs,
		VocabSize:             info.VocabSize,
		TierWeights:           cfg.TierWeights,
	}
	if cfg.Spec.Drafter == nil && cfg.Spec.ExecutorDrafts {
		d, ok := exec.(Drafter)
		if !ok {
			return nil, fmt.Errorf("engine: model %s: the executor cannot draft for speculative decoding", info.Model)
		}
		e.drafter = d
	} else {
		e.drafter = cfg.Spec.Drafter
	}
	if d := e.drafter; d != nil {
		spec := cfg.Spec.withDefaults()
		sc.SpecMaxTokens, sc.SpecMaxBatch, sc.ForgetDraft = spec.MaxTokens, spec.MaxBatch, d.Forget
	}
	if cm, ok := exec.(CostModel); ok && info.SwapBlocks > 0 {
		sc.SwapBlocks = info.SwapBlocks
		sc.SwapCost = cm.SwapTime
		sc.RecomputeCost = cm.PrefillTime
	}
	e.sched, err = NewScheduler(sc, pool, e.deliver)
	if err != nil {
		return nil, err
	}
	e.sched.dir = dir
	e.publishStats()
	return e, nil
}

// Info describes the executor the engine drives.
func (e *Engine) Info() ExecutorInfo { return e.info }

// MaxSeqTokens is the most tokens (prompt plus output) one sequence can hold.
func (e *Engine) MaxSeqTokens() int { return e.sched.MaxSeqTokens() }

// Submit queues req. The request is cancelled when ctx ends: it is removed
// and its blocks freed at the next step. It returns ErrClosed, ErrQueueFull,
// *ContextLengthError or *InvalidRequestError; ErrDuplicateID ends the
// returned stream if the id is already live.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	if err := e.sched.check(req); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st := newStream(req.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if e.pending.Load() >= int64(e.cfg.MaxWaiting+e.cfg.MaxRunning) {
		return nil, ErrQueueFull
	}
	e.pending.Add(1)
	id := req.ID
	stop := context.AfterFunc(ctx, func() { e.Cancel(id) })
	e.submitted = append(e.submitted, submission{req: req, at: e.clock.Now(), stream: st, stop: stop})
	e.signal()
	return st, nil
}

// Cancel cancels the live request with the given id; it is removed and its
// blocks freed at the next step.
func (e *Engine) Cancel(id string) {
	e.mu.Lock()
	e.cancelled = append(e.cancelled, id)
	e.mu.Unlock()
	e.signal()
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot; safe to call from any goroutine.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// Run runs the step loop until ctx ends; then every live request finishes
// with FinishCancelled and Run returns nil. An executor error fails the
// sequences of that step and the loop goes on.
func (e *Engine) Run(ctx context.Context) error {
	defer e.shutdown()
	for {
		ran, err := e.turn(ctx, false)
		if err != nil {
			return nil
		}
		if ran {
			continue
		}
		// Idle, or (which admission rules out: it ignores the watermark
		// when nothing runs) waiting work that cannot be admitted: sleep
		// until something arrives rather than spin.
		// While degraded, wake up to let the ladder descend. On a clock
		// other than the real one (a virtual clock in tests and
		// simulations) nothing else moves time while the engine is idle:
		// let a Hold pass on it, or work held by a paused class (batch,
		// shadow) would wait forever.
		if _, real := e.clock.(RealClock); !real && e.ladder.level > DegradeNone {
			if err := e.clock.Sleep(ctx, e.cfg.Ladder.Hold); err != nil {
				return nil
			}
			continue
		}
		var descend <-chan time.Time
		var timer *time.Timer
		if e.ladder.level > DegradeNone {
			timer = time.NewTimer(e.cfg.Ladder.Hold)
			descend = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		case <-descend:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// Step runs one turn of the step loop on the caller's goroutine, for a
// driver that owns time (a fleet simulator stepping many engines on one
// virtual timeline): it takes the submissions and cancellations made since
// the last turn, decides a batch, runs it through the executor (which
// sleeps on the engine's clock) and applies the results, so the step's
// events are in their streams when Step returns. It reports whether a step
// ran; false means the engine has nothing it can run (idle, or waiting
// work that cannot be admitted) until something is submitted or cancelled.
//
// Use Step or Run on an engine, never both, and call Step from one
// goroutine at a time. An executor error fails the step's sequences and
// Step returns nil, as Run goes on. If ctx ends before or during the step,
// Step returns ctx's error and the step's sequences fail with it.
func (e *Engine) Step(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return e.turn(ctx, true)
}

// turn is one turn of the step loop: drain the inbox, feed the ladder,
// then plan, run and apply one step. It reports whether a step ran. When
// ctx ends during the executor's step it returns ctx's error, having
// failed the step's sequences if failInterrupted (Step) or left them to the
// shutdown (Run).
func (e *Engine) turn(ctx context.Context, failInterrupted bool) (bool, error) {
	e.drainInbox()
	e.observeLadder()
	var plan *Plan
	running := e.sched.NumRunning()
	draftStart := e.clock.Now()
	if ctx.Err() == nil && running+e.sched.NumWaiting()+e.sched.NumSwapped() > 0 {
		if e.drafter != nil && e.gate.allow(running) {
			e.draft(ctx)
		}
		plan = e.sched.Step()
	}
	if plan == nil || plan.Empty() {
		e.publishStats()
		return false, nil
	}
	start := e.clock.Now()
	out, err := e.exec.Forward(ctx, &plan.Batch)
	switch {
	case err != nil && ctx.Err() != nil:
		if !failInterrupted {
			return true, ctx.Err()
		}
		e.sched.Fail(plan, ctx.Err())
		e.publishStats()
		return true, ctx.Err()
	case err != nil:
		e.logger.Error("executor step failed", "err", err, "seqs", len(plan.Batch.Seqs))
		e.sched.Fail(plan, err)
	default:
		end := e.clock.Now()
		e.fit.observe(batchTokens(&plan.Batch), end.Sub(start))
		decode, drafts := decodeOnly(&plan.Batch)
		before := e.sched.stats.GeneratedTokens
		e.sched.Apply(plan, out, end)
		if e.drafter != nil && decode {
			e.gate.observe(running, drafts, int(e.sched.stats.GeneratedTokens-before), end.Sub(draftStart))
		}
	}
	e.publishStats()
	return true, nil
}

// draft asks the drafter for the next step's drafts, if speculation is on
// and some sequence may speculate. A drafter error only skips speculation.
func (e *Engine) draft(ctx context.Context) {
	d := e.drafter
	if d == nil {
		return
	}
	reqs := e.sched.DraftRequests()
	if len(reqs) == 0 {
		return
	}
	if err := d.Draft(ctx, reqs); err != nil {
		e.logger.Warn("drafting failed; this step does not speculate", "err", err, "seqs", len(reqs))
		return
	}
	e.sched.SetDrafts(reqs)
}

// batchTokens counts the tokens b runs through the model.
func batchTokens(b *Batch) int {
	n := 0
	for i := range b.Seqs {
		n += len(b.Seqs[i].Tokens)
	}
	return n
}

// maxInspect bounds the requests Requests returns.
const maxInspect = 500

// Requests returns up to 500 live requests (newest first) with where each
// is: queued, prefill, decode or swapped. The step goroutine answers at its
// next turn.
func (e *Engine) Requests(ctx context.Context) ([]RequestState, error) {
	reply := make(chan []RequestState, 1)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.queries = append(e.queries, reply)
	e.mu.Unlock()
	e.signal()
	select {
	case rs := <-reply:
		return rs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// drainInbox moves submissions and cancellations into the scheduler and
// answers inspection queries.
func (e *Engine) drainInbox() {
	e.mu.Lock()
	subs, cancels, queries, ops := e.submitted, e.cancelled, e.queries, e.ops
	e.submitted, e.cancelled, e.queries, e.ops = nil, nil, nil, nil
	e.mu.Unlock()
	for _, op := range ops {
		op()
	}
	defer func() {
		if len(queries) > 0 {
			rs := e.sched.RequestStates(maxInspect)
			for _, q := range queries {
				q <- rs
			}
		}
	}()
	for _, s := range subs {
		if _, dup := e.streams[s.req.ID]; dup {
			s.stop()
			e.pending.Add(-1)
			s.stream.push(Event{Kind: EventFinish, Index: -1, Finish: FinishError, Err: ErrDuplicateID})
			continue
		}
		e.streams[s.req.ID] = s.stream
		s.stream.stop = s.stop
		if err := e.sched.AddAt(s.req, s.at); err != nil {
			delete(e.streams, s.req.ID)
			s.stop()
			e.pending.Add(-1)
			s.stream.push(Event{Kind: EventFinish, Index: -1, Finish: FinishError, Err: err})
		}
	}
	for _, id := range cancels {
		e.sched.Cancel(id)
	}
}

// observeLadder feeds the degradation ladder its signals (at most ten
// times per hold) and applies a change of level: the batch class is paused
// from DegradePauseBatch up, the shadow class from the first level above
// DegradeNone up and whenever batch is.
func (e *Engine) observeLadder() {
	if e.cfg.Ladder.Disabled {
		return
	}
	now := e.clock.Now()
	if !e.lastObserve.IsZero() && now.Sub(e.lastObserve) < e.cfg.Ladder.Hold/10 {
		return
	}
	e.lastObserve = now
	var wait time.Duration
	if t := e.sched.OldestWaiting(PriorityFree); !t.IsZero() {
		wait = now.Sub(t)
	}
	pool := e.sched.Pool()
	kv := float64(pool.NumUsed()) / float64(pool.NumBlocks())
	prev := e.ladder.observe(now, wait, kv)
	level := e.ladder.level
	if level == prev {
		return
	}
	pauseBatch := level >= DegradePauseBatch
	e.sched.SetClassPaused(PriorityBatch, pauseBatch)
	e.sched.SetClassPaused(PriorityShadow, pauseBatch || level > DegradeNone)
	log := e.logger.Info
	if level > prev {
		log = e.logger.Warn
	}
	log("degradation level changed", "from", prev.String(), "to", level.String(),
		"queue_wait_ms", wait.Milliseconds(), "kv_used", fmt.Sprintf("%.2f", kv))
}

// deliver is the scheduler's Emit: it hands an event to the request's
// stream without blocking.
func (e *Engine) deliver(r *Request, ev Event) {
	st, ok := e.streams[r.ID]
	if !ok {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = e.clock.Now()
	}
	st.push(ev)
	if ev.Last() {
		delete(e.streams, r.ID)
		if st.stop != nil {
			st.stop()
		}
		e.pending.Add(-1)
	}
}

// shutdown cancels everything still live and refuses new submissions.
func (e *Engine) shutdown() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.drainInbox()
	e.sched.CancelAll()
	e.publishStats()
}

func (e *Engine) publishStats() {
	pool := e.sched.Pool()
	st := Stats{
		SchedStats:        e.sched.Stats(),
		Model:             e.info.Model,
		BlocksTotal:       pool.NumBlocks(),
		BlocksUsed:        pool.NumUsed(),
		BlocksCached:      pool.NumCached(),
		BlockSize:         pool.BlockSize(),
		Running:           e.sched.NumRunning(),
		Waiting:           e.sched.NumWaiting(),
		Evictions:         pool.Evictions(),
		Swapped:           e.sched.NumSwapped(),
		SwapBlocksUsed:    e.sched.Swap().NumUsed(),
		SwapBlocksTotal:   e.sched.Swap().NumSlots(),
		WaitingByPriority: e.sched.WaitingByPriority(),
		Degrade:           e.ladder.level,

		QueuedPromptTokens:     e.sched.QueuedPromptTokens(),
		PrefillTokensPerSecond: e.fit.rate(),
	}
	e.statsMu.Lock()
	e.stats = st
	e.statsMu.Unlock()
}

// Collect reads a stream to its end and returns the tokens of each choice
// and the usage. It is a convenience for tests and non-streaming callers.
// It returns the first choice error, if any, after the stream ends.
func Collect(ctx context.Context, st *Stream) (tokens [][]int32, finish []FinishReason, usage Usage, err error) {
	var choiceErr error
	for {
		ev, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return tokens, finish, usage, choiceErr
		}
		if err != nil {
			return tokens, finish, usage, err
		}
		for ev.Index >= len(tokens) {
			tokens = append(tokens, nil)
			finish = append(finish, "")
		}
		switch {
		case ev.Kind == EventToken:
			tokens[ev.Index] = append(tokens[ev.Index], ev.Token)
		case ev.Last():
			usage = ev.Usage
			if ev.Err != nil {
				return tokens, finish, usage, ev.Err
			}
		case ev.Kind == EventFinish:
			finish[ev.Index] = ev.Finish
			if choiceErr == nil {
				choiceErr = ev.Err
			}
		}
	}
}
