package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/fleet"
	"github.com/llmd/llmd/internal/workload"
)

// secondsPerDay spreads daily requests over the day.
const secondsPerDay = 86_400

// planOpts are llmctl plan's flags. The defaults are the seed's example:
// 10M daily users, 20 requests each, 1,500 tokens in and 400 out, a 3x
// peak, a 70B GQA model in FP8 on 8-GPU H100 nodes.
type planOpts struct {
	hw              hardware
	dau             int64
	requestsPerUser float64
	inputTokens     int
	outputTokens    int
	peak            float64
	context         int
	itlTarget       time.Duration
	ttftTarget      time.Duration
	keepUp          float64
	simDuration     time.Duration
	asJSON          bool
	fromCluster     bool
	warmBuffer      float64
}

// newPlanCmd builds "llmctl plan".
func newPlanCmd(a *app) *cobra.Command {
	o := &planOpts{}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Size a fleet: requests/s, tokens/s, KV memory, node throughput (SIMULATED) and the GPUs needed",
		Long: "plan is the capacity back-of-the-envelope as a command: from daily users, requests per user,\n" +
			"prompt and answer lengths and a peak factor it derives requests/s and tokens/s on average and at\n" +
			"peak; from the model profile the KV cache bytes per token, per conversation and per request, and\n" +
			"how many sequences one node's memory holds. The throughput of one node at the inter-token latency\n" +
			"target comes from the simulator (the engine over SIMULATED GPUs, see llmctl simulate): a binary\n" +
			"search on the request rate for the highest load whose ITL p99 and TTFT p99 stay under their\n" +
			"targets while the node keeps up with the load. Then nodes and GPUs needed at peak.\n" +
			"The defaults are the seed's example (10M daily users, 20 requests each, 1,500 in / 400 out, 3x peak,\n" +
			"a 70B GQA model in FP8 on 8-GPU H100 nodes).",
		Example: "  llmctl plan\n" +
			"  llmctl plan --dau 2000000 --requests-per-user 10 --input-tokens 800 --output-tokens 300 --model small --tp 1\n" +
			"  llmctl plan --from-cluster --warm-buffer 0.2",
		Args: usageArgs(cobra.NoArgs),
		// Only --from-cluster talks to llmd (--addr, --api-key).
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if o.fromCluster {
				return a.connect(cmd)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fromCluster {
				if cmd.Flags().Changed("warm-buffer") && !(o.warmBuffer >= 0 && o.warmBuffer <= 10) {
					return usageError(cmd, fmt.Errorf("--warm-buffer must be within 0 and 10, got %g", o.warmBuffer))
				}
				return planFromCluster(cmd.Context(), a, cmd.OutOrStdout(), o.warmBuffer, o.asJSON)
			}
			if err := o.check(); err != nil {
				return usageError(cmd, err)
			}
			cfg, err := o.hw.config(1)
			if err != nil {
				return usageError(cmd, err)
			}
			p, err := planArithmetic(o.inputs(), cfg.Sim)
			if err != nil {
				return usageError(cmd, err)
			}
			n, err := searchNodeRate(cmd.Context(), cfg, o.target())
			if err != nil {
				return err
			}
			p.fleet(n)
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			writePlan(cmd.OutOrStdout(), o, cfg.Sim, p)
			return nil
		},
	}
	f := cmd.Flags()
	o.hw.flags(cmd, 8, "flagship")
	f.Int64Var(&o.dau, "dau", 10_000_000, "daily active users")
	f.Float64Var(&o.requestsPerUser, "requests-per-user", 20, "requests per user per day")
	f.IntVar(&o.inputTokens, "input-tokens", 1500, "prompt tokens per request")
	f.IntVar(&o.outputTokens, "output-tokens", 400, "answer tokens per request")
	f.Float64Var(&o.peak, "peak", 3, "peak-to-average ratio of the request rate")
	f.IntVar(&o.context, "context", 8192, "tokens per conversation, for the KV-per-conversation line")
	f.DurationVar(&o.itlTarget, "itl-target", 50*time.Millisecond, "inter-token latency target (p99)")
	f.DurationVar(&o.ttftTarget, "ttft-target", 2*time.Second, "time-to-first-token target (p99) that keeps the queue short")
	f.Float64Var(&o.keepUp, "keep-up", 0.97, "share of the offered output a node must generate to count as keeping up")
	f.DurationVar(&o.simDuration, "sim-duration", 90*time.Second, "virtual time of each simulation of the search (a third is warm-up)")
	f.BoolVar(&o.asJSON, "json", false, "print the figures as JSON")
	f.BoolVar(&o.fromCluster, "from-cluster", false,
		"instead: the running cluster's replicas per model and node count, from the autoscaling signal llmd exports "+
			"(llmd_desired_replicas: KV use, queue depth and TTFT over their targets; the node count needs an admin key)")
	f.Float64Var(&o.warmBuffer, "warm-buffer", -1, "with --from-cluster: share of capacity kept ahead of demand (default: the node's)")
	f.Lookup("warm-buffer").DefValue = "0" // shown as the node's, not -1
	return cmd
}

