package metrics

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// finishedReasons are vLLM's finished_reason values, precreated per model
// so that every series exists from the start.
var finishedReasons = [...]string{"stop", "length", "abort"}

// reasonIndex maps a finish reason to its index in finishedReasons.
func reasonIndex(reason string) int {
	switch reason {
	case "stop", "tool_calls", "function_call":
		return 0
	case "length":
		return 1
	}
	return 2
}

// modelObs holds one model's request metrics. Each carries model_name and
// engine as constant labels, so the token histograms of each model can
// have buckets up to that model's context length (vLLM registers them per
// model too) and an observation touches no label map.
type modelObs struct {
	ttft, e2e, queue, prefill, decode, inference prometheus.Histogram
	tpot                                         prometheus.Histogram
	itl                                          *weightedHistogram
	promptTokens, genTokens, maxTokens, n        prometheus.Histogram
	promptTotal, cachedTotal                     prometheus.Counter
	success                                      [len(finishedReasons)]prometheus.Counter
}

func newModelObs(model string, maxModelLen int) *modelObs {
	labels := prometheus.Labels{labelModel: model, labelEngine: engineIndex}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	tokens := buckets125(maxModelLen)
	o := &modelObs{
		ttft:      hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		e2e:       hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets),
		queue:     hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latencyBuckets),
		prefill:   hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latencyBuckets),
		decode:    hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latencyBuckets),
		inference: hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", latencyBuckets),
		tpot: hist("vllm:request_time_per_output_token_seconds",
			"Histogram of time_per_output_token_seconds per request.", itlBuckets),
		itl: newWeightedHistogram(prometheus.NewDesc("vllm:inter_token_latency_seconds",
			"Histogram of inter-token latency in seconds.", nil, labels), itlBuckets),
		promptTokens: hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens),
		genTokens:    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens),
		maxTokens:    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens),
		n:            hist("vllm:request_params_n", "Histogram of the n request parameter.", nBuckets),
		promptTotal:  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		cachedTotal: counter("vllm:prompt_tokens_cached_total",
			"Number of cached prompt tokens (local prefix cache hits)."),
	}
	for i, r := range finishedReasons {
		o.success[i] = prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "vllm:request_success_total",
			Help:        "Count of successfully processed requests.",
			ConstLabels: prometheus.Labels{labelModel: model, labelEngine: engineIndex, "finished_reason": r},
		})
	}
	return o
}

// observe records one finished request.
func (o *modelObs) observe(r RequestObservation) {
	if r.TTFT > 0 {
		o.ttft.Observe(r.TTFT.Seconds())
	}
	o.e2e.Observe(seconds(r.E2E))
	o.queue.Observe(seconds(r.Queue))
	o.prefill.Observe(seconds(r.Prefill))
	o.decode.Observe(seconds(r.Decode))
	o.inference.Observe(seconds(r.Prefill) + seconds(r.Decode))

	mean := r.MeanITL
	if len(r.ITLs) > 0 {
		o.itl.observeEach(r.ITLs)
		if mean <= 0 {
			var total time.Duration
			for _, d := range r.ITLs {
				total += max(d, 0)
			}
			mean = total / time.Duration(len(r.ITLs))
		}
	} else if mean > 0 {
		gaps := r.GenerationTokens - max(r.N, 1)
		o.itl.observeN(mean.Seconds(), uint64(max(gaps, 1)))
	}
	if mean > 0 {
		o.tpot.Observe(mean.Seconds())
	}

	prompt, cached := max(r.PromptTokens, 0), max(r.CachedTokens, 0)
	o.promptTokens.Observe(float64(prompt))
	o.genTokens.Observe(float64(max(r.GenerationTokens, 0)))
	if r.MaxTokens > 0 {
		o.maxTokens.Observe(float64(r.MaxTokens))
	}
	o.n.Observe(float64(max(r.N, 1)))
	o.promptTotal.Add(float64(prompt))
	o.cachedTotal.Add(float64(cached))
	o.success[reasonIndex(r.FinishedReason)].Inc()
}

// collect sends the model's request metrics.
func (o *modelObs) collect(ch chan<- prometheus.Metric) {
	for _, h := range [...]prometheus.Histogram{o.ttft, o.e2e, o.queue, o.prefill, o.decode, o.inference, o.tpot,
		o.promptTokens, o.genTokens, o.maxTokens, o.n} {
		ch <- h
	}
	ch <- o.itl.metric()
	ch <- o.promptTotal
	ch <- o.cachedTotal
	for _, c := range o.success {
		ch <- c
	}
}

// seconds is d in seconds, floored at 0.
func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }

// weightedHistogram is a histogram that can take one value n times in one
// step: vllm:inter_token_latency_seconds counts gaps, and a request
// observed by its mean gap adds all its gaps at once. A mutex keeps count,
// sum and buckets consistent with each other at scrape; it is held for a
// few additions only.
type weightedHistogram struct {
	desc   *prometheus.Desc
	bounds []float64

	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	count  uint64
	sum    float64
}

func newWeightedHistogram(desc *prometheus.Desc, bounds []float64) *weightedHistogram {
	return &weightedHistogram{desc: desc, bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// bucket is the index of the first bound >= v (Prometheus buckets are
// upper-inclusive).
func (h *weightedHistogram) bucket(v float64) int {
	return sort.SearchFloat64s(h.bounds, v)
}

// observeN adds v n times.
func (h *weightedHistogram) observeN(v float64, n uint64) {
	i := h.bucket(v)
	h.mu.Lock()
	h.counts[i] += n
	h.count += n
	h.sum += v * float64(n)
	h.mu.Unlock()
}

// observeEach adds each gap once (negative gaps as 0). The buckets are
// found before the lock is taken.
func (h *weightedHistogram) observeEach(gaps []time.Duration) {
	var local [32]uint64
	counts := local[:0]
	if len(h.counts) <= len(local) {
		counts = local[:len(h.counts)]
	} else {
		counts = make([]uint64, len(h.counts))
	}
	var sum float64
	for _, d := range gaps {
		v := seconds(d)
		counts[h.bucket(v)]++
		sum += v
	}
	h.mu.Lock()
	for i, c := range counts {
		h.counts[i] += c
	}
	h.count += uint64(len(gaps))
	h.sum += sum
	h.mu.Unlock()
}

// metric returns the histogram's current value.
func (h *weightedHistogram) metric() prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	h.mu.Lock()
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		buckets[b] = cum
	}
	count, sum := h.count, h.sum
	h.mu.Unlock()
	m, err := prometheus.NewConstHistogram(h.desc, count, sum, buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(h.desc, err)
	}
	return m
}

// requestCollector exposes every model's request metrics. It is an
// unchecked collector (Describe sends nothing): the models, and so the
// constant label values, are only known as they come.
type requestCollector struct{ m *Metrics }

// Describe implements [prometheus.Collector].
func (c *requestCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements [prometheus.Collector].
func (c *requestCollector) Collect(ch chan<- prometheus.Metric) {
	models := *c.m.models.Load()
	for _, o := range models {
		o.collect(ch)
	}
	if o := c.m.other.Load(); o != nil {
		if _, shadowed := models[OtherModel]; !shadowed {
			o.collect(ch)
		}
	}
}
