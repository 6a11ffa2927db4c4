package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// BenchmarkSchedulerStep measures one Step plus Apply with a full running
// set decoding and a long waiting queue. Finished requests are replaced
// from the queue, so admissions and prefill chunks are part of the mix.
func BenchmarkSchedulerStep(b *testing.B) {
	for _, tc := range []struct{ running, waiting int }{{256, 10000}, {64, 1000}} {
		b.Run(fmt.Sprintf("running=%d/waiting=%d", tc.running, tc.waiting), func(b *testing.B) {
			const promptLen, maxTok, blockSize = 128, 256, 16
			blocks := tc.running * ((promptLen+maxTok)/blockSize + 2)
			pool, err := kvcache.NewPool(blocks, blockSize)
			if err != nil {
				b.Fatal(err)
			}
			finished := 0
			s, err := NewScheduler(SchedulerConfig{MaxBatchTokens: 2048, MaxRunning: tc.running, ContextLength: 4096},
				pool, func(_ *Request, ev Event) {
					if ev.Last() {
						finished++
					}
				})
			if err != nil {
				b.Fatal(err)
			}
			next := 0
			submit := func() {
				p := make([]int32, promptLen)
				for i := range p {
					p[i] = int32(next*promptLen + i + 1)
				}
				// Staggered lengths so requests finish on different steps.
				if err := s.Add(Request{ID: fmt.Sprint(next), Prompt: p, MaxTokens: maxTok/2 + next%(maxTok/2), N: 1, Seed: uint64(next)}); err != nil {
					b.Fatal(err)
				}
				next++
			}
			for range tc.running + tc.waiting {
				submit()
			}
			out := &Output{}
			step := func() {
				plan := s.Step()
				out.Tokens = out.Tokens[:0]
				for i := range plan.Batch.Seqs {
					tok := int32(-1)
					if in := &plan.Batch.Seqs[i]; in.Sample {
						tok = fakeToken(in.Seed, in.Generated)
					}
					out.Tokens = append(out.Tokens, tok)
				}
				s.Apply(plan, out, time.Time{})
				for ; finished > 0; finished-- {
					submit()
				}
			}
			// Warm up until the running set is full and decoding.
			for s.NumRunning() < tc.running || s.Stats().StepTokens > tc.running {
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			b.StopTimer()
			b.ReportMetric(float64(s.Stats().GeneratedTokens)/float64(s.Stats().Steps), "tokens/step")
		})
	}
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

// BenchmarkSchedulerStepPreempting measures steps of a scheduler whose KV
// pool holds a quarter of what its admitted sequences grow to, so
// preemptions (by recompute) happen every few steps.
func BenchmarkSchedulerStepPreempting(b *testing.B) {
	const running, promptLen, maxTok, blockSize = 128, 16, 240, 16
	pool, err := kvcache.NewPool(running*(promptLen+maxTok)/blockSize/4, blockSize)
	if err != nil {
		b.Fatal(err)
	}
	finished := 0
	s, err := NewScheduler(SchedulerConfig{MaxBatchTokens: 2048, MaxRunning: running, ContextLength: 4096, DefaultExpectedOutput: 1},
		pool, func(_ *Request, ev Event) {
			if ev.Last() {
				finished++
			}
		})
	if err != nil {
		b.Fatal(err)
	}
	next := 0
	submit := func() {
		p := make([]int32, promptLen)
		for i := range p {
			p[i] = int32(next*promptLen + i + 1)
		}
		// A new tenant each time: no output history, so admission projects
		// one output token and over-admits on purpose.
		if err := s.Add(Request{ID: fmt.Sprint(next), Tenant: fmt.Sprint(next), Prompt: p, MaxTokens: maxTok, N: 1, Seed: uint64(next)}); err != nil {
			b.Fatal(err)
		}
		next++
	}
	for range 2 * running {
		submit()
	}
	out := &Output{}
	b.ReportAllocs()
	for b.Loop() {
		plan := s.Step()
		out.Tokens = out.Tokens[:0]
		for i := range plan.Batch.Seqs {
			tok := int32(-1)
			if in := &plan.Batch.Seqs[i]; in.Sample {
				tok = fakeToken(in.Seed, in.Generated)
			}
			out.Tokens = append(out.Tokens, tok)
		}
		s.Apply(plan, out, time.Time{})
		for ; finished > 0; finished-- {
			submit()
		}
	}
	st := s.Stats()
	b.ReportMetric(float64(st.Preemptions)/float64(st.Steps), "preemptions/step")
	b.ReportMetric(float64(st.GeneratedTokens)/float64(st.Steps), "tokens/step")
}
