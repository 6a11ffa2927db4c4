package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/gpu"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// replica is the part of a model's engine that the handlers use;
// *engine.Engine provides it through engineReplica, tests through a fake.
type replica interface {
	// Submit queues req; see engine.Engine.Submit. ctx cancels the request.
	Submit(ctx context.Context, req engine.Request) (eventStream, error)
	Info() engine.ExecutorInfo
	// MaxSeqTokens is the most tokens (prompt plus output) one sequence
	// can hold: the context length, or less if the KV pool is smaller.
	MaxSeqTokens() int
	Stats() engine.Stats
	// Requests inspects the live requests; see engine.Engine.Requests.
	Requests(ctx context.Context) ([]engine.RequestState, error)
	// BlockSize and CachedPrefix serve the cluster router: the KV block
	// size, and how many leading blocks of a prompt's hash chain the
	// replica holds (see engine.Engine.CachedPrefix); safe for
	// concurrent use.
	BlockSize() int
	CachedPrefix(hashes []kvcache.Hash) int
	// RecentPrefixes is the summary of cached prefixes this node gossips.
	RecentPrefixes(max int) []kvcache.Hash
}

// eventStream is a request's events; *engine.Stream implements it.
type eventStream interface {
	// Next returns the next event, io.EOF after the last, or ctx's error.
	Next(ctx context.Context) (engine.Event, error)
}

// engineReplica adapts *engine.Engine to replica.
type engineReplica struct{ e *engine.Engine }

func (r engineReplica) Submit(ctx context.Context, req engine.Request) (eventStream, error) {
	st, err := r.e.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (r engineReplica) Info() engine.ExecutorInfo { return r.e.Info() }
func (r engineReplica) MaxSeqTokens() int         { return r.e.MaxSeqTokens() }
func (r engineReplica) Stats() engine.Stats       { return r.e.Stats() }
func (r engineReplica) Requests(ctx context.Context) ([]engine.RequestState, error) {
	return r.e.Requests(ctx)
}
func (r engineReplica) BlockSize() int                         { return r.e.BlockSize() }
func (r engineReplica) CachedPrefix(hashes []kvcache.Hash) int { return r.e.CachedPrefix(hashes) }
func (r engineReplica) RecentPrefixes(max int) []kvcache.Hash  { return r.e.RecentPrefixes(max) }

// model is one served model: its engine, its tokenizer and what the API
// reports about it.
type model struct {
	id   string
	info engine.ExecutorInfo
	eng  replica
	text textModel
	eos  map[int32]bool
	// limit is the most tokens (prompt plus output) one sequence may hold.
	limit int
	// details reported by /v1/models
	arch         string
	params       int64
	quantization string
	created      int64 // Unix seconds
	// run runs the engine's step loop until ctx ends; nil for fakes.
	run func(ctx context.Context) error
	// lat holds recent latencies for the snapshot; sim describes the
	// simulated GPU group of a sim model (nil otherwise).
	lat latencyWindow
	sim *simGPU
}

// simGPU is a sim model's simulated GPU group, for the snapshot.
type simGPU struct {
	name       string
	tp         int
	memory     int64 // bytes, the whole group
	kvCapacity int64 // bytes of the KV pool
}

func newModel(eng replica, tok Tokenizer, created time.Time, run func(context.Context) error) *model {
	info := eng.Info()
	m := &model{id: info.Model, info: info, eng: eng, text: plainText{tok}, eos: map[int32]bool{},
		limit: min(info.ContextLength, eng.MaxSeqTokens()), created: created.Unix(), run: run}
	for _, t := range info.EOS {
		m.eos[t] = true
	}
	return m
}

// Server states, as /readyz reports them.
const (
	stateStarting int32 = iota
	stateReady
	stateDraining
)

// Server is llmd's API server and the owner of its model replicas. Build it
// with New, optionally bind it with Listen, and run it with Run.
type Server struct {
	cfg    Config
	log    *slog.Logger
	models []*model // sim models in Config.Models order, then GGUF models
	byID   map[string]*model
	// closers release the GGUF models' executors and mapped files; Run
	// calls them once its engines have stopped.
	closers []func()
	mux     *http.ServeMux
	state   atomic.Int32

	// store holds tenants, keys and quota settings; nil without a data
	// directory. quota decides admissions.
	store    *store.Store
	quota    quota.Limiter
	rejected rejections
	// settled counts the tokens of every settled reservation (they must
	// equal the usage ledger's).
	settled atomic.Int64
	// outputs learns each tenant's answer lengths (Config.QuotaEstimate).
	outputs *engine.OutputEstimator
	// usage writes the usage ledger (nil without a store); metrics is
	// /metrics.
	usage   *store.UsageWriter
	metrics *metrics.Metrics
	started time.Time
	// logs finds streams by request id (resume, cancel); active counts
	// generation handlers and stream relays, which Run waits for when it
	// stops.
	logs   logRegistry
	active atomic.Int64
	// gpu reads the node's real GPUs through NVML, when there are any.
	gpu gpu.Telemetry
	// cluster is this node's membership; nil when llmd runs alone. Set by
	// Run before serving, and published to members (the quota fallback's
	// node count; nil for servers built without New).
	cluster *cluster.Cluster
	members *atomic.Pointer[cluster.Cluster]
	// peers signs and checks forwarded requests, and peerClient sends
	// them; both set with cluster. rr turns the round-robin policy.
	// rootLog is the logger without this package's component, for the
	// packages that name their own (cluster).
	rootLog    *slog.Logger
	peers      *peerAuth
	peerClient *http.Client
	rr         atomic.Uint64
	// rates measures each model's output rate for the gossip.
	rates rateMeter

	mu sync.Mutex
	ln net.Listener
}

// New builds a server and one engine per configured model; it starts
// nothing (see Run). logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	models, err := buildSimModels(cfg, logger)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeID == "" {
		cfg.NodeID, _ = os.Hostname()
	}
	members := new(atomic.Pointer[cluster.Cluster]) // set by Run once joined
	st, lim, uw, err := openState(cfg, logger, func() int {
		if cl := members.Load(); cl != nil {
			return max(cl.NumAlive(), 1)
		}
		return 1
	})
	if err != nil {
		return nil, err
	}
	closeState := func() {
		if uw != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := uw.Close(ctx); err != nil {
				logger.Error("usage writer did not flush", "err", err)
			}
			cancel()
		}
		_ = lim.Close()
		if st != nil {
			_ = st.Close()
		}
	}
	closers, ggufs, err := loadGGUFModels(cfg, logger.With("component", "daemon"))
	if err != nil {
		closeState()
		return nil, err
	}
	closers = append(closers, closeState)
	models = append(models, ggufs...)
	seen := map[string]bool{}
	for _, m := range models {
		if seen[m.id] {
			for _, c := range closers {
				c()
			}
			return nil, fmt.Errorf("%w: %q", errDuplicateModel, m.id)
		}
		seen[m.id] = true
	}
	s := newServer(cfg, logger, models)
	s.closers = closers
	s.store, s.quota, s.usage = st, lim, uw
	s.members = members
	return s, nil
}

