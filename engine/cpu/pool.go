package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs parallel work on a fixed set of worker goroutines. It has
// Threads() workers, counting the goroutine that calls Run, which always
// takes a share of the work itself; so a pool of one thread starts no
// goroutine at all. The executor owns a pool and must Close it.
//
// A forward pass calls Run hundreds of times a step, each for well under a
// millisecond, so hand-offs must be fast: an idle worker spins (yielding
// its thread now and then) for poolSpin before it parks, and so does Run
// while it waits for the workers. Handing work to a parked goroutine
// instead costs a wake-up of tens of microseconds, and Go's scheduler may
// even run it on the caller's thread only once the caller blocks.
//
// Run splits the work into one chunk per thread; Share cuts it finer and
// lets each thread take chunks until none is left, so a thread that starts
// late (its worker parked, or its CPU taken by another goroutine) does less
// of it instead of holding up the rest.
//
// Run and Share are safe for concurrent use (calls are serialized), but fn
// must not call Run or Share on the same pool: that deadlocks. A nil *Pool
// is valid and runs everything on the caller's goroutine.
type Pool struct {
	threads int
	mu      sync.Mutex // serializes Run and Close
	workers []*poolWorker
	closed  bool
	wg      sync.WaitGroup // the running workers

	// Completion of a Run: the worker that brings pending to zero bumps
	// done, which Run awaits.
	pending atomic.Int32
	done    poolSignal

	// The Share in progress: its chunks, handed out by next.
	share struct {
		fn            func(start, end int)
		n, grain, cnt int
		next          atomic.Int64
	}
	shareTask func(start, end int) // p.shareLoop, made once

	// Counters for Stats.
	runs, callerParks, workerParks atomic.Uint64
}

// PoolStats counts a pool's hand-offs since it started: the barriers of a
// forward step and how they were waited for.
type PoolStats struct {
	// Runs counts the Run calls that split their work over two threads
	// or more: each is one barrier.
	Runs uint64
	// CallerParks counts the Runs whose caller parked waiting for the
	// workers, after spinning for poolSpin; WorkerParks the times an idle
	// worker parked. Each park costs a wake-up (a context switch, and on
	// a busy machine the wait for a CPU) where a spin costs none.
	CallerParks uint64
	WorkerParks uint64
}

// Stats returns the pool's counters (zero for a nil pool).
func (p *Pool) Stats() PoolStats {
	if p == nil {
		return PoolStats{}
	}
	return PoolStats{Runs: p.runs.Load(), CallerParks: p.callerParks.Load(), WorkerParks: p.workerParks.Load()}
}

// poolSpin is how long an idle worker, or Run waiting for the workers,
// spins before parking.
const poolSpin = 100 * time.Microsecond

// poolSignal is a counter that one goroutine awaits (spinning, then parked
// on wake) and others bump.
type poolSignal struct {
	seq      atomic.Uint64
	sleeping atomic.Bool
	wake     chan struct{} // capacity 1
	_        [40]byte      // keep workers' signals on separate cache lines
}

// bump increments the counter and wakes the waiter if it is parked.
func (s *poolSignal) bump() {
	s.seq.Add(1)
	if s.sleeping.Load() {
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// await returns the counter once it differs from old, and whether it
// parked before it did.
func (s *poolSignal) await(old uint64) (uint64, bool) {
	var deadline time.Time
	for i := 1; ; i++ {
		if n := s.seq.Load(); n != old {
			return n, false
		}
		if i%256 == 0 {
			runtime.Gosched() // let others on this thread run
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(poolSpin)
			} else if now.After(deadline) {
				break
			}
		}
	}
	for {
		// Announce the sleep, then look again: bump either sees the
		// announcement and sends a wake-up, or its increment is seen here.
		// A stale wake-up left in the channel only costs one more turn.
		s.sleeping.Store(true)
		if n := s.seq.Load(); n != old {
			s.sleeping.Store(false)
			return n, false
		}
		<-s.wake
		s.sleeping.Store(false)
		if n := s.seq.Load(); n != old {
			return n, true
		}
	}
}

// poolWorker is one worker goroutine's mailbox: Run writes task and sets
// state to poolAssigned (or Close sets quit), then bumps signal.
type poolWorker struct {
	signal   poolSignal
	task     poolTask
	state    atomic.Int32 // poolIdle, poolAssigned or poolRunning
	quit     atomic.Bool  // read on every wake-up, stale ones included
	panicked any          // what the last task panicked with, or nil
}

// A worker's task goes from poolAssigned to poolRunning when the worker
// takes it, or back to poolIdle when Share withdraws it before that.
const (
	poolIdle int32 = iota
	poolAssigned
	poolRunning
)

// poolTask is one worker's share of a Run.
type poolTask struct {
	fn         func(start, end int)
	start, end int
}

// NewPool starts a pool of threads workers (the caller of Run being one of
// them). A threads below 1 is taken as 1.
func NewPool(threads int) *Pool {
	threads = max(threads, 1)
	p := &Pool{threads: threads}
	p.shareTask = p.shareLoop
	p.done.wake = make(chan struct{}, 1)
	p.wg.Add(threads - 1)
	for range threads - 1 {
		w := &poolWorker{}
		w.signal.wake = make(chan struct{}, 1)
		p.workers = append(p.workers, w)
		go p.work(w)
	}
	return p
}

func (p *Pool) work(w *poolWorker) {
	defer p.wg.Done()
	var seen uint64
	for {
		var parked bool
		seen, parked = w.signal.await(seen)
		if parked {
			p.workerParks.Add(1)
		}
		if w.quit.Load() {
			return
		}
		if !w.state.CompareAndSwap(poolAssigned, poolRunning) {
			continue // withdrawn by Share, or a wake-up of one that was
		}
		w.panicked = poolCall(w.task)
		w.task = poolTask{}
		w.state.Store(poolIdle)
		if p.pending.Add(-1) == 0 {
			p.done.bump()
		}
	}
}

// poolCall runs one task and returns what it panicked with, or nil.
func poolCall(t poolTask) (panicked any) {
	defer func() { panicked = recover() }()
	t.fn(t.start, t.end)
	return nil
}

// Threads returns the number of workers, the caller of Run included (1 for
// a nil pool).
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// Close stops the worker goroutines and waits for them to exit. It is
// idempotent; Run must not be called after Close.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.workers {
		w.quit.Store(true)
		w.signal.bump()
	}
	p.wg.Wait()
}

