package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/pipeline"
)

// buildSimModels builds one engine per configured model, each over its own
// simulated GPU group (Config.GPU x Config.TP).
func buildSimModels(cfg Config, logger *slog.Logger) ([]*pipeline.Model, error) {
	if len(cfg.Models) == 0 {
		return nil, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	models := make([]*pipeline.Model, 0, len(cfg.Models))
	for _, name := range cfg.Models {
		m, err := buildSimModel(cfg, logger, simSpec{profile: name, gpu: cfg.GPU, tp: cfg.TP})
		if err != nil {
			return nil, err
		}
		models = append(models, m)
	}
	logger.Warn("the executor is SIMULATED: no model weights are loaded; the sim/ models answer with placeholder text "+
		"at the speed a real GPU would", "component", "daemon")
	return models, nil
}

// simSpec is one simulated model: its profile, the id it is served under
// ("" for the profile's, which starts with "sim/"; any other must too)
// and its GPU group.
type simSpec struct {
	profile, id, gpu string
	tp               int
}

// buildSimModel builds the engine of one simulated model over its own GPU
// group.
func buildSimModel(cfg Config, logger *slog.Logger, spec simSpec) (*pipeline.Model, error) {
	gpu, err := sim.GPUByName(spec.gpu)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = engine.RealClock{}
	}
	prof, err := sim.ModelByName(spec.profile)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if spec.id != "" {
		if err := checkSimID(spec.id); err != nil {
			return nil, err
		}
		prof.ID = spec.id
	}
	sc := sim.DefaultConfig()
	sc.GPU = gpu
	sc.Model = prof
	sc.TP = spec.tp
	sc.TimeScale = cfg.StepTimeScale
	ecfg := simSpeculation(cfg, &sc)
	exec, err := sim.New(sc, clock)
	if err != nil {
		return nil, fmt.Errorf("daemon: cannot serve %s on %dx %s (choose a GPU with more memory with --gpu, "+
			"a larger --tp, or fewer --models): %w", prof.ID, spec.tp, gpu.Name, err)
	}
	if cfg.speculating() {
		ecfg.Spec.Drafter = exec
	}
	eng, err := engine.New(exec, clock, ecfg, logger)
	if err != nil {
		return nil, fmt.Errorf("daemon: engine for %s: %w", prof.ID, err)
	}
	m := pipeline.NewModel(pipeline.EngineReplica{E: eng}, newPlainText(exec.Tokenizer()), time.Now(), eng.Run)
	m.Executor, m.Arch, m.Params, m.Quantization = pipeline.ExecutorSimulated, "sim", prof.Params, "BF16"
	m.Source = "sim:" + spec.profile
	m.Sim = &pipeline.SimGPU{Name: gpu.Name, TP: spec.tp, Memory: gpu.MemoryBytes * int64(spec.tp), KVCapacity: exec.KVCapacityBytes(),
		Utilization: exec.Utilization}
	if prof.WeightDTypeBytes == 1 {
		m.Quantization = "FP8"
	}
	logger.Info("model ready", "component", "daemon", "model", m.ID, "executor", "SIMULATED", "gpu", gpu.Name, "tp", spec.tp,
		"kv_blocks", m.Info.NumBlocks, "block_size", m.Info.BlockSize, "context_length", m.Info.ContextLength,
		"max_seq_tokens", m.Limit)
	return m, nil
}

// checkSimID refuses a simulated model's id that does not say so.
func checkSimID(id string) error {
	if len(id) <= len("sim/") || id[:len("sim/")] != "sim/" {
		return fmt.Errorf("daemon: a simulated model's id must start with \"sim/\" (simulated models are always labelled), got %q", id)
	}
	return nil
}
