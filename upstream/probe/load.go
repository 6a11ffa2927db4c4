package probe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
)

// Load is an engine's load as its /metrics says.
type Load struct {
	// KVUsage is the fraction of the KV cache in use, normally 0..1 (1 is
	// full); -1 when unknown (TGI publishes none, nor do recent
	// llama-server builds). With several engines or ranks it is the
	// fullest one.
	KVUsage float64
	// Running is the number of requests in the engine's batches, Waiting
	// the number queued inside the engine; -1 when unknown.
	Running, Waiting int
	// At is when the answer was read ([ReadLoad]); [ParseLoad] leaves it
	// zero.
	At time.Time
}

// unknownLoad is a Load with nothing known.
var unknownLoad = Load{KVUsage: -1, Running: -1, Waiting: -1}

// loadSeries names the series one kind of engine publishes its load in.
// For each figure the first name present wins (newer names first).
type loadSeries struct {
	name                 string // for messages: "vllm:"
	kv, running, waiting []string
	modelLabel           string   // label naming the served model; "" when series carry none
	maxOverLabels        []string // labels whose series repeat one figure (ranks of one engine)
}

var (
	vllmSeries = loadSeries{
		name: "vllm:",
		// kv_cache_usage_perc since vLLM 0.9 (V1), gpu_cache_usage_perc
		// before; both are fractions despite "perc".
		kv:         []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		running:    []string{"vllm:num_requests_running"},
		waiting:    []string{"vllm:num_requests_waiting"},
		modelLabel: "model_name",
	}
	sglangSeries = loadSeries{
		name:       "sglang:",
		kv:         []string{"sglang:token_usage"},
		running:    []string{"sglang:num_running_reqs"},
		waiting:    []string{"sglang:num_queue_reqs"},
		modelLabel: "model_name",
		// Each tensor/pipeline/expert rank of one scheduler may publish the
		// same figures; data-parallel ranks (dp_rank) are separate queues.
		maxOverLabels: []string{"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"},
	}
	llamaCppSeries = loadSeries{
		name: "llamacpp:",
		// Recent llama-server builds no longer publish
		// kv_cache_usage_ratio; theirs leave KVUsage unknown.
		kv:      []string{"llamacpp:kv_cache_usage_ratio"},
		running: []string{"llamacpp:requests_processing"},
		waiting: []string{"llamacpp:requests_deferred"},
	}
	tgiSeries = loadSeries{
		name:    "tgi_",
		running: []string{"tgi_batch_current_size"},
		waiting: []string{"tgi_queue_size"},
	}
)

// seriesOf returns the series of kind k; ok is false for kinds without
// known series (Ollama, unknown OpenAI servers), which are guessed from
// the exposition.
func seriesOf(k Kind) (loadSeries, bool) {
	switch k {
	case KindVLLM, KindLLMD: // llmd exposes vLLM's names (package metrics)
		return vllmSeries, true
	case KindSGLang:
		return sglangSeries, true
	case KindLlamaCpp:
		return llamaCppSeries, true
	case KindTGI:
		return tgiSeries, true
	}
	return loadSeries{}, false
}

// ParseLoad reads a Prometheus text exposition (format 0.0.4) of an
// engine of kind k:
//
//   - vLLM and llmd: vllm:kv_cache_usage_perc (or, before vLLM 0.9,
//     vllm:gpu_cache_usage_perc), vllm:num_requests_running,
//     vllm:num_requests_waiting
//   - SGLang: sglang:token_usage, sglang:num_running_reqs,
//     sglang:num_queue_reqs
//   - llama.cpp: llamacpp:kv_cache_usage_ratio (older builds only),
//     llamacpp:requests_processing, llamacpp:requests_deferred
//   - TGI: tgi_batch_current_size (running), tgi_queue_size (waiting); no
//     KV figure
//   - Ollama, KindOpenAI or any other kind: the first of the above whose
//     series appear.
//
// Counts are summed over series (models, vLLM's data-parallel engines,
// SGLang's dp_rank); KVUsage is the largest. Series that differ only in
// SGLang's tp_rank, pp_rank, moe_ep_rank or attn_tp_rank repeat one
// scheduler's figures and count once. When model is not "", series whose
// model_name label names another model are left out (llama.cpp and TGI
// label no model, so model changes nothing there).
//
// A figure whose series are absent is -1. When all three are, ParseLoad
// returns the unknown Load with an error wrapping [ErrNoMetrics]. Input
// that is not the text format is an error; at most 4 MiB of r is read.
func ParseLoad(k Kind, model string, r io.Reader) (Load, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxMetricsBytes+1))
	if err != nil {
		return unknownLoad, fmt.Errorf("read metrics: %w", err)
	}
	if len(body) > maxMetricsBytes {
		return unknownLoad, fmt.Errorf("read metrics: over %d bytes", maxMetricsBytes)
	}
	p := expfmt.NewTextParser(modelValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return unknownLoad, fmt.Errorf("parse metrics: %w", err)
	}
	s, ok := seriesOf(k)
	if !ok {
		if s, ok = guessSeries(fams); !ok {
			return unknownLoad, fmt.Errorf("%w: no vllm:, sglang:, llamacpp: or tgi_ load series", ErrNoMetrics)
		}
	}
	l := Load{
		KVUsage: s.read(fams, s.kv, model, math.Max),
		Running: count(s.read(fams, s.running, model, sum)),
		Waiting: count(s.read(fams, s.waiting, model, sum)),
	}
	if l.KVUsage == -1 && l.Running == -1 && l.Waiting == -1 {
		if model != "" && s.modelLabel != "" {
			return unknownLoad, fmt.Errorf("%w: no %s load series for model %q", ErrNoMetrics, s.name, model)
		}
		return unknownLoad, fmt.Errorf("%w: no %s load series", ErrNoMetrics, s.name)
	}
	return l, nil
}

