package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmd/llmd/engine"
)

var vllmLabels = []string{labelModel, labelEngine}

// Descriptions of the series read from Source.Engines.
var (
	descRunning = prometheus.NewDesc("vllm:num_requests_running",
		"Number of requests in model execution batches.", vllmLabels, nil)
	descWaiting = prometheus.NewDesc("vllm:num_requests_waiting",
		"Number of requests waiting to be processed.", vllmLabels, nil)
	descKVUsage = prometheus.NewDesc("vllm:kv_cache_usage_perc",
		"KV-cache usage. 1 means 100 percent usage.", vllmLabels, nil)
	descPrefixQueries = prometheus.NewDesc("vllm:prefix_cache_queries_total",
		"Prefix cache queries, in terms of number of queried tokens.", vllmLabels, nil)
	descPrefixHits = prometheus.NewDesc("vllm:prefix_cache_hits_total",
		"Prefix cache hits, in terms of number of cached tokens.", vllmLabels, nil)
	descPreemptions = prometheus.NewDesc("vllm:num_preemptions_total",
		"Cumulative number of preemption from the engine.", vllmLabels, nil)
	descGenTokens = prometheus.NewDesc("vllm:generation_tokens_total",
		"Number of generation tokens processed.", vllmLabels, nil)
	descCacheConfig = prometheus.NewDesc("vllm:cache_config_info",
		"Information of the LLMEngine CacheConfig",
		[]string{labelModel, labelEngine, "block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype"}, nil)
	descLoRA = prometheus.NewDesc("vllm:lora_requests_info",
		"Running stats on lora requests.",
		[]string{labelModel, labelEngine, "max_lora", "waiting_lora_adapters", "running_lora_adapters"}, nil)

	descQueueDepth = prometheus.NewDesc("llmd_queue_depth",
		"Requests waiting in the engine's queue, by tier.", []string{labelModel, "tier"}, nil)
	descDegradeLevel = prometheus.NewDesc("llmd_degradation_level",
		"Degradation ladder level: 0 none, 1 pause_batch, 2 limit_free, 3 shed_free, 4 queue_paid.",
		[]string{labelModel}, nil)
	descDegradeState = prometheus.NewDesc("llmd_degradation_state",
		"Degradation ladder level as a state set: 1 for the current level, 0 for the others.",
		[]string{labelModel, "level"}, nil)
	descSwapped = prometheus.NewDesc("llmd_swapped_sequences",
		"Sequences preempted to host swap space.", []string{labelModel}, nil)
	descSwapUsage = prometheus.NewDesc("llmd_swap_usage_perc",
		"Host swap space usage. 1 means 100 percent usage; 0 without swap space.", []string{labelModel}, nil)
	descPreemptionsKind = prometheus.NewDesc("llmd_preemptions_total",
		"Preemptions by kind: swap (blocks moved to host) or recompute (blocks freed, prompt recomputed).",
		[]string{labelModel, "kind"}, nil)
	descEvictions = prometheus.NewDesc("llmd_kv_cache_evictions_total",
		"Cached prefix blocks reclaimed for new work.", []string{labelModel}, nil)

	// Speculative decoding, with vLLM's names (its counters
	// vllm:spec_decode_num_drafts etc., exposed with the _total suffix).
	descSpecDrafts = prometheus.NewDesc("vllm:spec_decode_num_drafts_total",
		"Number of spec decoding drafts.", vllmLabels, nil)
	descSpecDraftTokens = prometheus.NewDesc("vllm:spec_decode_num_draft_tokens_total",
		"Number of draft tokens.", vllmLabels, nil)
	descSpecAccepted = prometheus.NewDesc("vllm:spec_decode_num_accepted_tokens_total",
		"Number of accepted tokens.", vllmLabels, nil)
	descSpecRate = prometheus.NewDesc("llmd_spec_decode_acceptance_rate",
		"Accepted over drafted tokens of speculative decoding since start (0 before any draft).", []string{labelModel}, nil)
)

// engineCollector exposes Source.Engines at scrape time. Each series is
// read from one snapshot, so the values of one model are consistent.
type engineCollector struct{ m *Metrics }

// Describe implements [prometheus.Collector].
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{descRunning, descWaiting, descKVUsage, descPrefixQueries, descPrefixHits,
		descPreemptions, descGenTokens, descCacheConfig, descLoRA, descQueueDepth, descDegradeLevel, descDegradeState,
		descSwapped, descSwapUsage, descPreemptionsKind, descEvictions,
		descSpecDrafts, descSpecDraftTokens, descSpecAccepted, descSpecRate} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector]. A model listed twice is
