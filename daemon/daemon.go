package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/catalog"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/gpu"
	"github.com/llmd/llmd/metrics"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/relay"
	"github.com/llmd/llmd/relay/redislog"
	"github.com/llmd/llmd/safety"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// Deps are what a daemon is handed rather than builds: its store, its
// quota limiter, and the models it serves (each an engine over its
// executor). OpenDeps builds them from a Config.
type Deps struct {
	// Store holds tenants, keys, quotas and usage; Usage writes the usage
	// ledger into it. Both nil without a data directory.
	Store *store.Store
	Usage *store.UsageWriter
	// Limiter decides admissions. Required.
	Limiter quota.Limiter
	// Models are the served models. At least one.
	Models []*pipeline.Model
	// Close releases what the deps hold (executors, mapped files, the
	// store, the limiter), once the engines have stopped and the usage
	// writer has flushed; nil for nothing. The daemon calls it when Run
	// returns. The daemon runs Usage itself (its Run).
	Close func()
	// live is the Redis limiter's count of live nodes (OpenDeps), pointed
	// at the daemon's cluster by New.
	live *liveNodes
	// closers release the executors of Models (OpenDeps), each once: the
	// fleet calls one when its model is unloaded, Close the rest.
	closers map[*pipeline.Model]func()
}

// Daemon is one llmd: the HTTP API (server) over the request pipeline,
// the stream relay, the model replicas, the quota limiter, the usage
// ledger and the cluster membership. It only composes them. Build it with
// Open (or New), optionally bind it with Listen, and run it with Run.
type Daemon struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	rootLog *slog.Logger
	models  *pipeline.Models
	fleet   *fleet
	// config is the models config (aliases, versions, rollouts), empty
	// without --models-config.
	config  *modelsConfig
	pipe    *pipeline.Pipeline
	streams *relay.Registry
	srv     *server.Server
	metrics *metrics.Metrics
	// eventLog copies resumable streams' events to Redis (with --redis).
	eventLog *redislog.Log
	// forwarder sends requests to peers and auth signs and checks them;
	// both nil without a cluster. cluster is this node's membership, set
	// by Run once joined.
	forwarder *peer.Forwarder
	auth      *peer.Auth
	cluster   atomic.Pointer[cluster.Cluster]
	// cert is the TLS certificate served, nil without TLS; ReloadTLS
	// replaces it.
	cert atomic.Pointer[tls.Certificate]
	// gpu reads the node's real GPUs through NVML, when there are any.
	gpu   gpu.Telemetry
	rates rateMeter
	// started is when the daemon was built (uptime, report windows).
	started time.Time

	// stop starts the drain (Shutdown); done is closed when Run returns.
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu sync.Mutex
	ln net.Listener
}

// Open builds the daemon that cfg describes: its deps (OpenDeps), then the
// daemon over them (New). logger may be nil.
func Open(cfg Config, logger *slog.Logger) (*Daemon, error) {
	deps, err := OpenDeps(cfg, logger)
	if err != nil {
		return nil, err
	}
	d, err := New(cfg, deps, logger)
	if err != nil {
		if deps.Close != nil {
			deps.Close()
		}
		return nil, err
	}
	return d, nil
}

