package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/fleet"
	"github.com/llmd/llmd/internal/workload"
)

// disaggOpts are llmctl simulate's disaggregation flags.
type disaggOpts struct {
	split     string // "P:D"
	bandwidth float64
	latency   time.Duration
	ttft, itl time.Duration
}

func (d *disaggOpts) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.split, "disagg", "",
		"P:D: compare P prefill and D decode nodes (the prompt's KV sent between them) with P+D nodes running requests whole, "+
			"under --ttft-slo and --itl-slo (single-turn workloads; --nodes and --route-policy are not used)")
	f.Float64Var(&d.bandwidth, "disagg-bandwidth", 50, "with --disagg: each decode node's inbound interconnect, GB/s (its transfers queue on it)")
	f.DurationVar(&d.latency, "disagg-latency", time.Millisecond, "with --disagg: fixed time added to each KV transfer")
	f.DurationVar(&d.ttft, "ttft-slo", 2*time.Second, "with --disagg: the time-to-first-token objective")
	f.DurationVar(&d.itl, "itl-slo", 50*time.Millisecond, "with --disagg: the inter-token latency objective (a request's mean time per output token)")
}

// parse reads --disagg.
func (d *disaggOpts) parse() (prefill, decode int, err error) {
	p, q, ok := strings.Cut(d.split, ":")
	if ok {
		prefill, err = strconv.Atoi(strings.TrimSpace(p))
		if err == nil {
			decode, err = strconv.Atoi(strings.TrimSpace(q))
		}
	}
	if !ok || err != nil || prefill < 1 || decode < 1 {
		return 0, 0, fmt.Errorf("--disagg %q: use P:D with at least one prefill and one decode node, e.g. 2:2", d.split)
	}
	if d.bandwidth <= 0 || d.latency < 0 || d.ttft <= 0 || d.itl <= 0 {
		return 0, 0, fmt.Errorf("--disagg-bandwidth, --ttft-slo and --itl-slo must be positive, --disagg-latency not negative")
	}
	return prefill, decode, nil
}

// disaggRow is one setup's result in simulate --disagg's output.
type disaggRow struct {
	Setup   string            `json:"setup"`
	Prefill int               `json:"prefill_nodes"`
	Decode  int               `json:"decode_nodes"`
	Report  *sim.DisaggReport `json:"report"`
}

// runDisagg runs simulate --disagg: the same arrivals on P+D whole nodes
// and on P prefill and D decode nodes.
func runDisagg(ctx context.Context, w io.Writer, o *simulateOpts, cfg fleet.Config) error {
	prefill, decode, err := o.disagg.parse()
	if err != nil {
		return err
	}
	if o.turns.Mean() != 1 {
		return fmt.Errorf("--disagg simulates single-turn requests: leave --turns at 1")
	}
	items, err := workload.Generate(cfg.Workload)
	if err != nil {
		return err
	}
	arrivals := make([]sim.DisaggArrival, len(items))
	for i, it := range items {
		a := sim.DisaggArrival{At: it.At, Input: it.SystemTokens + it.InputTokens, Output: it.OutputTokens, PromptSeed: uint64(i + 1)}
		if it.System >= 0 && it.SystemTokens > 0 {
			a.SharedPrefixID, a.SharedTokens = it.System+1, it.SystemTokens
		}
		arrivals[i] = a
	}
	s := cfg.Sim
	s.MeanOutputTokens = 0 // every answer runs to max_tokens, as in the fleet simulation
	dc := sim.DisaggConfig{Sim: s, Engine: cfg.Engine, BandwidthBytesPerSec: o.disagg.bandwidth * 1e9,
		TransferLatency: o.disagg.latency, TTFT: o.disagg.ttft, ITL: o.disagg.itl}
	var rows []disaggRow
	for _, setup := range [][2]int{{0, prefill + decode}, {prefill, decode}} {
		dc.Prefill, dc.Decode = setup[0], setup[1]
		r, err := sim.RunDisagg(ctx, dc, arrivals)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%d whole", setup[1])
		if setup[0] > 0 {
			name = fmt.Sprintf("%d prefill : %d decode", setup[0], setup[1])
		}
		rows = append(rows, disaggRow{Setup: name, Prefill: setup[0], Decode: setup[1], Report: r})
	}
	if o.asJSON {
		return writeJSON(w, struct {
			Simulated bool          `json:"simulated"`
			Config    simulateSetup `json:"config"`
			Bandwidth float64       `json:"bandwidth_gb_s"`
			Latency   string        `json:"transfer_latency"`
			TTFTSLO   string        `json:"ttft_slo"`
			ITLSLO    string        `json:"itl_slo"`
			Rows      []disaggRow   `json:"setups"`
		}{true, o.describe(cfg), o.disagg.bandwidth, o.disagg.latency.String(), o.disagg.ttft.String(), o.disagg.itl.String(), rows})
	}
	fmt.Fprintf(w, "SIMULATED disaggregation (engine/sim %s cost model, no model ran): %dx %s per node serving %s\n",
		o.hw.costModel, cfg.Sim.TP, cfg.Sim.GPU.Name, cfg.Sim.Model.ID)
	fmt.Fprintf(w, "workload: %g req/s (Poisson) for %s, input %s, output %s tokens; KV link %g GB/s per decode node, +%s per transfer\n",
		o.rate, o.duration, o.input, o.output, o.disagg.bandwidth, o.disagg.latency)
	fmt.Fprintf(w, "objectives: TTFT <= %s and ITL (mean time per output token) <= %s\n\n", o.disagg.ttft, o.disagg.itl)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SETUP\tSLO MET\tGOODPUT req/s\tOUT TOK/S\tTTFT P50/P90/P99 ms\tITL P50/P90/P99 ms\tKV MOVED GB\tTRANSFER ms\t")
	for _, row := range rows {
		r := row.Report
		fmt.Fprintf(tw, "%s\t%.0f%%\t%.2f\t%.0f\t%s\t%s\t%.1f\t%s\t\n", row.Setup, 100*r.Attainment, r.Goodput, r.Throughput,
			disaggMs(r.TTFT), disaggMs(r.ITL), float64(r.TransferBytes)/1e9, msOrDash(r.TransferTime, r.Transfers))
	}
	return tw.Flush()
}

func disaggMs(p sim.DisaggPercentiles) string {
	return percentilesMs(fleet.Percentiles{P50: p.P50, P90: p.P90, P99: p.P99, Count: 1})
}

func msOrDash(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}
