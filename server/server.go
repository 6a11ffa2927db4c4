package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/relay"
	"github.com/llmd/llmd/store"
)

// Price is what a million tokens of a model cost: input (not served from
// the prefix cache), cached input, and output.
type Price struct {
	Input  float64 `yaml:"input" json:"input"`
	Cached float64 `yaml:"cached" json:"cached"`
	Output float64 `yaml:"output" json:"output"`
}

// Config holds the server's settings; the daemon fills it from its own.
type Config struct {
	// NodeID names this node in answers (snapshot, nodes).
	NodeID string
	// Version is llmd's version, in cluster metadata.
	Version string
	// MaxBodyBytes is the largest request body accepted (413 past it).
	MaxBodyBytes int64
	// Follow bounds how a client reads a stream; Resume how many events a
	// stream keeps.
	Follow relay.FollowConfig
	Resume relay.Limits
	// Prices, GPUHourPrice and Currency price usage reports.
	Prices       map[string]Price
	GPUHourPrice float64
	Currency     string
	// QuotaBackend names the quota backend ("memory" or "redis").
	QuotaBackend string
	// Anonymous serves requests without a key as the local tenant even
	// once keys have been made (llmd --anonymous; loopback listeners only).
	Anonymous bool
	// Listen is the listen address; with AllowedHosts, the host names
	// anonymous requests may name in their Host header (besides IP
	// addresses and loopback names).
	Listen       string
	AllowedHosts []string
	// CORSOrigins are the origins (scheme://host[:port]) a browser page may
	// call llmd from; none by default.
	CORSOrigins []string
}

// Deps are the server's collaborators. Pipeline, Streams and Limiter are
// required; Store is nil without a data directory, PeerAuth without a
// cluster.
type Deps struct {
	Pipeline *pipeline.Pipeline
	Streams  *relay.Registry
	Store    *store.Store
	Limiter  quota.Limiter
	Metrics  *metrics.Metrics
	PeerAuth *peer.Auth
	// GPUs is the node's GPU telemetry (real and simulated).
	GPUs func() []api.GPUInfo
	// Members is the cluster as this node sees it: every member, or this
	// node alone when it runs without a cluster (clustered false).
	Members func() (members []cluster.Member, clustered bool)
	// Fleet loads and unloads models (the admin API); nil refuses.
	Fleet Fleet
	// Owners reaches the node that owns a request id, for a resume or
	// cancel that arrives here; nil without a cluster.
	Owners Owners
	// EventLog keeps resumable streams' events beside this node (Redis),
	// for a resume through any node once the owner is gone; nil for none.
	EventLog EventLog
	// Started is when llmd started (uptime, report windows).
	Started time.Time
	Logger  *slog.Logger
}

// State is the server's readiness, as /readyz reports it.
type State int32

// Server states.
const (
	StateStarting State = iota
	StateReady
	StateDraining
)

// Server is the HTTP API. Build it with New; serve Handler.
type Server struct {
	cfg      Config
	pipe     *pipeline.Pipeline
	models   *pipeline.Models
	streams  *relay.Registry
	store    *store.Store
	limiter  quota.Limiter
	metrics  *metrics.Metrics
	peerAuth *peer.Auth
	gpus     func() []api.GPUInfo
	members  func() ([]cluster.Member, bool)
	fleet    Fleet
	owners   Owners
	eventLog EventLog
	started  time.Time
	log      *slog.Logger
	mux      *http.ServeMux
	state    atomic.Int32
	active   inflight
	ollama   ollamaState
}

// New builds the server and its route table.
func New(cfg Config, deps Deps) *Server {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, pipe: deps.Pipeline, models: deps.Pipeline.Models(), streams: deps.Streams, store: deps.Store,
		limiter: deps.Limiter, metrics: deps.Metrics, peerAuth: deps.PeerAuth, gpus: deps.GPUs, members: deps.Members,
		fleet: deps.Fleet, owners: deps.Owners, eventLog: deps.EventLog, started: deps.Started, log: log.With("component", "server")}
	if s.gpus == nil {
		s.gpus = func() []api.GPUInfo { return nil }
	}
	s.mux = s.routes()
	return s
}

