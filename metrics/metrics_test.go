package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/quota"
)

// twoModels is a source with a busy model and an idle one that leaves
// block size, block count and context length to the defaults.
func twoModels() *fakeSource {
	busy := engine.Stats{
		SchedStats: engine.SchedStats{GeneratedTokens: 12345, PrefixQueryTokens: 1000, PrefixHitTokens: 400,
			Preemptions: 7, PreemptionsSwap: 5, PreemptionsRecompute: 2,
			SpecDrafts: 10, SpecDraftTokens: 40, SpecAcceptedTokens: 30},
		BlocksTotal: 1000, BlocksUsed: 250, BlockSize: 16, Running: 3, Waiting: 15,
		Swapped: 2, SwapBlocksUsed: 10, SwapBlocksTotal: 40, Evictions: 9,
		WaitingByPriority: [engine.NumPriorities]int{engine.PriorityShadow: 3, engine.PriorityBatch: 1, engine.PriorityFree: 2,
			engine.PriorityPaid: 4, engine.PriorityEnterprise: 5},
		Degrade: engine.DegradeLimitFree,
	}
	return &fakeSource{
		engines: []metrics.EngineSnapshot{
			{Model: "llama-8b", Stats: busy, BlockSize: 16, NumBlocks: 1000, PrefixCaching: true, CacheDType: "q8_0", MaxModelLen: 4096},
			{Model: "tiny", Stats: engine.Stats{BlockSize: 32, BlocksTotal: 64}, CacheDType: "sim"},
		},
		quota: quota.Counters{Allow: 10, Deny: 2, ErrorAllowed: 1, ErrorDenied: 3, Resets: 4, FallbackActive: true,
			HotDetected: 2},
		usage: metrics.UsageWriterSnapshot{Queued: 3, Lag: 1500 * time.Millisecond, Committed: 100, Spooled: 7, Failed: 1},
	}
}

var (
	vllmLabels = []string{"engine", "model_name"}
	gauge      = dto.MetricType_GAUGE
	counter    = dto.MetricType_COUNTER
	histo      = dto.MetricType_HISTOGRAM
)

// exposed lists every series llmd exposes besides go_* and process_*:
// name, type and label names.
var exposed = []struct {
	name   string
	typ    dto.MetricType
	labels []string
}{
	{"vllm:num_requests_running", gauge, vllmLabels},
	{"vllm:num_requests_waiting", gauge, vllmLabels},
	{"vllm:kv_cache_usage_perc", gauge, vllmLabels},
	{"vllm:cache_config_info", gauge, []string{"block_size", "cache_dtype", "enable_prefix_caching", "engine", "model_name", "num_gpu_blocks"}},
	{"vllm:lora_requests_info", gauge, []string{"engine", "max_lora", "model_name", "running_lora_adapters", "waiting_lora_adapters"}},
	{"vllm:prefix_cache_queries_total", counter, vllmLabels},
	{"vllm:prefix_cache_hits_total", counter, vllmLabels},
	{"vllm:num_preemptions_total", counter, vllmLabels},
	{"vllm:generation_tokens_total", counter, vllmLabels},
	{"vllm:prompt_tokens_total", counter, vllmLabels},
	{"vllm:prompt_tokens_cached_total", counter, vllmLabels},
	{"vllm:request_success_total", counter, []string{"engine", "finished_reason", "model_name"}},
	{"vllm:time_to_first_token_seconds", histo, vllmLabels},
	{"vllm:inter_token_latency_seconds", histo, vllmLabels},
	{"vllm:request_time_per_output_token_seconds", histo, vllmLabels},
	{"vllm:e2e_request_latency_seconds", histo, vllmLabels},
	{"vllm:request_queue_time_seconds", histo, vllmLabels},
	{"vllm:request_prefill_time_seconds", histo, vllmLabels},
	{"vllm:request_decode_time_seconds", histo, vllmLabels},
	{"vllm:request_inference_time_seconds", histo, vllmLabels},
	{"vllm:request_prompt_tokens", histo, vllmLabels},
	{"vllm:request_generation_tokens", histo, vllmLabels},
	{"vllm:request_params_max_tokens", histo, vllmLabels},
	{"vllm:request_params_n", histo, vllmLabels},
	{"llmd_queue_depth", gauge, []string{"model_name", "tier"}},
	{"llmd_degradation_level", gauge, []string{"model_name"}},
	{"llmd_degradation_state", gauge, []string{"level", "model_name"}},
	{"llmd_swapped_sequences", gauge, []string{"model_name"}},
	{"llmd_swap_usage_perc", gauge, []string{"model_name"}},
	{"llmd_preemptions_total", counter, []string{"kind", "model_name"}},
	{"llmd_kv_cache_evictions_total", counter, []string{"model_name"}},
	{"vllm:spec_decode_num_drafts_total", counter, vllmLabels},
	{"vllm:spec_decode_num_draft_tokens_total", counter, vllmLabels},
	{"vllm:spec_decode_num_accepted_tokens_total", counter, vllmLabels},
	{"llmd_spec_decode_acceptance_rate", gauge, []string{"model_name"}},
	{"llmd_requests_rejected_total", counter, []string{"model_name", "reason"}},
	{"llmd_quota_decisions_total", counter, []string{"result"}},
	{"llmd_quota_fallback_active", gauge, nil},
	{"llmd_quota_state_resets_total", counter, nil},
	{"llmd_quota_hot_tenants_detected_total", counter, nil},
	{"llmd_usage_writer_queue", gauge, nil},
	{"llmd_usage_writer_lag_seconds", gauge, nil},
	{"llmd_usage_events_total", counter, []string{"result"}},
}

