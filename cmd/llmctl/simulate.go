package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/fleet"
	"github.com/llmd/llmd/internal/workload"
	"github.com/llmd/llmd/quota"
)

// hardware is the node shape simulate and plan share: a GPU profile, a
// model profile and the GPUs per node.
type hardware struct {
	gpu, model  string
	tp          int
	maxRunning  int
	batchTokens int
	costModel   string
	// Speculative decoding (--speculative and its knobs).
	speculative    string
	specAcceptance float64
	specTokens     int
	specMaxBatch   int
}

// Cost models (--cost-model).
const (
	costCalibrated = "calibrated"
	costRoofline   = "roofline"
)

func (h *hardware) flags(cmd *cobra.Command, tp int, model string) {
	cmd.Flags().StringVar(&h.gpu, "gpu", "h100", "GPU profile: "+strings.Join(sim.GPUNames(), ", "))
	cmd.Flags().StringVarP(&h.model, "model", "m", model, "simulated model profile: "+strings.Join(sim.ModelNames(), ", "))
	cmd.Flags().IntVar(&h.tp, "tp", tp, "GPUs per node (the tensor-parallel degree)")
	cmd.Flags().IntVar(&h.maxRunning, "max-running", 256, "most sequences a node runs at once (the engine's batch size)")
	cmd.Flags().IntVar(&h.batchTokens, "max-batch-tokens", 2048, "most tokens a node's step processes (decode plus chunked prefill)")
	cmd.Flags().StringVar(&h.costModel, "cost-model", costCalibrated,
		"step times: calibrated (fitted to published vLLM throughput) or roofline (the hardware's peaks, an upper bound)")
	cmd.Flags().StringVar(&h.speculative, "speculative", "off",
		"speculative decoding on each node: off, ngram (prompt lookup, free drafts) or draft (a draft model a tenth of the target's cost per token)")
	cmd.Flags().Float64Var(&h.specAcceptance, "spec-acceptance", 0.7,
		"with --speculative: the probability that each drafted token is accepted")
	cmd.Flags().IntVar(&h.specTokens, "spec-tokens", engine.DefaultSpecTokens, "with --speculative: most draft tokens per sequence and step")
	cmd.Flags().IntVar(&h.specMaxBatch, "spec-max-batch", engine.DefaultSpecMaxBatch,
		"with --speculative: speculate only while a node runs at most this many sequences")
}

// simDraftCost is a simulated draft model's cost per drafted token, as a
// fraction of the target's weight-read time (llmd's daemon uses the same).
const simDraftCost = 0.1

// config returns the fleet configuration of nodes of this shape.
func (h *hardware) config(nodes int) (fleet.Config, error) {
	cfg := fleet.DefaultConfig()
	cfg.Nodes = nodes
	var err error
	if cfg.Sim.GPU, err = sim.GPUByName(h.gpu); err != nil {
		return cfg, err
	}
	if cfg.Sim.Model, err = sim.ModelByName(h.model); err != nil {
		return cfg, err
	}
	cfg.Sim.TP = h.tp
	switch h.costModel {
	case costCalibrated:
	case costRoofline:
		cfg.Sim.BandwidthEfficiency, cfg.Sim.ComputeEfficiency, cfg.Sim.SeqOverhead = 0, 0, 0
	default:
		return cfg, fmt.Errorf("--cost-model %q: use %s or %s", h.costModel, costCalibrated, costRoofline)
	}
	cfg.Engine.MaxRunning = h.maxRunning
	cfg.Engine.MaxBatchTokens = h.batchTokens
	switch h.speculative {
	case "off", "":
	case "ngram", "draft":
		cfg.Engine.Spec = engine.SpecConfig{ExecutorDrafts: true, MaxTokens: h.specTokens, MaxBatch: h.specMaxBatch}
		cfg.Sim.SpecAcceptance = h.specAcceptance
		if h.speculative == "draft" {
			cfg.Sim.DraftCost = simDraftCost
		}
	default:
		return cfg, fmt.Errorf("--speculative %q: use off, ngram or draft", h.speculative)
	}
	if err := cfg.Sim.Validate(); err != nil {
		return cfg, err
	}
	return cfg, cfg.Engine.Validate()
}

// simulateOpts are llmctl simulate's flags.
type simulateOpts struct {
	hw            hardware
	nodes         int
	rate          float64
	duration      time.Duration
	warmup        time.Duration
	input, output workload.Dist
	firstInput    workload.Dist
	sharedPrefix  float64
	systemPrompts int
	systemTokens  workload.Dist
	turns         workload.Dist
	thinkTime     time.Duration
	cancelRatio   float64
	tenants       int
	rpm, tpm      int64
	concurrency   int64
	route         string
	zones         int
	zoneLatency   time.Duration
	seed          uint64
	workers       int
	asJSON        bool
	disagg        disaggOpts
}

