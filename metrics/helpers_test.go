package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/quota"
)

// fakeSource is a Source whose snapshots a test changes between scrapes.
type fakeSource struct {
	mu      sync.Mutex
	engines []metrics.EngineSnapshot
	quota   quota.Counters
	usage   metrics.UsageWriterSnapshot
	calls   int // Engines calls
}

func (f *fakeSource) source() metrics.Source {
	return metrics.Source{Engines: f.Engines, Quota: f.Quota, Usage: f.Usage}
}

func (f *fakeSource) Engines() []metrics.EngineSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return append([]metrics.EngineSnapshot(nil), f.engines...)
}

func (f *fakeSource) Quota() quota.Counters {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quota
}

func (f *fakeSource) Usage() metrics.UsageWriterSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usage
}

// set changes the source under its lock.
func (f *fakeSource) set(fn func(f *fakeSource)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSource) engineCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// scrape GETs /metrics from m's handler over HTTP and parses the text
// format, requiring names valid under the legacy (pre-UTF-8) rules that
// every Prometheus accepts.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// labelsOf returns a metric's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// labelNames returns a metric's label names, sorted.
func labelNames(m *dto.Metric) []string {
	var n []string
	for _, p := range m.GetLabel() {
		n = append(n, p.GetName())
	}
	sort.Strings(n)
	return n
}

// find returns the metric of family name whose labels include want, or
// nil.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		l := labelsOf(m)
		for k, v := range want {
			if l[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value returns the value of a gauge or counter sample; it fails the test
// when the sample is missing.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	m := find(fams, name, want)
	require.NotNil(t, m, "%s%v not exposed", name, want)
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	t.Fatalf("%s%v is not a gauge or counter", name, want)
	return 0
}

// histogram returns a histogram sample; it fails the test when the sample
// is missing.
func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Histogram {
	t.Helper()
	m := find(fams, name, want)
	require.NotNil(t, m, "%s%v not exposed", name, want)
	require.NotNil(t, m.Histogram, "%s is not a histogram", name)
	return m.GetHistogram()
}

// bounds returns a histogram's finite bucket bounds.
func bounds(h *dto.Histogram) []float64 {
	var b []float64
	for _, bk := range h.GetBucket() {
		b = append(b, bk.GetUpperBound())
	}
	if n := len(b); n > 0 && b[n-1] > 1e300 {
		b = b[:n-1] // +Inf, when the parser keeps it
	}
	return b
}

// gather collects m's registry directly (no HTTP).
func gather(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := m.Registry().Gather()
	require.NoError(t, err)
	out := make(map[string]*dto.MetricFamily, len(fs))
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}

// model is a label selector for one model's vLLM series.
func modelSel(name string) map[string]string {
	return map[string]string{"model_name": name, "engine": "0"}
}