func TestExposition(t *testing.T) {
	t.Parallel()
	m := metrics.New(twoModels().source())
	m.ObserveRejected("llama-8b", "overload")
	fams := scrape(t, m)

	want := map[string]bool{}
	for _, e := range exposed {
		want[e.name] = true
		t.Run(e.name, func(t *testing.T) {
			f := fams[e.name]
			require.NotNil(t, f, "not exposed")
			assert.Equal(t, e.typ, f.GetType(), "# TYPE")
			assert.NotEmpty(t, f.GetHelp(), "# HELP")
			if e.typ == counter {
				assert.True(t, strings.HasSuffix(e.name, "_total"), "counter without _total")
			}
			require.NotEmpty(t, f.GetMetric())
			for _, s := range f.GetMetric() {
				assert.Equal(t, e.labels, labelNames(s))
				if strings.HasPrefix(e.name, "vllm:") {
					l := labelsOf(s)
					assert.Equal(t, "0", l["engine"])
					assert.Contains(t, []string{"llama-8b", "tiny"}, l["model_name"])
				}
			}
		})
	}
	for name := range fams {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		assert.True(t, want[name], "unexpected series %s", name)
	}
	assert.Contains(t, fams, "go_goroutines")
	assert.Contains(t, fams, "process_start_time_seconds")
}

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	ttft := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itl := []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	latency := []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	// 1-2-5 up to the context length, 4096 for llama-8b; 1,000,000 for
	// tiny, whose context length is unknown.
	to4096 := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}
	toMillion := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
		100000, 200000, 500000, 1000000}
	n := []float64{1, 2, 5, 10, 20}

	fams := scrape(t, metrics.New(twoModels().source()))
	for _, c := range []struct {
		name         string
		llama, small []float64
	}{
		{"vllm:time_to_first_token_seconds", ttft, ttft},
		{"vllm:inter_token_latency_seconds", itl, itl},
		{"vllm:request_time_per_output_token_seconds", itl, itl},
		{"vllm:e2e_request_latency_seconds", latency, latency},
		{"vllm:request_queue_time_seconds", latency, latency},
		{"vllm:request_prefill_time_seconds", latency, latency},
		{"vllm:request_decode_time_seconds", latency, latency},
		{"vllm:request_inference_time_seconds", latency, latency},
		{"vllm:request_prompt_tokens", to4096, toMillion},
		{"vllm:request_generation_tokens", to4096, toMillion},
		{"vllm:request_params_max_tokens", to4096, toMillion},
		{"vllm:request_params_n", n, n},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.llama, bounds(histogram(t, fams, c.name, modelSel("llama-8b"))))
			assert.Equal(t, c.small, bounds(histogram(t, fams, c.name, modelSel("tiny"))))
		})
	}
}