func (o *planOpts) check() error {
	switch {
	case o.dau < 1:
		return fmt.Errorf("--dau must be at least 1, got %d", o.dau)
	case !(o.requestsPerUser > 0):
		return fmt.Errorf("--requests-per-user must be positive, got %g", o.requestsPerUser)
	case o.inputTokens < 1 || o.outputTokens < 1:
		return fmt.Errorf("--input-tokens and --output-tokens must be at least 1, got %d and %d", o.inputTokens, o.outputTokens)
	case !(o.peak >= 1):
		return fmt.Errorf("--peak must be at least 1, got %g", o.peak)
	case o.context < 1:
		return fmt.Errorf("--context must be at least 1, got %d", o.context)
	case o.itlTarget <= 0 || o.ttftTarget <= 0:
		return fmt.Errorf("--itl-target and --ttft-target must be positive")
	case !(o.keepUp > 0 && o.keepUp <= 1):
		return fmt.Errorf("--keep-up must be within (0, 1], got %g", o.keepUp)
	case o.simDuration < 10*time.Second:
		return fmt.Errorf("--sim-duration must be at least 10s, got %s", o.simDuration)
	}
	return nil
}

func (o *planOpts) inputs() planInputs {
	return planInputs{DAU: o.dau, RequestsPerUser: o.requestsPerUser, InputTokens: o.inputTokens,
		OutputTokens: o.outputTokens, Peak: o.peak, Context: o.context}
}

func (o *planOpts) target() nodeTarget {
	return nodeTarget{InputTokens: o.inputTokens, OutputTokens: o.outputTokens, ITL: o.itlTarget, TTFT: o.ttftTarget,
		KeepUp: o.keepUp, Duration: o.simDuration}
}

// planInputs are the traffic figures a plan starts from.
type planInputs struct {
	DAU             int64
	RequestsPerUser float64
	InputTokens     int
	OutputTokens    int
	Peak            float64
	Context         int
}