// newSimulateCmd builds "llmctl simulate".
func newSimulateCmd() *cobra.Command {
	o := &simulateOpts{
		input: workload.Uniform(128, 1024), output: workload.Uniform(64, 512),
		systemTokens: workload.Fixed(1024), turns: workload.Fixed(1),
	}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Simulate a fleet of llmd nodes in virtual time (SIMULATED GPUs, no llmd needed)",
		Long: "simulate runs N llmd engines (the real scheduler, KV cache, prefix cache and preemption) over\n" +
			"SIMULATED GPUs: each step takes the roofline time of a GPU profile and a model profile, on a\n" +
			"virtual clock, so an hour of traffic takes seconds to a minute. A router in front places each\n" +
			"request as a llmd cluster does (--route-policy). It prints, per node and for the fleet, output tokens/s,\n" +
			"KV cache usage, preemptions, prefix-cache hits and TTFT and inter-token latency percentiles.\n\n" +
			"Distributions (--input, --output, --system-tokens, --turns): 128, uniform:64-512 or normal:512,128.\n" +
			"No model runs: the figures are those of the cost model in engine/sim, calibrated against vLLM.",
		Example: "  llmctl simulate --nodes 4 --gpu h100 --model small --rate 40 --duration 1h\n" +
			"  llmctl simulate --model flagship --tp 8 --rate 30 --turns uniform:1-6 --route-policy round_robin --json\n" +
			"  llmctl simulate --disagg 2:2 --rate 12 --input uniform:3000-6000 --output 200 --duration 1m --itl-slo 20ms",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			deprecatedFlag(cmd, "route", "route-policy")
			cfg, err := o.config()
			if err != nil {
				return usageError(cmd, err)
			}
			if o.disagg.split != "" {
				if _, _, err := o.disagg.parse(); err != nil {
					return usageError(cmd, err)
				}
				return runDisagg(cmd.Context(), cmd.OutOrStdout(), o, cfg)
			}
			r, err := fleet.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), simulateJSON{Simulated: true, Config: o.describe(cfg), Report: r,
					SimulatedSeconds: r.Simulated.Seconds(), WallSeconds: r.Wall.Seconds()})
			}
			writeSimulation(cmd.OutOrStdout(), cfg, o, r)
			return nil
		},
	}
	f := cmd.Flags()
	o.hw.flags(cmd, 1, "small")
	f.IntVar(&o.nodes, "nodes", 4, "number of llmd nodes")
	f.Float64Var(&o.rate, "rate", 40, "arrival rate of requests per second, fleet-wide (Poisson)")
	f.DurationVar(&o.duration, "duration", time.Hour, "virtual time to simulate")
	f.DurationVar(&o.warmup, "warmup", 0, "virtual time at the start left out of the figures")
	f.Var(&o.input, "input", "user message length in tokens (a distribution)")
	f.Var(&o.output, "output", "answer length in tokens (max_tokens; every answer runs to it)")
	f.Var(&o.firstInput, "first-input", "length of a conversation's first user message, when it differs from --input (a document it opens with)")
	f.Float64Var(&o.sharedPrefix, "shared-prefix", 0.5, "share of conversations that start with a shared system prompt (0..1)")
	f.IntVar(&o.systemPrompts, "system-prompts", 8, "number of distinct shared system prompts")
	f.Var(&o.systemTokens, "system-tokens", "length of each shared system prompt in tokens (a distribution)")
	f.Var(&o.turns, "turns", "turns per conversation (a distribution); a turn's prompt holds the conversation so far")
	f.DurationVar(&o.thinkTime, "think-time", 0, "least time between two turns of a conversation")
	f.Float64Var(&o.cancelRatio, "cancel-ratio", 0, "share of requests cancelled at their first token (0..1)")
	f.IntVar(&o.tenants, "tenants", 1, "number of tenants the conversations are spread over")
	f.Int64Var(&o.rpm, "quota-rpm", 0, "requests per minute allowed per tenant (0: no quota)")
	f.Int64Var(&o.tpm, "quota-tpm", 0, "tokens per minute allowed per tenant (0: no quota)")
	f.Int64Var(&o.concurrency, "quota-concurrency", 0, "concurrent requests allowed per tenant (0: no quota)")
	f.StringVar(&o.route, "route-policy", string(cluster.PolicyPrefix),
		"routing policy, as llmd --route-policy: "+cluster.PolicyNames(fleet.RoutePolicies))
	// The old name, accepted with a warning.
	f.StringVar(&o.route, "route", string(cluster.PolicyPrefix), "routing policy")
	_ = f.MarkHidden("route")
	f.IntVar(&o.zones, "zones", 1, "zones the nodes are spread over (node i in zone i % N); each conversation comes from one (drawn at random), and "+
		"routing prefers it as llmd --zone does")
	f.DurationVar(&o.zoneLatency, "inter-zone-latency", 30*time.Millisecond,
		"with --zones: round trip added to the time to first token of a request served out of its zone")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the workload")
	f.IntVar(&o.workers, "workers", 1, "goroutines stepping the nodes (more help only on idle cores); the figures do not depend on it")
	f.BoolVar(&o.asJSON, "json", false, "print the configuration and the report as JSON")
	o.disagg.flags(cmd)
	return standalone(cmd)
}

