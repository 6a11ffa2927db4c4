package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/quota"
)

// Label names and fixed values.
const (
	labelModel  = "model_name"
	labelEngine = "engine"
	// engineIndex is the engine label's value: llmd runs one engine per
	// model, vLLM's engine 0.
	engineIndex = "0"
	// OtherModel is the model_name of observations for a model that is not
	// served (see [Metrics.ObserveRequest]).
	OtherModel = "other"
	// OtherReason is the reason label of rejections past maxReasons
	// distinct reasons.
	OtherReason = "other"
)

// maxReasons bounds the distinct reason values of
// llmd_requests_rejected_total.
const maxReasons = 64

// refreshInterval is the least time between two reads of Source.Engines
// caused by observations of a model not seen yet.
const refreshInterval = time.Second

// Source is what the metrics read at scrape time. Each function must be
// safe for concurrent use, return quickly without blocking (a snapshot
// under a short lock, atomic loads), and not call back into [Metrics]. A
// nil function exposes none of its series.
type Source struct {
	// Engines returns one snapshot per served model. Besides scrapes, it is
	// called by New and, at most once per second, by an observation of a
	// model not seen yet: the caller of ObserveRequest or ObserveRejected
	// must not hold a lock that Engines takes.
	Engines func() []EngineSnapshot
	// Quota returns the quota limiter's decision counters.
	Quota func() quota.Counters
	// Usage returns the usage writer's state; nil until the usage writer
	// exists.
	Usage func() UsageWriterSnapshot
	// GPUs returns the node's GPU telemetry (NVML, or the simulated
	// groups); nil exposes none.
	GPUs func() []api.GPUInfo
}

// EngineSnapshot is one served model's engine at scrape time.
type EngineSnapshot struct {
	// Model is the served model's name (the model_name label); empty
	// takes Stats.Model.
	Model string
	Stats engine.Stats
	// BlockSize is the KV block size in tokens and NumBlocks the number of
	// KV blocks (vllm:cache_config_info's block_size and num_gpu_blocks);
	// 0 takes Stats.BlockSize and Stats.BlocksTotal.
	BlockSize, NumBlocks int
	// PrefixCaching reports that prefix reuse is on.
	PrefixCaching bool
	// CacheDType is the KV cache's element type: "f16", "q8_0", "sim" ...
	CacheDType string
	// MaxModelLen is the model's context length in tokens: the largest
	// bound of its token histograms (1-2-5 buckets up to it, as vLLM). It is
	// read when the model is first seen; <= 0 means 1,000,000.
	MaxModelLen int
}

// UsageWriterSnapshot is the usage writer's state at scrape time.
type UsageWriterSnapshot struct {
	// Queued is the number of events waiting to be written.
	Queued int
	// Lag is the age of the oldest queued event.
	Lag time.Duration
	// Committed, Spooled and Failed count events since the writer started:
	// written to the database, written to the spool file instead, lost.
	Committed, Spooled, Failed uint64
}

// RequestObservation is one finished request, for [Metrics.ObserveRequest].
// Negative durations and counts are taken as 0.
type RequestObservation struct {
	// Model is the served model's name; another name is counted as
	// model_name="other".
	Model string
	// FinishedReason is vLLM's finished_reason: "stop", "length" or
	// "abort". "tool_calls" and "function_call" count as "stop"; anything
	// else ("cancelled", "error", "") as "abort".
	FinishedReason string
	// PromptTokens is the whole prompt, CachedTokens the part of it served
	// from the prefix cache, GenerationTokens the output tokens of all
	// choices.
	PromptTokens, GenerationTokens, CachedTokens int
	// MaxTokens is the max_tokens parameter (0: not set, not observed) and
	// N the n parameter (0 is taken as 1).
	MaxTokens, N int
	// TTFT is the time to the first token; 0 if no token was produced
	// (then it is not observed).
	TTFT time.Duration
	// MeanITL is the mean inter-token latency; 0 with fewer than 2 tokens
	// (then it is not observed).
	MeanITL time.Duration
	// ITLs are the inter-token gaps, each observed into
	// vllm:inter_token_latency_seconds as vLLM does. When ITLs is empty,
	// MeanITL is observed once per gap instead: GenerationTokens-max(N,1)
	// times (at least once), so that the histogram's count is still the
	// number of gaps and its sum their total, and only the spread within a
	// request is lost. The slice is only read during the call.
	ITLs []time.Duration
	// E2E is the request's latency as the client saw it; Queue, Prefill and
	// Decode its phases (vllm:request_inference_time_seconds observes
	// Prefill+Decode).
	E2E, Queue, Prefill, Decode time.Duration
}

