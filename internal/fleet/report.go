package fleet

import "time"

// Report is what a run measured, over the window from Config.Warmup to
// the end. Token and request counts are of that window; latencies are of
// the requests that arrived in it.
type Report struct {
	// Nodes has one entry per node, in order; Fleet sums them (its
	// percentiles are over every node's samples).
	Nodes []NodeReport `json:"nodes"`
	Fleet NodeReport   `json:"fleet"`
	// Simulated is the virtual time simulated; Window the part measured
	// (Simulated less the warm-up).
	Simulated time.Duration `json:"-"`
	Window    time.Duration `json:"-"`
	// Wall is the real time the run took.
	Wall time.Duration `json:"-"`
	// Arrived counts the requests that arrived in the window (every turn
	// of a conversation counts); OfferedOutputTokens is the sum of their
	// output lengths.
	Arrived             int   `json:"arrived"`
	OfferedOutputTokens int64 `json:"offered_output_tokens"`
	// Refused counts requests never sent, by reason: "quota" (the
	// limiter said no), "queue_full" (the node's queue was full) and
	// "context_length" (prompt and output exceed what one sequence can
	// hold: a conversation outgrew the context).
	Refused map[string]int `json:"refused"`
	// Unfinished counts requests still queued or running at the end.
	Unfinished int `json:"unfinished"`
	// Routed counts routing decisions by rule ("prefix", "affinity",
	// "least_loaded", "overloaded_skipped", "round_robin", or "cost" and
	// "cost_prefix", the cost policy's choice of a member holding part of
	// the prompt); PrefixRouted is the share placed for a cached prefix
	// ("prefix" and "cost_prefix").
	Routed       map[string]int `json:"routed"`
	PrefixRouted float64        `json:"prefix_routed"`
	// CrossZone is the share of routed requests served out of their zone
	// (Config.Zones).
	CrossZone float64 `json:"cross_zone"`
	// Steps is the number of engine steps run on all nodes.
	Steps uint64 `json:"steps"`
}

// NodeReport is one node's share of a run (or the fleet's sum).
type NodeReport struct {
	ID string `json:"id"`
	// Requests counts the requests routed to the node; Completed those
	// that finished (for any reason).
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	// InputTokens and CachedTokens are the prompt tokens of the completed
	// requests and how many of them the prefix cache served; CacheHit is
	// their ratio.
	InputTokens  int64   `json:"input_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	CacheHit     float64 `json:"cache_hit"`
	// OutputTokens is the tokens generated; Throughput the same per second
	// of the window.
	OutputTokens int64   `json:"output_tokens"`
	Throughput   float64 `json:"output_tokens_per_s"`
	// KVMean and KVMax are the time-weighted mean and the largest share of
	// KV blocks in use, 0..1 (for the fleet: the mean and the max over the
	// nodes).
	KVMean float64 `json:"kv_mean"`
	KVMax  float64 `json:"kv_max"`
	// Preemptions counts preemptions (swap or recompute).
	Preemptions uint64 `json:"preemptions"`
	// TTFT is the time from a request's arrival to its first token; ITL
	// the time between two tokens of one answer.
	TTFT Percentiles `json:"ttft"`
	ITL  Percentiles `json:"itl"`
	// Steps is the number of engine steps.
	Steps uint64 `json:"steps"`
}

// report builds the Report once the run is over.
func (d *driver) report() *Report {
	r := &Report{
		Simulated: d.horizon.Sub(epoch),
		Window:    max(d.horizon.Sub(d.warm), 0),
		Arrived:   d.arrived, OfferedOutputTokens: d.offered,
		Refused: d.refused, Routed: d.routed,
	}
	secs := r.Window.Seconds()
	fleet := NodeReport{ID: "fleet"}
	var ttft, itl hist
	for _, n := range d.nodes {
		d.noteKV(n, maxTime(d.horizon, n.kvAt), n.kvUsage)
		st := n.eng.Stats()
		if !n.warmed {
			n.preempt0, n.steps0 = st.Preemptions, st.Steps
		}
		nr := NodeReport{
			ID: n.id, Requests: n.requests, Completed: n.completed,
			InputTokens: n.input, CachedTokens: n.cached, OutputTokens: n.output,
			KVMax: n.kvMax, Preemptions: st.Preemptions - n.preempt0, Steps: st.Steps - n.steps0,
			TTFT: n.ttft.percentiles(), ITL: n.itl.percentiles(),
		}
		if secs > 0 {
			nr.Throughput = float64(n.output) / secs
			nr.KVMean = n.kvSeconds / secs
		}
		if n.input > 0 {
			nr.CacheHit = float64(n.cached) / float64(n.input)
		}
		r.Nodes = append(r.Nodes, nr)
		r.Unfinished += len(n.started) + len(n.queued)
		fleet.Requests += nr.Requests
		fleet.Completed += nr.Completed
		fleet.InputTokens += nr.InputTokens
		fleet.CachedTokens += nr.CachedTokens
		fleet.OutputTokens += nr.OutputTokens
		fleet.Throughput += nr.Throughput
		fleet.KVMean += nr.KVMean / float64(len(d.nodes))
		fleet.KVMax = max(fleet.KVMax, nr.KVMax)
		fleet.Preemptions += nr.Preemptions
		fleet.Steps += nr.Steps
		ttft.merge(&n.ttft)
		itl.merge(&n.itl)
	}
	fleet.TTFT, fleet.ITL = ttft.percentiles(), itl.percentiles()
	if fleet.InputTokens > 0 {
		fleet.CacheHit = float64(fleet.CachedTokens) / float64(fleet.InputTokens)
	}
	r.Fleet = fleet
	r.Steps = fleet.Steps
	total := 0
	for _, c := range r.Routed {
		total += c
	}
	if total > 0 {
		r.PrefixRouted = float64(r.Routed["prefix"]+r.Routed[costPrefix]) / float64(total)
		r.CrossZone = float64(d.crossZone) / float64(total)
	}
	return r
}
