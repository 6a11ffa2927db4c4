package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkUsageWriter is ME-6: parallel producers call Record, each
// waiting for its group commit (synchronous=FULL, on the disk of the
// test's temporary directory). It reports events/s, events per commit and
// the commit time's p99; the goal is at least 2,000 events/s with a p99
// under 50 ms.
func BenchmarkUsageWriter(b *testing.B) {
	for _, producers := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			s := openStore(b, b.TempDir())
			var commits []time.Duration // written by the writer's goroutine only
			w, err := s.newUsageWriter(UsageWriterConfig{}, writerHooks{
				onCommit: func(_ int, d time.Duration) { commits = append(commits, d) },
			})
			if err != nil {
				b.Fatal(err)
			}
			stop := runWriter(b, w)
			ctx := context.Background()
			var next atomic.Int64 // the events' numbers, 1 to b.N
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for range producers {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if err := w.Record(ctx, done(fmt.Sprintf("r%d", i))); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			st := w.Stats()
			if st.Spooled+st.Failed > 0 {
				b.Fatalf("%d events spooled, %d failed", st.Spooled, st.Failed)
			}
			slices.Sort(commits)
			p99 := commits[(len(commits)*99)/100]
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/float64(len(commits)), "events/commit")
			b.ReportMetric(float64(p99)/float64(time.Millisecond), "commit-p99-ms")
		})
	}
}

// BenchmarkUsageProgress measures the checkpoints of running requests
// (issue 18): one producer calls Progress as fast as it can, round-robin
// over the requests, each call with one more output token. ns/op is the
// call's cost on the relay; rows/s the checkpoints committed (the rest
// were coalesced: the writer takes what it can).
func BenchmarkUsageProgress(b *testing.B) {
	for _, requests := range []int{24, 5000} {
		b.Run(fmt.Sprintf("requests=%d", requests), func(b *testing.B) {
			s := openStore(b, b.TempDir())
			w, err := s.newUsageWriter(UsageWriterConfig{}, writerHooks{})
			if err != nil {
				b.Fatal(err)
			}
			stop := runWriter(b, w)
			evs := make([]UsageEvent, requests)
			for i := range evs {
				evs[i] = admitted(fmt.Sprintf("r%d", i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ev := &evs[i%requests]
				ev.OutputTokens++
				if err := w.Progress(*ev); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := w.Stats()
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Committed)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(st.ProgressDropped), "dropped")
		})
	}
}
