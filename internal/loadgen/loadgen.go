// Package loadgen runs a [workload.Spec] against an OpenAI-compatible
// server (llmd, vLLM, llama.cpp's server, Ollama's /v1) and measures it the
// way vLLM's serving benchmark does: time to first token, inter-token
// latency, time per output token, end-to-end latency, throughputs and
// goodput under an SLO.
//
// Every request is a streamed chat completion (POST /v1/chat/completions,
// "stream": true, "stream_options": {"include_usage": true}), or a streamed
// text completion (POST /v1/completions) whose prompt may be token ids, so
// that two servers with different chat templates and tokenizers get the
// same tokens; one goroutine runs each request in flight, and their number
// is bounded.
//
// Output tokens are counted as the server reports them (Config.Basis): by
// llama.cpp's per-chunk timings (predicted_n), by per-token log
// probabilities, or, failing both, one per chunk that carries text. With
// random weights many tokens decode to no visible text (part of a UTF-8
// character, a control token), so counting text chunks misplaces the first
// token and the gaps between tokens. [Runner.Run]
// returns when every request finished or was stopped by its context; it
// leaves no goroutine behind.
//
// It imports api (wire types and the SSE reader) and workload, nothing
// else of llmd.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/workload"
)

// DefaultMaxInFlight bounds the requests in flight in open loop when the
// Spec sets no Concurrency.
const DefaultMaxInFlight = 1024

// Config says where and how to send a workload.
type Config struct {
	// BaseURL is the server's address, e.g. "http://127.0.0.1:8700";
	// requests go to BaseURL + "/v1/chat/completions" ("/chat/completions"
	// when BaseURL already ends in "/v1").
	BaseURL string
	// Model is the model field of every request.
	Model string
	// APIKeys are sent as "Authorization: Bearer <key>": request of
	// tenant i (workload.Item.Tenant) carries APIKeys[i % len(APIKeys)].
	// Empty sends none.
	APIKeys []string
	// Timeout bounds each request, from sending to the end of its stream;
	// 0 means no bound.
	Timeout time.Duration
	// Temperature, when set, is sent with every request.
	Temperature *float64
	// IgnoreEOS sends vLLM's "ignore_eos": true, so that answers run to
	// max_tokens on servers that support it (llmd, vLLM, SGLang).
	IgnoreEOS bool
	// ResponseFormat, when set, is every request's response_format
	// (structured output).
	ResponseFormat *api.ResponseFormat
	// SLO sets the goodput's objectives; the zero SLO disables goodput.
	SLO SLO
	// HTTPClient sends the requests; nil means a client of its own, with
	// as many idle connections as requests in flight, closed at the end
	// of Run.
	HTTPClient *http.Client
	// MaxInFlight bounds requests in flight in open loop when the Spec
	// sets no Concurrency; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// Endpoint is the API: EndpointChat (the default) or
	// EndpointCompletions.
	Endpoint string
	// PromptIDs, when Hi > Lo, makes every prompt token ids drawn from
	// [Lo, Hi) (EndpointCompletions only; single-turn workloads): exactly
	// the workload's token counts, whatever the server's tokenizer.
	PromptIDs IDRange
	// Basis is how output tokens are counted as they arrive: BasisTimings,
	// BasisLogprobs or BasisChunks (the default). DetectBasis picks one
	// for a server.
	Basis string
}

// Endpoints of Config.Endpoint.
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
)

// Token bases of Config.Basis.
const (
	// BasisTimings sends llama.cpp's "timings_per_token": true and counts
	// each chunk's tokens from its timings.predicted_n (llama.cpp's
	// server).
	BasisTimings = "timings"
	// BasisLogprobs asks for log probabilities ("logprobs": true on chat,
	// "logprobs": 0 on completions) and counts one token per entry (llmd,
	// vLLM, SGLang).
	BasisLogprobs = "logprobs"
	// BasisChunks counts one token per chunk carrying text.
	BasisChunks = "chunks"
)

// IDRange is a half-open range of token ids.
type IDRange struct{ Lo, Hi int }

// SLO is a service-level objective per request. A request is good when it
// completed and meets every objective set (non-zero).
type SLO struct {
	// TTFT bounds the time to first token.
	TTFT time.Duration
	// ITL bounds the request's time per output token (TPOT: its mean
	// inter-token gap, (E2E - TTFT) / (output tokens - 1)), as vLLM's
	// --goodput tpot:MS does; a request of one token meets it.
	ITL time.Duration
	// E2E bounds the end-to-end latency.
	E2E time.Duration
}

// IsZero reports whether no objective is set.
func (s SLO) IsZero() bool { return s == SLO{} }

// Progress is a snapshot of a run, for progress displays.
type Progress struct {
	// Total is the number of requests planned; 0 when only a duration
	// bounds the run.
	Total int
	// Duration is the Spec's duration (0: none).
	Duration time.Duration
	// Elapsed is the time since the run started.
	Elapsed time.Duration
	// Sent counts requests sent; Done those that ended, Failed and
	// Cancelled (by design) among them.
	Sent, Done, Failed, Cancelled int
	// OutputTokens counts the tokens received so far by ended requests.
	OutputTokens int
}