// openState opens the store in the data directory (recovering the usage
// ledger after a crash and starting its writer) and the quota limiter, and
// refuses a non-loopback listener while no API key exists.
//
// liveNodes counts the cluster's live nodes: with Redis failing, each node
// admits its share of a limit (limit / live nodes).
func openState(cfg Config, logger *slog.Logger, liveNodes func() int) (*store.Store, quota.Limiter, *store.UsageWriter, error) {
	var st *store.Store
	var uw *store.UsageWriter
	fail := func(err error) (*store.Store, quota.Limiter, *store.UsageWriter, error) {
		if uw != nil {
			_ = uw.Close(context.Background())
		}
		if st != nil {
			_ = st.Close()
		}
		return nil, nil, nil, err
	}
	if cfg.DataDir != "" {
		var err error
		st, err = store.Open(context.Background(), cfg.DataDir)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("daemon: open the data directory: %w", err)
		}
		if !cfg.Insecure && !isLoopback(cfg.Listen) {
			n, _, err := st.ActiveKeys(context.Background())
			if err == nil && n == 0 {
				err = fmt.Errorf("daemon: listen address %q is not a loopback address and no API key exists yet: "+
					"create one with `llmctl keys create --admin --data-dir %s`, or pass --insecure", cfg.Listen, cfg.DataDir)
			}
			if err != nil {
				return fail(err)
			}
		}
		replayed, interrupted, err := st.RecoverUsage(context.Background(), cfg.NodeID, time.Now())
		if err != nil {
			return fail(fmt.Errorf("daemon: recover the usage ledger: %w", err))
		}
		if replayed > 0 || interrupted > 0 {
			logger.Warn("usage ledger recovered after an unclean stop", "component", "daemon",
				"replayed_from_spool", replayed, "marked_interrupted", interrupted)
		}
		if uw, err = st.NewUsageWriter(store.UsageWriterConfig{}); err != nil {
			return fail(fmt.Errorf("daemon: usage writer: %w", err))
		}
	}
	if cfg.RedisURL == "" {
		return st, quota.NewMemory(quota.MemoryConfig{}), uw, nil
	}
	lim, err := quota.NewRedis(quota.RedisConfig{URL: cfg.RedisURL, Timeout: cfg.QuotaTimeout, LiveNodes: liveNodes,
		Logger: logger})
	if err != nil {
		return fail(fmt.Errorf("daemon: quota backend: %w", err))
	}
	return st, lim, uw, nil
}

