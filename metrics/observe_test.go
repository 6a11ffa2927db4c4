package metrics_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/metrics"
)

// oneModel is a source serving model "m" with an 8192-token context.
func oneModel() *fakeSource {
	return &fakeSource{engines: []metrics.EngineSnapshot{{Model: "m", MaxModelLen: 8192}}}
}

// below returns a histogram's cumulative count at bound le.
func below(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%g", le)
	return 0
}

func TestObserveRequest(t *testing.T) {
	t.Parallel()
	m := metrics.New(oneModel().source())
	sel := modelSel("m")
	hist := func(fams map[string]*dto.MetricFamily, name string) *dto.Histogram {
		return histogram(t, fams, name, sel)
	}
	success := func(fams map[string]*dto.MetricFamily, reason string) float64 {
		return value(t, fams, "vllm:request_success_total", map[string]string{"model_name": "m", "engine": "0", "finished_reason": reason})
	}

	// Before anything: every series exists at zero.
	fams := gather(t, m)
	assert.Zero(t, hist(fams, "vllm:time_to_first_token_seconds").GetSampleCount())
	for _, r := range []string{"stop", "length", "abort"} {
		assert.Zero(t, success(fams, r), r)
	}

	m.ObserveRequest(metrics.RequestObservation{
		Model: "m", FinishedReason: "stop",
		PromptTokens: 100, CachedTokens: 64, GenerationTokens: 11, MaxTokens: 256, N: 1,
		TTFT: 150 * time.Millisecond, MeanITL: 40 * time.Millisecond,
		E2E: 600 * time.Millisecond, Queue: 50 * time.Millisecond, Prefill: 100 * time.Millisecond, Decode: 400 * time.Millisecond,
	})
	fams = gather(t, m)
	h := hist(fams, "vllm:time_to_first_token_seconds")
	assert.Equal(t, uint64(1), h.GetSampleCount())
	assert.InDelta(t, 0.15, h.GetSampleSum(), 1e-9)
	assert.Equal(t, uint64(0), below(t, h, 0.1))
	assert.Equal(t, uint64(1), below(t, h, 0.25))
	// 11 tokens, no ITLs: the mean is observed once per gap (10).
	h = hist(fams, "vllm:inter_token_latency_seconds")
	assert.Equal(t, uint64(10), h.GetSampleCount())
	assert.InDelta(t, 0.4, h.GetSampleSum(), 1e-9)
	assert.Equal(t, uint64(0), below(t, h, 0.025))
	assert.Equal(t, uint64(10), below(t, h, 0.05))
	h = hist(fams, "vllm:request_time_per_output_token_seconds")
	assert.Equal(t, uint64(1), h.GetSampleCount())
	assert.InDelta(t, 0.04, h.GetSampleSum(), 1e-9)
	for name, sum := range map[string]float64{
		"vllm:e2e_request_latency_seconds":    0.6,
		"vllm:request_queue_time_seconds":     0.05,
		"vllm:request_prefill_time_seconds":   0.1,
		"vllm:request_decode_time_seconds":    0.4,
		"vllm:request_inference_time_seconds": 0.5,
		"vllm:request_prompt_tokens":          100,
		"vllm:request_generation_tokens":      11,
		"vllm:request_params_max_tokens":      256,
		"vllm:request_params_n":               1,
	} {
		h := hist(fams, name)
		assert.Equal(t, uint64(1), h.GetSampleCount(), name)
		assert.InDelta(t, sum, h.GetSampleSum(), 1e-9, name)
	}
	assert.Equal(t, uint64(0), below(t, hist(fams, "vllm:request_prompt_tokens"), 50))
	assert.Equal(t, uint64(1), below(t, hist(fams, "vllm:request_prompt_tokens"), 100))
	assert.Equal(t, 100.0, value(t, fams, "vllm:prompt_tokens_total", sel))
	assert.Equal(t, 64.0, value(t, fams, "vllm:prompt_tokens_cached_total", sel))
	assert.Equal(t, 1.0, success(fams, "stop"))

	// Cancelled before any token: no TTFT, ITL or max_tokens observation;
	// n=0 counts as 1; "cancelled" is vLLM's "abort".
	m.ObserveRequest(metrics.RequestObservation{
		Model: "m", FinishedReason: "cancelled", PromptTokens: 20,
		E2E: 2 * time.Second, Queue: 2 * time.Second,
	})
	fams = gather(t, m)
	assert.Equal(t, uint64(1), hist(fams, "vllm:time_to_first_token_seconds").GetSampleCount())
	assert.Equal(t, uint64(10), hist(fams, "vllm:inter_token_latency_seconds").GetSampleCount())
	assert.Equal(t, uint64(1), hist(fams, "vllm:request_time_per_output_token_seconds").GetSampleCount())
	assert.Equal(t, uint64(1), hist(fams, "vllm:request_params_max_tokens").GetSampleCount())
	assert.Equal(t, uint64(2), hist(fams, "vllm:request_params_n").GetSampleCount())
	assert.InDelta(t, 2.0, hist(fams, "vllm:request_params_n").GetSampleSum(), 1e-9)
	assert.Equal(t, uint64(2), hist(fams, "vllm:e2e_request_latency_seconds").GetSampleCount())
	assert.Equal(t, uint64(2), hist(fams, "vllm:request_generation_tokens").GetSampleCount())
	assert.Equal(t, 120.0, value(t, fams, "vllm:prompt_tokens_total", sel))
	assert.Equal(t, 1.0, success(fams, "abort"))

	// Each given gap is observed on its own; the per-request mean comes
	// from them when MeanITL is not set.
	m.ObserveRequest(metrics.RequestObservation{
		Model: "m", FinishedReason: "length", PromptTokens: 5, GenerationTokens: 4, N: 1,
		TTFT: 10 * time.Millisecond,
		ITLs: []time.Duration{5 * time.Millisecond, 30 * time.Millisecond, 301 * time.Millisecond},
	})
	fams = gather(t, m)
	h = hist(fams, "vllm:inter_token_latency_seconds")
	assert.Equal(t, uint64(13), h.GetSampleCount())
	assert.InDelta(t, 0.4+0.336, h.GetSampleSum(), 1e-9)
	assert.Equal(t, uint64(1), below(t, h, 0.01))
	assert.Equal(t, uint64(12), below(t, h, 0.05))
	assert.Equal(t, uint64(12), below(t, h, 0.3))
	assert.Equal(t, uint64(13), below(t, h, 0.4))
	h = hist(fams, "vllm:request_time_per_output_token_seconds")
	assert.Equal(t, uint64(2), h.GetSampleCount())
	assert.InDelta(t, 0.04+0.112, h.GetSampleSum(), 1e-9)
	assert.Equal(t, 1.0, success(fams, "length"))

	// With n=2, 10 tokens are 8 gaps.
	m.ObserveRequest(metrics.RequestObservation{Model: "m", FinishedReason: "stop", GenerationTokens: 10, N: 2,
		MeanITL: 20 * time.Millisecond})
	h = hist(gather(t, m), "vllm:inter_token_latency_seconds")
	assert.Equal(t, uint64(21), h.GetSampleCount())
	assert.InDelta(t, 0.736+0.16, h.GetSampleSum(), 1e-9)
}