// New composes a daemon over deps; it starts nothing (see Run). On error
// deps are the caller's to close. logger may be nil.
func New(cfg Config, deps Deps, logger *slog.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.NodeID = nodeID(cfg)
	models, err := pipeline.NewModels(deps.Models)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if deps.Limiter == nil {
		return nil, errors.New("daemon: no quota limiter")
	}
	d := &Daemon{cfg: cfg, deps: deps, log: logger.With("component", "daemon"), rootLog: logger, models: models,
		streams: relay.NewRegistry(cfg.ResumeGrace, cfg.ResumeTTL), stop: make(chan struct{}), done: make(chan struct{}),
		started: time.Now()}
	d.fleet = newFleet(cfg, models, deps.closers, logger)
	ccfg := &catalog.Config{}
	if cfg.ModelsConfig != "" {
		if ccfg, err = catalog.ReadFile(cfg.ModelsConfig); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
	}
	d.config = &modelsConfig{cfg: cfg, fleet: d.fleet, cat: catalog.New(ccfg), log: logger.With("component", "models"),
		fromConfig: map[string]bool{}, loads: map[string]*pendingLoad{}}
	d.fleet.onTick = d.config.checkRollbacks
	checkers, err := buildCheckers(ccfg)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.config.checkers.Store(&checkers)
	if cfg.TLSCertFile != "" {
		if err := d.ReloadTLS(); err != nil {
			return nil, err
		}
	}
	d.metrics = d.newMetrics()
	d.metrics.Registry().MustRegister(newAutoscaleCollector(d, cfg.Autoscale))
	if deps.live != nil {
		deps.live.cl = &d.cluster
	}

	pdeps := pipeline.Deps{Models: models, Limiter: deps.Limiter, Metrics: d.metrics, StatusOf: server.StatusOf,
		Logger: logger, Catalog: d.config.cat, Loader: d.config.ensure, SafetyFor: d.config.safetyFor}
	if cfg.Safety.URL != "" {
		if pdeps.Safety, err = safety.New(cfg.Safety, nil); err != nil {
			return nil, fmt.Errorf("daemon: safety check: %w", err)
		}
	}
	if deps.Store != nil {
		pdeps.Accounts, pdeps.Shadows = deps.Store, deps.Store
	}
	if deps.Usage != nil {
		pdeps.Ledger = deps.Usage
	}
	pcfg := pipeline.Config{NodeID: cfg.NodeID, MaxN: cfg.MaxN, QuotaEstimate: cfg.QuotaEstimate, QuotaShadow: cfg.QuotaShadow,
		DegradeRoutes: cfg.DegradeRoutes, DegradeFreeMaxTokens: cfg.DegradeFreeMaxTokens,
		ShedRetryAfter: max(5*cfg.Engine.Ladder.Hold, time.Second), StallTimeout: cfg.StallTimeout}
	if cc := cfg.Cluster; cc != nil {
		// Forwarding is signed with a key derived from the gossip key;
		// without one (--insecure-gossip) the node gossips but serves every
		// request itself and refuses forwarded ones.
		if auth, err := peer.NewAuth(cc.Key); err == nil {
			d.auth = auth
			clientTLS, err := peerTLS(cfg)
			if err != nil {
				return nil, err
			}
			d.forwarder = peer.NewForwarder(peer.Config{NodeID: cfg.NodeID, Auth: d.auth, ForwardTimeout: cc.forwardTimeout(),
				Stall: max(3*cfg.HeartbeatInterval, cc.forwardTimeout()), TLS: clientTLS, Logger: logger})
			pdeps.Router, pdeps.Peer = router{&d.cluster}, d.forwarder.Target
			pcfg.Fallback, pcfg.RoutePolicy, pcfg.LoadBound, pcfg.LoadSlack = cc.Fallback, cc.RoutePolicy, cc.LoadBound, cc.LoadSlack
			pcfg.Zone = cc.Zone
			pcfg.Role, pcfg.Disagg, pcfg.DisaggTimeout = cc.Role, cc.Disagg, cc.DisaggTimeout
			if cc.Role != cluster.RolePrefill {
				pdeps.PullKV = d.forwarder.PullKV
			}
		}
	}
	d.pipe = pipeline.New(pcfg, pdeps)
	var owners server.Owners
	if d.forwarder != nil {
		owners = requestOwners{d}
	}
	backend := "memory"
	var events server.EventLog
	if cfg.RedisURL != "" {
		backend = "redis"
		l, err := redislog.New(redislog.Config{URL: cfg.RedisURL, TTL: cfg.ResumeTTL, MaxEvents: cfg.ResumeMaxEvents, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("daemon: the stream event log: %w", err)
		}
		d.eventLog, events = l, eventLog{l}
	}
	d.srv = server.New(server.Config{NodeID: cfg.NodeID, Version: Version, MaxBodyBytes: cfg.MaxBodyBytes,
		Follow: relay.FollowConfig{Heartbeat: cfg.HeartbeatInterval, WriteTimeout: cfg.StreamWriteTimeout, MaxLag: cfg.MaxClientLag,
			MaxLagTime: cfg.MaxClientLagTime},
		Resume: relay.Limits{MaxEvents: cfg.ResumeMaxEvents, MaxBytes: cfg.ResumeMaxBytes},
		Prices: cfg.Prices, GPUHourPrice: cfg.GPUHourPrice, Currency: cfg.Currency, QuotaBackend: backend,
		Anonymous: cfg.Anonymous, Listen: cfg.Listen, AllowedHosts: cfg.AllowedHosts, CORSOrigins: cfg.CORSOrigins},
		server.Deps{Pipeline: d.pipe, Streams: d.streams, Store: deps.Store, Limiter: deps.Limiter, Metrics: d.metrics,
			PeerAuth: d.auth, GPUs: d.gpus, Members: d.members, Fleet: fleetAdmin{d.fleet, d.config}, Owners: owners, EventLog: events, Started: d.started,
			Logger: logger})
	return d, nil
}

// fleetAdmin is the server's view of the fleet and the models config.
type fleetAdmin struct {
	*fleet
	config *modelsConfig
}

// Apply replaces the models config (see models.Apply).
func (f fleetAdmin) Apply(ctx context.Context, yaml []byte) (api.ModelsApplied, error) {
	return f.config.Apply(ctx, yaml)
}

// SaveConfig saves the models config in force to its file (see
// modelsConfig.Save).
func (f fleetAdmin) SaveConfig() (bool, error) { return f.config.Save() }

// ReloadModels reads the models config file again and applies it (SIGHUP).
func (d *Daemon) ReloadModels(ctx context.Context) error {
	if d.cfg.ModelsConfig == "" {
		return nil
	}
	return d.config.Reload(ctx)
}

// nodeID is cfg's node id: Config.NodeID, else the host name.
func nodeID(cfg Config) string {
	if cfg.NodeID != "" {
		return cfg.NodeID
	}
	host, _ := os.Hostname()
	return host
}

// newMetrics builds /metrics over the daemon's engines, quota and usage
// writer, read at scrape time.
func (d *Daemon) newMetrics() *metrics.Metrics {
	return metrics.New(metrics.Source{
		Engines: func() []metrics.EngineSnapshot {
			out := make([]metrics.EngineSnapshot, 0, len(d.models.List()))
			for _, m := range d.models.List() {
				dtype := "sim"
				if m.Executor == pipeline.ExecutorCPU {
					dtype = ggufKVType(d.cfg.KVCacheType) // --kv-cache-type, every GGUF model's
				}
				out = append(out, metrics.EngineSnapshot{Model: m.ID, Stats: m.Replica.Stats(), BlockSize: m.Info.BlockSize,
					NumBlocks: m.Info.NumBlocks, PrefixCaching: !d.cfg.Engine.DisablePrefixCache, CacheDType: dtype,
					MaxModelLen: m.Limit})
			}
			return out
		},
		Quota: func() quota.Counters { return d.deps.Limiter.Counters() },
		GPUs:  d.gpus,
		Usage: func() metrics.UsageWriterSnapshot {
			if d.deps.Usage == nil {
				return metrics.UsageWriterSnapshot{}
			}
			st := d.deps.Usage.Stats()
			return metrics.UsageWriterSnapshot{Queued: st.Queued, Lag: st.Lag, Committed: st.Committed,
				Spooled: st.Spooled, Failed: st.Failed}
		},
	})
}

// gpus is the node's GPU telemetry: the real devices (NVML) when there
// are any, and each simulated model's GPU group, whose used memory is its
// weights and reserve plus the KV blocks in use.
func (d *Daemon) gpus() []api.GPUInfo {
	out := d.gpu.Devices()
	for _, m := range d.models.List() {
		if m.Sim == nil {
			continue
		}
		st := m.Replica.Stats()
		used := m.Sim.Memory - m.Sim.KVCapacity
		if st.BlocksTotal > 0 {
			used += m.Sim.KVCapacity * int64(st.BlocksUsed) / int64(st.BlocksTotal)
		}
		var util float64
		if m.Sim.Utilization != nil {
			util = m.Sim.Utilization()
		}
		out = append(out, api.GPUInfo{Index: len(out), Name: fmt.Sprintf("%s x%d (%s)", m.Sim.Name, m.Sim.TP, m.ID),
			MemoryUsed: used, MemoryTotal: m.Sim.Memory, Utilization: util, Simulated: true})
	}
	return out
}

// ReloadTLS reads Config.TLSCertFile and TLSKeyFile again and serves the
// pair from the next TLS handshake on; connections already open (and their
// streams) keep theirs. On error the certificate in use stays.
func (d *Daemon) ReloadTLS() error {
	if d.cfg.TLSCertFile == "" {
		return errors.New("daemon: no TLS certificate configured (--tls-cert, --tls-key)")
	}
	cert, err := tls.LoadX509KeyPair(d.cfg.TLSCertFile, d.cfg.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("daemon: load the TLS certificate: %w", err)
	}
	d.cert.Store(&cert)
	d.log.Info("TLS certificate loaded", "cert", d.cfg.TLSCertFile)
	return nil
}

// peerTLS is the TLS configuration of forwarding to peers: nil when this
// node serves plain HTTP (so do its peers); else the peers' certificates
// are checked against Config.CAFile, or the system's roots.
func peerTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("daemon: read the CA certificate: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("daemon: %s holds no PEM certificate", cfg.CAFile)
		}
	}
	return c, nil
}