func newServer(cfg Config, logger *slog.Logger, models []*model) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: logger.With("component", "daemon"), rootLog: logger, models: models, byID: map[string]*model{},
		quota: quota.NewMemory(quota.MemoryConfig{}), outputs: engine.NewOutputEstimator(), started: time.Now()}
	for _, m := range models {
		s.byID[m.id] = m
	}
	s.metrics = s.newMetrics()
	s.mux = s.routes()
	return s
}

// Handler returns the server's HTTP handler (every route).
func (s *Server) Handler() http.Handler { return s.mux }

// Models returns the ids of the served models, in configuration order.
func (s *Server) Models() []string {
	ids := make([]string, len(s.models))
	for i, m := range s.models {
		ids[i] = m.id
	}
	return ids
}

// Stats returns a snapshot of every model's engine, in Models order.
func (s *Server) Stats() []engine.Stats {
	st := make([]engine.Stats, 0, len(s.models))
	for _, m := range s.models {
		st = append(st, m.eng.Stats())
	}
	return st
}

// Listen binds Config.Listen, if it is not bound yet, and returns the bound
// address (useful with port 0). Run calls it itself.
func (s *Server) Listen() (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		ln, err := net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("daemon: listen on %s: %w", s.cfg.Listen, err)
		}
		s.ln = ln
	}
	return s.ln.Addr(), nil
}

