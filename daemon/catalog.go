package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/catalog"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/safety"
)

// modelsConfig is the daemon's side of the models config: it loads the models
// the config names (resident ones at start and on each apply, the others
// on their first request), unloads those an apply drops, and checks the
// canaries for rollback.
//
// Locking: applyMu serialises applies; mu guards fromConfig; loadMu
// guards loads, the on-demand loads in progress.
type modelsConfig struct {
	cfg   Config
	fleet *fleet
	cat   *catalog.Catalog
	log   *slog.Logger

	applyMu sync.Mutex
	mu      sync.Mutex
	// fromConfig are the models loaded because the config names them.
	fromConfig map[string]bool

	loadMu sync.Mutex
	loads  map[string]*pendingLoad

	// checkers are the models' own safety checkers (nil: none), by id.
	checkers atomic.Pointer[map[string]*safety.Checker]
}

// buildCheckers makes the safety checkers of cfg's models that override
// llmd's.
func buildCheckers(cfg *catalog.Config) (map[string]*safety.Checker, error) {
	out := map[string]*safety.Checker{}
	for _, s := range cfg.Models {
		sf := s.Safety
		if sf == nil {
			continue
		}
		if sf.Off {
			out[s.ID] = nil
			continue
		}
		c, err := safety.New(safety.Config{URL: sf.URL, Timeout: sf.Timeout, Policy: safety.Policy(sf.Policy),
			OutputEvery: sf.OutputEvery}, nil)
		if err != nil {
			return nil, fmt.Errorf("models config: model %s: safety: %w", s.ID, err)
		}
		out[s.ID] = c
	}
	return out, nil
}

// safetyFor is the pipeline's SafetyFor: model's own checker, if the
// config gives it one.
func (ms *modelsConfig) safetyFor(model string) (*safety.Checker, bool) {
	m := ms.checkers.Load()
	if m == nil {
		return nil, false
	}
	c, ok := (*m)[model]
	return c, ok
}

// pendingLoad is an on-demand load that concurrent requests wait for.
type pendingLoad struct {
	done chan struct{}
	m    *pipeline.Model
	err  error
}

// loadSpec is the load request of one model of the config.
func loadSpec(s catalog.ModelSpec) api.ModelLoadRequest {
	req := api.ModelLoadRequest{Source: s.Source, ID: s.ID, KVCacheBytes: s.KVCacheBytes, Threads: s.Threads, GPU: s.GPU, TP: s.TP}
	if s.KeepAlive > 0 {
		req.KeepAlive = s.KeepAlive.String()
	}
	return req
}

// loadResident loads the config's resident models (no keep_alive) that
// are not served yet, and returns their ids.
func (ms *modelsConfig) loadResident(ctx context.Context, cfg *catalog.Config) ([]string, error) {
	var loaded []string
	for _, s := range cfg.Models {
		if s.KeepAlive > 0 || ms.fleet.models.Get(s.ID) != nil {
			continue
		}
		if _, err := ms.fleet.Load(ctx, loadSpec(s), func(api.ModelLoadProgress) {}); err != nil {
			return loaded, fmt.Errorf("models config: load %s (%s): %w", s.ID, s.Source, err)
		}
		ms.mu.Lock()
		ms.fromConfig[s.ID] = true
		ms.mu.Unlock()
		loaded = append(loaded, s.ID)
	}
	return loaded, nil
}

// ensure serves the config's model id, loading it on demand (a model with
// a keep_alive); concurrent requests for it wait for one load.
func (ms *modelsConfig) ensure(ctx context.Context, id string) (*pipeline.Model, error) {
	if m := ms.fleet.models.Get(id); m != nil && !m.Draining() {
		return m, nil
	}
	spec, ok := ms.cat.Spec(id)
	if !ok {
		return ms.fleet.models.Lookup(id)
	}
	ms.loadMu.Lock()
	pl := ms.loads[id]
	leader := pl == nil
	if leader {
		pl = &pendingLoad{done: make(chan struct{})}
		ms.loads[id] = pl
	}
	ms.loadMu.Unlock()
	if leader {
		// The first request loads the model in its own goroutine (the load
		// completes even if its client leaves); the others wait for it.
		start := time.Now()
		_, pl.err = ms.fleet.Load(context.WithoutCancel(ctx), loadSpec(spec), func(api.ModelLoadProgress) {})
		if pl.err == nil {
			pl.m = ms.fleet.models.Get(id)
			ms.mu.Lock()
			ms.fromConfig[id] = true
			ms.mu.Unlock()
			ms.log.Info("model loaded on demand", "model", id, "ms", time.Since(start).Milliseconds())
		}
		ms.loadMu.Lock()
		delete(ms.loads, id)
		ms.loadMu.Unlock()
		close(pl.done)
	}
	select {
	case <-pl.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if pl.err != nil {
		return nil, pl.err
	}
	if pl.m == nil {
		return nil, &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer, Param: "model",
			Message: fmt.Sprintf("model %s was loaded on demand and unloaded again; retry", id)}
	}
	return pl.m, nil
}