// modelValidation accepts any metric and label name: engines' names are
// not ours to police, and colons are common (vllm:...).
var modelValidation = pmodel.UTF8Validation

// ReadLoad gets base's /metrics and parses it with [ParseLoad], stamping
// At with the time the answer arrived. A /metrics that answers 404 or 501
// (Ollama; SGLang without --enable-metrics; llama.cpp without --metrics)
// is an error wrapping both [ErrNoMetrics] and the [*StatusError].
func ReadLoad(ctx context.Context, hc *http.Client, base string, k Kind, model string) (Load, error) {
	c, err := newClient(hc, base)
	if err != nil {
		return unknownLoad, err
	}
	body, err := c.get(ctx, "/metrics", acceptMetrics, maxMetricsBytes)
	if err != nil {
		if isStatus(err, http.StatusNotFound, http.StatusNotImplemented) {
			return unknownLoad, fmt.Errorf("%w: %w", ErrNoMetrics, err)
		}
		return unknownLoad, err
	}
	at := time.Now()
	l, err := ParseLoad(k, model, bytes.NewReader(body))
	l.At = at
	if err != nil {
		return l, fmt.Errorf("GET %s/metrics: %w", c.base, err)
	}
	return l, nil
}

// guessSeries picks the first kind whose series appear in fams.
func guessSeries(fams map[string]*dto.MetricFamily) (loadSeries, bool) {
	for _, s := range []loadSeries{vllmSeries, sglangSeries, llamaCppSeries, tgiSeries} {
		for _, names := range [][]string{s.kv, s.running, s.waiting} {
			for _, n := range names {
				if _, ok := fams[n]; ok {
					return s, true
				}
			}
		}
	}
	return loadSeries{}, false
}

func sum(a, b float64) float64 { return a + b }

// count turns a summed figure into a request count; -1 stays unknown.
func count(v float64) int {
	if v < 0 {
		return -1
	}
	return int(math.Round(v))
}

// read returns the figure of the first of names present in fams, combining
// its series with combine; -1 when none is present or no series is left
// after the model filter.
//
// Series that differ only in s.maxOverLabels are one group whose figure is
// its largest value; groups are combined with combine.
func (s loadSeries) read(fams map[string]*dto.MetricFamily, names []string, model string, combine func(a, b float64) float64) float64 {
	for _, name := range names {
		mf, ok := fams[name]
		if !ok {
			continue
		}
		groups := map[string]float64{}
		for _, m := range mf.GetMetric() {
			v, ok := value(mf.GetType(), m)
			if !ok {
				continue
			}
			key, ok := s.groupKey(m, model)
			if !ok {
				continue
			}
			if old, seen := groups[key]; !seen || v > old {
				groups[key] = v
			}
		}
		if len(groups) == 0 {
			// The newer name with no series for this model: an older name
			// will not have them either.
			return -1
		}
		total, first := 0.0, true
		for _, v := range groups {
			if first {
				total, first = v, false
				continue
			}
			total = combine(total, v)
		}
		return total
	}
	return -1
}

// groupKey identifies the engine a series belongs to: its labels but
// s.maxOverLabels. ok is false when the series is about another model.
func (s loadSeries) groupKey(m *dto.Metric, model string) (string, bool) {
	var b strings.Builder
	pairs := slices.Clone(m.GetLabel())
	slices.SortFunc(pairs, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	for _, lp := range pairs {
		name := lp.GetName()
		if model != "" && s.modelLabel != "" && name == s.modelLabel && lp.GetValue() != model {
			return "", false
		}
		if slices.Contains(s.maxOverLabels, name) {
			continue
		}
		fmt.Fprintf(&b, "%s=%q,", name, lp.GetValue())
	}
	return b.String(), true
}

// value is a gauge's, counter's or untyped sample's value; ok is false
// for other types and for NaN and infinities.
func value(t dto.MetricType, m *dto.Metric) (float64, bool) {
	var v float64
	switch t {
	case dto.MetricType_GAUGE:
		v = m.GetGauge().GetValue()
	case dto.MetricType_COUNTER:
		v = m.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
