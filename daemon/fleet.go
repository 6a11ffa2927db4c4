package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/cpu"
	modelfile "github.com/llmd/llmd/model"
	"github.com/llmd/llmd/pipeline"
)

// fleet owns the served models' engines: the ones built at start and those
// loaded and unloaded while llmd runs (the admin API, the models config,
// keep_alive). A model is served from the moment it is added to the
// pipeline's set; unloading drains it (no new requests, running ones
// finish within a timeout), stops its engine and frees its memory. Other
// models' streams never notice.
//
// Locking: mu guards entries, loading and run.
type fleet struct {
	cfg    Config
	models *pipeline.Models
	log    *slog.Logger
	// memAvailable reads the host's available memory (tests replace it).
	memAvailable func() (int64, error)

	mu      sync.Mutex
	entries map[string]*fleetEntry
	loading map[string]int64 // ids being loaded, with their accounted memory
	// run is the engines' context while Run runs, nil before and after.
	run context.Context
	wg  sync.WaitGroup
	// failed carries the first engine failure to Run; running is closed
	// once Run runs the engines.
	failed  chan error
	running chan struct{}
	// onTick, if set, is called on each of Run's ticks (canary checks).
	onTick func(now time.Time)
}

// fleetEntry is one served model and what stops and frees it.
type fleetEntry struct {
	m *pipeline.Model
	// close releases the executor (once); nil for none.
	close func()
	// cancel stops the engine; done is closed when its Run returned. Both
	// nil until the engine runs.
	cancel    context.CancelFunc
	done      chan struct{}
	keepAlive time.Duration
}

// newFleet returns the fleet of the models already in models; closers
// release their executors.
func newFleet(cfg Config, models *pipeline.Models, closers map[*pipeline.Model]func(), logger *slog.Logger) *fleet {
	f := &fleet{cfg: cfg, models: models, log: logger.With("component", "fleet"), memAvailable: memAvailable,
		entries: map[string]*fleetEntry{}, loading: map[string]int64{}, failed: make(chan error, 1),
		running: make(chan struct{})}
	for _, m := range models.List() {
		f.entries[m.ID] = &fleetEntry{m: m, close: closers[m]}
	}
	return f
}

// keepAliveTick is how often idle models are looked for.
const keepAliveTick = 250 * time.Millisecond