func TestValuesFollowSource(t *testing.T) {
	t.Parallel()
	src := twoModels()
	m := metrics.New(src.source())
	llama, tiny := modelSel("llama-8b"), modelSel("tiny")
	byModel := func(model string, kv ...string) map[string]string {
		l := map[string]string{"model_name": model}
		for i := 0; i < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}

	before := time.Now()
	fams := scrape(t, m)
	after := time.Now()
	assert.Equal(t, 3.0, value(t, fams, "vllm:num_requests_running", llama))
	assert.Equal(t, 15.0, value(t, fams, "vllm:num_requests_waiting", llama))
	assert.Equal(t, 0.25, value(t, fams, "vllm:kv_cache_usage_perc", llama))
	assert.Equal(t, 0.0, value(t, fams, "vllm:kv_cache_usage_perc", tiny))
	assert.Equal(t, 1000.0, value(t, fams, "vllm:prefix_cache_queries_total", llama))
	assert.Equal(t, 400.0, value(t, fams, "vllm:prefix_cache_hits_total", llama))
	assert.Equal(t, 7.0, value(t, fams, "vllm:num_preemptions_total", llama))
	assert.Equal(t, 12345.0, value(t, fams, "vllm:generation_tokens_total", llama))
	assert.Equal(t, 1.0, value(t, fams, "vllm:cache_config_info", map[string]string{"model_name": "llama-8b",
		"engine": "0", "block_size": "16", "num_gpu_blocks": "1000", "enable_prefix_caching": "True", "cache_dtype": "q8_0"}))
	// tiny's block size and count come from its Stats.
	assert.Equal(t, 1.0, value(t, fams, "vllm:cache_config_info", map[string]string{"model_name": "tiny",
		"block_size": "32", "num_gpu_blocks": "64", "enable_prefix_caching": "False", "cache_dtype": "sim"}))
	lora := value(t, fams, "vllm:lora_requests_info", map[string]string{"model_name": "llama-8b",
		"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""})
	assert.InDelta(t, float64(before.UnixNano())/1e9, lora, float64(after.Sub(before))/1e9+1, "lora_requests_info is the scrape time")
	for tier, v := range map[string]float64{"shadow": 3, "batch": 1, "free": 2, "paid": 4, "enterprise": 5} {
		assert.Equal(t, v, value(t, fams, "llmd_queue_depth", byModel("llama-8b", "tier", tier)), tier)
	}
	assert.Equal(t, 2.0, value(t, fams, "llmd_degradation_level", byModel("llama-8b")))
	for level, v := range map[string]float64{"none": 0, "pause_batch": 0, "limit_free": 1, "shed_free": 0, "queue_paid": 0} {
		assert.Equal(t, v, value(t, fams, "llmd_degradation_state", byModel("llama-8b", "level", level)), level)
	}
	assert.Equal(t, 2.0, value(t, fams, "llmd_swapped_sequences", byModel("llama-8b")))
	assert.Equal(t, 0.25, value(t, fams, "llmd_swap_usage_perc", byModel("llama-8b")))
	assert.Equal(t, 5.0, value(t, fams, "llmd_preemptions_total", byModel("llama-8b", "kind", "swap")))
	assert.Equal(t, 2.0, value(t, fams, "llmd_preemptions_total", byModel("llama-8b", "kind", "recompute")))
	assert.Equal(t, 9.0, value(t, fams, "llmd_kv_cache_evictions_total", byModel("llama-8b")))
	assert.Equal(t, 10.0, value(t, fams, "vllm:spec_decode_num_drafts_total", llama))
	assert.Equal(t, 40.0, value(t, fams, "vllm:spec_decode_num_draft_tokens_total", llama))
	assert.Equal(t, 30.0, value(t, fams, "vllm:spec_decode_num_accepted_tokens_total", llama))
	assert.Equal(t, 0.75, value(t, fams, "llmd_spec_decode_acceptance_rate", byModel("llama-8b")))
	assert.Equal(t, 0.0, value(t, fams, "llmd_spec_decode_acceptance_rate", byModel("tiny")))
	for result, v := range map[string]float64{"allow": 10, "deny": 2, "error_allowed": 1, "error_denied": 3} {
		assert.Equal(t, v, value(t, fams, "llmd_quota_decisions_total", map[string]string{"result": result}), result)
	}
	assert.Equal(t, 1.0, value(t, fams, "llmd_quota_fallback_active", nil))
	assert.Equal(t, 4.0, value(t, fams, "llmd_quota_state_resets_total", nil))
	assert.Equal(t, 2.0, value(t, fams, "llmd_quota_hot_tenants_detected_total", nil))
	assert.Equal(t, 3.0, value(t, fams, "llmd_usage_writer_queue", nil))
	assert.Equal(t, 1.5, value(t, fams, "llmd_usage_writer_lag_seconds", nil))
	for result, v := range map[string]float64{"committed": 100, "spooled": 7, "failed": 1} {
		assert.Equal(t, v, value(t, fams, "llmd_usage_events_total", map[string]string{"result": result}), result)
	}

	src.set(func(f *fakeSource) {
		s := &f.engines[0].Stats
		s.Running, s.Waiting, s.BlocksUsed = 0, 9, 1000
		s.GeneratedTokens += 55
		s.WaitingByPriority = [engine.NumPriorities]int{engine.PriorityPaid: 9}
		s.Degrade = engine.DegradeNone
		f.quota = quota.Counters{Allow: 11, Deny: 2}
		f.usage = metrics.UsageWriterSnapshot{Committed: 101}
	})
	fams = scrape(t, m)
	assert.Equal(t, 0.0, value(t, fams, "vllm:num_requests_running", llama))
	assert.Equal(t, 9.0, value(t, fams, "vllm:num_requests_waiting", llama))
	assert.Equal(t, 1.0, value(t, fams, "vllm:kv_cache_usage_perc", llama))
	assert.Equal(t, 12400.0, value(t, fams, "vllm:generation_tokens_total", llama))
	assert.Equal(t, 9.0, value(t, fams, "llmd_queue_depth", byModel("llama-8b", "tier", "paid")))
	assert.Equal(t, 0.0, value(t, fams, "llmd_queue_depth", byModel("llama-8b", "tier", "free")))
	assert.Equal(t, 0.0, value(t, fams, "llmd_queue_depth", byModel("llama-8b", "tier", "shadow")))
	assert.Equal(t, 0.0, value(t, fams, "llmd_degradation_level", byModel("llama-8b")))
	assert.Equal(t, 1.0, value(t, fams, "llmd_degradation_state", byModel("llama-8b", "level", "none")))
	assert.Equal(t, 0.0, value(t, fams, "llmd_degradation_state", byModel("llama-8b", "level", "limit_free")))
	assert.Equal(t, 11.0, value(t, fams, "llmd_quota_decisions_total", map[string]string{"result": "allow"}))
	assert.Equal(t, 0.0, value(t, fams, "llmd_quota_fallback_active", nil))
	assert.Equal(t, 0.0, value(t, fams, "llmd_usage_writer_queue", nil))
	assert.Equal(t, 101.0, value(t, fams, "llmd_usage_events_total", map[string]string{"result": "committed"}))

	// A model that goes away takes its state series with it.
	src.set(func(f *fakeSource) { f.engines = f.engines[:1] })
	fams = scrape(t, m)
	assert.Nil(t, find(fams, "vllm:num_requests_running", tiny))
	assert.NotNil(t, find(fams, "vllm:num_requests_running", llama))
}

func TestNilSources(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Source{})
	fams := gather(t, m)
	for name := range fams {
		assert.True(t, strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_"), "unexpected %s", name)
	}
}

func TestObserveQuotaDecision(t *testing.T) {
	t.Parallel()
	t.Run("added to Source.Quota", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(twoModels().source())
		m.ObserveQuotaDecision("allow")
		m.ObserveQuotaDecision("allow")
		m.ObserveQuotaDecision("error_denied")
		m.ObserveQuotaDecision("bogus") // ignored
		fams := gather(t, m)
		for result, v := range map[string]float64{"allow": 12, "deny": 2, "error_allowed": 1, "error_denied": 4} {
			assert.Equal(t, v, value(t, fams, "llmd_quota_decisions_total", map[string]string{"result": result}), result)
		}
		assert.Len(t, fams["llmd_quota_decisions_total"].GetMetric(), 4)
	})
	t.Run("without Source.Quota", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(metrics.Source{})
		assert.NotContains(t, gather(t, m), "llmd_quota_decisions_total")
		m.ObserveQuotaDecision("deny")
		fams := gather(t, m)
		assert.Equal(t, 1.0, value(t, fams, "llmd_quota_decisions_total", map[string]string{"result": "deny"}))
		assert.Equal(t, 0.0, value(t, fams, "llmd_quota_decisions_total", map[string]string{"result": "allow"}))
		assert.NotContains(t, fams, "llmd_quota_fallback_active")
	})
}