// exposed once (the first snapshot); one without a name not at all.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.src.Engines == nil {
		return
	}
	snaps := c.m.src.Engines()
	now := float64(c.m.now().UnixNano()) / 1e9
	seen := make(map[string]bool, len(snaps))
	for i := range snaps {
		s := &snaps[i]
		name := s.name()
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		c.m.learn(name, s.MaxModelLen)
		collectEngine(ch, name, s, now)
	}
}

// collectEngine sends one model's series; now is the scrape time in Unix
// seconds.
func collectEngine(ch chan<- prometheus.Metric, model string, s *EngineSnapshot, now float64) {
	st := &s.Stats
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- constMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- constMetric(d, prometheus.CounterValue, float64(v), labels...)
	}

	gauge(descRunning, float64(st.Running), model, engineIndex)
	gauge(descWaiting, float64(st.Waiting), model, engineIndex)
	gauge(descKVUsage, fraction(st.BlocksUsed, st.BlocksTotal), model, engineIndex)
	counter(descPrefixQueries, st.PrefixQueryTokens, model, engineIndex)
	counter(descPrefixHits, st.PrefixHitTokens, model, engineIndex)
	counter(descPreemptions, st.Preemptions, model, engineIndex)
	counter(descGenTokens, st.GeneratedTokens, model, engineIndex)

	blockSize, numBlocks := s.BlockSize, s.NumBlocks
	if blockSize == 0 {
		blockSize = st.BlockSize
	}
	if numBlocks == 0 {
		numBlocks = st.BlocksTotal
	}
	// vLLM writes the labels with Python's str(): True/False.
	prefix := "False"
	if s.PrefixCaching {
		prefix = "True"
	}
	gauge(descCacheConfig, 1, model, engineIndex, strconv.Itoa(blockSize), strconv.Itoa(numBlocks), prefix,
		validLabel(s.CacheDType))
	// vLLM sets this gauge to the time of its last update, and llm-d picks
	// the series with the largest value; llmd serves no LoRA adapters.
	gauge(descLoRA, now, model, engineIndex, "0", "", "")

	for p := range engine.NumPriorities {
		gauge(descQueueDepth, float64(st.WaitingByPriority[p]), model, engine.Priority(p).String())
	}
	gauge(descDegradeLevel, float64(st.Degrade), model)
	for l := engine.DegradeNone; l <= engine.DegradeQueuePaid; l++ {
		v := 0.0
		if l == st.Degrade {
			v = 1
		}
		gauge(descDegradeState, v, model, l.String())
	}
	gauge(descSwapped, float64(st.Swapped), model)
	gauge(descSwapUsage, fraction(st.SwapBlocksUsed, st.SwapBlocksTotal), model)
	counter(descPreemptionsKind, st.PreemptionsSwap, model, "swap")
	counter(descPreemptionsKind, st.PreemptionsRecompute, model, "recompute")
	counter(descEvictions, st.Evictions, model)
	counter(descSpecDrafts, st.SpecDrafts, model, engineIndex)
	counter(descSpecDraftTokens, st.SpecDraftTokens, model, engineIndex)
	counter(descSpecAccepted, st.SpecAcceptedTokens, model, engineIndex)
	rate := 0.0
	if st.SpecDraftTokens > 0 {
		rate = float64(st.SpecAcceptedTokens) / float64(st.SpecDraftTokens)
	}
	gauge(descSpecRate, rate, model)
}

// constMetric is prometheus.NewConstMetric that reports an error to the
// registry (which leaves the series out) instead of panicking in the
// scrape.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// fraction is used/total clamped to [0, 1]; 0 when total is 0.
func fraction(used, total int) float64 {
	if total <= 0 || used <= 0 {
		return 0
	}
	return min(float64(used)/float64(total), 1)
}

// quotaResults are llmd_quota_decisions_total's result values, in
// Metrics.quotaObserved's order.
var quotaResults = [...]string{"allow", "deny", "error_allowed", "error_denied"}

const numQuotaResults = len(quotaResults)

var (
	descQuotaDecisions = prometheus.NewDesc("llmd_quota_decisions_total",
		"Quota decisions: allow and deny by the backend, error_allowed and error_denied by the local fallback while Redis fails.",
		[]string{"result"}, nil)
	descQuotaFallback = prometheus.NewDesc("llmd_quota_fallback_active",
		"1 while the quota limiter decides locally because Redis is failing, else 0.", nil, nil)
	descQuotaResets = prometheus.NewDesc("llmd_quota_state_resets_total",
		"Times Redis was found to have lost a tenant's quota state.", nil, nil)
	descQuotaHotDetected = prometheus.NewDesc("llmd_quota_hot_tenants_detected_total",
		"Tenants this node's quota script found over --hot-tenant-rps and split into Redis sub-buckets.", nil, nil)
)

// quotaCollector exposes Source.Quota, plus the decisions counted by
// Metrics.ObserveQuotaDecision.
type quotaCollector struct{ m *Metrics }

