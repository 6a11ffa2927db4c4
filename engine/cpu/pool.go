package cpu

import "sync"

// Pool runs parallel work on a fixed set of worker goroutines. It has
// Threads() workers, counting the goroutine that calls Run, which always
// takes a share of the work itself; so a pool of one thread starts no
// goroutine at all. The executor owns a pool and must Close it.
//
// Run is safe for concurrent use (calls are serialized), but fn must not call
// Run on the same pool: that deadlocks. A nil *Pool is valid and runs
// everything on the caller's goroutine.
type Pool struct {
	threads int
	mu      sync.Mutex      // serializes Run
	work    []chan poolTask // one per worker goroutine (threads-1)
	done    chan any        // a worker's recovered panic, or nil
	wg      sync.WaitGroup  // the running workers
	close   sync.Once
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
	p := &Pool{
		threads: threads,
		work:    make([]chan poolTask, threads-1),
		done:    make(chan any, threads),
	}
	p.wg.Add(threads - 1)
	for i := range p.work {
		p.work[i] = make(chan poolTask)
		go p.worker(p.work[i])
	}
	return p
}

func (p *Pool) worker(tasks <-chan poolTask) {
	defer p.wg.Done()
	for t := range tasks {
		p.done <- poolCall(t)
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
	p.close.Do(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.work {
			close(c)
		}
		p.wg.Wait()
	})
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
	for i := 1; i < k; i++ {
		p.work[i-1] <- poolTask{fn: fn, start: i * n / k, end: (i + 1) * n / k}
	}
	first := poolCall(poolTask{fn: fn, start: 0, end: n / k})
	for i := 1; i < k; i++ {
		if v := <-p.done; v != nil && first == nil {
			first = v
		}
	}
	if first != nil {
		panic(first)
	}
}
