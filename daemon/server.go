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

	"github.com/llmd/llmd/engine"
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
	closers, ggufs, err := loadGGUFModels(cfg, logger.With("component", "daemon"))
	if err != nil {
		return nil, err
	}
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
	return s, nil
}

func newServer(cfg Config, logger *slog.Logger, models []*model) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: logger.With("component", "daemon"), models: models, byID: map[string]*model{}}
	for _, m := range models {
		s.byID[m.id] = m
	}
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
	}()
	if s.cfg.DataDir != "" {
		if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("daemon: create data dir: %w", err)
		}
	}
	if _, err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
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
		shCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		err := srv.Shutdown(shCtx)
		cancel()
		if err != nil {
			// Deadline passed: cancel what is left. The engines finish every
			// live request as cancelled, and its handler ends its stream.
			s.log.Warn("drain deadline passed; cancelling in-flight requests")
			stopEngines()
			shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := srv.Shutdown(shCtx); err != nil {
				_ = srv.Close()
			}
			cancel()
		}
		stopEngines()
		return nil
	})
	err := g.Wait()
	s.log.Info("stopped")
	return err
}

// routes builds the router. Each route checks its method itself so that a
// wrong method gets 405 and an unknown path 404, both with OpenAI bodies.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/v1/chat/completions", s.api(http.MethodPost, "chat.completions", s.handleChatCompletions))
	mux.Handle("/v1/completions", s.api(http.MethodPost, "completions", s.handleCompletions))
	mux.Handle("/v1/chat", s.api(http.MethodPost, "chat", s.handleNativeChat))
	mux.Handle("/v1/models", s.api(http.MethodGet, "", s.handleModels))
	mux.Handle("/v1/models/{id...}", s.api(http.MethodGet, "", s.handleModel))
	mux.Handle("/v1/stats", s.api(http.MethodGet, "", s.handleStats))
	mux.Handle("/tokenize", s.api(http.MethodPost, "tokenize", s.handleTokenize))
	mux.Handle("/detokenize", s.api(http.MethodPost, "detokenize", s.handleDetokenize))
	mux.Handle("/healthz", s.api(http.MethodGet, "", s.handleHealthz))
	mux.Handle("/readyz", s.api(http.MethodGet, "", s.handleReadyz))
	mux.Handle("/", s.api("", "", func(w http.ResponseWriter, r *http.Request, _ *reqLog) {
		writeError(w, "", &requestError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Message: fmt.Sprintf("unknown route %s %s", r.Method, r.URL.Path)})
	}))
	return mux
}

// handlerFunc is an API handler; it fills in the request's log record.
type handlerFunc func(w http.ResponseWriter, r *http.Request, rl *reqLog)
