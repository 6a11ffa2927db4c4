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
	log := logger.With("component", "daemon")
	gpu, err := sim.GPUByName(cfg.GPU)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = engine.RealClock{}
	}
	now := time.Now()
	models := make([]*pipeline.Model, 0, len(cfg.Models))
	for _, name := range cfg.Models {
		prof, err := sim.ModelByName(name)
		if err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		sc := sim.DefaultConfig()
		sc.GPU = gpu
		sc.Model = prof
		sc.TP = cfg.TP
		sc.TimeScale = cfg.StepTimeScale
		exec, err := sim.New(sc, clock)
		if err != nil {
			return nil, fmt.Errorf("daemon: cannot serve %s on %dx %s (choose a GPU with more memory with --gpu, "+
				"a larger --tp, or fewer --models): %w", prof.ID, cfg.TP, gpu.Name, err)
		}
		eng, err := engine.New(exec, clock, cfg.Engine, logger)
		if err != nil {
			return nil, fmt.Errorf("daemon: engine for %s: %w", prof.ID, err)
		}
		m := pipeline.NewModel(pipeline.EngineReplica{E: eng}, newPlainText(exec.Tokenizer()), now, eng.Run)
		m.Executor, m.Arch, m.Params, m.Quantization = pipeline.ExecutorSimulated, "sim", prof.Params, "BF16"
		m.Sim = &pipeline.SimGPU{Name: gpu.Name, TP: cfg.TP, Memory: gpu.MemoryBytes * int64(cfg.TP), KVCapacity: exec.KVCapacityBytes()}
		if prof.WeightDTypeBytes == 1 {
			m.Quantization = "FP8"
		}
		log.Info("model ready", "model", m.ID, "executor", "SIMULATED", "gpu", gpu.Name, "tp", cfg.TP,
			"kv_blocks", m.Info.NumBlocks, "block_size", m.Info.BlockSize, "context_length", m.Info.ContextLength,
			"max_seq_tokens", m.Limit)
		models = append(models, m)
	}
	log.Warn("the executor is SIMULATED: no model weights are loaded; the sim/ models answer with placeholder text " +
		"at the speed a real GPU would")
	return models, nil
}
