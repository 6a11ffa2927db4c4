// Package upstream serves a model through OpenAI-compatible engines on the
// node (vLLM, SGLang, llama.cpp's server, TGI, Ollama's /v1, another
// llmd): llmd's pipeline in front (keys, quotas, tiers, resumable
// streams, metering, routing between nodes) and the engine's GPU behind.
//
// A Set is one model's replicas. It is the model's pipeline.Target: it
// holds the queue in front of the engines (strict priority between tiers,
// round robin between tenants within one) and releases a request to a
// replica while that replica is healthy, has fewer than MaxInflight
// requests of llmd's in flight, and its own /metrics say its waiting
// queue and KV-cache use are under their bounds. Among the replicas that
// may take it, a request goes to the one that holds the longest prefix of
// its prompt in an approximate index of what llmd sent it, unless that
// one's load is above the bounded-load limit; else to the least loaded.
// The Set is also the model's pipeline.Replica (its load, for the
// snapshot, /metrics and the gossip) and its pipeline.TextModel (the
// prompt's tokens for the quota: the engine's /tokenize when it has one,
// else an estimate).
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/upstream/probe"
)

// Config configures a Set.
type Config struct {
	// Model is the id llmd serves; URLs are the replicas' base URLs
	// (http://host:port).
	Model string
	URLs  []string
	// Name is the model's name on the engines; "" takes the first model
	// the first replica lists.
	Name string
	// Kind is the engines' kind; "" detects it.
	Kind probe.Kind
	// MaxInflight bounds the requests llmd has in flight on one replica.
	// Default 256.
	MaxInflight int
	// MaxWaiting and MaxKVUsage are the bounds on a replica's own waiting
	// queue and KV-cache use (0 to 1) under which llmd releases requests
	// to it, read from its /metrics. Defaults 8 and 0.95; a figure the
	// engine does not publish does not hold anything back.
	MaxWaiting int
	MaxKVUsage float64
	// Poll is how often each replica's health and /metrics are read.
	// Default 500ms.
	Poll time.Duration
	// Stall ends a stream silent for this long (the engine hung).
	// Default 60s.
	Stall time.Duration
	// ContextLength overrides the engine's context length (0: the engine's
	// max_model_len, else 8192).
	ContextLength int
	// LoadBound and LoadSlack are the bounded-load limit: a replica whose
	// in-flight count is above LoadBound times the mean plus LoadSlack is
	// passed over for prefix affinity. Defaults 1.25 and 8.
	LoadBound float64
	LoadSlack int
	// Ladder is the degradation ladder over llmd's queue here (the oldest
	// non-batch wait) and the engines' KV-cache use: its level limits and
	// sheds free-tier requests as the engine's own does, and pauses the
	// batch and shadow classes. The zero value is the engine's default.
	Ladder engine.LadderConfig
	// Tokenizer counts prompts on this node (the model's own tokenizer
	// and chat template: a GGUF file or a Hugging Face directory), instead
	// of the engine's /tokenize or an estimate; TokenizerFrom says where it
	// was read. nil: LoadTokenizer is tried with the path the engine says
	// it loaded the model from, when the engine has no /tokenize.
	Tokenizer     Tokenizer
	TokenizerFrom string
	LoadTokenizer func(root string) (Tokenizer, error)
	Client        *http.Client
	Logger        *slog.Logger
}

// errNoReplica refuses a request while no replica is healthy.
var errNoReplica = &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer, Code: "upstream_unavailable",
	Message: "no upstream engine serving this model is healthy; please retry"}

// Set is one model's upstream replicas. Its methods are safe for
// concurrent use.
//
// Locking: mu guards the queue, the replicas' state and the prefix
// indexes.
type Set struct {
	cfg  Config
	kind probe.Kind
	name string
	ctx  int // context length
	hc   *http.Client
	log  *slog.Logger
	// tokenize says the engines answer /tokenize with messages; tok is
	// the tokenizer on this node, when there is one (see Counting).
	tokenize bool
	tok      Tokenizer
	counting string

	mu       sync.Mutex
	replicas []*replica
	// runs are the jobs the engines are generating; closed is set when
	// Run ends, which ends them (shutdown) and refuses new ones.
	runs   map[*run]struct{}
	closed bool
	queue  queue
	ladder *engine.Ladder
	level  engine.DegradeLevel
	// wake is signalled when the queue or a replica's room changes.
	wake chan struct{}
}

// replica is one engine.
type replica struct {
	url      string
	healthy  bool
	load     probe.Load
	inflight int
	// prefixes is the approximate index of the prompts sent to it: block
	// hash -> last use, bounded.
	prefixes map[kvcache.Hash]time.Time
	sent     int // requests sent, for the log
}

