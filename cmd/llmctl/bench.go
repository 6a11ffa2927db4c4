package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/internal/loadgen"
	"github.com/llmd/llmd/internal/workload"
)

// benchOptions are the flags of "llmctl bench".
type benchOptions struct {
	spec    workload.Spec
	model   string
	dataset string
	apiKeys []string
	slo     loadgen.SLO
	timeout time.Duration
	asJSON  bool
	ignEOS  bool

	endpoint  string
	promptIDs string
	basis     string
}

// benchProgressEvery is how often the progress display is refreshed on a
// terminal; without one, a line is printed every benchPlainEvery.
const (
	benchProgressEvery = 200 * time.Millisecond
	benchPlainEvery    = 5 * time.Second
)

// newBenchCmd builds "llmctl bench".
func newBenchCmd(a *app) *cobra.Command {
	o := &benchOptions{spec: workload.Spec{
		Input:         workload.Uniform(128, 512),
		Output:        workload.Fixed(128),
		SystemPrompts: 1,
		SystemTokens:  workload.Fixed(512),
		Turns:         workload.Fixed(1),
	}}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test an OpenAI-compatible server: TTFT, TPOT, ITL, latency, throughput, goodput",
		Long: `Send a synthetic (or --dataset) workload of streamed chat completions to
llmd or any OpenAI-compatible server (vLLM, llama.cpp's server, Ollama's
/v1) at --addr, and report latencies and throughputs comparable to vLLM's
serving benchmark (benchmarks/benchmark_serving.py, "vllm bench serve").

Load: --concurrency N users each send a request when their previous one
ended (closed loop; the default, 8 users); or --rate R requests per second
arriving as a Poisson process (open loop), with --concurrency then bounding
the requests in flight. The run stops after --requests requests or
--duration, whichever comes first (--duration alone: no request limit).

Requests: each user message is --input tokens of generated English text,
each answer asks for --output tokens (max_tokens). A distribution is a
count ("128"), "uniform:LO-HI" or "normal:MEAN,STDDEV". --shared-prefix is
the share of conversations that start with one of --system-prompts system
prompts of --system-tokens tokens (to exercise prefix caching); --turns
makes conversations of several turns, each turn sent after the previous
one ended (and --think-time), with the real answer in its history;
--cancel-ratio closes that share of requests after their first token.
Token counts are exact for llmd's sim/* models and approximate elsewhere.
--dataset reads user messages from a JSONL file of {"prompt": ...,
"output_tokens": N} lines or ShareGPT {"conversations": [...]} entries.
--api-key may be repeated: conversations are spread over the keys, as
tenants. --seed makes the workload reproducible: the same seed sends the
same prompts, so a second run against the same server finds them in its
prefix cache; change --seed for a cold cache.

--endpoint completions sends text completions (/v1/completions) instead
of chat; with --prompt-ids LO-HI their prompts are token ids drawn from
[LO, HI), exactly --input (and --system-tokens) tokens whatever the
server's tokenizer or chat template, so that two servers (llmd and
llama.cpp's server) process the same tokens.

Tokens are counted as the server reports them (--token-basis): "timings"
sends llama.cpp's timings_per_token and reads each chunk's predicted_n;
"logprobs" asks for log probabilities and counts one token per entry
(llmd with a real model, vLLM, SGLang); "chunks" counts one token per
chunk carrying text, which misplaces tokens that decode to no text (often,
with random weights); "auto" (the default) probes the server for the
first it offers. The report says which basis it used.

Metrics, as vLLM defines them, measured on this client:
  TTFT  time from sending the request to the first chunk carrying a token.
  ITL   each gap between two consecutive tokens of a request (percentiles
        over all gaps of all requests; tokens of one chunk are gaps of 0).
  TPOT  per request, (E2E - TTFT) / (output tokens - 1), requests of two
        tokens or more: the mean inter-token gap, excluding the first token.
  E2E   time from sending the request to the end of its stream.
Throughputs count completed requests over the run's duration (start to
the end of the last request); output tokens come from the usage chunk
(stream_options.include_usage), else one per content chunk. Goodput is the
completed requests per second meeting every objective set: --slo-ttft on
TTFT, --slo-itl on the request's TPOT (as vLLM's --goodput tpot:MS), and
--slo-e2e. The prefix hit rate is cached / input tokens, from
usage.prompt_tokens_details.cached_tokens (vLLM sends it only with
--enable-prompt-tokens-details). Cancelled requests count in TTFT only;
failed requests are listed by kind (http_429, http_5xx, timeout,
transport, stream_error:CODE).

Progress goes to stderr, the report to stdout (--json for JSON). Ctrl-C
stops the run and prints what finished.`,
		Example: `  llmctl bench --model sim/small --requests 200 --concurrency 16
  llmctl bench --rate 20 --duration 1m --input normal:512,128 --output 256 --slo-ttft 500ms --slo-itl 50ms
  llmctl bench --requests 200 --shared-prefix 0.5 --system-prompts 4 --system-tokens 800 --turns 2
  llmctl bench --addr http://gpu-box:8000 --model meta-llama/Llama-3.1-8B-Instruct --dataset sharegpt.jsonl --json
  llmctl bench --endpoint completions --prompt-ids 1000-30000 --input 512 --output 1 --ignore-eos`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(cmd); err != nil {
				return usageError(cmd, err)
			}
			return a.bench(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.model, "model", "m", "", "model to benchmark (default: the server's preferred or first model)")
	f.IntVar(&o.spec.Requests, "requests", 100, "number of requests to send (0: no limit; needs --duration)")
	f.IntVar(&o.spec.Concurrency, "concurrency", 8, "users in closed loop; with --rate, the most requests in flight (0: no bound)")
	f.Float64Var(&o.spec.Rate, "rate", 0, "open loop: mean requests per second, Poisson arrivals")
	f.DurationVar(&o.spec.Duration, "duration", 0, "stop sending after this long (0: no limit)")
	f.Var(&o.spec.Input, "input", "user message length in tokens: N, uniform:LO-HI or normal:MEAN,SD")
	f.Var(&o.spec.Output, "output", "answer length in tokens (max_tokens): N, uniform:LO-HI or normal:MEAN,SD")
	f.Float64Var(&o.spec.SharedPrefix, "shared-prefix", 0, "share (0 to 1) of conversations starting with a shared system prompt")
	f.IntVar(&o.spec.SystemPrompts, "system-prompts", 1, "number of distinct shared system prompts")
	f.Var(&o.spec.SystemTokens, "system-tokens", "length of each shared system prompt in tokens")
	f.Var(&o.spec.Turns, "turns", "turns per conversation (1: single requests)")
	f.DurationVar(&o.spec.ThinkTime, "think-time", 0, "pause between a turn's end and the next turn of its conversation")
	f.Float64Var(&o.spec.CancelRatio, "cancel-ratio", 0, "share (0 to 1) of requests closed after their first token")
	f.StringVar(&o.dataset, "dataset", "", "JSONL file of prompts instead of generated text")
	// This shadows the global --api-key: bench accepts several.
	f.StringArrayVar(&o.apiKeys, "api-key", nil,
		"API key to send; repeat it to spread conversations over tenants (default: the global --api-key or $LLMD_API_KEY)")
	f.DurationVar(&o.slo.TTFT, "slo-ttft", 0, "goodput objective on the time to first token (e.g. 500ms)")
	f.DurationVar(&o.slo.ITL, "slo-itl", 0, "goodput objective on the time per output token (e.g. 50ms)")
	f.DurationVar(&o.slo.E2E, "slo-e2e", 0, "goodput objective on the end-to-end latency")
	f.Uint64Var(&o.spec.Seed, "seed", 1, "seed of the workload")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on a request after this long (0: never)")
	f.BoolVar(&o.ignEOS, "ignore-eos", false, `send "ignore_eos": true (llmd, vLLM, SGLang) so answers run to --output`)
	f.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	f.StringVar(&o.endpoint, "endpoint", loadgen.EndpointChat, "API to load: chat (/v1/chat/completions) or completions (/v1/completions)")
	f.StringVar(&o.promptIDs, "prompt-ids", "", "completions only: prompts of token ids drawn from LO-HI (e.g. 1000-30000), exact token counts")
	f.StringVar(&o.basis, "token-basis", "auto", "how output tokens are counted: auto, timings (llama.cpp), logprobs or chunks")
	return cmd
}