// config turns the flags into a fleet configuration.
func (o *simulateOpts) config() (fleet.Config, error) {
	cfg, err := o.hw.config(o.nodes)
	if err != nil {
		return cfg, err
	}
	cfg.Route = cluster.Policy(o.route)
	cfg.Zones, cfg.InterZoneLatency = o.zones, o.zoneLatency
	cfg.Warmup = o.warmup
	cfg.Workers = o.workers
	if o.duration <= 0 {
		return cfg, fmt.Errorf("--duration must be positive, got %s", o.duration)
	}
	spec := workload.Spec{
		Duration: o.duration, Rate: o.rate, Input: o.input, Output: o.output, FirstInput: o.firstInput,
		SharedPrefix: o.sharedPrefix, SystemPrompts: o.systemPrompts, SystemTokens: o.systemTokens,
		Turns: o.turns, ThinkTime: o.thinkTime, CancelRatio: o.cancelRatio, Seed: o.seed,
	}
	if o.tenants < 1 {
		return cfg, fmt.Errorf("--tenants must be at least 1, got %d", o.tenants)
	}
	if o.tenants > 1 {
		for i := range o.tenants {
			spec.Tenants = append(spec.Tenants, fmt.Sprintf("tenant-%d", i+1))
		}
	}
	if o.sharedPrefix == 0 {
		spec.SystemPrompts = 0
	}
	cfg.Workload = spec
	if o.rpm != 0 || o.tpm != 0 || o.concurrency != 0 {
		cfg.Quota = &quota.Limits{RPM: o.rpm, TPM: o.tpm, Concurrency: o.concurrency}
	}
	return cfg, cfg.Validate()
}

// simulateJSON is simulate's --json output.
type simulateJSON struct {
	// Simulated is always true: no model ran.
	Simulated        bool          `json:"simulated"`
	Config           simulateSetup `json:"config"`
	Report           *fleet.Report `json:"report"`
	SimulatedSeconds float64       `json:"simulated_s"`
	WallSeconds      float64       `json:"wall_s"`
}

// simulateSetup describes a run in --json output.
type simulateSetup struct {
	Nodes        int            `json:"nodes"`
	GPU          string         `json:"gpu"`
	Model        string         `json:"model"`
	TP           int            `json:"tp"`
	CostModel    string         `json:"cost_model"`
	Route        cluster.Policy `json:"route"`
	Zones        int            `json:"zones,omitempty"`
	ZoneLatency  string         `json:"inter_zone_latency,omitempty"`
	Rate         float64        `json:"rate"`
	Duration     string         `json:"duration"`
	Warmup       string         `json:"warmup"`
	Input        string         `json:"input"`
	Output       string         `json:"output"`
	SharedPrefix float64        `json:"shared_prefix"`
	SystemPrompt string         `json:"system_tokens"`
	Prompts      int            `json:"system_prompts"`
	Turns        string         `json:"turns"`
	Seed         uint64         `json:"seed"`
	Speculative  string         `json:"speculative,omitempty"`
}

func (o *simulateOpts) describe(cfg fleet.Config) simulateSetup {
	s := simulateSetup{Nodes: cfg.Nodes, GPU: cfg.Sim.GPU.Name, Model: cfg.Sim.Model.ID, TP: cfg.Sim.TP, CostModel: o.hw.costModel, Route: cfg.Route,
		Rate: o.rate, Duration: o.duration.String(), Warmup: o.warmup.String(), Input: o.input.String(), Output: o.output.String(),
		SharedPrefix: o.sharedPrefix, SystemPrompt: o.systemTokens.String(), Prompts: o.systemPrompts, Turns: o.turns.String(), Seed: o.seed,
		Speculative: o.hw.specSummary()}
	if cfg.Zones > 1 {
		s.Zones, s.ZoneLatency = cfg.Zones, cfg.InterZoneLatency.String()
	}
	return s
}