// Handler returns the server's HTTP handler (every route).
func (s *Server) Handler() http.Handler { return s.mux }

// SetState sets what /readyz reports. From StateDraining on, new
// generation requests are refused (503) and not counted by WaitIdle.
func (s *Server) SetState(st State) {
	s.state.Store(int32(st))
	if st == StateDraining {
		s.active.close()
	}
}

// State returns the server's state.
func (s *Server) State() State { return State(s.state.Load()) }

// WaitIdle waits until no generation request or stream relay is active, or
// ctx ends.
func (s *Server) WaitIdle(ctx context.Context) error { return s.active.wait(ctx) }

// Active is the number of generation requests and stream relays running.
func (s *Server) Active() int64 { return s.active.n.Load() }

// inflight counts generation handlers and the stream relays they start,
// for the drain. Once closed it counts no new handler, so that the count
// never rises from zero while the drain waits.
type inflight struct {
	wg sync.WaitGroup
	n  atomic.Int64

	mu     sync.Mutex
	closed bool
}

// enter counts a generation handler; false once closed.
func (f *inflight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.wg.Add(1)
	f.n.Add(1)
	return true
}

// child counts a relay started by a counted handler: the count is not
// zero then.
func (f *inflight) child() {
	f.wg.Add(1)
	f.n.Add(1)
}

func (f *inflight) leave() {
	f.n.Add(-1)
	f.wg.Done()
}

// close stops counting new handlers.
func (f *inflight) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// wait waits for the count to reach zero, or ctx to end. Call close first.
func (f *inflight) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// The waiter returns once the last request ends; the daemon
		// cancels what is left and waits again.
		return ctx.Err()
	}
}

// route is one entry of the route table: the only place routes are
// registered, each with its access policy.
type route struct {
	pattern string
	// method is the one method allowed ("" any); GET also allows HEAD.
	method string
	policy policy
	h      http.HandlerFunc
	// peer lets a signed request forwarded by a peer in: the generation and embeddings
	// routes, the cancel that follows a forwarded stream, and a resume or
	// cancel that reached another node than the request's owner.
	peer bool
}