// check rejects the flag values that llmctl can tell are wrong, each in
// one line naming the flag.
func (o *benchOptions) check(cmd *cobra.Command) error {
	f := cmd.Flags()
	s := &o.spec
	switch {
	case s.Requests < 0:
		return fmt.Errorf("--requests must be >= 0, got %d", s.Requests)
	case s.Concurrency < 0:
		return fmt.Errorf("--concurrency must be >= 0, got %d", s.Concurrency)
	case s.Rate < 0:
		return fmt.Errorf("--rate must be >= 0, got %g", s.Rate)
	case s.Duration < 0:
		return fmt.Errorf("--duration must be >= 0, got %s", s.Duration)
	case s.SharedPrefix < 0 || s.SharedPrefix > 1:
		return fmt.Errorf("--shared-prefix must be within 0 and 1, got %g", s.SharedPrefix)
	case s.SystemPrompts < 1:
		return fmt.Errorf("--system-prompts must be >= 1, got %d", s.SystemPrompts)
	case s.CancelRatio < 0 || s.CancelRatio > 1:
		return fmt.Errorf("--cancel-ratio must be within 0 and 1, got %g", s.CancelRatio)
	case s.ThinkTime < 0:
		return fmt.Errorf("--think-time must be >= 0, got %s", s.ThinkTime)
	case o.timeout < 0:
		return fmt.Errorf("--timeout must be >= 0, got %s", o.timeout)
	case o.slo.TTFT < 0 || o.slo.ITL < 0 || o.slo.E2E < 0:
		return errors.New("--slo-ttft, --slo-itl and --slo-e2e must be >= 0")
	case o.dataset != "" && f.Changed("input"):
		return errors.New("give --input or --dataset, not both")
	}
	switch o.endpoint {
	case loadgen.EndpointChat, loadgen.EndpointCompletions:
	default:
		return fmt.Errorf("--endpoint must be chat or completions, got %q", o.endpoint)
	}
	switch o.basis {
	case "auto", loadgen.BasisTimings, loadgen.BasisLogprobs, loadgen.BasisChunks:
	default:
		return fmt.Errorf("--token-basis must be auto, timings, logprobs or chunks, got %q", o.basis)
	}
	if o.promptIDs != "" {
		if o.endpoint != loadgen.EndpointCompletions {
			return errors.New("--prompt-ids needs --endpoint completions")
		}
		if _, err := parseIDRange(o.promptIDs); err != nil {
			return err
		}
	}
	if s.Rate == 0 && s.Concurrency == 0 {
		return errors.New("--concurrency must be >= 1 without --rate")
	}
	// --duration alone bounds the run by time.
	if f.Changed("duration") && !f.Changed("requests") {
		s.Requests = 0
	}
	if s.Requests == 0 && s.Duration == 0 {
		return errors.New("give --requests or --duration")
	}
	// With --rate, --concurrency bounds requests in flight only when given.
	if s.Rate > 0 && !f.Changed("concurrency") {
		s.Concurrency = 0
	}
	for _, k := range o.apiKeys {
		if k == "" {
			return errors.New("--api-key must not be empty")
		}
	}
	return nil
}