// maxPrefixes bounds each replica's prefix index.
const maxPrefixes = 1 << 16

// New detects the engines' kind, model name and context length from the
// first replica that answers, and returns the Set; Run polls them.
func New(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Model == "" || len(cfg.URLs) == 0 {
		return nil, errors.New("upstream: a model and at least one URL are required")
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 256
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = 8
	}
	if cfg.MaxKVUsage <= 0 {
		cfg.MaxKVUsage = 0.95
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Stall <= 0 {
		cfg.Stall = 60 * time.Second
	}
	if cfg.LoadBound <= 0 {
		cfg.LoadBound = 1.25
	}
	if cfg.LoadSlack <= 0 {
		cfg.LoadSlack = 8
	}
	if cfg.Ladder == (engine.LadderConfig{}) {
		cfg.Ladder = engine.DefaultLadderConfig()
	}
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second,
			DisableCompression: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext}}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{cfg: cfg, kind: cfg.Kind, name: cfg.Name, hc: hc, log: log.With("component", "upstream", "model", cfg.Model),
		wake: make(chan struct{}, 1), ladder: engine.NewLadder(cfg.Ladder), runs: map[*run]struct{}{}}
	var (
		lastErr error
		root    string
	)
	for _, u := range cfg.URLs {
		u = strings.TrimRight(u, "/")
		s.replicas = append(s.replicas, &replica{url: u, load: probe.Load{KVUsage: -1, Running: -1, Waiting: -1},
			prefixes: map[kvcache.Hash]time.Time{}})
	}
	for _, r := range s.replicas {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := probe.Detect(dctx, hc, r.url)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		r.healthy = true
		if s.kind == "" {
			s.kind = info.Kind
		}
		if s.name == "" && len(info.Models) > 0 {
			s.name = info.Models[0].ID
		}
		for _, m := range info.Models {
			if m.ID == s.name && m.MaxModelLen > 0 {
				s.ctx = m.MaxModelLen
			}
			if m.ID == s.name {
				root = m.Root
			}
		}
		break
	}
	if s.kind == "" {
		return nil, fmt.Errorf("upstream: no replica of %s answered: %w", cfg.Model, lastErr)
	}
	if s.name == "" {
		return nil, fmt.Errorf("upstream: the engine at %s lists no model; name it (MODEL=URL with --upstream-name)", s.replicas[0].url)
	}
	if cfg.ContextLength > 0 {
		s.ctx = cfg.ContextLength
	}
	if s.ctx == 0 {
		s.ctx = 8192
	}
	s.tokenize = s.kind == probe.KindVLLM || s.kind == probe.KindLLMD || s.kind == probe.KindSGLang
	if root == "" && s.kind == probe.KindOllama {
		root = "ollama:" + s.name // Ollama's store holds the GGUF file
	}
	s.setCounting(root)
	s.pollAll(ctx) // every replica's health and load before the first request
	s.log.Info("upstream ready", "kind", string(s.kind), "name", s.name, "replicas", len(s.replicas),
		"context_length", s.ctx, "prompt_tokens", s.counting)
	return s, nil
}

// Kind is the engines' kind ("vllm", ...).
func (s *Set) Kind() probe.Kind { return s.kind }

// Run polls every replica's health and load until ctx ends, and releases
// queued requests as room appears.
func (s *Set) Run(ctx context.Context) error {
	// The engines' figures are read every Poll, and every backlogPoll
	// while requests wait here: a burst that filled an engine's queue is
	// released as soon as the engine has taken it in, not a whole Poll
	// later.
	const backlogPoll = 25 * time.Millisecond
	tick := time.NewTicker(min(backlogPoll, s.cfg.Poll))
	defer tick.Stop()
	s.pollAll(ctx)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.closed = true
			s.queue.failAll(engine.ErrClosed)
			for x := range s.runs {
				x.close()
			}
			s.mu.Unlock()
			return nil
		case now := <-tick.C:
			s.mu.Lock()
			backlog := s.queue.n > 0
			s.mu.Unlock()
			if backlog || now.Sub(last) >= s.cfg.Poll {
				s.pollAll(ctx)
				last = time.Now()
			}
		case <-s.wake:
		}
		s.mu.Lock()
		s.observeLocked(time.Now())
		s.releaseLocked()
		s.mu.Unlock()
	}
}

