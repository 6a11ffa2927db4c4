package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmd/llmd/api"
)

// clusterPlan is llmctl plan --from-cluster: the autoscaling signal every
// llmd exports (llmd_desired_replicas and its inputs, from the load the
// nodes gossip and the entry node's recent time to first token), turned
// into replicas per model and a node count.
type clusterPlan struct {
	Source string `json:"source"`
	// WarmBuffer is the share of capacity kept ahead of demand (the
	// --warm-buffer given, else the node's, as its figures imply).
	WarmBuffer *float64            `json:"warm_buffer,omitempty"`
	Models     []clusterPlanModel  `json:"models"`
	Nodes      *clusterPlanNodeSum `json:"nodes,omitempty"`
}

// clusterPlanModel is one model's live figures and what they ask for.
type clusterPlanModel struct {
	Model    string  `json:"model"`
	Replicas int     `json:"replicas"`
	KV       float64 `json:"kv_ratio"`
	Queue    float64 `json:"queue_ratio"`
	TTFT     float64 `json:"ttft_ratio"`
	Desired  int     `json:"desired_replicas"`
}

// clusterPlanNodeSum is the node count: each node scaled by the most
// pressed of the models it serves.
type clusterPlanNodeSum struct {
	Now     int `json:"now"`
	Desired int `json:"desired"`
}

// planFromCluster reads the live figures through a and writes the plan.
// warmBuffer < 0 keeps the node's own warm buffer.
func planFromCluster(ctx context.Context, a *app, w io.Writer, warmBuffer float64, asJSON bool) error {
	raw, err := a.client.Metrics(ctx)
	if err != nil {
		return a.apiError(err)
	}
	models, err := parseAutoscale(raw)
	if err != nil {
		return &exitError{code: exitFailure, err: err}
	}
	if len(models) == 0 {
		return &exitError{code: exitFailure, err: errors.New(
			"llmd at " + a.base + " exports no autoscaling signal (llmd_desired_replicas): it serves no model, or is older than this llmctl")}
	}
	p := clusterPlan{Source: a.base, Models: models}
	if warmBuffer >= 0 {
		p.WarmBuffer = &warmBuffer
		for i := range p.Models {
			m := &p.Models[i]
			ratio := max(m.KV, m.Queue, m.TTFT)
			m.Desired = max(1, int(math.Ceil(float64(m.Replicas)*ratio*(1+warmBuffer)-1e-9)))
		}
	}
	// Nodes need the cluster's membership, which an admin key reads.
	if nl, err := a.client.Nodes(ctx); err == nil {
		p.Nodes = nodeCount(nl, p.Models)
	}
	if asJSON {
		return writeJSON(w, p)
	}
	writeClusterPlan(w, p)
	return nil
}

// parseAutoscale reads the autoscaling gauges of a Prometheus text
// exposition, one entry per model in name order.
func parseAutoscale(raw []byte) ([]clusterPlanModel, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("llmd's /metrics: %w", err)
	}
	byModel := map[string]*clusterPlanModel{}
	get := func(name string) *clusterPlanModel {
		m := byModel[name]
		if m == nil {
			m = &clusterPlanModel{Model: name}
			byModel[name] = m
		}
		return m
	}
	label := func(ls []*dto.LabelPair, k string) string {
		for _, l := range ls {
			if l.GetName() == k {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, mf := range fams {
		for _, mt := range mf.GetMetric() {
			name := label(mt.GetLabel(), "model_name")
			if name == "" || mt.GetGauge() == nil {
				continue
			}
			v := mt.GetGauge().GetValue()
			switch mf.GetName() {
			case "llmd_desired_replicas":
				get(name).Desired = int(v)
			case "llmd_autoscale_replicas":
				get(name).Replicas = int(v)
			case "llmd_autoscale_signal_ratio":
				switch label(mt.GetLabel(), "signal") {
				case "kv":
					get(name).KV = v
				case "queue":
					get(name).Queue = v
				case "ttft":
					get(name).TTFT = v
				}
			}
		}
	}
	out := make([]clusterPlanModel, 0, len(byModel))
	for _, m := range byModel {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b clusterPlanModel) int {
		switch {
		case a.Model < b.Model:
			return -1
		case a.Model > b.Model:
			return 1
		}
		return 0
	})
	return out, nil
}

// nodeCount scales each alive node by the largest desired/replicas of the
// models it serves and sums them: a node serving only an idle model stays
// one node, one serving a model that asks for twice its replicas counts
// as two.
func nodeCount(nl *api.NodeList, models []clusterPlanModel) *clusterPlanNodeSum {
	factor := map[string]float64{}
	for _, m := range models {
		if m.Replicas > 0 {
			factor[m.Model] = float64(m.Desired) / float64(m.Replicas)
		}
	}
	sum := &clusterPlanNodeSum{}
	total := 0.0
	for _, n := range nl.Nodes {
		if n.Status != "alive" || n.Draining {
			continue
		}
		sum.Now++
		f := 0.0
		for _, id := range n.Models {
			f = max(f, factor[id])
		}
		total += f
	}
	sum.Desired = max(1, int(math.Ceil(total-1e-9)))
	return sum
}

func writeClusterPlan(w io.Writer, p clusterPlan) {
	fmt.Fprintf(w, "live figures of the cluster through %s\n", p.Source)
	if p.WarmBuffer != nil {
		fmt.Fprintf(w, "warm buffer %.0f%% (--warm-buffer)\n", 100**p.WarmBuffer)
	} else {
		fmt.Fprintln(w, "warm buffer: the node's (10%; --warm-buffer sets another)")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tREPLICAS\tKV/TARGET\tQUEUE/TARGET\tTTFT/TARGET\tDESIRED")
	for _, m := range p.Models {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%d\n", m.Model, m.Replicas, m.KV, m.Queue, m.TTFT, m.Desired)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	if p.Nodes != nil {
		fmt.Fprintf(w, "nodes: run %d (now %d alive): each node scaled by the most pressed model it serves\n", p.Nodes.Desired, p.Nodes.Now)
	} else {
		fmt.Fprintln(w, "nodes: the node count needs the cluster's membership (an admin key); the replicas above are per model")
	}
}