// planFigures is a plan: the arithmetic, then the simulated node and the
// fleet it implies.
type planFigures struct {
	Simulated bool `json:"simulated_node"`
	// Traffic.
	RequestsPerSec     float64 `json:"requests_per_s"`
	PeakRequestsPerSec float64 `json:"peak_requests_per_s"`
	InputTokensPerSec  float64 `json:"input_tokens_per_s"`
	OutputTokensPerSec float64 `json:"output_tokens_per_s"`
	PeakInputPerSec    float64 `json:"peak_input_tokens_per_s"`
	PeakOutputPerSec   float64 `json:"peak_output_tokens_per_s"`
	// Memory of one node.
	KVBytesPerToken      int64   `json:"kv_bytes_per_token"`
	KVPerConversation    int64   `json:"kv_bytes_per_conversation"`
	KVPerRequest         int64   `json:"kv_bytes_per_request"`
	WeightBytes          int64   `json:"weight_bytes"`
	NodeMemoryBytes      int64   `json:"node_memory_bytes"`
	KVCapacityBytes      int64   `json:"kv_capacity_bytes"`
	SequencesPerNode     int64   `json:"sequences_per_node"`
	ConversationsPerNode int64   `json:"conversations_per_node"`
	ReserveFraction      float64 `json:"reserve_fraction"`
	// The node at the targets, from the simulator.
	Node nodeResult `json:"node"`
	// The fleet.
	NodesAtPeak    int `json:"nodes_at_peak"`
	GPUsAtPeak     int `json:"gpus_at_peak"`
	NodesAtAverage int `json:"nodes_at_average"`
	GPUsAtAverage  int `json:"gpus_at_average"`
	tp             int
	in             planInputs
}

// planArithmetic is the back-of-the-envelope: traffic from users, KV
// memory from the model shape and the node's memory.
func planArithmetic(in planInputs, sc sim.Config) (*planFigures, error) {
	exec, err := sim.New(sc, engine.NewVirtualClock(time.Time{}))
	if err != nil {
		return nil, err
	}
	p := &planFigures{Simulated: true, tp: sc.TP, in: in, ReserveFraction: sc.ReserveFraction}
	p.RequestsPerSec = float64(in.DAU) * in.RequestsPerUser / secondsPerDay
	p.PeakRequestsPerSec = p.RequestsPerSec * in.Peak
	p.InputTokensPerSec = p.RequestsPerSec * float64(in.InputTokens)
	p.OutputTokensPerSec = p.RequestsPerSec * float64(in.OutputTokens)
	p.PeakInputPerSec = p.PeakRequestsPerSec * float64(in.InputTokens)
	p.PeakOutputPerSec = p.PeakRequestsPerSec * float64(in.OutputTokens)
	// The group's bytes per token: KV heads are replicated when TP
	// exceeds them, which the tokens a node holds account for.
	p.KVBytesPerToken = sc.Model.KVBytesPerToken()
	perToken := p.KVBytesPerToken
	if sc.TP > sc.Model.KVHeads {
		perToken = perToken / int64(sc.Model.KVHeads) * int64(sc.TP)
	}
	p.KVPerConversation = int64(in.Context) * p.KVBytesPerToken
	p.KVPerRequest = int64(in.InputTokens+in.OutputTokens) * perToken
	p.WeightBytes = sc.Model.WeightBytes()
	p.NodeMemoryBytes = sc.GPU.MemoryBytes * int64(sc.TP)
	p.KVCapacityBytes = exec.KVCapacityBytes()
	p.SequencesPerNode = p.KVCapacityBytes / p.KVPerRequest
	p.ConversationsPerNode = p.KVCapacityBytes / (int64(in.Context) * perToken)
	return p, nil
}

// fleet sizes the fleet for the node's sustainable rate.
func (p *planFigures) fleet(n nodeResult) {
	p.Node = n
	p.NodesAtPeak = int(math.Ceil(p.PeakRequestsPerSec / n.RequestsPerSec))
	p.NodesAtAverage = int(math.Ceil(p.RequestsPerSec / n.RequestsPerSec))
	p.GPUsAtPeak = p.NodesAtPeak * p.tp
	p.GPUsAtAverage = p.NodesAtAverage * p.tp
}

// nodeTarget is what one node must sustain: its requests' shape and the
// latency targets.
type nodeTarget struct {
	InputTokens, OutputTokens int
	ITL, TTFT                 time.Duration
	// KeepUp is the share of the offered output the node must generate.
	KeepUp   float64
	Duration time.Duration
}

