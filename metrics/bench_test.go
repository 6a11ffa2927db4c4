package metrics_test

import (
	"testing"
	"time"

	"github.com/llmd/llmd/metrics"
)

func BenchmarkObserveRequest(b *testing.B) {
	src := &fakeSource{engines: []metrics.EngineSnapshot{{Model: "m", MaxModelLen: 32768}}}
	obs := metrics.RequestObservation{
		Model: "m", FinishedReason: "stop", PromptTokens: 1500, CachedTokens: 1024, GenerationTokens: 257,
		MaxTokens: 512, N: 1, TTFT: 180 * time.Millisecond, MeanITL: 22 * time.Millisecond,
		E2E: 6 * time.Second, Queue: 40 * time.Millisecond, Prefill: 140 * time.Millisecond, Decode: 5700 * time.Millisecond,
	}
	gaps := make([]time.Duration, 256)
	for i := range gaps {
		gaps[i] = time.Duration(15+i%20) * time.Millisecond
	}
	for _, c := range []struct {
		name string
		itls []time.Duration
	}{{"itls=0", nil}, {"itls=256", gaps}} {
		o := obs
		o.ITLs = c.itls
		b.Run(c.name, func(b *testing.B) {
			m := metrics.New(src.source())
			b.ReportAllocs()
			for b.Loop() {
				m.ObserveRequest(o)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			m := metrics.New(src.source())
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m.ObserveRequest(o)
				}
			})
		})
	}
}