// bench runs "llmctl bench".
func (a *app) bench(cmd *cobra.Command, o *benchOptions) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	if o.dataset != "" {
		ps, err := workload.LoadJSONL(o.dataset)
		if err != nil {
			return usageError(cmd, fmt.Errorf("--dataset: %w", err))
		}
		o.spec.Dataset = ps
	}
	keys := o.apiKeys
	if len(keys) == 0 && a.apiKey != "" {
		keys = []string{a.apiKey}
	}
	if len(keys) > 0 {
		// Model listing needs a key too when the server asks for one.
		a.client.SetAPIKey(keys[0])
	}
	if len(keys) > 1 {
		// Labels, not the keys: a key must never be printed.
		o.spec.Tenants = make([]string, len(keys))
		for i := range keys {
			o.spec.Tenants[i] = fmt.Sprintf("key%d", i+1)
		}
	}
	if err := o.spec.Validate(); err != nil {
		return usageError(cmd, err)
	}
	model, err := a.pickModel(ctx, o.model)
	if err != nil {
		return err
	}
	cfg := loadgen.Config{
		BaseURL: a.base, Model: model, APIKeys: keys,
		Timeout: o.timeout, SLO: o.slo, IgnoreEOS: o.ignEOS,
		Endpoint: o.endpoint, Basis: o.basis,
	}
	if o.promptIDs != "" {
		cfg.PromptIDs, _ = parseIDRange(o.promptIDs) // checked by check
	}
	if cfg.Basis == "auto" {
		cfg.Basis = loadgen.DetectBasis(ctx, cfg)
	}
	r, err := loadgen.New(cfg, o.spec)
	if err != nil {
		return usageError(cmd, err)
	}

	errOut := cmd.ErrOrStderr()
	fmt.Fprintf(errOut, "bench: %s at %s, %s\n", model, a.base, describeLoad(o.spec))
	stopProgress := showProgress(r, errOut, isTerminalWriter(errOut))
	rep, err := r.Run(ctx)
	stopProgress()
	if err != nil {
		return &exitError{code: exitFailure, err: err}
	}

	out := cmd.OutOrStdout()
	if o.asJSON {
		err = writeJSON(out, rep)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	switch {
	case rep.Stopped:
		return &exitError{code: exitInterrupted}
	case rep.Completed == 0 && rep.Cancelled == 0 && rep.Failed > 0:
		kind := slices.Sorted(maps.Keys(rep.Errors))[0]
		return &exitError{code: exitFailure, err: fmt.Errorf(
			"no request succeeded (%s: %s); check --addr, --model and --api-key", kind, rep.FirstErrors[kind])}
	}
	return nil
}