// nodeResult is one node at the highest rate that met the targets.
type nodeResult struct {
	RequestsPerSec     float64           `json:"requests_per_s"`
	OutputTokensPerSec float64           `json:"output_tokens_per_s"`
	TokensPerSec       float64           `json:"tokens_per_s"`
	ITL                fleet.Percentiles `json:"itl"`
	TTFT               fleet.Percentiles `json:"ttft"`
	KVMean             float64           `json:"kv_mean"`
	Preemptions        uint64            `json:"preemptions"`
	// Tried lists the rates simulated, in order, and whether each met the
	// targets.
	Tried []triedRate `json:"tried"`
	Wall  float64     `json:"search_wall_s"`
}

type triedRate struct {
	Rate float64 `json:"rate"`
	OK   bool    `json:"ok"`
	Why  string  `json:"why,omitempty"`
}

// searchNodeRate finds, by simulation, the highest request rate one node
// of cfg sustains within the target: requests of exactly the target's
// lengths, no shared prefix (the plan assumes no cache hits), Poisson
// arrivals. It brackets the rate from a roofline estimate, then bisects
// to 2%.
func searchNodeRate(ctx context.Context, cfg fleet.Config, t nodeTarget) (nodeResult, error) {
	start := time.Now()
	var res nodeResult
	var best *fleet.Report
	try := func(rate float64) (bool, error) {
		c := cfg
		c.Nodes = 1
		c.Warmup = t.Duration / 3
		c.Workload = workload.Spec{Duration: t.Duration, Rate: rate, Input: workload.Fixed(t.InputTokens),
			Output: workload.Fixed(t.OutputTokens), Seed: 1}
		r, err := fleet.Run(ctx, c)
		if err != nil {
			return false, err
		}
		n := r.Nodes[0]
		var why []string
		if n.ITL.P99 > t.ITL {
			why = append(why, "ITL p99 "+n.ITL.P99.Round(100*time.Microsecond).String())
		}
		if n.TTFT.P99 > t.TTFT {
			why = append(why, "TTFT p99 "+n.TTFT.P99.Round(time.Millisecond).String())
		}
		if r.OfferedOutputTokens > 0 && float64(n.OutputTokens) < t.KeepUp*float64(r.OfferedOutputTokens) {
			why = append(why, fmt.Sprintf("generated %.0f%% of the load", 100*float64(n.OutputTokens)/float64(r.OfferedOutputTokens)))
		}
		if len(r.Refused) > 0 {
			why = append(why, "requests refused")
		}
		ok := len(why) == 0
		res.Tried = append(res.Tried, triedRate{Rate: rate, OK: ok, Why: strings.Join(why, ", ")})
		if ok && (best == nil || rate > res.RequestsPerSec) {
			best, res.RequestsPerSec = r, rate
		}
		return ok, nil
	}
	// The compute roofline of a request bounds the rate from above.
	m := cfg.Sim.Model
	flops := 2 * float64(m.Params) * float64(t.InputTokens+t.OutputTokens)
	guess := cfg.Sim.GPU.PeakFLOPS(m.WeightDTypeBytes) * float64(cfg.Sim.TP) / flops / 2
	lo, hi := 0.0, 0.0
	rate := roundRate(guess)
	for range 12 {
		ok, err := try(rate)
		if err != nil {
			return res, err
		}
		if ok {
			lo = rate
			if hi > 0 {
				break
			}
			rate = roundRate(rate * 1.5)
		} else {
			hi = rate
			if lo > 0 {
				break
			}
			rate = roundRate(rate / 1.5)
		}
	}
	if lo == 0 {
		return res, fmt.Errorf("no load met the targets (lowest tried: %.3g req/s): the ITL target may be below one step of the model on this hardware", rate)
	}
	for hi > 0 && (hi-lo)/lo > 0.02 {
		mid := roundRate((lo + hi) / 2)
		if mid <= lo || mid >= hi {
			break
		}
		ok, err := try(mid)
		if err != nil {
			return res, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	n := best.Nodes[0]
	res.OutputTokensPerSec = n.Throughput
	res.TokensPerSec = res.RequestsPerSec * float64(t.InputTokens+t.OutputTokens)
	res.ITL, res.TTFT, res.KVMean, res.Preemptions = n.ITL, n.TTFT, n.KVMean, n.Preemptions
	res.Wall = time.Since(start).Seconds()
	return res, nil
}

// roundRate keeps three significant digits, so the rates tried read well.
func roundRate(r float64) float64 {
	if r <= 0 {
		return r
	}
	p := math.Pow(10, math.Floor(math.Log10(r))-2)
	return math.Round(r/p) * p
}

// writePlan prints the plan with its reasoning.
func writePlan(w io.Writer, o *planOpts, sc sim.Config, p *planFigures) {
	m := sc.Model
	in := p.in
	fmt.Fprintf(w, "Capacity plan: %s users x %s requests a day, %s tokens in and %s out, %gx peak;\n",
		commas(float64(in.DAU)), trimFloat(in.RequestsPerUser), commas(float64(in.InputTokens)), commas(float64(in.OutputTokens)), in.Peak)
	fmt.Fprintf(w, "%s (%s) on %d-GPU %s nodes. The node throughput is SIMULATED (engine/sim's %s cost model).\n\n",
		m.ID, modelShape(m), sc.TP, sc.GPU.Name, o.hw.costModel)
	if spec := o.hw.specSummary(); spec != "" {
		fmt.Fprintf(w, "Speculative decoding on each node: %s.\n\n", spec)
	}

	fmt.Fprintln(w, "Traffic")
	fmt.Fprintf(w, "  requests/s, average   %s x %s / 86,400 s = %s req/s\n", commas(float64(in.DAU)), trimFloat(in.RequestsPerUser), commas(p.RequestsPerSec))
	fmt.Fprintf(w, "  requests/s, peak      %s x %g = %s req/s\n", commas(p.RequestsPerSec), in.Peak, commas(p.PeakRequestsPerSec))
	fmt.Fprintf(w, "  input tokens/s        %s x %s = %s average, %s at peak\n", commas(p.RequestsPerSec), commas(float64(in.InputTokens)),
		siCount(p.InputTokensPerSec), siCount(p.PeakInputPerSec))
	fmt.Fprintf(w, "  output tokens/s       %s x %s = %s average, %s at peak\n\n", commas(p.RequestsPerSec), commas(float64(in.OutputTokens)),
		siCount(p.OutputTokensPerSec), siCount(p.PeakOutputPerSec))

	fmt.Fprintln(w, "Memory")
	fmt.Fprintf(w, "  KV bytes per token    2 (K and V) x %d layers x %d KV heads x %d head dim x %d bytes = %s B\n",
		m.Layers, m.KVHeads, m.HeadDim, m.KVDTypeBytes, commas(float64(p.KVBytesPerToken)))
	fmt.Fprintf(w, "  KV per conversation   %s tokens x %s B = %s (%s)\n", commas(float64(in.Context)), commas(float64(p.KVBytesPerToken)),
		gbString(p.KVPerConversation), gibString(p.KVPerConversation))
	fmt.Fprintf(w, "  KV per request        %s tokens (%s in + %s out) x %s B = %s\n", commas(float64(in.InputTokens+in.OutputTokens)),
		commas(float64(in.InputTokens)), commas(float64(in.OutputTokens)), commas(float64(p.KVPerRequest/int64(in.InputTokens+in.OutputTokens))),
		gbString(p.KVPerRequest))
	fmt.Fprintf(w, "  KV capacity per node  %d x %s of memory, less %.0f%% reserve and %s of weights = %s\n", sc.TP,
		gbString(sc.GPU.MemoryBytes), 100*p.ReserveFraction, gbString(p.WeightBytes), gbString(p.KVCapacityBytes))
	fmt.Fprintf(w, "  sequences per node    %s / %s = %s requests at once (%s conversations of %s tokens)",
		gbString(p.KVCapacityBytes), gbString(p.KVPerRequest), commas(float64(p.SequencesPerNode)),
		commas(float64(p.ConversationsPerNode)), commas(float64(in.Context)))
	if int64(o.hw.maxRunning) < p.SequencesPerNode {
		fmt.Fprintf(w, "; the engine runs at most %d (--max-running)", o.hw.maxRunning)
	}
	fmt.Fprint(w, "\n\n")

	n := p.Node
	fmt.Fprintln(w, "Throughput of one node (SIMULATED)")
	fmt.Fprintf(w, "  binary search on the request rate, %s runs of %s-in/%s-out requests (Poisson, no cache hits);\n",
		o.simDuration, commas(float64(in.InputTokens)), commas(float64(in.OutputTokens)))
	fmt.Fprintf(w, "  a rate passes when ITL p99 <= %s, TTFT p99 <= %s and the node generates >= %.0f%% of the load\n",
		o.itlTarget, o.ttftTarget, 100*o.keepUp)
	var tried []string
	for _, t := range n.Tried {
		mark := "ok"
		if !t.OK {
			mark = t.Why
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", trimFloat(t.Rate), mark))
	}
	fmt.Fprintf(w, "  tried (req/s): %s\n", strings.Join(tried, "; "))
	fmt.Fprintf(w, "  highest passing load  %s req/s = %s output tok/s (%s tok/s with the prompts)\n",
		trimFloat(n.RequestsPerSec), commas(n.OutputTokensPerSec), commas(n.TokensPerSec))
	fmt.Fprintf(w, "  at that load          ITL p50/p99 %s / %s, TTFT p50/p99 %s / %s, KV cache %.0f%% used, %d preemptions\n\n",
		n.ITL.P50.Round(100*time.Microsecond), n.ITL.P99.Round(100*time.Microsecond),
		n.TTFT.P50.Round(time.Millisecond), n.TTFT.P99.Round(time.Millisecond), 100*n.KVMean, n.Preemptions)

	fmt.Fprintln(w, "Fleet")
	fmt.Fprintf(w, "  nodes at peak         %s / %s = %d nodes = %s GPUs (%s)\n", commas(p.PeakRequestsPerSec), trimFloat(n.RequestsPerSec),
		p.NodesAtPeak, commas(float64(p.GPUsAtPeak)), sc.GPU.Name)
	fmt.Fprintf(w, "  nodes on average      %s / %s = %d nodes = %s GPUs\n", commas(p.RequestsPerSec), trimFloat(n.RequestsPerSec),
		p.NodesAtAverage, commas(float64(p.GPUsAtAverage)))
	fmt.Fprintf(w, "  (no headroom for failures, cache hits or uneven routing; the search took %.0fs of wall time)\n", n.Wall)
}

// modelShape describes a model profile in a few words.
func modelShape(m sim.Model) string {
	dt := map[int]string{1: "FP8", 2: "BF16"}[m.WeightDTypeBytes]
	kv := map[int]string{1: "FP8", 2: "FP16"}[m.KVDTypeBytes]
	return fmt.Sprintf("%.1fB parameters in %s, %d layers, GQA %d/%d heads, %s KV cache", float64(m.Params)/1e9, dt,
		m.Layers, m.Heads, m.KVHeads, kv)
}

// commas writes v rounded to an integer with thousands separators:
// 2314.8 -> "2,315".
func commas(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// siCount writes a count with three significant digits and K or M.
func siCount(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'g', 3, 64) + "G"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "K"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// trimFloat writes v with at most three decimals and no trailing zeros.
func trimFloat(v float64) string { return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64) }

// gbString writes bytes in decimal units: "2.68 GB", "623 MB".
func gbString(b int64) string {
	switch v := float64(b); {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " GB"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 0, 64) + " MB"
	default:
		return commas(v) + " B"
	}
}

// gibString writes bytes in GiB: "2.50 GiB".
func gibString(b int64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64) + " GiB" }
