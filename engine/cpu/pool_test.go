package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestPoolRunCoversEachIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		for _, n := range []int{0, 1, 2, 3, 5, 7, 8, 9, 101} {
			t.Run(fmt.Sprintf("threads=%d/n=%d", threads, n), func(t *testing.T) {
				hits := make([]atomic.Int32, n)
				var mu sync.Mutex
				var chunks [][2]int
				p.Run(n, func(start, end int) {
					mu.Lock()
					chunks = append(chunks, [2]int{start, end})
					mu.Unlock()
					for i := start; i < end; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					require.Equal(t, int32(1), hits[i].Load(), "index %d", i)
				}
				assert.Len(t, chunks, min(n, threads))
				lo, hi := n, 0
				for _, c := range chunks {
					assert.Less(t, c[0], c[1], "empty chunk")
					lo, hi = min(lo, c[1]-c[0]), max(hi, c[1]-c[0])
				}
				if n > 0 {
					assert.LessOrEqual(t, hi-lo, 1, "chunks of %v are uneven", chunks)
				}
			})
		}
		p.Close()
	}
}

func TestPoolRunsInParallel(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	// Every chunk waits for the others: this only returns if all three run
	// at once.
	var arrived sync.WaitGroup
	arrived.Add(3)
	p.Run(3, func(start, end int) {
		arrived.Done()
		arrived.Wait()
	})
}

func TestPoolRunPropagatesPanic(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	for _, bad := range []int{0, 1} { // the caller's chunk, then a worker's
		assert.PanicsWithValue(t, "boom", func() {
			p.Run(2, func(start, end int) {
				if start == bad {
					panic("boom")
				}
			})
		})
	}
	// The pool still works afterwards.
	var sum atomic.Int64
	p.Run(10, func(start, end int) {
		for i := start; i < end; i++ {
			sum.Add(int64(i))
		}
	})
	assert.Equal(t, int64(45), sum.Load())
}

func TestPoolCloseStopsWorkers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := NewPool(4)
	assert.Equal(t, 4, p.Threads())
	p.Run(100, func(start, end int) {})
	p.Close()
	p.Close() // idempotent
}

// TestPoolOnOneProc checks that spinning workers yield: with one P, Run
// still finishes (a worker that never yielded would hold the P for a
// preemption slice each time).
func TestPoolOnOneProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := NewPool(4)
	defer p.Close()
	start := time.Now()
	var sum atomic.Int64
	for range 200 {
		p.Run(8, func(start, end int) { sum.Add(int64(end - start)) })
	}
	assert.Equal(t, int64(1600), sum.Load())
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestPoolStats checks the counters: one barrier per Run that splits its
// work, none for a Run on one thread; parks once the pool idles past its
// spin.
func TestPoolStats(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	for range 5 {
		p.Run(2, func(start, end int) {})
	}
	p.Run(1, func(start, end int) {}) // one chunk: no barrier
	assert.Equal(t, uint64(5), p.Stats().Runs)
	// A worker descheduled past poolSpin makes its caller park: at most
	// once per Run (none on an idle machine, but that is timing).
	assert.LessOrEqual(t, p.Stats().CallerParks, uint64(5))
	// An idle worker parks after poolSpin and counts it when the next Run
	// wakes it. (Retried: a thread descheduled through the whole spin
	// sees the work before it parks.)
	require.Eventually(t, func() bool {
		time.Sleep(20 * poolSpin)
		p.Run(2, func(start, end int) {})
		return p.Stats().WorkerParks > 0
	}, 10*time.Second, time.Millisecond)
	// The caller parks when its worker takes longer than the spin.
	require.Eventually(t, func() bool {
		p.Run(2, func(start, end int) {
			if start > 0 {
				time.Sleep(20 * poolSpin)
			}
		})
		return p.Stats().CallerParks > 0
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, PoolStats{}, (*Pool)(nil).Stats())
}

// TestPoolShareCoversEachIndexOnce: Share's chunks are grain indices (the
// last shorter), each index in exactly one, whichever goroutine takes it.
func TestPoolShareCoversEachIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		for _, n := range []int{0, 1, 2, 7, 64, 101} {
			for _, grain := range []int{0, 1, 3, 16, 200} {
				t.Run(fmt.Sprintf("threads=%d/n=%d/grain=%d", threads, n, grain), func(t *testing.T) {
					hits := make([]atomic.Int32, n)
					var calls atomic.Int32
					g := max(grain, 1)
					if threads == 1 {
						g = n // one thread: the whole range at once
					}
					p.Share(n, grain, func(start, end int) {
						calls.Add(1)
						assert.Zero(t, start%max(g, 1), "chunk at %d", start)
						assert.Equal(t, min(n, start+g), end, "chunk at %d", start)
						for i := start; i < end; i++ {
							hits[i].Add(1)
						}
					})
					for i := range hits {
						require.Equal(t, int32(1), hits[i].Load(), "index %d", i)
					}
					if n > 0 {
						assert.Equal(t, int32((n+g-1)/g), calls.Load())
					}
				})
			}
		}
		p.Close()
	}
}