// Run runs the engines until ctx ends (or one fails: its error), unloading
// models idle past their keep_alive meanwhile; then it stops every engine.
// Close frees what is left.
func (f *fleet) Run(ctx context.Context) error {
	f.mu.Lock()
	f.run = ctx
	for _, e := range f.entries {
		f.startLocked(e)
	}
	f.mu.Unlock()
	close(f.running)
	tick := time.NewTicker(keepAliveTick)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-f.failed:
			break loop
		case now := <-tick.C:
			f.expire(ctx, now)
			if f.onTick != nil {
				f.onTick(now)
			}
		}
	}
	f.mu.Lock()
	f.run = nil
	for _, e := range f.entries {
		if e.cancel != nil {
			e.cancel()
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

// Close frees the executors of the models still loaded; the daemon calls
// it once Run has returned and no request is left.
func (f *fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.entries {
		if e.close != nil {
			e.close()
		}
	}
}

// startLocked runs e's engine under f.run. mu must be held, f.run set.
func (f *fleet) startLocked(e *fleetEntry) {
	ctx, cancel := context.WithCancel(f.run)
	e.cancel, e.done = cancel, make(chan struct{})
	if e.m.Run == nil {
		close(e.done)
		return
	}
	f.wg.Go(func() {
		defer close(e.done)
		if err := e.m.Run(ctx); err != nil && ctx.Err() == nil {
			select {
			case f.failed <- fmt.Errorf("daemon: engine %s: %w", e.m.ID, err):
			default:
			}
		}
	})
}

// expire unloads the models idle for longer than their keep_alive.
func (f *fleet) expire(ctx context.Context, now time.Time) {
	f.mu.Lock()
	var idle []string
	for id, e := range f.entries {
		if e.keepAlive > 0 && e.m.Active() == 0 && !e.m.Draining() && now.Sub(e.m.LastUsed()) > e.keepAlive {
			idle = append(idle, id)
		}
	}
	f.mu.Unlock()
	for _, id := range idle {
		if res, err := f.Unload(ctx, id, time.Second); err == nil {
			f.log.Info("model unloaded after its keep_alive", "model", id, "freed_bytes", res.FreedBytes)
		}
	}
}

// SetKeepAlive makes the served model id unload once idle for d (0: keep
// it loaded), as an Ollama request's keep_alive asks.
func (f *fleet) SetKeepAlive(id string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entries[id]
	if e == nil {
		return errUnknownModel(id)
	}
	e.keepAlive = max(d, 0)
	return nil
}

// loadRequest is a model to load, as the admin API or the models config
// names it.
type loadRequest struct {
	api.ModelLoadRequest
	keepAlive time.Duration
}

// errLoad is a refused load, with its status and code.
func errLoad(status int, code, format string, args ...any) *pipeline.Error {
	return &pipeline.Error{Status: status, Type: pipeline.TypeInvalidRequest, Code: code, Param: "source",
		Message: fmt.Sprintf(format, args...)}
}

// Load loads the model req names and serves it, calling progress (never
// nil) as it goes. The memory it needs is accounted before anything is
// read: a model that would not fit is refused (507).
func (f *fleet) Load(ctx context.Context, req api.ModelLoadRequest, progress func(api.ModelLoadProgress)) (api.ModelState, error) {
	lr := loadRequest{ModelLoadRequest: req}
	if req.KeepAlive != "" {
		d, err := time.ParseDuration(req.KeepAlive)
		if err != nil || d < 0 {
			return api.ModelState{}, pipeline.InvalidParam("keep_alive", "keep_alive must be a duration such as 5m, got %q", req.KeepAlive)
		}
		lr.keepAlive = d
	}
	if req.Threads < 0 || req.TP < 0 || req.KVCacheBytes < 0 {
		return api.ModelState{}, pipeline.InvalidParam("source", "threads, tp and kv_cache_bytes must not be negative")
	}
	if err := (cpu.Config{KVType: req.KVCacheType}).Validate(); err != nil {
		return api.ModelState{}, pipeline.InvalidParam("kv_cache_type", "%v", err)
	}
	progress(api.ModelLoadProgress{Status: api.LoadChecking, Model: req.ID})
	if profile, ok := strings.CutPrefix(req.Source, "sim:"); ok {
		return f.loadSim(lr, profile, progress)
	}
	if urls, ok := strings.CutPrefix(req.Source, "upstream:"); ok {
		return f.loadUpstream(ctx, lr, urls, progress)
	}
	return f.loadGGUF(ctx, lr, progress)
}

// loadSim loads a simulated model; it takes no host memory to speak of.
func (f *fleet) loadSim(lr loadRequest, profile string, progress func(api.ModelLoadProgress)) (api.ModelState, error) {
	id := lr.ID
	if id == "" {
		id = "sim/" + strings.TrimPrefix(profile, "sim/")
	}
	if err := f.reserve(id, 0); err != nil {
		return api.ModelState{}, err
	}
	defer f.unreserve(id)
	gpu, tp := f.cfg.GPU, f.cfg.TP
	if lr.GPU != "" {
		gpu = lr.GPU
	}
	if lr.TP > 0 {
		tp = lr.TP
	}
	progress(api.ModelLoadProgress{Status: api.LoadBuilding, Model: id})
	m, err := buildSimModel(f.cfg, f.log, simSpec{profile: profile, id: id, gpu: gpu, tp: tp})
	if err != nil {
		return api.ModelState{}, errLoad(http.StatusBadRequest, "invalid_model_source", "%v", err)
	}
	return f.add(&fleetEntry{m: m, keepAlive: lr.keepAlive})
}

// loadUpstream serves a model through engines at urls
// ("URL[,URL...][#NAME]"); it takes no host memory of llmd's.
func (f *fleet) loadUpstream(ctx context.Context, lr loadRequest, urls string, progress func(api.ModelLoadProgress)) (api.ModelState, error) {
	if lr.ID == "" {
		return api.ModelState{}, pipeline.InvalidParam("id", "an upstream model needs an id (the name llmd serves it under)")
	}
	spec, err := ParseUpstream(lr.ID + "=" + urls)
	if err != nil {
		return api.ModelState{}, errLoad(http.StatusBadRequest, "invalid_model_source", "%v", err)
	}
	if err := f.reserve(spec.Model, 0); err != nil {
		return api.ModelState{}, err
	}
	defer f.unreserve(spec.Model)
	progress(api.ModelLoadProgress{Status: api.LoadBuilding, Model: spec.Model})
	m, err := buildUpstream(ctx, f.cfg, spec, f.log)
	if err != nil {
		return api.ModelState{}, errLoad(http.StatusBadGateway, "upstream_unavailable", "%v", err)
	}
	return f.add(&fleetEntry{m: m, keepAlive: lr.keepAlive})
}

// loadGGUF reads a GGUF file (with progress), builds its CPU executor
// and engine, and serves it.
func (f *fleet) loadGGUF(ctx context.Context, lr loadRequest, progress func(api.ModelLoadProgress)) (api.ModelState, error) {
	if lr.Source == "" {
		return api.ModelState{}, pipeline.InvalidParam("source", "source is required: a GGUF file path, ollama:NAME[:TAG] or sim:PROFILE")
	}
	refs, err := modelfile.Resolve(lr.Source, f.cfg.Resolve)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, modelfile.ErrModelNotFound) {
			status = http.StatusNotFound
		}
		return api.ModelState{}, errLoad(status, "invalid_model_source", "%v", err)
	}
	if len(refs) != 1 {
		return api.ModelState{}, errLoad(http.StatusBadRequest, "invalid_model_source",
			"%s names %d models; load one file at a time", lr.Source, len(refs))
	}
	ref := refs[0]
	if lr.ID != "" {
		if strings.HasPrefix(lr.ID, "sim/") {
			return api.ModelState{}, pipeline.InvalidParam("id", "the sim/ prefix is for simulated models; %s is a GGUF file", ref.Path)
		}
		ref.Name = lr.ID
	}
	st, err := os.Stat(ref.Path)
	if err != nil {
		return api.ModelState{}, errLoad(http.StatusBadRequest, "invalid_model_source", "%v", err)
	}
	opts := ggufOptions{threads: f.cfg.CPUThreads, kvBytes: f.cfg.KVCacheBytes, kvType: f.cfg.KVCacheType, f16MatMul: f.cfg.CPUF16MatMul}
	if lr.Threads > 0 {
		opts.threads = lr.Threads
	}
	if lr.KVCacheBytes > 0 {
		opts.kvBytes = lr.KVCacheBytes
	}
	if lr.KVCacheType != "" {
		opts.kvType = lr.KVCacheType
	}
	kv := opts.kvBytes
	if kv == 0 {
		kv = cpu.DefaultConfig().KVCacheBytes
	}
	need := ggufMemory(st.Size(), kv)
	if err := f.fits(ref.Name, need, st.Size(), kv); err != nil {
		return api.ModelState{}, err
	}
	if err := f.reserve(ref.Name, need); err != nil {
		return api.ModelState{}, err
	}
	defer f.unreserve(ref.Name)
	if err := readAhead(ctx, ref.Path, st.Size(), func(done int64) {
		progress(api.ModelLoadProgress{Status: api.LoadReading, Model: ref.Name, Completed: done, Total: st.Size()})
	}); err != nil {
		return api.ModelState{}, err
	}
	progress(api.ModelLoadProgress{Status: api.LoadBuilding, Model: ref.Name})
	start := time.Now()
	closer, m, err := loadGGUF(ref, opts, f.cfg, f.log)
	if err != nil {
		return api.ModelState{}, errLoad(http.StatusBadRequest, "invalid_model_source", "load %s (%s): %v", ref.Name, ref.Path, err)
	}
	f.log.Info("model loaded", "model", m.ID, "path", ref.Path, "arch", m.Arch, "quantization", m.Quantization,
		"memory_bytes", m.Memory, "executor", "cpu", "kv_blocks", m.Info.NumBlocks, "kv_type", ggufKVType(opts.kvType), "f16_matmul", ggufF16MatMul(opts.f16MatMul), "load_ms", time.Since(start).Milliseconds())
	return f.add(&fleetEntry{m: m, close: closer, keepAlive: lr.keepAlive})
}