// routeTable lists every route with its policy.
func (s *Server) routeTable() []route {
	const get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	return []route{
		{"/v1/chat/completions", post, policyUser, s.generate(chatCodec), true},
		{"/v1/completions", post, policyUser, s.generate(completionCodec), true},
		{"/v1/chat", post, policyUser, s.generate(nativeCodec), true},
		{"/v1/models", get, policyUser, s.handleModels, false},
		{"/v1/models/{id...}", get, policyUser, s.handleModel, false},
		{"/v1/embeddings", post, policyUser, s.handleEmbeddings, true},
		{"/tokenize", post, policyUser, s.handleTokenize, false},
		{"/detokenize", post, policyUser, s.handleDetokenize, false},
		{"/v1/stats", get, policyAdmin, s.handleStats, false},
		{"/metrics", get, policyUser, s.handleMetrics, false},
		{"GET /v1/requests/{id}/stream", get, policyUser, s.handleResume, true},
		{"POST " + pipeline.KVPrefillPath, post, policyUser, s.handleKVPrefill, true},
		{"DELETE /v1/requests/{id}", del, policyUser, s.handleCancel, true},
		{"GET /v1/admin/usage", get, policyAdmin, s.needStore(s.handleUsage), false},
		{"GET /v1/admin/snapshot", get, policyAdmin, s.handleSnapshot, false},
		{"GET /v1/admin/nodes", get, policyAdmin, s.handleNodes, false},
		{"GET /v1/admin/models", get, policyAdmin, s.needFleet(s.handleListLoaded), false},
		{"POST /v1/admin/models", post, policyAdmin, s.needFleet(s.handleLoadModel), false},
		{"PUT /v1/admin/models/config", put, policyAdmin, s.needFleet(s.handleApplyModels), false},
		{"GET /v1/admin/models/rollouts", get, policyAdmin, s.needCatalog(s.handleRollouts), false},
		{"GET /v1/admin/models/shadow/report", get, policyAdmin, s.needStore(s.handleShadowReport), false},
		{"PUT /v1/admin/models/aliases/{alias}/canary", put, policyAdmin, s.needCatalog(s.handleSetCanary), false},
		{"DELETE /v1/admin/models/aliases/{alias}/canary", del, policyAdmin, s.needCatalog(s.handleClearCanary), false},
		{"PUT /v1/admin/models/aliases/{alias}/shadow", put, policyAdmin, s.needCatalog(s.handleSetShadow), false},
		{"DELETE /v1/admin/models/aliases/{alias}/shadow", del, policyAdmin, s.needCatalog(s.handleClearShadow), false},
		{"POST /v1/admin/models/aliases/{alias}/promote", post, policyAdmin, s.needCatalog(s.handlePromote), false},
		{"DELETE /v1/admin/models/{id...}", del, policyAdmin, s.needFleet(s.handleUnloadModel), false},
		{"POST /v1/admin/keys", post, policyAdmin, s.needStore(s.handleCreateKey), false},
		{"GET /v1/admin/keys", get, policyAdmin, s.needStore(s.handleListKeys), false},
		{"DELETE /v1/admin/keys/{id}", del, policyAdmin, s.needStore(s.handleRevokeKey), false},
		{"GET /v1/admin/tenants", get, policyAdmin, s.needStore(s.handleListTenants), false},
		{"GET /v1/admin/quotas", get, policyAdmin, s.needStore(s.handleListQuotas), false},
		{"GET /v1/admin/quotas/{tenant}", get, policyAdmin, s.needStore(s.handleGetQuota), false},
		{"PUT /v1/admin/quotas/{tenant}", put, policyAdmin, s.needStore(s.handleSetQuota), false},
		// Anthropic's Messages API and Ollama's API (peers get these
		// requests as OpenAI's).
		{"/v1/messages", post, policyUser, s.generate(anthropicCodec), false},
		{"/v1/messages/count_tokens", post, policyUser, s.handleCountTokens, false},
		{"/api/chat", post, policyUser, s.handleOllamaChat, false},
		{"/api/generate", post, policyUser, s.handleOllamaGenerate, false},
		{"/api/tags", get, policyUser, s.handleOllamaTags, false},
		{"/api/ps", get, policyUser, s.handleOllamaPS, false},
		{"/api/show", post, policyUser, s.handleOllamaShow, false},
		{"/api/version", get, policyUser, s.handleOllamaVersion, false},
		{"/api/embed", post, policyUser, s.handleOllamaEmbed, false},
		{"/api/embeddings", post, policyUser, s.handleOllamaEmbeddings, false},
		{"/healthz", get, policyPublic, s.handleHealthz, false},
		{"/readyz", get, policyPublic, s.handleReadyz, false},
		// Anything else: 401 without a key (nothing is revealed), else 404.
		{"/", "", policyUser, func(w http.ResponseWriter, r *http.Request) {
			writeError(w, "", &pipeline.Error{Status: http.StatusNotFound, Type: pipeline.TypeInvalidRequest,
				Message: fmt.Sprintf("unknown route %s %s", r.Method, r.URL.Path)})
		}, false},
	}
}

// RouteInfo describes a route: its pattern (with its method when the
// pattern names one), the one method it allows ("" for any), and who may
// call it ("public", "user", "admin"; "unset" is a route no one may call).
type RouteInfo struct {
	Pattern, Method, Policy string
}