// Metrics owns llmd's Prometheus registry: the scrape-time collectors over
// a [Source] and the per-request histograms. Its methods are safe for
// concurrent use.
type Metrics struct {
	src Source
	reg *prometheus.Registry
	// now is the clock of vllm:lora_requests_info's value.
	now func() time.Time

	// models maps each served model seen to its request metrics. Copy on
	// write: readers load it without a lock, writers hold mu. other holds
	// OtherModel's, made on first use. mu also guards additions to
	// reasons.
	models      atomic.Pointer[map[string]*modelObs]
	other       atomic.Pointer[modelObs]
	mu          sync.Mutex
	lastRefresh atomic.Int64 // Unix nanoseconds of the last miss refresh

	rejected *prometheus.CounterVec
	// routed counts the requests a cluster route sent on, by destination
	// (local, peer) and zone (same, cross).
	routed *prometheus.CounterVec
	// disagg counts disaggregated prefill and decode (disagg.go).
	disagg disaggObs
	// safety is the safety check's latency by verdict ("allow", "flag",
	// "block") and failure.
	safety   *prometheus.HistogramVec
	reasons  sync.Map // reason string -> struct{}
	nReasons int      // entries of reasons; guarded by mu

	quotaObserved [numQuotaResults]atomic.Uint64
}

// New returns the metrics over src, with every collector registered on a
// registry of their own (plus the Go runtime and process collectors). It
// reads src.Engines once to learn the served models.
func New(src Source) *Metrics {
	m := &Metrics{src: src, reg: prometheus.NewRegistry(), now: time.Now}
	empty := map[string]*modelObs{}
	m.models.Store(&empty)
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmd_requests_rejected_total",
		Help: "Requests refused before any compute (quota, load shedding), by reason.",
	}, []string{labelModel, "reason"})
	m.routed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmd_routed_requests_total",
		Help: "Requests routed in a cluster, by destination (local, peer) and whether it was in the entry node's zone (same, cross).",
	}, []string{"destination", "zone"})
	m.safety = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "llmd_safety_check_seconds",
		Help:    "Latency of the safety check of requests' input, by verdict and whether the classifier failed (the policy's verdict then).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2},
	}, []string{"verdict", "failed"})
	m.disagg = newDisaggObs()
	m.reg.MustRegister(m.disagg.collectors()...)
	m.reg.MustRegister(
		m.safety,
		m.routed,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&engineCollector{m: m},
		&quotaCollector{m: m},
		&usageCollector{m: m},
		&gpuCollector{m: m},
		&requestCollector{m: m},
		m.rejected,
	)
	m.refresh()
	return m
}

// Handler returns the handler of GET /metrics: Prometheus text format, or
// OpenMetrics when the scraper asks for it. A collector's error leaves its
// series out of the answer rather than failing the scrape.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
	})
}

// Registry returns the registry, for tests and for collectors of other
// packages.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveRequest records one finished request that reached the engine:
// the vllm:request_* and latency histograms, vllm:prompt_tokens_total,
// vllm:prompt_tokens_cached_total and vllm:request_success_total. On the
// common path (a served model already seen) it makes no allocation and
// takes one short lock, the inter-token histogram's.
func (m *Metrics) ObserveRequest(o RequestObservation) {
	m.obsFor(o.Model).observe(o)
}

// ObserveRejected counts a request refused before any compute in
// llmd_requests_rejected_total{model_name, reason}. reason should come from
// a fixed set ("overload", "quota_rpm" ...): past 64 distinct values, new
// ones are counted as "other"; a model that is not served as "other".
func (m *Metrics) ObserveRejected(model, reason string) {
	name := OtherModel
	if m.served(model) || m.maybeRefresh() && m.served(model) {
		name = model
	}
	m.rejected.WithLabelValues(name, m.boundReason(reason)).Inc()
}