// Handler returns the daemon's HTTP handler (every route).
func (d *Daemon) Handler() http.Handler { return d.srv.Handler() }

// Models returns the ids of the served models, in configuration order.
func (d *Daemon) Models() []string { return d.models.IDs() }

// Stats returns a snapshot of every model's engine, in Models order.
func (d *Daemon) Stats() []engine.Stats {
	ms := d.models.List()
	st := make([]engine.Stats, 0, len(ms))
	for _, m := range ms {
		st = append(st, m.Replica.Stats())
	}
	return st
}

// Listen binds Config.Listen, if it is not bound yet, and returns the bound
// address (useful with port 0). Run calls it itself.
func (d *Daemon) Listen() (net.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ln == nil {
		ln, err := net.Listen("tcp", d.cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("daemon: listen on %s: %w", d.cfg.Listen, err)
		}
		d.ln = ln
	}
	return d.ln.Addr(), nil
}

// Addr returns the bound address, or nil before Listen.
func (d *Daemon) Addr() net.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ln == nil {
		return nil
	}
	return d.ln.Addr()
}

// Shutdown starts the drain that Run does when its context ends, and
// waits for Run to return or ctx to end.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.stopOnce.Do(func() { close(d.stop) })
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run serves the API and runs the engines until ctx ends (or Shutdown is
// called, or one of them fails), then drains in order: it stops admitting
// requests, leaves the cluster, lets in-flight requests finish for up to
// Config.ShutdownTimeout, cancels the rest (their streams end with an
// error event), stops the HTTP server and the engines, and releases its
// deps (flushing the usage ledger, closing SQLite). It returns nil after a
// clean stop.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.done)
	defer func() {
		d.fleet.Close()
		if d.eventLog != nil {
			_ = d.eventLog.Close()
		}
		if d.deps.Close != nil {
			d.deps.Close()
		}
		d.gpu.Close()
		if d.forwarder != nil {
			d.forwarder.Close()
		}
	}()
	if _, err := d.Listen(); err != nil {
		return err
	}
	d.mu.Lock()
	ln := d.ln
	d.mu.Unlock()
	if err := d.startCluster(ln.Addr().String()); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           d.srv.Handler(),
		ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		// The whole request, body included; a stream's writes are bounded
		// per write (StreamWriteTimeout).
		ReadTimeout:    d.cfg.BodyTimeout,
		IdleTimeout:    d.cfg.IdleTimeout,
		MaxHeaderBytes: 1 << 20,
		ErrorLog:       slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	ln = server.LimitListener(ln, server.ConnLimits{Max: d.cfg.MaxConnections, PerClient: d.cfg.MaxClientConnections,
		SendBuffer: d.cfg.SendBufferBytes, TLS: d.cert.Load() != nil}, d.log)
	if d.cert.Load() != nil {
		ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return d.cert.Load(), nil }})
	} else if !isLoopback(d.cfg.Listen) {
		d.log.Warn("serving plain HTTP on a non-loopback address: API keys and prompts cross the network in clear; "+
			"use --tls-cert and --tls-key", "addr", ln.Addr().String())
	}

	// The engines outlive ctx: in-flight requests still need them while
	// the server drains.
	g, gctx := errgroup.WithContext(context.WithoutCancel(ctx))
	engCtx, stopEngines := context.WithCancel(gctx)
	defer stopEngines()
	g.Go(func() error { return d.fleet.Run(engCtx) })
	// The models config's resident models load before llmd is ready.
	select {
	case <-d.fleet.running:
	case <-gctx.Done():
	}
	if _, err := d.config.loadResident(ctx, d.config.cat.Config()); err != nil {
		d.log.Error("models config: a model did not load", "err", err)
		stopEngines()
		_ = g.Wait()
		return fmt.Errorf("daemon: %w", err)
	}
	g.Go(func() error { return d.streams.Run(engCtx) })
	// The membership runs until the drain starts: the node then leaves.
	clusterCtx, leaveCluster := context.WithCancel(context.WithoutCancel(ctx))
	defer leaveCluster()
	left := make(chan struct{})
	if cl := d.cluster.Load(); cl != nil {
		g.Go(func() error {
			defer close(left)
			err := cl.Run(clusterCtx)
			if errors.Is(err, cluster.ErrJoin) {
				// --retry-join-max ran out: stop, for a supervisor to
				// restart the node or a person to look.
				d.log.Error("could not join the cluster; stopping", "err", err)
				return fmt.Errorf("daemon: %w", err)
			}
			if err != nil {
				d.log.Warn("leaving the cluster", "err", err)
			}
			return nil
		})
	} else {
		close(left)
	}
	// The usage writer takes rows until the HTTP server and the engines
	// have stopped, then flushes (before Close closes SQLite).
	usageCtx, stopUsage := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUsage()
	if w := d.deps.Usage; w != nil {
		g.Go(func() error {
			if err := w.Run(usageCtx); err != nil {
				d.log.Error("usage writer did not flush", "err", err)
			}
			return nil
		})
	}
	if d.eventLog != nil {
		g.Go(func() error { return d.eventLog.Run(usageCtx) })
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("daemon: serve: %w", err)
		}
		return nil
	})
	d.srv.SetState(server.StateReady)
	d.log.Info("serving", "addr", ln.Addr().String(), "models", d.Models())

	g.Go(func() error {
		select {
		case <-ctx.Done():
		case <-d.stop:
		case <-gctx.Done(): // an engine or the listener failed
		}
		d.srv.SetState(server.StateDraining)
		d.pipe.Drain()
		d.pipe.CloseShadows() // discardable: cancelled, not waited for
		d.log.Info("draining", "timeout", d.cfg.ShutdownTimeout.String())
		leaveCluster()
		<-left
		d.drain(srv, stopEngines)
		stopUsage()
		return nil
	})
	err := g.Wait()
	d.log.Info("stopped")
	return err
}

// drain lets in-flight requests finish, then stops the HTTP server and
// the engines (see Run).
func (d *Daemon) drain(srv *http.Server, stopEngines context.CancelFunc) {
	// Keep listening while in-flight requests finish, so that probes and
	// new requests get 503 rather than a refused connection; then close the
	// listener and the idle connections.
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	err := d.srv.WaitIdle(ctx)
	if err == nil {
		err = srv.Shutdown(ctx)
	}
	cancel()
	if err != nil {
		// Deadline passed: cancel what is left. The engines finish every
		// live request as cancelled, and each stream ends with an error
		// event.
		d.log.Warn("drain deadline passed; cancelling in-flight requests")
		stopEngines()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.srv.WaitIdle(ctx); err != nil {
			d.log.Error("requests did not stop", "err", err, "active", d.srv.Active())
		}
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		cancel()
	}
	stopEngines()
}