// Runner runs one workload once. Create it with New.
type Runner struct {
	cfg     Config
	spec    workload.Spec
	url     string
	hc      *http.Client
	ownHC   bool
	systems []string // text of each shared system prompt

	started atomic.Int64 // start time, unix nanoseconds; 0 before Run
	total   atomic.Int64
	sent    atomic.Int64
	done    atomic.Int64
	failed  atomic.Int64
	cancels atomic.Int64
	tokens  atomic.Int64

	mu      sync.Mutex
	results []Result
}

// New checks cfg and spec and returns their Runner.
func New(cfg Config, spec workload.Spec) (*Runner, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("loadgen: no model")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("loadgen: timeout must be >= 0, got %s", cfg.Timeout)
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("loadgen: base URL %q: want http:// or https://", cfg.BaseURL)
	}
	path := "/chat/completions"
	switch cfg.Endpoint {
	case "", EndpointChat:
		if cfg.PromptIDs.Hi > cfg.PromptIDs.Lo {
			return nil, errors.New("loadgen: token-id prompts need the completions endpoint")
		}
	case EndpointCompletions:
		path = "/completions"
	default:
		return nil, fmt.Errorf("loadgen: endpoint %q: want %q or %q", cfg.Endpoint, EndpointChat, EndpointCompletions)
	}
	switch cfg.Basis {
	case "", BasisChunks, BasisTimings, BasisLogprobs:
	default:
		return nil, fmt.Errorf("loadgen: token basis %q: want %q, %q or %q", cfg.Basis, BasisTimings, BasisLogprobs, BasisChunks)
	}
	if cfg.PromptIDs.Lo < 0 || cfg.PromptIDs.Hi < cfg.PromptIDs.Lo {
		return nil, fmt.Errorf("loadgen: token id range %d-%d is empty", cfg.PromptIDs.Lo, cfg.PromptIDs.Hi)
	}
	if cfg.PromptIDs.Hi > cfg.PromptIDs.Lo && (spec.Turns != (workload.Dist{}) && spec.Turns != workload.Fixed(1) || spec.Dataset != nil) {
		return nil, errors.New("loadgen: token-id prompts are generated single turns (no --turns, no --dataset)")
	}
	url := base + "/v1" + path
	if strings.HasSuffix(base, "/v1") {
		url = base + path
	}
	r := &Runner{cfg: cfg, spec: spec, url: url, hc: cfg.HTTPClient}
	if r.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = r.maxInFlight()
		t.DisableCompression = true
		r.hc = &http.Client{Transport: t}
		r.ownHC = true
	}
	if spec.SharedPrefix > 0 {
		r.systems = make([]string, spec.SystemPrompts)
		for i := range r.systems {
			r.systems[i] = spec.SystemText(i)
		}
	}
	return r, nil
}

// maxInFlight is the bound on requests in flight.
func (r *Runner) maxInFlight() int {
	switch {
	case r.spec.Concurrency > 0:
		return r.spec.Concurrency
	case r.cfg.MaxInFlight > 0:
		return r.cfg.MaxInFlight
	default:
		return DefaultMaxInFlight
	}
}

// key returns the API key of tenant i.
func (r *Runner) key(i int) string {
	if len(r.cfg.APIKeys) == 0 {
		return ""
	}
	return r.cfg.APIKeys[i%len(r.cfg.APIKeys)]
}

// Progress returns a snapshot of the run; it may be called from any
// goroutine, before, during or after Run.
func (r *Runner) Progress() Progress {
	p := Progress{
		Total:        int(r.total.Load()),
		Duration:     r.spec.Duration,
		Sent:         int(r.sent.Load()),
		Done:         int(r.done.Load()),
		Failed:       int(r.failed.Load()),
		Cancelled:    int(r.cancels.Load()),
		OutputTokens: int(r.tokens.Load()),
	}
	if s := r.started.Load(); s != 0 {
		p.Elapsed = time.Since(time.Unix(0, s))
	}
	return p
}

// Results returns a copy of the results so far, in the order requests
// ended.
func (r *Runner) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.results...)
}

// Run sends the workload and returns its report. It returns when every
// request ended; when ctx ends first (Ctrl-C), requests in flight are
// cancelled, counted as interrupted, and the report of what finished is
// returned with Report.Stopped set, and a nil error. A Runner runs once.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	if !r.started.CompareAndSwap(0, start.UnixNano()) {
		return nil, errors.New("loadgen: a Runner runs once")
	}
	if r.ownHC {
		defer r.hc.CloseIdleConnections()
	}
	var err error
	if r.spec.Rate > 0 {
		err = r.runOpen(ctx, start)
	} else {
		r.runClosed(ctx, start)
	}
	if err != nil {
		return nil, err
	}
	end := time.Now()
	rep := r.report(start, end)
	rep.Stopped = ctx.Err() != nil
	return rep, nil
}

