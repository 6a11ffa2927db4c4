package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/model/toolcall"
)

// Replica is the part of a model's engine that the pipeline and the server
// use; *engine.Engine provides it through EngineReplica, tests through a
// fake.
type Replica interface {
	// Submit queues req; see engine.Engine.Submit. ctx cancels the request.
	Submit(ctx context.Context, req engine.Request) (EventStream, error)
	Info() engine.ExecutorInfo
	// MaxSeqTokens is the most tokens (prompt plus output) one sequence
	// can hold: the context length, or less if the KV pool is smaller.
	MaxSeqTokens() int
	Stats() engine.Stats
	// Requests inspects the live requests; see engine.Engine.Requests.
	Requests(ctx context.Context) ([]engine.RequestState, error)
	// BlockSize and CachedPrefix serve the cluster router: the KV block
	// size, and how many leading blocks of a prompt's hash chain the
	// replica holds (see engine.Engine.CachedPrefix); safe for concurrent
	// use.
	BlockSize() int
	CachedPrefix(hashes []kvcache.Hash) int
	// RecentPrefixes is the summary of cached prefixes this node gossips.
	RecentPrefixes(max int) []kvcache.Hash
}

// EventStream is a request's events; *engine.Stream implements it.
type EventStream interface {
	// Next returns the next event, io.EOF after the last, or ctx's error.
	Next(ctx context.Context) (engine.Event, error)
}

// EngineReplica adapts *engine.Engine to Replica.
type EngineReplica struct{ E *engine.Engine }