// specSummary describes the speculative decoding setting, "" when off.
func (h *hardware) specSummary() string {
	if h.speculative == "" || h.speculative == "off" {
		return ""
	}
	return fmt.Sprintf("%s, acceptance %g, up to %d draft tokens, off above %d running sequences",
		h.speculative, h.specAcceptance, h.specTokens, h.specMaxBatch)
}

// writeSimulation prints the per-node table and the fleet summary.
func writeSimulation(w io.Writer, cfg fleet.Config, o *simulateOpts, r *fleet.Report) {
	fmt.Fprintf(w, "SIMULATED fleet (engine/sim %s cost model, no model ran): %d node(s) of %dx %s serving %s, routed by %s\n",
		o.hw.costModel, cfg.Nodes, cfg.Sim.TP, cfg.Sim.GPU.Name, cfg.Sim.Model.ID, cfg.Route)
	shared := "no shared system prompt"
	if o.sharedPrefix > 0 {
		shared = fmt.Sprintf("%.0f%% start with one of %d system prompts of %s tokens", 100*o.sharedPrefix, o.systemPrompts, o.systemTokens)
	}
	fmt.Fprintf(w, "workload: %g req/s (Poisson) for %s of virtual time, input %s, output %s tokens, %s, %s turn(s)\n",
		o.rate, o.duration, o.input, o.output, shared, o.turns)
	if spec := o.hw.specSummary(); spec != "" {
		fmt.Fprintf(w, "speculative decoding: %s\n", spec)
	}
	if o.warmup > 0 {
		fmt.Fprintf(w, "figures over the last %s (the first %s warm the fleet up)\n", r.Window, o.warmup)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "NODE\tREQUESTS\tDONE\tOUT TOK/S\tKV MEAN\tKV MAX\tPREEMPT\tCACHE HIT\tTTFT P50/P90/P99 ms\tITL P50/P90/P99 ms\t")
	row := func(n fleet.NodeReport) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f%%\t%.0f%%\t%d\t%.0f%%\t%s\t%s\t\n", n.ID, n.Requests, n.Completed, n.Throughput,
			100*n.KVMean, 100*n.KVMax, n.Preemptions, 100*n.CacheHit, percentilesMs(n.TTFT), percentilesMs(n.ITL))
	}
	for _, n := range r.Nodes {
		row(n)
	}
	row(r.Fleet)
	tw.Flush()
	fmt.Fprintln(w)

	reasons := slices.Sorted(maps.Keys(r.Routed))
	parts := make([]string, 0, len(reasons))
	for _, k := range reasons {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Routed[k]))
	}
	fmt.Fprintf(w, "routing: %.0f%% of requests placed for a cached prefix (%s); prompt tokens served from the cache: %.0f%%\n",
		100*r.PrefixRouted, strings.Join(parts, ", "), 100*r.Fleet.CacheHit)
	if cfg.Zones > 1 {
		fmt.Fprintf(w, "zones: %d; %.1f%% of requests served out of their zone (+%s to their first token)\n",
			cfg.Zones, 100*r.CrossZone, cfg.InterZoneLatency)
	}
	refused := "none"
	if len(r.Refused) > 0 {
		var rs []string
		for _, k := range slices.Sorted(maps.Keys(r.Refused)) {
			rs = append(rs, fmt.Sprintf("%s %d", k, r.Refused[k]))
		}
		refused = strings.Join(rs, ", ")
	}
	fmt.Fprintf(w, "requests: %d arrived, %d completed, %d unfinished at the end; refused: %s\n",
		r.Arrived, r.Fleet.Completed, r.Unfinished, refused)
	if r.OfferedOutputTokens > 0 {
		fmt.Fprintf(w, "output: %.0f tok/s generated of %.0f tok/s asked for (%.0f%%)\n", r.Fleet.Throughput,
			float64(r.OfferedOutputTokens)/r.Window.Seconds(), 100*float64(r.Fleet.OutputTokens)/float64(r.OfferedOutputTokens))
	}
	speed := r.Simulated.Seconds() / max(r.Wall.Seconds(), 1e-9)
	fmt.Fprintf(w, "wall time: %s for %s simulated (%.0fx real time), %d engine steps\n",
		r.Wall.Round(10*time.Millisecond), r.Simulated, speed, r.Steps)
}

// percentilesMs formats p50/p90/p99 in milliseconds.
func percentilesMs(p fleet.Percentiles) string {
	if p.Count == 0 {
		return "-"
	}
	ms := func(d time.Duration) string {
		v := float64(d) / float64(time.Millisecond)
		if v >= 100 {
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("%.1f", v)
	}
	return ms(p.P50) + " / " + ms(p.P90) + " / " + ms(p.P99)
}
