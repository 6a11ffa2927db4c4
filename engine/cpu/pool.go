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
// Run is safe for concurrent use (calls are serialized), but fn must not call
// Run on the same pool: that deadlocks. A nil *Pool is valid and runs
// everything on the caller's goroutine.
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

// poolWorker is one worker goroutine's mailbox: Run writes task (or Close
// quit) and then bumps signal.
type poolWorker struct {
	signal   poolSignal
	task     poolTask
	quit     bool
	panicked any // what the last task panicked with, or nil
}

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
		if w.quit {
			return
		}
		w.panicked = poolCall(w.task)
		w.task = poolTask{}
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
		w.quit = true
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		panic("cpu: Run on a closed Pool")
	}
	p.runs.Add(1)
	done := p.done.seq.Load()
	p.pending.Store(int32(k - 1))
	for i := 1; i < k; i++ {
		w := p.workers[i-1]
		w.task = poolTask{fn: fn, start: i * n / k, end: (i + 1) * n / k}
		w.signal.bump()
	}
	first := poolCall(poolTask{fn: fn, start: 0, end: n / k})
	if _, parked := p.done.await(done); parked {
		p.callerParks.Add(1)
	}
	for _, w := range p.workers[:k-1] {
		if first == nil {
			first = w.panicked
		}
		w.panicked = nil
	}
	if first != nil {
		panic(first)
	}
}
