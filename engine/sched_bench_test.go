package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// benchLoad is a scheduler under a steady load: requests of promptLen
// tokens are queued, and every finished request is replaced by a new one.
type benchLoad struct {
	s        *Scheduler
	out      Output
	finished int
	next     int
	// request builds the i-th request's fields beyond its prompt.
	request func(i int) Request
	submit  func()
}

func newBenchLoad(b *testing.B, cfg SchedulerConfig, pool *kvcache.Pool, promptLen int, request func(i int) Request) *benchLoad {
	l := &benchLoad{request: request}
	var err error
	l.s, err = NewScheduler(cfg, pool, func(_ *Request, ev Event) {
		if ev.Last() {
			l.finished++
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	l.submit = func() {
		req := l.request(l.next)
		req.ID, req.N, req.Seed = fmt.Sprint(l.next), 1, uint64(l.next)
		req.Prompt = make([]int32, promptLen)
		for i := range req.Prompt {
			req.Prompt[i] = int32(l.next*promptLen + i + 1)
		}
		if err := l.s.Add(req); err != nil {
			b.Fatal(err)
		}
		l.next++
	}
	return l
}

// step runs one Step and Apply with deterministic tokens, then replaces
// finished requests.
func (l *benchLoad) step() {
	plan := l.s.Step()
	l.out.Tokens = l.out.Tokens[:0]
	for i := range plan.Batch.Seqs {
		tok := int32(-1)
		if in := &plan.Batch.Seqs[i]; in.Sample {
			tok = fakeToken(in.Seed, in.Generated)
		}
		l.out.Tokens = append(l.out.Tokens, tok)
	}
	l.s.Apply(plan, &l.out, time.Time{})
	for ; l.finished > 0; l.finished-- {
		l.submit()
	}
}

// BenchmarkSchedulerStep measures one Step plus Apply with a full running
// set decoding and a long waiting queue. Finished requests are replaced
// from the queue, so admissions and prefill chunks are part of the mix.
func BenchmarkSchedulerStep(b *testing.B) {
	for _, tc := range []struct{ running, waiting int }{{256, 10000}, {64, 1000}} {
		b.Run(fmt.Sprintf("running=%d/waiting=%d", tc.running, tc.waiting), func(b *testing.B) {
			const promptLen, maxTok, blockSize = 128, 256, 16
			pool, err := kvcache.NewPool(tc.running*((promptLen+maxTok)/blockSize+2), blockSize)
			if err != nil {
				b.Fatal(err)
			}
			l := newBenchLoad(b, SchedulerConfig{MaxBatchTokens: 2048, MaxRunning: tc.running, ContextLength: 4096},
				pool, promptLen, func(i int) Request {
					// Staggered lengths so requests finish on different steps.
					return Request{Priority: PriorityBatch, MaxTokens: maxTok/2 + i%(maxTok/2)}
				})
			for range tc.running + tc.waiting {
				l.submit()
			}
			// Warm up until the running set is full and decoding.
			for l.s.NumRunning() < tc.running || l.s.Stats().StepTokens > tc.running {
				l.step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.step()
			}
			b.StopTimer()
			b.ReportMetric(float64(l.s.Stats().GeneratedTokens)/float64(l.s.Stats().Steps), "tokens/step")
		})
	}
}

// BenchmarkSchedulerStepPreempting measures steps of a scheduler whose KV
// pool holds a quarter of what its admitted sequences grow to, so
// preemptions (by recompute) happen every few steps.
func BenchmarkSchedulerStepPreempting(b *testing.B) {
	const running, promptLen, maxTok, blockSize = 128, 16, 240, 16
	pool, err := kvcache.NewPool(running*(promptLen+maxTok)/blockSize/4, blockSize)
	if err != nil {
		b.Fatal(err)
	}
	l := newBenchLoad(b, SchedulerConfig{MaxBatchTokens: 2048, MaxRunning: running, ContextLength: 4096, DefaultExpectedOutput: 1},
		pool, promptLen, func(i int) Request {
			// A new tenant each time: no output history, so admission
			// projects one output token and over-admits on purpose.
			return Request{Tenant: fmt.Sprint(i), Priority: PriorityBatch, MaxTokens: maxTok}
		})
	for range 2 * running {
		l.submit()
	}
	b.ReportAllocs()
	for b.Loop() {
		l.step()
	}
	st := l.s.Stats()
	b.ReportMetric(float64(st.Preemptions)/float64(st.Steps), "preemptions/step")
	b.ReportMetric(float64(st.GeneratedTokens)/float64(st.Steps), "tokens/step")
}

func BenchmarkPoolAllocateRelease(b *testing.B) {
	pool, err := kvcache.NewPool(1<<16, 16)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int32, 256)
	b.ReportAllocs()
	for b.Loop() {
		for i := range ids {
			ids[i], _ = pool.Allocate()
		}
		for _, id := range ids {
			pool.Release(id)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/block")
}