// fits refuses a model that needs more memory than is left: within the
// budget when one is set, else within the host's available memory.
func (f *fleet) fits(id string, need, weights, kv int64) error {
	f.mu.Lock()
	used := f.usedLocked()
	f.mu.Unlock()
	if b := f.cfg.MemoryBudget; b > 0 {
		if used+need > b {
			return errLoad(http.StatusInsufficientStorage, "insufficient_memory",
				"model %s needs %s (weights %s + KV cache %s) but only %s of the %s memory budget is free (%s in use); "+
					"unload a model or raise --memory-budget", id, memText(need), memText(weights), memText(kv), memText(b-used), memText(b), memText(used))
		}
		return nil
	}
	avail, err := f.memAvailable()
	if err != nil {
		return nil // no figure to refuse by
	}
	if need > avail {
		return errLoad(http.StatusInsufficientStorage, "insufficient_memory",
			"model %s needs %s (weights %s + KV cache %s) but the host has %s available; "+
				"unload a model, use a smaller KV cache (kv_cache_bytes) or a smaller file", id, memText(need), memText(weights), memText(kv), memText(avail))
	}
	return nil
}

// usedLocked is the memory accounted to loaded and loading models.
func (f *fleet) usedLocked() int64 {
	var n int64
	for _, e := range f.entries {
		n += e.m.Memory
	}
	for _, b := range f.loading {
		n += b
	}
	return n
}