// apply makes cfg the models config: it loads the resident models it adds,
// switches the catalog to it, then unloads the models the previous config
// loaded that cfg no longer names. Applies run one at a time.
func (ms *modelsConfig) apply(ctx context.Context, cfg *catalog.Config) (api.ModelsApplied, error) {
	ms.applyMu.Lock()
	defer ms.applyMu.Unlock()
	res := api.ModelsApplied{Loaded: []string{}, Unloaded: []string{}}
	checkers, err := buildCheckers(cfg)
	if err != nil {
		return res, pipeline.InvalidParam("", "%v", err)
	}
	loaded, err := ms.loadResident(ctx, cfg)
	res.Loaded = append(res.Loaded, loaded...)
	if err != nil {
		return res, &pipeline.Error{Status: http.StatusBadRequest, Type: pipeline.TypeInvalidRequest, Message: err.Error()}
	}
	ms.cat.Apply(cfg)
	ms.checkers.Store(&checkers)
	keep := map[string]bool{}
	for _, s := range cfg.Models {
		keep[s.ID] = true
	}
	var drop []string
	ms.mu.Lock()
	for id := range ms.fromConfig {
		if !keep[id] {
			drop = append(drop, id)
		}
	}
	ms.mu.Unlock()
	slices.Sort(drop)
	for _, id := range drop {
		if _, err := ms.fleet.Unload(ctx, id, 0); err != nil {
			ms.log.Warn("models config: a model it dropped was not unloaded", "model", id, "err", err)
			continue
		}
		res.Unloaded = append(res.Unloaded, id)
		ms.mu.Lock()
		delete(ms.fromConfig, id)
		ms.mu.Unlock()
	}
	res.Names = ms.cat.Names()
	return res, nil
}

// Apply parses yaml as the models config, applies it and saves it to
// Config.ModelsConfig (atomically) when llmd has that file.
func (ms *modelsConfig) Apply(ctx context.Context, yaml []byte) (api.ModelsApplied, error) {
	cfg, err := catalog.Parse(yaml)
	if err != nil {
		return api.ModelsApplied{}, pipeline.InvalidParam("", "%v", err)
	}
	res, err := ms.apply(ctx, cfg)
	if err != nil {
		return res, err
	}
	if path := ms.cfg.ModelsConfig; path != "" {
		if err := writeFileAtomic(path, yaml); err != nil {
			ms.log.Error("models config applied but not saved", "path", path, "err", err)
		} else {
			res.Saved = true
		}
	}
	return res, nil
}

// Save writes the config in force (with the admin API's changes: a
// canary, a shadow, a promotion) to Config.ModelsConfig, so that a reload
// or a restart keeps them; saved is false without that file.
func (ms *modelsConfig) Save() (saved bool, err error) {
	if ms.cfg.ModelsConfig == "" {
		return false, nil
	}
	ms.applyMu.Lock()
	defer ms.applyMu.Unlock()
	b, err := catalog.Marshal(ms.cat.Config())
	if err != nil {
		return false, err
	}
	if err := writeFileAtomic(ms.cfg.ModelsConfig, b); err != nil {
		return false, err
	}
	return true, nil
}

// Reload reads Config.ModelsConfig again and applies it (SIGHUP).
func (ms *modelsConfig) Reload(ctx context.Context) error {
	cfg, err := catalog.ReadFile(ms.cfg.ModelsConfig)
	if err != nil {
		return err
	}
	res, err := ms.apply(ctx, cfg)
	if err != nil {
		return err
	}
	ms.log.Info("models config reloaded", "path", ms.cfg.ModelsConfig, "loaded", res.Loaded, "unloaded", res.Unloaded)
	return nil
}

// checkRollbacks rolls back the canaries that do worse than their stable
// version by their policy's margin, and logs each.
func (ms *modelsConfig) checkRollbacks(now time.Time) {
	for _, st := range ms.cat.CheckRollback(now) {
		ms.log.Warn("canary rolled back", "alias", st.Alias, "canary", st.Canary, "stable", st.Stable, "reason", st.Reason,
			"canary_requests", st.CanaryStats.Requests, "canary_error_rate", st.CanaryStats.ErrorRate,
			"stable_error_rate", st.StableStats.ErrorRate, "canary_ttft_p95_ms", st.CanaryStats.TTFTp95.Milliseconds(),
			"stable_ttft_p95_ms", st.StableStats.TTFTp95.Milliseconds())
	}
}

// writeFileAtomic replaces path with b: a temporary file in the same
// directory, synced, then renamed over it.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