// Submit implements Replica.
func (r EngineReplica) Submit(ctx context.Context, req engine.Request) (EventStream, error) {
	st, err := r.E.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Info implements Replica.
func (r EngineReplica) Info() engine.ExecutorInfo { return r.E.Info() }

// MaxSeqTokens implements Replica.
func (r EngineReplica) MaxSeqTokens() int { return r.E.MaxSeqTokens() }

// Stats implements Replica.
func (r EngineReplica) Stats() engine.Stats { return r.E.Stats() }

// Requests implements Replica.
func (r EngineReplica) Requests(ctx context.Context) ([]engine.RequestState, error) {
	return r.E.Requests(ctx)
}

// BlockSize implements Replica.
func (r EngineReplica) BlockSize() int { return r.E.BlockSize() }

// CachedPrefix implements Replica.
func (r EngineReplica) CachedPrefix(hashes []kvcache.Hash) int { return r.E.CachedPrefix(hashes) }

// RecentPrefixes implements Replica.
func (r EngineReplica) RecentPrefixes(max int) []kvcache.Hash { return r.E.RecentPrefixes(max) }

// TextModel is a model's side of text: chat rendering, tokenization and
// detokenization.
type TextModel interface {
	// ChatPrompt renders the conversation (and its tools) with the model's
	// chat template and tokenizes the result. An error is the template refusing the conversation (a 400).
	ChatPrompt(in ChatInput) ([]int32, error)
	// Vocabulary is the model's tokens as a grammar matches them
	// (structured output); nil when the model has none.
	Vocabulary() *grammar.Vocabulary
	// ToolFormat is the tool-call format of the model's chat template, and
	// whether the template renders the tools itself.
	ToolFormat() (f toolcall.Format, rendersTools bool)
	// Prompt tokenizes raw text, adding the model's BOS/EOS when addSpecial.
	Prompt(text string, addSpecial bool) []int32
	Decode(tokens []int32) string
	// DecodeToken is a generated token's text as shown (special tokens
	// hidden); TokenText is its text in the vocabulary (for logprobs).
	DecodeToken(token int32) string
	TokenText(token int32) string
	VocabSize() int
}

// Executor kinds (Model.Executor).
const (
	ExecutorSimulated = "simulated"
	ExecutorCPU       = "cpu"
)

// Model is one served model: its engine replica, its text side and what
// the API reports about it. Fields are set when the model is built and
// read-only after; Latency and the lifecycle state (draining, active
// requests, last use) are safe for concurrent use.
type Model struct {
	ID      string
	Info    engine.ExecutorInfo
	Replica Replica
	Text    TextModel
	// EOS holds the tokens that end a choice (never shown).
	EOS map[int32]bool
	// Limit is the most tokens (prompt plus output) one sequence may hold.
	Limit int
	// Executor is ExecutorSimulated or ExecutorCPU.
	Executor string
	// Details reported by /v1/models.
	Arch         string
	Params       int64
	Quantization string
	Created      int64 // Unix seconds
	// Source is where the model came from (a GGUF path, "ollama:NAME",
	// "sim:PROFILE"); Memory the host memory accounted to it, in bytes.
	Source string
	Memory int64
	// Run runs the engine's step loop until ctx ends; nil for fakes.
	Run func(ctx context.Context) error
	// Target, when set, runs the model's jobs instead of the local engine:
	// an upstream engine (Executor "upstream:KIND"), whose Replica reports
	// its load.
	Target Target
	// Sim describes the simulated GPU group of a simulated model, nil
	// otherwise.
	Sim *SimGPU
	// Latency holds recent latencies, for the snapshot.
	Latency LatencyWindow
	// Template is the chat template's source as the model file holds it
	// ("" when it has none), and Metadata the file's metadata keys and
	// values (GGUF: general.architecture, <arch>.context_length, ...;
	// arrays longer than MaxMetadataArray are nil), for Ollama's
	// /api/show; both empty for a model that is not a GGUF file. Read-only.
	Template string
	Metadata map[string]any
	// Embed is an embedding model's side (see NewEmbedModel); nil for a
	// generative model. An embedding model answers embeddings requests
	// only, a generative one everything else.
	Embed *EmbedModel

	// draining refuses new requests (the model is being unloaded);
	// active counts the requests that chose it and have not ended;
	// lastUsed is when one last chose it (Unix nanoseconds).
	draining atomic.Bool
	active   atomic.Int64
	lastUsed atomic.Int64
}

// MaxMetadataArray is the longest metadata array Model.Metadata keeps
// (the vocabulary's arrays are left out, as Ollama's /api/show does).
const MaxMetadataArray = 64

// SimGPU is a simulated model's GPU group.
type SimGPU struct {
	Name       string
	TP         int
	Memory     int64 // bytes, the whole group
	KVCapacity int64 // bytes of the KV pool
	// Utilization is the group's busy share of the last second, 0 to 1
	// (sim.Executor.Utilization); nil reads 0.
	Utilization func() float64
}

// NewModel describes the model served by replica, whose text side is text;
// created is when it was loaded.
func NewModel(replica Replica, text TextModel, created time.Time, run func(context.Context) error) *Model {
	info := replica.Info()
	m := &Model{ID: info.Model, Info: info, Replica: replica, Text: text, EOS: map[int32]bool{},
		Limit: min(info.ContextLength, replica.MaxSeqTokens()), Created: created.Unix(), Run: run,
		Executor: ExecutorCPU}
	if strings.HasPrefix(m.ID, "sim/") {
		m.Executor = ExecutorSimulated
	}
	for _, t := range info.EOS {
		m.EOS[t] = true
	}
	return m
}

// Drain makes the model refuse new requests (Lookup answers 503); those
// that chose it already go on.
func (m *Model) Drain() { m.draining.Store(true) }

// Draining reports whether the model refuses new requests.
func (m *Model) Draining() bool { return m.draining.Load() }

// Active is the number of requests that chose the model and have not
// ended yet.
func (m *Model) Active() int64 { return m.active.Load() }

// LastUsed is when a request last chose the model or ended on it (its
// creation before any did).
func (m *Model) LastUsed() time.Time {
	if ns := m.lastUsed.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Unix(m.Created, 0)
}

// acquire counts a request that chose the model; release ends it.
func (m *Model) acquire() {
	m.active.Add(1)
	m.lastUsed.Store(time.Now().UnixNano())
}

func (m *Model) release() {
	// Idle time counts from the end of the last request (keep_alive).
	m.lastUsed.Store(time.Now().UnixNano())
	m.active.Add(-1)
}

// tryAcquire counts a request that chose the model unless the model is
// draining. Drain before the count is read: a request counted is seen by
// whoever waits for the model to become idle, one not counted saw the
// drain.
func (m *Model) tryAcquire() bool {
	m.acquire()
	if m.Draining() {
		m.release()
		return false
	}
	return true
}

// ErrDuplicateModel is two served models with one id.
var ErrDuplicateModel = errors.New("pipeline: two models have the same id")

// Models is the set of models this node serves, in the order they were
// added. Models are added and removed while requests run (hot loading):
// readers see one consistent set, swapped whole on each change.
//
// Locking: mu serialises Add and Remove; readers load set.
type Models struct {
	mu  sync.Mutex
	set atomic.Pointer[modelSet]
}

// modelSet is one version of the set; never modified once published.
type modelSet struct {
	list []*Model
	byID map[string]*Model
}

// NewModels returns the set of ms, refusing two with one id.
func NewModels(ms []*Model) (*Models, error) {
	s := &Models{}
	s.set.Store(&modelSet{byID: map[string]*Model{}})
	for _, m := range ms {
		if err := s.Add(m); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Add serves m from now on; an id already served is ErrDuplicateModel.
func (s *Models) Add(m *Model) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.set.Load()
	if old.byID[m.ID] != nil {
		return fmt.Errorf("%w: %q", ErrDuplicateModel, m.ID)
	}
	next := &modelSet{list: append(slices.Clone(old.list), m), byID: maps.Clone(old.byID)}
	next.byID[m.ID] = m
	s.set.Store(next)
	return nil
}

// Remove stops serving the model with id and returns it (nil if none).
// Requests that chose it already keep their *Model.
func (s *Models) Remove(id string) *Model {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.set.Load()
	m := old.byID[id]
	if m == nil {
		return nil
	}
	next := &modelSet{list: slices.DeleteFunc(slices.Clone(old.list), func(x *Model) bool { return x == m }),
		byID: maps.Clone(old.byID)}
	delete(next.byID, id)
	s.set.Store(next)
	return m
}

// Get returns the model with id, nil if none.
func (s *Models) Get(id string) *Model { return s.set.Load().byID[id] }

// List returns the models; the caller must not modify the slice.
func (s *Models) List() []*Model { return s.set.Load().list }

// IDs returns the models' ids.
func (s *Models) IDs() []string {
	list := s.List()
	ids := make([]string, len(list))
	for i, m := range list {
		ids[i] = m.ID
	}
	return ids
}

// ErrModelUnloading refuses a request for a model being unloaded.
func errModelUnloading(id string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Param: "model", Code: "model_unloading",
		Message: fmt.Sprintf("The model `%s` is being unloaded and takes no new requests.", id)}
}

// Lookup finds the model a request names: a 400 without a name, a 404
// naming the served models for an unknown one, a 503 for one being
// unloaded.
func (s *Models) Lookup(id string) (*Model, error) {
	if id == "" {
		return nil, InvalidParam("model", "you must provide a model parameter")
	}
	if m := s.Get(id); m != nil {
		if m.Draining() {
			return nil, errModelUnloading(id)
		}
		return m, nil
	}
	return nil, s.NotFound(id, nil)
}

// NotFound is the 404 of an unknown model name; it names the models this
// node serves and the others names a caller may use (aliases, peers'
// models).
func (s *Models) NotFound(id string, others []string) *Error {
	names := s.IDs()
	for _, o := range others {
		if !slices.Contains(names, o) {
			names = append(names, o)
		}
	}
	slices.Sort(names)
	return &Error{Status: 404, Type: TypeInvalidRequest, Param: "model", Code: CodeModelNotFound,
		Message: fmt.Sprintf("The model `%s` does not exist. Available models: %s.", id, strings.Join(names, ", "))}
}

// LatencyWindow keeps the TTFT and mean inter-token latency of a model's
// recently finished requests, for the percentiles of the last minute.
//
// Locking: mu guards all fields.
type LatencyWindow struct {
	mu      sync.Mutex
	samples []latencySample // oldest first, bounded
}

type latencySample struct {
	at   time.Time
	ttft time.Duration
	itl  time.Duration // 0: fewer than two tokens
}

const maxLatencySamples = 4096

// Add records one finished request.
func (w *LatencyWindow) Add(at time.Time, ttft, itl time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) >= maxLatencySamples {
		w.samples = append(w.samples[:0], w.samples[len(w.samples)/2:]...)
	}
	w.samples = append(w.samples, latencySample{at: at, ttft: ttft, itl: itl})
}

// Percentiles returns the p50 and p95 of the TTFT and ITL samples taken
// since now-span, in seconds (0 without samples).
func (w *LatencyWindow) Percentiles(now time.Time, span time.Duration) (ttft50, ttft95, itl50, itl95 float64) {
	w.mu.Lock()
	cutoff := now.Add(-span)
	i := 0
	for i < len(w.samples) && w.samples[i].at.Before(cutoff) {
		i++
	}
	w.samples = w.samples[i:]
	var ttfts, itls []time.Duration
	for _, s := range w.samples {
		ttfts = append(ttfts, s.ttft)
		if s.itl > 0 {
			itls = append(itls, s.itl)
		}
	}
	w.mu.Unlock()
	ttft50, ttft95 = pct(ttfts, 0.5), pct(ttfts, 0.95)
	itl50, itl95 = pct(itls, 0.5), pct(itls, 0.95)
	return
}

// pct is the nearest-rank percentile q of ds, in seconds.
func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)].Seconds()
}