func TestFinishedReason(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length",
		"abort": "abort", "cancelled": "abort", "error": "abort", "": "abort", "whatever": "abort",
	} {
		t.Run(fmt.Sprintf("reason=%q", reason), func(t *testing.T) {
			t.Parallel()
			m := metrics.New(oneModel().source())
			m.ObserveRequest(metrics.RequestObservation{Model: "m", FinishedReason: reason})
			fams := gather(t, m)
			require.Len(t, fams["vllm:request_success_total"].GetMetric(), 3)
			for _, r := range []string{"stop", "length", "abort"} {
				v := value(t, fams, "vllm:request_success_total", map[string]string{"model_name": "m", "finished_reason": r})
				if r == want {
					assert.Equal(t, 1.0, v, r)
				} else {
					assert.Equal(t, 0.0, v, r)
				}
			}
		})
	}
}

// modelNames returns the model_name values of a family.
func modelNames(fams map[string]*dto.MetricFamily, name string) map[string]bool {
	out := map[string]bool{}
	for _, s := range fams[name].GetMetric() {
		out[labelsOf(s)["model_name"]] = true
	}
	return out
}

func TestCardinalityGuard(t *testing.T) {
	t.Parallel()
	t.Run("unknown models count as other", func(t *testing.T) {
		t.Parallel()
		src := oneModel()
		m := metrics.New(src.source())
		for i := range 1000 {
			m.ObserveRequest(metrics.RequestObservation{Model: fmt.Sprintf("junk-%d", i), FinishedReason: "stop", PromptTokens: 1})
			m.ObserveRejected(fmt.Sprintf("junk-%d", i), "overload")
		}
		m.ObserveRequest(metrics.RequestObservation{Model: "m", FinishedReason: "stop", PromptTokens: 2})
		fams := gather(t, m)
		for _, name := range []string{"vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds",
			"llmd_requests_rejected_total"} {
			names := modelNames(fams, name)
			assert.LessOrEqual(t, len(names), 2, name)
			for n := range names {
				assert.Contains(t, []string{"m", "other"}, n, name)
			}
		}
		assert.Equal(t, 1000.0, value(t, fams, "vllm:prompt_tokens_total", modelSel("other")))
		assert.Equal(t, 2.0, value(t, fams, "vllm:prompt_tokens_total", modelSel("m")))
		assert.Equal(t, 1000.0, value(t, fams, "llmd_requests_rejected_total", map[string]string{"model_name": "other", "reason": "overload"}))
		// The "other" token histograms have the default buckets.
		assert.Equal(t, 1e6, bounds(histogram(t, fams, "vllm:request_prompt_tokens", modelSel("other")))[18])
		// Misses re-read the engines at most once a second: New, then the
		// first miss (and one more if this test ran past a second).
		assert.LessOrEqual(t, src.engineCalls(), 3)
	})
	t.Run("rejection reasons are bounded", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(oneModel().source())
		for i := range 100 {
			m.ObserveRejected("m", fmt.Sprintf("reason-%d", i))
		}
		m.ObserveRejected("m", "reason-0")
		fams := gather(t, m)
		assert.Len(t, fams["llmd_requests_rejected_total"].GetMetric(), 65)
		assert.Equal(t, 2.0, value(t, fams, "llmd_requests_rejected_total", map[string]string{"model_name": "m", "reason": "reason-0"}))
		assert.Equal(t, 36.0, value(t, fams, "llmd_requests_rejected_total", map[string]string{"model_name": "m", "reason": "other"}))
	})
	t.Run("a model served after New is learned", func(t *testing.T) {
		t.Parallel()
		src := &fakeSource{}
		m := metrics.New(src.source())
		src.set(func(f *fakeSource) {
			f.engines = []metrics.EngineSnapshot{{Model: "late", MaxModelLen: 100}}
		})
		m.ObserveRequest(metrics.RequestObservation{Model: "late", FinishedReason: "stop", PromptTokens: 3})
		fams := gather(t, m)
		assert.Equal(t, 3.0, value(t, fams, "vllm:prompt_tokens_total", modelSel("late")))
		assert.Equal(t, []float64{1, 2, 5, 10, 20, 50, 100}, bounds(histogram(t, fams, "vllm:request_prompt_tokens", modelSel("late"))))
		assert.NotContains(t, modelNames(fams, "vllm:prompt_tokens_total"), "other")
	})
	t.Run("a rejection learns a model served after New", func(t *testing.T) {
		t.Parallel()
		src := &fakeSource{}
		m := metrics.New(src.source())
		src.set(func(f *fakeSource) { f.engines = []metrics.EngineSnapshot{{Model: "late"}} })
		m.ObserveRejected("late", "quota_rpm")
		fams := gather(t, m)
		assert.Equal(t, 1.0, value(t, fams, "llmd_requests_rejected_total", map[string]string{"model_name": "late", "reason": "quota_rpm"}))
	})
	t.Run("a scrape learns new models", func(t *testing.T) {
		t.Parallel()
		src := &fakeSource{}
		m := metrics.New(src.source())
		// Spend the miss refresh.
		m.ObserveRequest(metrics.RequestObservation{Model: "nope"})
		src.set(func(f *fakeSource) { f.engines = []metrics.EngineSnapshot{{Model: "new"}} })
		gather(t, m)
		m.ObserveRequest(metrics.RequestObservation{Model: "new", FinishedReason: "stop", PromptTokens: 4})
		m.ObserveRejected("new", "overload")
		fams := gather(t, m)
		assert.Equal(t, 4.0, value(t, fams, "vllm:prompt_tokens_total", modelSel("new")))
		assert.Equal(t, 1.0, value(t, fams, "llmd_requests_rejected_total", map[string]string{"model_name": "new", "reason": "overload"}))
	})
	t.Run("a served model named other", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(metrics.Source{Engines: func() []metrics.EngineSnapshot {
			return []metrics.EngineSnapshot{{Model: metrics.OtherModel}}
		}})
		m.ObserveRequest(metrics.RequestObservation{Model: "junk", PromptTokens: 1})
		m.ObserveRequest(metrics.RequestObservation{Model: "other", PromptTokens: 1})
		fams := gather(t, m) // fails on duplicate series
		assert.Equal(t, 2.0, value(t, fams, "vllm:prompt_tokens_total", modelSel("other")))
	})
}