// conversation is the state of one conversation in open loop. Its turns
// run one at a time in the goroutine that holds running.
type conversation struct {
	mu      sync.Mutex
	running bool
	queue   []workload.Item // turns that arrived while one was running
	history []api.Message   // owned by the goroutine that holds running
}

// runOpen sends the items of workload.Generate at their arrival times. A
// turn that arrives while its conversation's previous turn is still
// running is queued and sent, by that turn's goroutine, when it ends.
func (r *Runner) runOpen(ctx context.Context, start time.Time) error {
	items, err := workload.Generate(r.spec)
	if err != nil {
		return err
	}
	r.total.Store(int64(len(items)))
	last := make(map[int]int, len(items)) // conversation -> index of its last item
	for i, it := range items {
		last[it.Conversation] = i
	}
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, r.maxInFlight())
		convs = map[int]*conversation{}
		timer = time.NewTimer(0)
	)
	defer timer.Stop()
	<-timer.C
	defer wg.Wait()
	for i, it := range items {
		if d := time.Until(start.Add(it.At)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		c := convs[it.Conversation]
		if c == nil {
			c = &conversation{}
			convs[it.Conversation] = c
		}
		if last[it.Conversation] == i {
			delete(convs, it.Conversation)
		}
		c.mu.Lock()
		if c.running {
			c.queue = append(c.queue, it)
			c.mu.Unlock()
			continue
		}
		c.running = true
		c.mu.Unlock()
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		wg.Go(func() {
			defer func() { <-slots }()
			r.runTurns(ctx, start, c, it)
		})
	}
	return nil
}

// runTurns runs it, then the turns of c queued meanwhile, in order.
func (r *Runner) runTurns(ctx context.Context, start time.Time, c *conversation, it workload.Item) {
	for {
		if ctx.Err() != nil {
			return
		}
		c.history = r.turn(ctx, start, c.history, it)
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		it = c.queue[0]
		c.queue = c.queue[1:]
		c.mu.Unlock()
	}
}

// runClosed runs Concurrency users, each sending the turns of one
// conversation after another, a turn when the previous one ended (and
// ThinkTime passed), until the Source is empty, Duration passed or ctx
// ended.
func (r *Runner) runClosed(ctx context.Context, start time.Time) {
	src := workload.NewSource(r.spec)
	r.total.Store(int64(r.spec.Requests))
	var deadline time.Time
	if r.spec.Duration > 0 {
		deadline = start.Add(r.spec.Duration)
	}
	over := func() bool {
		return ctx.Err() != nil || !deadline.IsZero() && !time.Now().Before(deadline)
	}
	var wg sync.WaitGroup
	for range r.spec.Concurrency {
		wg.Go(func() {
			for !over() {
				turns, ok := src.NextConversation()
				if !ok {
					return
				}
				var history []api.Message
				for k, it := range turns {
					if k > 0 && r.spec.ThinkTime > 0 && !sleep(ctx, r.spec.ThinkTime) {
						return
					}
					if over() {
						return
					}
					history = r.turn(ctx, start, history, it)
				}
			}
		})
	}
	wg.Wait()
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// turn sends it after the conversation's history, records the result and
// returns the history for the next turn: the messages sent and the answer.
func (r *Runner) turn(ctx context.Context, start time.Time, history []api.Message, it workload.Item) []api.Message {
	msgs := history
	if len(msgs) == 0 && it.System >= 0 && it.System < len(r.systems) {
		msgs = append(msgs, api.Message{Role: "system", Content: api.Content(r.systems[it.System])})
	}
	msgs = append(msgs[:len(msgs):len(msgs)], api.Message{Role: "user", Content: api.Content(r.spec.UserText(it))})
	r.sent.Add(1)
	var res Result
	if b, err := r.body(it, msgs); err != nil {
		res = Result{Item: it, Kind: KindProtocol, Message: err.Error()}
	} else {
		res = r.do(ctx, start, it, b)
	}
	if !res.Usage {
		res.PromptTokens = estimatePrompt(msgs)
		if r.cfg.PromptIDs.Hi > r.cfg.PromptIDs.Lo {
			res.PromptTokens = it.SystemTokens + it.InputTokens
		}
	}
	r.record(res)
	if res.Text != "" {
		msgs = append(msgs, api.Message{Role: "assistant", Content: api.Content(res.Text)})
	}
	return msgs
}

// estimatePrompt estimates the prompt tokens of msgs for a server that
// sends no usage: their text plus a few tokens of chat template each.
func estimatePrompt(msgs []api.Message) int {
	n := 0
	for _, m := range msgs {
		n += workload.ApproxTokens(string(m.Content)) + 4
	}
	return n
}

// record keeps res and updates the progress counters.
func (r *Runner) record(res Result) {
	switch {
	case res.Kind == KindCancelled:
		r.cancels.Add(1)
	case res.Kind != "" && res.Kind != KindInterrupted:
		r.failed.Add(1)
	}
	r.tokens.Add(int64(res.OutputTokens))
	r.done.Add(1)
	res.Text = ""
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
}