// reserve marks id as loading, with need bytes accounted, refusing an id
// that is served or loading already.
func (f *fleet) reserve(id string, need int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.loading[id]; ok {
		return errLoad(http.StatusConflict, "model_exists", "model %s is being loaded already", id)
	}
	if f.entries[id] != nil || f.models.Get(id) != nil {
		return errLoad(http.StatusConflict, "model_exists", "model %s is served already; unload it first", id)
	}
	f.loading[id] = need
	return nil
}

func (f *fleet) unreserve(id string) {
	f.mu.Lock()
	delete(f.loading, id)
	f.mu.Unlock()
}

// add serves e's model and runs its engine.
func (f *fleet) add(e *fleetEntry) (api.ModelState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(err error) (api.ModelState, error) {
		if e.close != nil {
			e.close()
		}
		return api.ModelState{}, err
	}
	if f.run == nil {
		return fail(&pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer,
			Message: "llmd is not serving (starting or shutting down); load the model again later"})
	}
	if err := f.models.Add(e.m); err != nil {
		return fail(errLoad(http.StatusConflict, "model_exists", "%v", err))
	}
	f.entries[e.m.ID] = e
	f.startLocked(e)
	return f.stateLocked(e), nil
}

// errUnknownModel is the 404 of unloading a model not served.
func errUnknownModel(id string) *pipeline.Error {
	return &pipeline.Error{Status: http.StatusNotFound, Type: pipeline.TypeInvalidRequest, Param: "model",
		Code: pipeline.CodeModelNotFound, Message: fmt.Sprintf("model %s is not loaded", id)}
}