func TestConcurrentObserve(t *testing.T) {
	t.Parallel()
	src := &fakeSource{engines: []metrics.EngineSnapshot{{Model: "a"}, {Model: "b"}}}
	m := metrics.New(src.source())
	const workers, each = 8, 500
	itls := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}

	done := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := m.Registry().Gather(); err != nil {
				t.Errorf("gather: %v", err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				model := [...]string{"a", "b", "stranger"}[(w+i)%3]
				m.ObserveRequest(metrics.RequestObservation{Model: model, FinishedReason: "stop", PromptTokens: 2,
					GenerationTokens: 3, TTFT: time.Millisecond, ITLs: itls, E2E: time.Second})
				m.ObserveRejected(model, "overload")
				m.ObserveQuotaDecision("allow")
			}
		})
	}
	wg.Wait()
	close(done)
	<-scraped

	fams := gather(t, m)
	var prompt, success, rejected float64
	var ttft, itl uint64
	for _, model := range []string{"a", "b", "other"} {
		sel := modelSel(model)
		prompt += value(t, fams, "vllm:prompt_tokens_total", sel)
		success += value(t, fams, "vllm:request_success_total", map[string]string{"model_name": model, "finished_reason": "stop"})
		rejected += value(t, fams, "llmd_requests_rejected_total", map[string]string{"model_name": model})
		ttft += histogram(t, fams, "vllm:time_to_first_token_seconds", sel).GetSampleCount()
		itl += histogram(t, fams, "vllm:inter_token_latency_seconds", sel).GetSampleCount()
	}
	const n = workers * each
	assert.Equal(t, float64(2*n), prompt)
	assert.Equal(t, float64(n), success)
	assert.Equal(t, float64(n), rejected)
	assert.Equal(t, uint64(n), ttft)
	assert.Equal(t, uint64(2*n), itl)
	assert.Equal(t, float64(n), value(t, fams, "llmd_quota_decisions_total", map[string]string{"result": "allow"}))
}