// Run calls fn(start, end) over [0, n) split into min(n, Threads())
// contiguous chunks of nearly equal size (they differ by at most one), runs
// them in parallel — the caller's goroutine takes the first — and returns
// when all are done. Every index in [0, n) is in exactly one chunk, and no
// chunk is empty; n <= 0 calls nothing. A panic in fn is re-raised in the
// caller once every chunk has finished.
func (p *Pool) Run(n int, fn func(start, end int)) {
	if n <= 0 {
		return
	}
	k := min(n, p.Threads())
	if k == 1 {
		fn(0, n)
		return
	}
	done := p.begin(k, "Run")
	defer p.mu.Unlock()
	for i := 1; i < k; i++ {
		p.assign(p.workers[i-1], poolTask{fn: fn, start: i * n / k, end: (i + 1) * n / k})
	}
	first := poolCall(poolTask{fn: fn, start: 0, end: n / k})
	p.finish(k, done, true, first)
}

// begin locks p for a Run or Share (op) over k threads, k-1 of them
// workers, and returns the completion counter to await; it panics if p is
// closed. The caller unlocks p.mu.
func (p *Pool) begin(k int, op string) uint64 {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		panic("cpu: " + op + " on a closed Pool")
	}
	p.runs.Add(1)
	done := p.done.seq.Load()
	p.pending.Store(int32(k - 1))
	return done
}

// assign hands t to the idle worker w and wakes it.
func (p *Pool) assign(w *poolWorker, t poolTask) {
	w.task = t
	w.state.Store(poolAssigned)
	w.signal.bump()
}

// finish ends a Run or Share over k threads whose caller's part returned
// first (a panic value or nil): it waits for the workers still due (done
// is the completion counter before they were assigned), or, unless wait,
// first withdraws the tasks of those that have not started, then re-raises
// the first panic.
func (p *Pool) finish(k int, done uint64, wait bool, first any) {
	await := true
	if !wait {
		for _, w := range p.workers[:k-1] {
			// A withdrawn worker never touches its task: count it done here.
			// Whoever brings pending to zero is the last: when that is the
			// caller, no worker bumps done.
			if w.state.CompareAndSwap(poolAssigned, poolIdle) && p.pending.Add(-1) == 0 {
				await = false
			}
		}
	}
	if await {
		if _, parked := p.done.await(done); parked {
			p.callerParks.Add(1)
		}
	}
	for _, w := range p.workers[:k-1] {
		if first == nil {
			first = w.panicked
		}
		w.panicked = nil
		w.task = poolTask{}
	}
	if first != nil {
		panic(first)
	}
}

// Share calls fn over [0, n) in chunks of grain indices (the last may be
// shorter) that the caller and the workers take in turn until none is left,
// then returns; a worker that has not started by then is not waited for.
// Each index is in exactly one chunk; fn may be called several times on one
// goroutine and must not depend on which runs a chunk (MatMul's rows are
// independent). A panic in fn is re-raised in the caller once every chunk
// under way has finished.
func (p *Pool) Share(n, grain int, fn func(start, end int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	cnt := (n + grain - 1) / grain
	k := min(cnt, p.Threads())
	if k == 1 {
		fn(0, n)
		return
	}
	done := p.begin(k, "Share")
	defer p.mu.Unlock()
	sh := &p.share
	sh.fn, sh.n, sh.grain, sh.cnt = fn, n, grain, cnt
	sh.next.Store(0)
	for _, w := range p.workers[:k-1] {
		p.assign(w, poolTask{fn: p.shareTask})
	}
	first := poolCall(poolTask{fn: p.shareTask})
	p.finish(k, done, false, first)
	sh.fn = nil
}

// shareLoop runs the chunks of the Share in progress until none is left.
func (p *Pool) shareLoop(int, int) {
	sh := &p.share
	for {
		i := int(sh.next.Add(1) - 1)
		if i >= sh.cnt {
			return
		}
		sh.fn(i*sh.grain, min(sh.n, (i+1)*sh.grain))
	}
}