// parseIDRange parses --prompt-ids: "LO-HI", 0 <= LO < HI.
func parseIDRange(s string) (loadgen.IDRange, error) {
	var r loadgen.IDRange
	lo, hi, ok := strings.Cut(s, "-")
	var err error
	if ok {
		_, err = fmt.Sscanf(lo+" "+hi, "%d %d", &r.Lo, &r.Hi)
	}
	if !ok || err != nil || r.Lo < 0 || r.Hi <= r.Lo {
		return r, fmt.Errorf("--prompt-ids must be LO-HI with 0 <= LO < HI, got %q", s)
	}
	return r, nil
}

// describeLoad says in words what a run will send.
func describeLoad(s workload.Spec) string {
	var load string
	switch {
	case s.Rate > 0 && s.Concurrency > 0:
		load = fmt.Sprintf("%g req/s, at most %d in flight", s.Rate, s.Concurrency)
	case s.Rate > 0:
		load = fmt.Sprintf("%g req/s", s.Rate)
	default:
		load = fmt.Sprintf("%d concurrent", s.Concurrency)
	}
	var limit string
	switch {
	case s.Requests > 0 && s.Duration > 0:
		limit = fmt.Sprintf("%d requests or %s", s.Requests, s.Duration)
	case s.Requests > 0:
		limit = fmt.Sprintf("%d requests", s.Requests)
	default:
		limit = s.Duration.String()
	}
	return load + ", " + limit
}

// showProgress displays r's progress on w until the returned function is
// called (which waits for the display to stop): a bar rewritten in place
// on a terminal, else a plain line every benchPlainEvery.
func showProgress(r *loadgen.Runner, w io.Writer, terminal bool) (stop func()) {
	every := benchPlainEvery
	if terminal {
		every = benchProgressEvery
	}
	draw := func(final bool) {
		p := r.Progress()
		if !terminal {
			if !final {
				fmt.Fprintln(w, "bench: "+progressLine(p))
			}
			return
		}
		fmt.Fprintf(w, "\r\x1b[K%s  %s", progressBar(progressFraction(p), 30), progressLine(p))
		if final {
			fmt.Fprintln(w)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				draw(false)
			case <-done:
				draw(true)
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// progressBar draws fraction f (0 to 1) as a bar of width cells and a
// percentage. (bubbles/progress would need a module llmd does not
// require: harmonica, for its animation.)
func progressBar(f float64, width int) string {
	n := int(f * float64(width))
	return strings.Repeat("█", n) + strings.Repeat("░", width-n) + fmt.Sprintf(" %3.0f%%", 100*f)
}

// progressFraction is how far a run is, 0 to 1.
func progressFraction(p loadgen.Progress) float64 {
	f := 0.0
	if p.Total > 0 {
		f = float64(p.Done) / float64(p.Total)
	}
	if p.Duration > 0 {
		f = max(f, p.Elapsed.Seconds()/p.Duration.Seconds())
	}
	return min(f, 1)
}

// progressLine is one line of progress.
func progressLine(p loadgen.Progress) string {
	done := fmt.Sprint(p.Done)
	if p.Total > 0 {
		done = fmt.Sprintf("%d/%d", p.Done, p.Total)
	}
	tps := 0.0
	if s := p.Elapsed.Seconds(); s > 0 {
		tps = float64(p.OutputTokens) / s
	}
	line := fmt.Sprintf("%s requests, %d in flight, %.0f tok/s, %s", done, p.Sent-p.Done, tps, p.Elapsed.Round(100*time.Millisecond))
	if p.Failed > 0 {
		line += fmt.Sprintf(", %d failed", p.Failed)
	}
	return line
}