// observeLocked feeds the ladder: the oldest non-batch wait here and the
// engines' mean KV-cache use; from pause_batch up the batch and shadow
// classes are held.
func (s *Set) observeLocked(now time.Time) {
	var wait time.Duration
	if t := s.queue.oldest(engine.PriorityFree); !t.IsZero() {
		wait = now.Sub(t)
	}
	kv, n := 0.0, 0
	for _, r := range s.replicas {
		if r.healthy && r.load.KVUsage >= 0 {
			kv += r.load.KVUsage
			n++
		}
	}
	if n > 0 {
		kv /= float64(n)
	}
	level := s.ladder.Observe(now, wait, kv)
	if level != s.level {
		s.log.Warn("degradation level changed", "from", s.level.String(), "to", level.String(),
			"queue_wait_ms", wait.Milliseconds(), "kv_usage", kv)
		s.level = level
	}
	s.queue.min = 0
	if level >= engine.DegradePauseBatch {
		s.queue.min = engine.PriorityFree
	}
}

// pollAll reads every replica's health and load, in parallel.
func (s *Set) pollAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range s.replicas {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, max(s.cfg.Poll, time.Second))
			defer cancel()
			herr := probe.Health(pctx, s.hc, r.url, s.kind)
			load, lerr := probe.ReadLoad(pctx, s.hc, r.url, s.kind, s.name)
			s.mu.Lock()
			defer s.mu.Unlock()
			if was := r.healthy; was != (herr == nil) {
				if herr != nil {
					s.log.Warn("upstream replica out of rotation", "url", r.url, "err", herr)
				} else {
					s.log.Info("upstream replica back in rotation", "url", r.url)
				}
			}
			r.healthy = herr == nil
			if lerr == nil {
				r.load = load
			} else {
				r.load = probe.Load{KVUsage: -1, Running: -1, Waiting: -1}
			}
		})
	}
	wg.Wait()
}

// signal wakes Run's loop to release queued requests.
func (s *Set) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// room reports whether r may take one more request now.
func (s *Set) room(r *replica) bool {
	if !r.healthy || r.inflight >= s.cfg.MaxInflight {
		return false
	}
	if w := r.load.Waiting; w >= 0 && w > s.cfg.MaxWaiting {
		return false
	}
	if kv := r.load.KVUsage; kv >= 0 && kv >= s.cfg.MaxKVUsage {
		return false
	}
	return true
}

// releaseLocked hands queued requests to replicas while any has room.
func (s *Set) releaseLocked() {
	for {
		w := s.queue.peek()
		if w == nil {
			return
		}
		r := s.pickLocked(w.prefix)
		if r == nil {
			if !slices.ContainsFunc(s.replicas, func(r *replica) bool { return r.healthy }) {
				s.queue.failAll(errNoReplica)
			}
			return
		}
		s.queue.pop()
		r.inflight++
		r.sent++
		now := time.Now()
		for _, h := range w.prefix {
			if len(r.prefixes) >= maxPrefixes {
				evictOldest(r.prefixes)
			}
			r.prefixes[h] = now
		}
		w.ready <- r
	}
}

// pickLocked chooses the replica for a prompt with hash chain prefix:
// the one holding the longest part of it, unless its load is past the
// bound; else the least loaded with room; nil when none has room.
func (s *Set) pickLocked(prefix []kvcache.Hash) *replica {
	var cands []*replica
	total := 0
	for _, r := range s.replicas {
		if r.healthy {
			total += r.inflight
		}
		if s.room(r) {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	mean := float64(total) / float64(len(cands))
	limit := int(mean*s.cfg.LoadBound) + s.cfg.LoadSlack
	var best *replica
	bestDepth := 0
	for _, r := range cands {
		depth := 0
		for _, h := range prefix {
			if _, ok := r.prefixes[h]; !ok {
				break
			}
			depth++
		}
		if depth > bestDepth && r.inflight <= limit {
			best, bestDepth = r, depth
		}
	}
	if best != nil {
		return best
	}
	return slices.MinFunc(cands, func(a, b *replica) int { return a.inflight - b.inflight })
}

// evictOldest drops the least recently used quarter of an index.
func evictOldest(m map[kvcache.Hash]time.Time) {
	times := make([]time.Time, 0, len(m))
	for _, t := range m {
		times = append(times, t)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	cut := times[len(times)/4]
	for h, t := range m {
		if !t.After(cut) {
			delete(m, h)
		}
	}
}

// done ends a request on r.
func (s *Set) done(r *replica) {
	s.mu.Lock()
	s.inflightDoneLocked(r)
	s.mu.Unlock()
}

// inflightDoneLocked counts a request of r's as ended.
func (s *Set) inflightDoneLocked(r *replica) {
	r.inflight--
	s.signal()
}

// markDown takes r out of rotation until its health check passes again.
func (s *Set) markDown(r *replica, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.healthy {
		s.log.Warn("upstream replica out of rotation", "url", r.url, "err", err)
	}
	r.healthy = false
}
