package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// OpenDeps builds the deps cfg names: the store and the usage ledger in
// the data directory (recovering the ledger after a crash), the quota
// limiter (in memory, or Redis), and the models (the simulated profiles,
// then the GGUF files, each on its own engine). It refuses a non-loopback
// listener while no API key exists. logger may be nil.
func OpenDeps(cfg Config, logger *slog.Logger) (Deps, error) {
	if err := cfg.Validate(); err != nil {
		return Deps{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.NodeID = nodeID(cfg) // the ledger's recovery marks this node's rows
	models, err := buildSimModels(cfg, logger)
	if err != nil {
		return Deps{}, err
	}
	// The Redis limiter shares a limit among the live nodes while Redis
	// fails; New points live at the daemon's cluster.
	live := &liveNodes{}
	deps, err := openState(cfg, logger, live.count)
	if err != nil {
		return Deps{}, err
	}
	deps.live = live
	ggufClosers, ggufs, err := loadGGUFModels(cfg, logger.With("component", "daemon"))
	if err != nil {
		deps.Close()
		return Deps{}, err
	}
	closeState := deps.Close
	// Each model's closer runs once: when it is unloaded, else here.
	deps.closers = make(map[*pipeline.Model]func(), len(ggufs))
	for i, m := range ggufs {
		deps.closers[m] = sync.OnceFunc(ggufClosers[i])
	}
	deps.Close = func() {
		for _, c := range deps.closers {
			c()
		}
		closeState()
	}
	deps.Models = append(models, ggufs...)
	for _, spec := range cfg.Upstreams {
		m, err := buildUpstream(context.Background(), cfg, spec, logger)
		if err != nil {
			deps.Close()
			return Deps{}, err
		}
		deps.Models = append(deps.Models, m)
	}
	return deps, nil
}

// liveNodes counts the cluster's live nodes for the Redis limiter's
// fallback: one until the daemon has joined a cluster.
type liveNodes struct {
	cl *atomic.Pointer[cluster.Cluster]
}

func (l *liveNodes) count() int {
	if l.cl == nil {
		return 1
	}
	if cl := l.cl.Load(); cl != nil {
		return max(cl.NumAlive(), 1)
	}
	return 1
}

// openState opens the store in the data directory (recovering the usage
// ledger after a crash and starting its writer) and the quota limiter, and
// refuses a non-loopback listener while no API key exists.
//
// liveNodes counts the cluster's live nodes: with Redis failing, each node
// admits its share of a limit (limit / live nodes).
func openState(cfg Config, logger *slog.Logger, liveNodes func() int) (Deps, error) {
	var deps Deps
	fail := func(err error) (Deps, error) {
		if deps.Usage != nil {
			stopWriter(deps.Usage)
		}
		if deps.Store != nil {
			_ = deps.Store.Close()
		}
		return Deps{}, err
	}
	if cfg.DataDir != "" {
		st, err := store.Open(context.Background(), cfg.DataDir)
		if err != nil {
			return Deps{}, fmt.Errorf("daemon: open the data directory: %w", err)
		}
		deps.Store = st
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
		if deps.Usage, err = st.NewUsageWriter(store.UsageWriterConfig{}); err != nil {
			return fail(fmt.Errorf("daemon: usage writer: %w", err))
		}
	}
	if cfg.RedisURL == "" {
		deps.Limiter = quota.NewMemory(quota.MemoryConfig{})
	} else {
		lim, err := quota.NewRedis(quota.RedisConfig{URL: cfg.RedisURL, Timeout: cfg.QuotaTimeout, LiveNodes: liveNodes,
			Logger: logger, HotRPS: cfg.HotTenantRPS, HotShards: cfg.HotTenantShards})
		if err != nil {
			return fail(fmt.Errorf("daemon: quota backend: %w", err))
		}
		deps.Limiter = lim
	}
	deps.Close = func() {
		_ = deps.Limiter.Close()
		if deps.Store != nil {
			_ = deps.Store.Close()
		}
	}
	return deps, nil
}

// stopWriter releases a usage writer that never ran.
func stopWriter(w *store.UsageWriter) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = w.Run(ctx)
}
