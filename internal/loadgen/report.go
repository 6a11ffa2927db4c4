package loadgen

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report sums up a run. Latencies are in milliseconds, throughputs per
// second of the run's duration (from its start to the end of its last
// request), as in vLLM's benchmark_serving.py.
type Report struct {
	BaseURL     string  `json:"base_url"`
	Model       string  `json:"model"`
	Mode        string  `json:"mode"` // "open" (a rate) or "closed" (a concurrency)
	Rate        float64 `json:"rate,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	Seed        uint64  `json:"seed"`
	// Stopped is set when the run was interrupted (Ctrl-C).
	Stopped   bool    `json:"stopped,omitempty"`
	DurationS float64 `json:"duration_s"`

	// Requests counts requests sent: Completed + Cancelled (by design,
	// after their first token) + Failed + Interrupted (cut by a stop).
	Requests    int `json:"requests"`
	Completed   int `json:"completed"`
	Cancelled   int `json:"cancelled"`
	Failed      int `json:"failed"`
	Interrupted int `json:"interrupted,omitempty"`

	// Token counts of completed requests, from the servers' usage chunks
	// (else estimated; see Result). UsageReported counts the completed
	// requests that carried one.
	InputTokens   int `json:"input_tokens"`
	OutputTokens  int `json:"output_tokens"`
	CachedTokens  int `json:"cached_tokens"`
	UsageReported int `json:"usage_reported"`
	// TokenBasis is how tokens were timed (TTFT, ITL): the basis of most
	// completed requests (Config.Basis: "timings", "logprobs" or
	// "chunks"); Bases counts the completed requests per basis.
	TokenBasis string         `json:"token_basis"`
	Bases      map[string]int `json:"token_bases,omitempty"`

	// RequestThroughput is completed requests per second; OutputThroughput
	// their output tokens per second; TotalThroughput their input and
	// output tokens per second.
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	TotalThroughput   float64 `json:"total_token_throughput"`
	// Goodput is the completed requests meeting SLO per second; nil when
	// no SLO was set. Good counts them.
	Goodput *float64 `json:"goodput,omitempty"`
	Good    int      `json:"good,omitempty"`
	SLO     *SLOJSON `json:"slo,omitempty"`
	// PrefixHitRate is cached / input tokens of the completed requests
	// whose usage reported cached tokens; nil when none did (vLLM reports
	// them only with --enable-prompt-tokens-details).
	PrefixHitRate *float64 `json:"prefix_hit_rate"`

	// TTFT covers completed and cancelled requests (both got a first
	// token); TPOT, ITL and E2E completed ones. TPOT has one value per
	// request of two tokens or more; ITL one per gap between tokens of
	// any completed request.
	TTFT Stats `json:"ttft"`
	TPOT Stats `json:"tpot"`
	ITL  Stats `json:"itl"`
	E2E  Stats `json:"e2e"`

	// Errors counts failed requests by kind ("http_429", "timeout",
	// "stream_error:server_error", ...). FirstErrors holds one message per
	// kind.
	Errors      map[string]int    `json:"errors"`
	FirstErrors map[string]string `json:"first_errors,omitempty"`
}

// SLOJSON is an SLO in milliseconds (0: not set).
type SLOJSON struct {
	TTFTms float64 `json:"ttft_ms,omitempty"`
	ITLms  float64 `json:"itl_ms,omitempty"`
	E2Ems  float64 `json:"e2e_ms,omitempty"`
}

// Stats summarises a latency sample, in milliseconds. Percentiles
// interpolate linearly between the closest ranks (numpy's default, as
// vLLM's benchmark uses).
type Stats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	Std  float64 `json:"std_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// NewStats summarises ds; the zero Stats when ds is empty. It sorts ds.
func NewStats(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var sum float64
	for _, d := range ds {
		sum += ms(d)
	}
	mean := sum / float64(len(ds))
	var sq float64
	for _, d := range ds {
		sq += (ms(d) - mean) * (ms(d) - mean)
	}
	pct := func(p float64) float64 {
		x := p / 100 * float64(len(ds)-1)
		i := int(math.Floor(x))
		if i+1 >= len(ds) {
			return ms(ds[len(ds)-1])
		}
		return ms(ds[i]) + (x-float64(i))*(ms(ds[i+1])-ms(ds[i]))
	}
	return Stats{
		N: len(ds), Mean: mean, Std: math.Sqrt(sq / float64(len(ds))),
		P50: pct(50), P90: pct(90), P99: pct(99), Max: ms(ds[len(ds)-1]),
	}
}

// report computes the report of the results so far.
func (r *Runner) report(start, end time.Time) *Report {
	rep := &Report{
		BaseURL: r.cfg.BaseURL, Model: r.cfg.Model, Mode: "closed",
		Concurrency: r.spec.Concurrency, Seed: r.spec.Seed,
		Errors: map[string]int{},
	}
	if r.spec.Rate > 0 {
		rep.Mode, rep.Rate = "open", r.spec.Rate
	}
	results := r.Results()
	var (
		ttft, tpot, itl, e2e []time.Duration
		lastEnd              time.Duration
		cachedIn             int
		cachedSeen           bool
	)
	for i := range results {
		res := &results[i]
		rep.Requests++
		lastEnd = max(lastEnd, res.Sent+res.E2E)
		switch {
		case res.Kind == KindInterrupted:
			rep.Interrupted++
			continue
		case res.Kind == KindCancelled:
			rep.Cancelled++
			ttft = append(ttft, res.TTFT)
			continue
		case res.Kind != "":
			rep.Failed++
			rep.Errors[res.Kind]++
			if rep.FirstErrors == nil {
				rep.FirstErrors = map[string]string{}
			}
			if _, ok := rep.FirstErrors[res.Kind]; !ok {
				rep.FirstErrors[res.Kind] = res.Message
			}
			continue
		}
		rep.Completed++
		if rep.Bases == nil {
			rep.Bases = map[string]int{}
		}
		rep.Bases[res.Basis]++
		rep.InputTokens += res.PromptTokens
		rep.OutputTokens += res.OutputTokens
		if res.Usage {
			rep.UsageReported++
			rep.CachedTokens += res.CachedTokens
		}
		if res.cachedReported {
			cachedSeen = true
			cachedIn += res.PromptTokens
		}
		ttft = append(ttft, res.TTFT)
		e2e = append(e2e, res.E2E)
		itl = append(itl, res.ITL...)
		tp, ok := res.TPOT()
		if ok {
			tpot = append(tpot, tp)
		}
		if !r.cfg.SLO.IsZero() && meets(r.cfg.SLO, res, tp) {
			rep.Good++
		}
	}
	dur := end.Sub(start)
	if rep.Requests > 0 && lastEnd > 0 {
		dur = lastEnd
	}
	rep.DurationS = dur.Seconds()
	if s := rep.DurationS; s > 0 {
		rep.RequestThroughput = float64(rep.Completed) / s
		rep.OutputThroughput = float64(rep.OutputTokens) / s
		rep.TotalThroughput = float64(rep.InputTokens+rep.OutputTokens) / s
		if !r.cfg.SLO.IsZero() {
			g := float64(rep.Good) / s
			rep.Goodput = &g
		}
	}
	if !r.cfg.SLO.IsZero() {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		rep.SLO = &SLOJSON{TTFTms: ms(r.cfg.SLO.TTFT), ITLms: ms(r.cfg.SLO.ITL), E2Ems: ms(r.cfg.SLO.E2E)}
	}
	if cachedSeen && cachedIn > 0 {
		h := float64(rep.CachedTokens) / float64(cachedIn)
		rep.PrefixHitRate = &h
	}
	rep.TTFT, rep.TPOT, rep.ITL, rep.E2E = NewStats(ttft), NewStats(tpot), NewStats(itl), NewStats(e2e)
	for _, b := range slices.Sorted(maps.Keys(rep.Bases)) {
		if rep.TokenBasis == "" || rep.Bases[b] > rep.Bases[rep.TokenBasis] {
			rep.TokenBasis = b
		}
	}
	return rep
}

// meets reports whether a completed request meets slo; tpot is its TPOT
// (0 for fewer than two tokens, which meets any ITL objective, as in
// vLLM).
func meets(slo SLO, res *Result, tpot time.Duration) bool {
	return (slo.TTFT == 0 || res.TTFT <= slo.TTFT) &&
		(slo.ITL == 0 || tpot <= slo.ITL) &&
		(slo.E2E == 0 || res.E2E <= slo.E2E)
}

// WriteText writes rep as the table "llmctl bench" prints.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	line := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	load := fmt.Sprintf("closed loop, %d concurrent", rep.Concurrency)
	if rep.Mode == "open" {
		load = fmt.Sprintf("open loop, %g req/s (Poisson)", rep.Rate)
		if rep.Concurrency > 0 {
			load += fmt.Sprintf(", at most %d in flight", rep.Concurrency)
		}
	}
	line("model\t%s at %s", rep.Model, rep.BaseURL)
	line("load\t%s, seed %d", load, rep.Seed)
	if rep.Stopped {
		line("stopped\tinterrupted: the figures cover what finished")
	}
	line("duration\t%.2f s", rep.DurationS)
	req := fmt.Sprintf("%d sent, %d completed, %d cancelled, %d failed", rep.Requests, rep.Completed, rep.Cancelled, rep.Failed)
	if rep.Interrupted > 0 {
		req += fmt.Sprintf(", %d interrupted", rep.Interrupted)
	}
	line("requests\t%s", req)
	line("tokens\t%d input (%d cached), %d output", rep.InputTokens, rep.CachedTokens, rep.OutputTokens)
	line("request throughput\t%.2f req/s", rep.RequestThroughput)
	line("output throughput\t%.1f tok/s", rep.OutputThroughput)
	line("total throughput\t%.1f tok/s", rep.TotalThroughput)
	if rep.Goodput != nil {
		var objs []string
		if rep.SLO.TTFTms > 0 {
			objs = append(objs, fmt.Sprintf("TTFT <= %s", fmtMs(rep.SLO.TTFTms)))
		}
		if rep.SLO.ITLms > 0 {
			objs = append(objs, fmt.Sprintf("TPOT <= %s", fmtMs(rep.SLO.ITLms)))
		}
		if rep.SLO.E2Ems > 0 {
			objs = append(objs, fmt.Sprintf("E2E <= %s", fmtMs(rep.SLO.E2Ems)))
		}
		pct := 0.0
		if rep.Completed > 0 {
			pct = 100 * float64(rep.Good) / float64(rep.Completed)
		}
		line("goodput\t%.2f req/s (%d good, %.0f%% of completed; %s)", *rep.Goodput, rep.Good, pct, strings.Join(objs, ", "))
	}
	if rep.TokenBasis != "" {
		basis := basisWords[rep.TokenBasis]
		if len(rep.Bases) > 1 {
			basis += fmt.Sprintf(" (%d of %d requests)", rep.Bases[rep.TokenBasis], rep.Completed)
		}
		line("tokens timed by\t%s", basis)
	}
	if rep.PrefixHitRate != nil {
		line("prefix hit rate\t%.1f%% of input tokens cached", 100**rep.PrefixHitRate)
	} else {
		line("prefix hit rate\t- (the server reported no cached tokens)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-13s %9s %9s %9s %9s %9s %7s\n", "latency (ms)", "mean", "p50", "p90", "p99", "max", "n")
	for _, s := range []struct {
		name string
		st   Stats
	}{{"TTFT", rep.TTFT}, {"TPOT", rep.TPOT}, {"ITL", rep.ITL}, {"E2E", rep.E2E}} {
		if _, err := fmt.Fprintf(w, "%-13s %9.1f %9.1f %9.1f %9.1f %9.1f %7d\n",
			s.name, s.st.Mean, s.st.P50, s.st.P90, s.st.P99, s.st.Max, s.st.N); err != nil {
			return err
		}
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "errors")
		for _, k := range slices.Sorted(maps.Keys(rep.Errors)) {
			msg := rep.FirstErrors[k]
			if len(msg) > 100 {
				msg = msg[:100] + "..."
			}
			if _, err := fmt.Fprintf(w, "  %-28s %6d  %s\n", k, rep.Errors[k], msg); err != nil {
				return err
			}
		}
	}
	return nil
}

// basisWords says what each token basis means, for the text report.
var basisWords = map[string]string{
	BasisTimings:  "tokens the server reported (llama.cpp timings.predicted_n)",
	BasisLogprobs: "tokens the server reported (one log probability each)",
	BasisChunks:   "chunks carrying text (the server reported no tokens: TTFT and ITL are approximate)",
}

// fmtMs formats milliseconds as a duration.
func fmtMs(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).String()
}