// Unload drains the model with id (no new requests; running ones may
// finish within timeout, 0 for Config.UnloadTimeout), then stops its
// engine, which ends what is left as cancelled, and frees its memory.
func (f *fleet) Unload(ctx context.Context, id string, timeout time.Duration) (api.ModelUnloadResult, error) {
	if timeout <= 0 {
		timeout = f.cfg.UnloadTimeout
	}
	f.mu.Lock()
	e := f.entries[id]
	switch {
	case e == nil:
		_, loading := f.loading[id]
		f.mu.Unlock()
		if loading {
			return api.ModelUnloadResult{}, errLoad(http.StatusConflict, "model_loading", "model %s is still loading", id)
		}
		return api.ModelUnloadResult{}, errUnknownModel(id)
	case e.m.Draining():
		f.mu.Unlock()
		return api.ModelUnloadResult{}, errLoad(http.StatusConflict, "model_unloading", "model %s is being unloaded already", id)
	}
	e.m.Drain()
	f.mu.Unlock()
	start := time.Now()
	before := e.m.Active()
	f.log.Info("unloading a model: draining", "model", id, "active", before, "timeout", timeout.String())
	idle := waitIdle(ctx, e.m, timeout)
	left := e.m.Active()
	f.mu.Lock()
	delete(f.entries, id)
	f.models.Remove(id)
	f.mu.Unlock()
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	// The engine ended what was left as cancelled; their handlers still
	// hold the model until they have written their last event.
	if !idle {
		idle = waitIdle(context.Background(), e.m, 10*time.Second)
	}
	res := api.ModelUnloadResult{ID: id, Finished: max(before-left, 0), Cancelled: left, DrainMs: time.Since(start).Milliseconds()}
	if idle {
		if e.close != nil {
			e.close()
		}
		res.FreedBytes = e.m.Memory
	} else {
		// Freeing the weights under a request still reading them would
		// crash llmd; keep them mapped instead.
		f.log.Error("requests still hold an unloaded model; its memory is kept", "model", id, "active", e.m.Active())
	}
	f.log.Info("model unloaded", "model", id, "finished", res.Finished, "cancelled", res.Cancelled,
		"drain_ms", res.DrainMs, "freed_bytes", res.FreedBytes)
	return res, nil
}

// waitIdle waits until m has no active request, up to timeout or ctx's
// end; it reports whether m became idle.
func waitIdle(ctx context.Context, m *pipeline.Model, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for m.Active() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// States lists the served and loading models.
func (f *fleet) States() api.ModelStateList {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := api.ModelStateList{Models: make([]api.ModelState, 0, len(f.entries)+len(f.loading)),
		MemoryUsed: f.usedLocked(), MemoryBudget: f.cfg.MemoryBudget}
	for _, e := range f.entries {
		out.Models = append(out.Models, f.stateLocked(e))
	}
	for id, need := range f.loading {
		out.Models = append(out.Models, api.ModelState{ID: id, State: "loading", Memory: need})
	}
	slices.SortFunc(out.Models, func(a, b api.ModelState) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (f *fleet) stateLocked(e *fleetEntry) api.ModelState {
	st := api.ModelState{ID: e.m.ID, Source: e.m.Source, Executor: e.m.Executor, State: "ready", Memory: e.m.Memory,
		Active: e.m.Active(), LastUsed: e.m.LastUsed(), Created: e.m.Created}
	if e.m.Draining() {
		st.State = "draining"
	}
	if e.keepAlive > 0 {
		st.KeepAlive = e.keepAlive.String()
	}
	return st
}

// readAhead reads the file at path (size bytes) once, so that the mapped
// weights are in the page cache when the executor touches them, calling
// progress at most every 100 ms and at the end.
func readAhead(ctx context.Context, path string, size int64, progress func(done int64)) error {
	fh, err := os.Open(path)
	if err != nil {
		return errLoad(http.StatusBadRequest, "invalid_model_source", "%v", err)
	}
	defer fh.Close()
	buf := make([]byte, 4<<20)
	var done int64
	last := time.Now()
	progress(0)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := fh.Read(buf)
		done += int64(n)
		if time.Since(last) >= 100*time.Millisecond {
			progress(min(done, size))
			last = time.Now()
		}
		if errors.Is(err, io.EOF) {
			progress(min(done, size))
			return nil
		}
		if err != nil {
			return errLoad(http.StatusBadRequest, "invalid_model_source", "read %s: %v", path, err)
		}
	}
}

// memAvailable is the host's available memory (MemAvailable in
// /proc/meminfo).
func memAvailable() (int64, error) {
	fh, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("daemon: no MemAvailable in /proc/meminfo")
}

// memText writes a byte count in MiB, or GiB from 1 GiB up.
func memText(b int64) string {
	if b >= 1<<30 {
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
}