// Addr returns the bound address, or nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Run serves the API and runs the engines until ctx ends or one of them
// fails, then stops cleanly: it stops admitting requests, lets in-flight
// ones finish for up to Config.ShutdownTimeout, cancels the rest (their
// streams end with an error event), and stops the engines. It returns nil
// after a clean stop.
func (s *Server) Run(ctx context.Context) error {
	defer func() {
		for _, c := range s.closers {
			c()
		}
		s.gpu.Close()
	}()
	if _, err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if err := s.startCluster(ln.Addr().String()); err != nil {
		return err
	}
	defer func() {
		if s.cluster != nil {
			_ = s.cluster.Close()
		}
	}()
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}

	// The engines outlive ctx: in-flight requests still need them while
	// the server drains.
	g, gctx := errgroup.WithContext(context.WithoutCancel(ctx))
	engCtx, stopEngines := context.WithCancel(gctx)
	defer stopEngines()
	for _, m := range s.models {
		if m.run == nil {
			continue
		}
		g.Go(func() error {
			if err := m.run(engCtx); err != nil {
				return fmt.Errorf("daemon: engine %s: %w", m.id, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("daemon: serve: %w", err)
		}
		return nil
	})
	s.state.Store(stateReady)
	s.log.Info("serving", "addr", ln.Addr().String(), "models", s.Models())

	g.Go(func() error {
		select {
		case <-ctx.Done():
		case <-gctx.Done(): // an engine or the listener failed
		}
		s.state.Store(stateDraining)
		s.log.Info("draining", "timeout", s.cfg.ShutdownTimeout.String())
		if s.cluster != nil {
			if err := s.cluster.Leave(2 * time.Second); err != nil {
				s.log.Warn("leaving the cluster", "err", err)
			}
		}
		// Keep listening while in-flight requests finish, so that probes
		// and new requests get 503 rather than a refused connection; then
		// close the listener and the idle connections.
		shCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		err := s.waitIdle(shCtx)
		if err == nil {
			err = srv.Shutdown(shCtx)
		}
		cancel()
		if err != nil {
			// Deadline passed: cancel what is left. The engines finish every
			// live request as cancelled, and each stream ends with an error
			// event.
			s.log.Warn("drain deadline passed; cancelling in-flight requests")
			stopEngines()
			shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.waitIdle(shCtx); err != nil {
				s.log.Error("requests did not stop", "err", err, "active", s.active.Load())
			}
			if err := srv.Shutdown(shCtx); err != nil {
				_ = srv.Close()
			}
			cancel()
		}
		stopEngines()
		return nil
	})
	g.Go(func() error {
		s.sweepStreams(engCtx)
		return nil
	})
	err := g.Wait()
	s.log.Info("stopped")
	return err
}

// route is one entry of the route table: the only place routes are
// registered, each with its access policy.
type route struct {
	pattern string
	// method is the one method allowed ("" any); GET also allows HEAD.
	method string
	// endpoint names a generation endpoint (its requests get an id and a
	// log line); "" for the others.
	endpoint string
	policy   policy
	h        handlerFunc
}

// routeTable lists every route with its policy.
func (s *Server) routeTable() []route {
	const get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	return []route{
		{"/v1/chat/completions", post, "chat.completions", policyUser, s.handleChatCompletions},
		{"/v1/completions", post, "completions", policyUser, s.handleCompletions},
		{"/v1/chat", post, "chat", policyUser, s.handleNativeChat},
		{"/v1/models", get, "", policyUser, s.handleModels},
		{"/v1/models/{id...}", get, "", policyUser, s.handleModel},
		{"/tokenize", post, "tokenize", policyUser, s.handleTokenize},
		{"/detokenize", post, "detokenize", policyUser, s.handleDetokenize},
		{"/v1/stats", get, "", policyAdmin, s.handleStats},
		{"/metrics", get, "", policyUser, s.handleMetrics},
		{"GET /v1/requests/{id}/stream", get, "", policyUser, s.handleResume},
		{"DELETE /v1/requests/{id}", del, "", policyUser, s.handleCancel},
		{"GET /v1/admin/usage", get, "", policyAdmin, s.needStore(s.handleUsage)},
		{"GET /v1/admin/snapshot", get, "", policyAdmin, s.handleSnapshot},
		{"GET /v1/admin/nodes", get, "", policyAdmin, s.handleNodes},
		{"POST /v1/admin/keys", post, "", policyAdmin, s.needStore(s.handleCreateKey)},
		{"GET /v1/admin/keys", get, "", policyAdmin, s.needStore(s.handleListKeys)},
		{"DELETE /v1/admin/keys/{id}", del, "", policyAdmin, s.needStore(s.handleRevokeKey)},
		{"GET /v1/admin/tenants", get, "", policyAdmin, s.needStore(s.handleListTenants)},
		{"GET /v1/admin/quotas", get, "", policyAdmin, s.needStore(s.handleListQuotas)},
		{"GET /v1/admin/quotas/{tenant}", get, "", policyAdmin, s.needStore(s.handleGetQuota)},
		{"PUT /v1/admin/quotas/{tenant}", put, "", policyAdmin, s.needStore(s.handleSetQuota)},
		{"/healthz", get, "", policyPublic, s.handleHealthz},
		{"/readyz", get, "", policyPublic, s.handleReadyz},
		// Anything else: 401 without a key (nothing is revealed), else 404.
		{"/", "", "", policyUser, func(w http.ResponseWriter, r *http.Request, _ *reqLog) {
			writeError(w, "", &requestError{Status: http.StatusNotFound, Type: typeInvalidRequest,
				Message: fmt.Sprintf("unknown route %s %s", r.Method, r.URL.Path)})
		}},
	}
}

// routes builds the router from the route table. Each route checks its
// method itself so that a wrong method gets 405 and an unknown path 404,
// both with OpenAI bodies. Admin routes with a method in their pattern
// answer other methods on their path with 405 through adminMethodNotAllowed.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.Handle(rt.pattern, s.api(rt.method, rt.endpoint, rt.policy, rt.h))
	}
	for _, p := range []string{"/v1/admin/keys", "/v1/admin/keys/{id}", "/v1/admin/tenants", "/v1/admin/quotas",
		"/v1/admin/quotas/{tenant}", "/v1/admin/usage", "/v1/admin/snapshot", "/v1/admin/nodes", "/v1/requests/{id}", "/v1/requests/{id}/stream"} {
		mux.Handle(p, s.api("", "", policyAdmin, adminMethodNotAllowed))
	}
	return mux
}

// adminMethodNotAllowed answers an admin path called with a method it has
// no route for.
func adminMethodNotAllowed(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	writeError(w, "", &requestError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
		Message: fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path)})
}

// handlerFunc is an API handler; it fills in the request's log record.
type handlerFunc func(w http.ResponseWriter, r *http.Request, rl *reqLog)

// waitIdle waits until no generation request or stream relay is active,
// or ctx ends.
func (s *Server) waitIdle(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