// TestPoolShareDoesNotWaitForLateWorkers: on one P a worker only runs when
// the caller yields, so the caller takes every chunk itself, withdraws the
// worker's task and returns; the pool stays consistent for Run and Share
// after it (a withdrawn worker's late wake-up does nothing).
func TestPoolShareDoesNotWaitForLateWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := NewPool(3)
	defer p.Close()
	var sum atomic.Int64
	for i := range 300 {
		if i%3 == 0 {
			p.Run(6, func(start, end int) { sum.Add(int64(end - start)) })
			continue
		}
		p.Share(64, 4, func(start, end int) { sum.Add(int64(end - start)) })
	}
	assert.Equal(t, int64(100*6+200*64), sum.Load())
}

// TestPoolShareStealsFromAStalledThread: one chunk stalls its goroutine
// while the others go on; every other chunk is done by the time it ends.
func TestPoolShareStealsFromAStalledThread(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	var done atomic.Int32
	var stalledSaw int32
	p.Share(40, 1, func(start, end int) {
		if start == 0 {
			require.Eventually(t, func() bool { return done.Load() == 39 }, 10*time.Second, time.Millisecond)
			stalledSaw = done.Load()
			return
		}
		done.Add(1)
	})
	assert.Equal(t, int32(39), stalledSaw, "the other thread took the stalled one's share")
}

func TestPoolSharePropagatesPanic(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	assert.PanicsWithValue(t, "boom", func() {
		p.Share(16, 1, func(start, end int) {
			if start == 9 {
				panic("boom")
			}
		})
	})
	var sum atomic.Int64
	p.Share(10, 2, func(start, end int) {
		for i := start; i < end; i++ {
			sum.Add(int64(i))
		}
	})
	assert.Equal(t, int64(45), sum.Load())
}

func TestPoolRunAfterClosePanics(t *testing.T) {
	p := NewPool(2)
	p.Close()
	assert.Panics(t, func() { p.Run(2, func(start, end int) {}) })
	assert.Panics(t, func() { p.Share(2, 1, func(start, end int) {}) })
}

func TestNilPoolRunsInline(t *testing.T) {
	var p *Pool
	assert.Equal(t, 1, p.Threads())
	var got [][2]int
	p.Run(5, func(start, end int) { got = append(got, [2]int{start, end}) })
	assert.Equal(t, [][2]int{{0, 5}}, got)
	got = nil
	p.Share(5, 2, func(start, end int) { got = append(got, [2]int{start, end}) })
	assert.Equal(t, [][2]int{{0, 5}}, got)
	p.Close()
	assert.Equal(t, 1, NewPool(0).Threads())
}

// BenchmarkPoolRun measures the cost of one Run with no work: the hand-off
// to the workers and back.
func BenchmarkPoolRun(b *testing.B) {
	for _, threads := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			for b.Loop() {
				p.Run(threads, func(start, end int) {})
			}
		})
	}
}