// ObserveRoute counts one routed request in llmd_routed_requests_total:
// served here or by a peer, and whether that node is outside the entry
// node's zone.
func (m *Metrics) ObserveRoute(peer, crossZone bool) {
	dest, zone := "local", "same"
	if peer {
		dest = "peer"
	}
	if crossZone {
		zone = "cross"
	}
	m.routed.WithLabelValues(dest, zone).Inc()
}

// ObserveSafety records one safety check: its verdict, whether the
// classifier failed, and its latency.
func (m *Metrics) ObserveSafety(verdict string, failed bool, latency time.Duration) {
	switch verdict {
	case "allow", "flag", "block":
	default:
		verdict = "other"
	}
	m.safety.WithLabelValues(verdict, strconv.FormatBool(failed)).Observe(latency.Seconds())
}

// ObserveQuotaDecision counts one quota decision in
// llmd_quota_decisions_total{result}; result is "allow", "deny",
// "error_allowed" or "error_denied", other values are ignored. The
// exposed counts are these plus Source.Quota's: count each decision in one
// of the two only.
func (m *Metrics) ObserveQuotaDecision(result string) {
	for i, r := range quotaResults {
		if r == result {
			m.quotaObserved[i].Add(1)
			return
		}
	}
}

// boundReason returns reason, or OtherReason once maxReasons other
// reasons are known.
func (m *Metrics) boundReason(reason string) string {
	reason = validLabel(reason)
	if _, ok := m.reasons.Load(reason); ok {
		return reason
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.reasons.Load(reason); ok {
		return reason
	}
	if m.nReasons >= maxReasons {
		return OtherReason
	}
	m.reasons.Store(reason, struct{}{})
	m.nReasons++
	return reason
}

// lookup returns the request metrics of a served model already seen.
func (m *Metrics) lookup(model string) (*modelObs, bool) {
	o, ok := (*m.models.Load())[model]
	return o, ok
}

// served reports whether model is a served model already seen.
func (m *Metrics) served(model string) bool {
	_, ok := m.lookup(model)
	return ok
}

// obsFor returns model's request metrics: its own if it is served, else
// OtherModel's. A model not seen yet makes it re-read Source.Engines, at
// most once per refreshInterval.
func (m *Metrics) obsFor(model string) *modelObs {
	if o, ok := m.lookup(model); ok {
		return o
	}
	if m.maybeRefresh() {
		if o, ok := m.lookup(model); ok {
			return o
		}
	}
	return m.otherObs()
}

// otherObs returns OtherModel's request metrics, making them on first use
// (so that no "other" series exists until something is counted there). A
// served model named "other" takes them over.
func (m *Metrics) otherObs() *modelObs {
	if o, ok := m.lookup(OtherModel); ok {
		return o
	}
	if o := m.other.Load(); o != nil {
		return o
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.other.Load(); o != nil {
		return o
	}
	o := newModelObs(OtherModel, 0)
	m.other.Store(o)
	return o
}

// maybeRefresh re-reads Source.Engines unless it was done in the last
// refreshInterval; it reports whether it did.
func (m *Metrics) maybeRefresh() bool {
	now := time.Now().UnixNano()
	last := m.lastRefresh.Load()
	if now-last < int64(refreshInterval) || !m.lastRefresh.CompareAndSwap(last, now) {
		return false
	}
	m.refresh()
	return true
}

// refresh learns the models of Source.Engines.
func (m *Metrics) refresh() {
	if m.src.Engines == nil {
		return
	}
	for _, s := range m.src.Engines() {
		if name := s.name(); name != "" {
			m.learn(name, s.MaxModelLen)
		}
	}
}

// learn makes a served model's request metrics on first sight, with token
// buckets up to maxModelLen; later calls change nothing.
func (m *Metrics) learn(model string, maxModelLen int) {
	if _, ok := m.lookup(model); ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.models.Load()
	if _, ok := old[model]; ok {
		return
	}
	next := make(map[string]*modelObs, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[model] = newModelObs(model, maxModelLen)
	m.models.Store(&next)
}

// name is the snapshot's model_name.
func (s *EngineSnapshot) name() string {
	name := s.Model
	if name == "" {
		name = s.Stats.Model
	}
	return validLabel(name)
}

// validLabel returns s as a valid label value (UTF-8).
func validLabel(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