func TestDuplicateAndUnnamedModels(t *testing.T) {
	t.Parallel()
	src := &fakeSource{engines: []metrics.EngineSnapshot{
		{Model: "dup", Stats: engine.Stats{Running: 1}},
		{Model: "dup", Stats: engine.Stats{Running: 2}},
		{Stats: engine.Stats{Model: "from-stats", Running: 3}},
		{}, // no name at all: left out
	}}
	m := metrics.New(src.source())
	fams := gather(t, m) // fails on duplicate series
	assert.Len(t, fams["vllm:num_requests_running"].GetMetric(), 2)
	assert.Equal(t, 1.0, value(t, fams, "vllm:num_requests_running", modelSel("dup")))
	assert.Equal(t, 3.0, value(t, fams, "vllm:num_requests_running", modelSel("from-stats")))
}

func TestOpenMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New(twoModels().source())
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text"), resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(body)
	assert.True(t, strings.HasSuffix(text, "# EOF\n"))
	assert.Contains(t, text, "# TYPE vllm:prefix_cache_hits counter\n")
	assert.Contains(t, text, `vllm:prefix_cache_hits_total{engine="0",model_name="llama-8b"} 400`)
	assert.Contains(t, text, `vllm:kv_cache_usage_perc{engine="0",model_name="llama-8b"} 0.25`)
}