// Routes lists the route table, for documentation and tests.
func (s *Server) Routes() []RouteInfo {
	table := s.routeTable()
	out := make([]RouteInfo, len(table))
	for i, rt := range table {
		out[i] = RouteInfo{Pattern: rt.pattern, Method: rt.method, Policy: rt.policy.String()}
	}
	return out
}

// routes builds the router from the route table. Each route checks its
// method itself so that a wrong method gets 405 and an unknown path 404,
// both with OpenAI bodies. Admin routes with a method in their pattern
// answer other methods on their path with 405 through methodNotAllowed.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.Handle(rt.pattern, s.api(rt, rt.h))
	}
	for _, p := range []string{"/v1/admin/keys", "/v1/admin/keys/{id}", "/v1/admin/tenants", "/v1/admin/quotas",
		"/v1/admin/quotas/{tenant}", "/v1/admin/usage", "/v1/admin/snapshot", "/v1/admin/nodes",
		"/v1/admin/models", "/v1/admin/models/{id...}", "/v1/requests/{id}", "/v1/requests/{id}/stream"} {
		mux.Handle(p, s.api(route{policy: policyAdmin}, methodNotAllowed))
	}
	return mux
}

// methodNotAllowed answers an admin path called with a method it has no
// route for.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeError(w, "", &pipeline.Error{Status: http.StatusMethodNotAllowed, Type: pipeline.TypeInvalidRequest,
		Message: fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path)})
}

// api wraps a route's handler: it gives every answer a request id,
// authenticates the caller for the route's policy (a peer's forwarded
// request only on the routes that let peers in), answers a wrong method
// with 405, and turns a handler's panic into a 500 (or an aborted
// connection once the answer started).
func (s *Server) api(rt route, h http.HandlerFunc) http.Handler {
	method, pol := rt.method, rt.policy
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := dialectFor(r.URL.Path); d != nil {
			w = &dialectWriter{ResponseWriter: w, d: d}
		}
		// Every answer carries an id, refusals included; a generation
		// request replaces it with its own.
		w.Header().Set("X-Request-Id", pipeline.NewID("req_"))
		if !s.guard(w, r) {
			return
		}
		p, err := s.authenticate(r, pol)
		if err != nil {
			if StatusOf(err) >= 500 {
				s.log.Error("authentication failed", "path", r.URL.Path, "err", err)
			}
			writeError(w, "", err)
			return
		}
		if p.Peer != "" && !rt.peer {
			writeError(w, "", errPeerRoute)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		if method != "" && r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, "", &pipeline.Error{Status: http.StatusMethodNotAllowed, Type: pipeline.TypeInvalidRequest,
				Message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, method)})
			return
		}
		rw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
					panic(v)
				}
				id := w.Header().Get("X-Request-Id")
				s.log.Error("handler panic", "request_id", id, "path", r.URL.Path, "panic", fmt.Sprint(v),
					"stack", string(debug.Stack()))
				if rw.wrote {
					panic(http.ErrAbortHandler)
				}
				writeError(w, id, errors.New("server: handler panic"))
			}
		}()
		h(rw, r)
	})
}

// dialectFor is the error shape of the API path belongs to: Ollama's
// under /api/, Anthropic's under /v1/messages; nil for OpenAI's.
func dialectFor(path string) dialect {
	switch {
	case strings.HasPrefix(path, "/api/"):
		return ollamaErrors{}
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return anthropicErrors{}
	}
	return nil
}

// statusWriter notes whether the answer has started.
type statusWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// write deadlines, trailers).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher for handlers that flush directly.
func (w *statusWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// needStore wraps a handler of a route that reads the store: without a
// data directory it answers 503.
func (s *Server) needStore(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.store == nil {
			writeError(w, "", &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer,
				Message: "llmd runs without a data directory, so it has no tenants, keys, quotas or usage; start it with --data-dir"})
			return
		}
		h(w, r)
	}
}
