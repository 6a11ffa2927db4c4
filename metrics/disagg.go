package metrics

import "github.com/prometheus/client_golang/prometheus"

// disaggObs counts disaggregated prefill and decode: the per-request
// decisions of decode nodes and the KV blocks and bytes moved.
type disaggObs struct {
	decisions *prometheus.CounterVec
	blocks    *prometheus.CounterVec
	bytes     *prometheus.CounterVec
}

func newDisaggObs() disaggObs {
	return disaggObs{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmd_disagg_requests_total",
			Help: "Requests a decode node disaggregated, by outcome: pulled (the prompt's KV came from a prefill node), fallback (the transfer failed; the prompt was recomputed here).",
		}, []string{"outcome"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmd_kv_transfer_blocks_total",
			Help: "KV blocks moved between nodes for disaggregated prefill and decode, by direction: sent (by a prefill node), imported and held (received, but already cached here, so not installed).",
		}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmd_kv_transfer_bytes_total",
			Help: "Bytes of KV transfers between nodes, by direction (sent, received).",
		}, []string{"direction"}),
	}
}

func (d disaggObs) collectors() []prometheus.Collector {
	return []prometheus.Collector{d.decisions, d.blocks, d.bytes}
}

// ObserveDisagg counts one disaggregated request by its outcome
// ("pulled", "fallback").
func (m *Metrics) ObserveDisagg(outcome string) {
	m.disagg.decisions.WithLabelValues(outcome).Inc()
}

// ObserveKVTransfer counts a KV transfer's blocks by direction ("sent",
// "imported", "held") and its bytes by byteDirection ("sent",
// "received"; "" counts none).
func (m *Metrics) ObserveKVTransfer(direction string, blocks int, byteDirection string, bytes int) {
	if blocks > 0 {
		m.disagg.blocks.WithLabelValues(direction).Add(float64(blocks))
	}
	if byteDirection != "" && bytes > 0 {
		m.disagg.bytes.WithLabelValues(byteDirection).Add(float64(bytes))
	}
}