// Describe implements [prometheus.Collector].
func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQuotaDecisions
	ch <- descQuotaFallback
	ch <- descQuotaResets
	ch <- descQuotaHotDetected
}

// Collect implements [prometheus.Collector]. The decision counters are
// exposed when Source.Quota is set or a decision was observed.
func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	var counts [numQuotaResults]uint64
	observed := false
	for i := range counts {
		counts[i] = c.m.quotaObserved[i].Load()
		observed = observed || counts[i] > 0
	}
	if c.m.src.Quota != nil {
		q := c.m.src.Quota()
		counts[0] += q.Allow
		counts[1] += q.Deny
		counts[2] += q.ErrorAllowed
		counts[3] += q.ErrorDenied
		fallback := 0.0
		if q.FallbackActive {
			fallback = 1
		}
		ch <- constMetric(descQuotaFallback, prometheus.GaugeValue, fallback)
		ch <- constMetric(descQuotaResets, prometheus.CounterValue, float64(q.Resets))
		ch <- constMetric(descQuotaHotDetected, prometheus.CounterValue, float64(q.HotDetected))
	} else if !observed {
		return
	}
	for i, r := range quotaResults {
		ch <- constMetric(descQuotaDecisions, prometheus.CounterValue, float64(counts[i]), r)
	}
}

var (
	descUsageQueue = prometheus.NewDesc("llmd_usage_writer_queue",
		"Usage events waiting to be written.", nil, nil)
	descUsageLag = prometheus.NewDesc("llmd_usage_writer_lag_seconds",
		"Age of the oldest usage event waiting to be written.", nil, nil)
	descUsageEvents = prometheus.NewDesc("llmd_usage_events_total",
		"Usage events by outcome: committed to the database, spooled to the local file, failed (lost).",
		[]string{"result"}, nil)
)

// usageCollector exposes Source.Usage.
type usageCollector struct{ m *Metrics }

// Describe implements [prometheus.Collector].
func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUsageQueue
	ch <- descUsageLag
	ch <- descUsageEvents
}

// Collect implements [prometheus.Collector].
func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.src.Usage == nil {
		return
	}
	u := c.m.src.Usage()
	ch <- constMetric(descUsageQueue, prometheus.GaugeValue, float64(u.Queued))
	ch <- constMetric(descUsageLag, prometheus.GaugeValue, seconds(u.Lag))
	ch <- constMetric(descUsageEvents, prometheus.CounterValue, float64(u.Committed), "committed")
	ch <- constMetric(descUsageEvents, prometheus.CounterValue, float64(u.Spooled), "spooled")
	ch <- constMetric(descUsageEvents, prometheus.CounterValue, float64(u.Failed), "failed")
}

var (
	gpuLabels       = []string{"gpu", "name", "simulated"}
	descGPUMemUsed  = prometheus.NewDesc("llmd_gpu_memory_used_bytes", "GPU memory in use (simulated GPUs: the model's weights, reserve and KV blocks in use).", gpuLabels, nil)
	descGPUMemTotal = prometheus.NewDesc("llmd_gpu_memory_total_bytes", "GPU memory.", gpuLabels, nil)
	descGPUUtil     = prometheus.NewDesc("llmd_gpu_utilization_ratio", "GPU utilisation, 0 to 1 (real GPUs only).", gpuLabels, nil)
	descGPUTemp     = prometheus.NewDesc("llmd_gpu_temperature_celsius", "GPU temperature (real GPUs only).", gpuLabels, nil)
	descGPUPower    = prometheus.NewDesc("llmd_gpu_power_watts", "GPU power draw (real GPUs only).", gpuLabels, nil)
)

// gpuCollector exposes Source.GPUs.
type gpuCollector struct{ m *Metrics }

// Describe implements [prometheus.Collector].
func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPUMemUsed, descGPUMemTotal, descGPUUtil, descGPUTemp, descGPUPower} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector].
func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.src.GPUs == nil {
		return
	}
	for _, g := range c.m.src.GPUs() {
		lv := []string{strconv.Itoa(g.Index), g.Name, strconv.FormatBool(g.Simulated)}
		ch <- constMetric(descGPUMemUsed, prometheus.GaugeValue, float64(g.MemoryUsed), lv...)
		ch <- constMetric(descGPUMemTotal, prometheus.GaugeValue, float64(g.MemoryTotal), lv...)
		if !g.Simulated {
			ch <- constMetric(descGPUUtil, prometheus.GaugeValue, g.Utilization, lv...)
			ch <- constMetric(descGPUTemp, prometheus.GaugeValue, g.TemperatureC, lv...)
			ch <- constMetric(descGPUPower, prometheus.GaugeValue, g.PowerW, lv...)
		}
	}
}
