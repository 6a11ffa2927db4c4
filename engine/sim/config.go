package sim

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Config configures an Executor: which model runs on which GPUs, and the
// knobs of the cost model. Start from DefaultConfig.
type Config struct {
	// GPU is the profile of each GPU in the tensor-parallel group.
	// Default: H100 SXM 80GB.
	GPU GPU
	// Model is the simulated model. Default: sim/small.
	Model Model
	// TP is the tensor-parallel degree: the number of GPUs the model is
	// split across. A power of two, at most 64, dividing the attention
	// heads. KV heads are replicated when TP exceeds them. Default 1.
	TP int
	// ReserveFraction is the share of GPU memory kept out of the KV cache
	// for activations, CUDA graphs and the runtime, in [0, 1). Default
	// 0.10 (vLLM's gpu_memory_utilization of 0.9).
	ReserveFraction float64
	// BlockSize is the number of tokens per KV block; a power of two.
	// Default 16.
	BlockSize int
	// StepOverhead is added to every step's roofline time: kernel launches,
	// sampling and scheduling that neither bandwidth nor FLOPs account
	// for. Default 1ms.
	StepOverhead time.Duration
	// BandwidthEfficiency and ComputeEfficiency are the shares of the
	// datasheet's peak memory bandwidth and peak FLOP/s that a step's
	// kernels reach, in (0, 1]; 0 means 1, the pure roofline. Real
	// kernels fall short of both peaks (attention over paged blocks, small
	// GEMMs, the norms and activations between them); CalibratedConfig
	// sets values fitted to published vLLM throughput. Default 0 (1).
	BandwidthEfficiency float64
	ComputeEfficiency   float64
	// SeqOverhead is added to a step's time for each sequence in its batch:
	// the host work per sequence and step (scheduling, preparing inputs,
	// sampling, handing the token out) that a serving engine does between
	// kernels. Default 0.
	SeqOverhead time.Duration
	// HostLinkBytesPerSec is the host-to-device bandwidth of one GPU in
	// bytes/s, used for swapped blocks; 0 means the GPU's
	// (GPU.HostLinkBytesPerSec: about 50 GB/s for PCIe Gen5 x16). Default 0.
	HostLinkBytesPerSec float64
	// HostSwapBytes is the host memory for swapped-out KV blocks, in bytes.
	// Default 64 GiB.
	HostSwapBytes int64
	// MeanOutputTokens is the mean natural length of an answer in tokens:
	// each sequence emits EOS at a length drawn from its seed, between
	// about 16 and 4x the mean. 0 means never: generation runs to
	// max_tokens. Default 150.
	MeanOutputTokens int
	// TimeScale scales the time Forward sleeps and reports: 1 is the
	// roofline time, 0.01 a hundred times faster. StepTime is unscaled.
	// Default 1.
	TimeScale float64
	// SpecAcceptance is the probability that a drafted token is accepted
	// when the executor drafts for speculative decoding (engine.Drafter):
	// the simulated drafter guesses each token right with it, independently.
	// In [0, 1]. Default 0.7.
	SpecAcceptance float64
	// DraftCost is the time a draft model takes per drafted token, as a
	// fraction of the target's weight-read time (its memory-bound decode
	// step): about the draft's share of the weights. 0 models prompt-lookup
	// drafting, which needs no model. In [0, 1]. Default 0.
	DraftCost float64
}

// DefaultConfig returns the documented defaults: sim/small on one H100.
func DefaultConfig() Config {
	return Config{
		GPU:              gpus["h100"],
		Model:            models["small"],
		TP:               1,
		ReserveFraction:  0.10,
		BlockSize:        16,
		StepOverhead:     time.Millisecond,
		HostSwapBytes:    64 * gib,
		MeanOutputTokens: 150,
		TimeScale:        1,
		SpecAcceptance:   0.7,
	}
}

// The calibrated efficiencies of CalibratedConfig. They were fitted to
// vLLM's own offline throughput of Llama 3 8B (BF16) on one H100 SXM:
// 24.24 requests/s with 256 prompt and 256 output tokens a request
// (github.com/vllm-project/vllm/pull/7117, August 2024) and 20.72
// requests/s with 1,000 and 100 (github.com/vllm-project/vllm/pull/4600,
// v0.4.1, May 2024), 1,000 requests each; the pure roofline is 3.0 and 2.2
// times faster. Kernels typically stream about 80% of peak HBM bandwidth and
// reach about half of peak dense FLOP/s in a serving engine's mix of
// shapes; the remainder, about 80 µs per sequence and step, is host work
// (vLLM's v0.6.0 notes measured only 38% of its Llama 3 8B time on the
// GPU before its CPU-overhead work). BENCHMARKS.md has the comparison.
const (
	CalibratedBandwidthEfficiency = 0.8
	CalibratedComputeEfficiency   = 0.5
	CalibratedSeqOverhead         = 80 * time.Microsecond
)

// CalibratedConfig returns DefaultConfig with the calibrated efficiencies
// and per-sequence overhead: step times close to what a 2024 vLLM reaches on
// the same GPU, where DefaultConfig's pure roofline is an upper bound.
func CalibratedConfig() Config {
	c := DefaultConfig()
	c.BandwidthEfficiency = CalibratedBandwidthEfficiency
	c.ComputeEfficiency = CalibratedComputeEfficiency
	c.SeqOverhead = CalibratedSeqOverhead
	return c
}

// Validate reports every problem with c, if any: a malformed profile or
// knob, or (as a *FitError) a model whose weights do not fit on the GPUs
// with room for at least one KV block.
func (c Config) Validate() error {
	var errs []error
	if err := c.Model.Validate(); err != nil {
		errs = append(errs, err)
	}
	g := c.GPU
	if g.Name == "" || g.MemoryBytes <= 0 || !(g.BandwidthBytesPerSec > 0) || !(g.BF16FLOPS > 0) || g.FP8FLOPS < 0 {
		errs = append(errs, fmt.Errorf("sim: GPU %q: memory, bandwidth and BF16 FLOP/s must be positive", g.Name))
	}
	if !isPow2(c.TP) || c.TP > 64 {
		errs = append(errs, fmt.Errorf("sim: tensor-parallel degree %d must be a power of two from 1 to 64", c.TP))
	} else if m := c.Model; m.Heads > 0 && m.KVHeads > 0 && (m.Heads%c.TP != 0 || m.KVHeads%c.TP != 0 && c.TP%m.KVHeads != 0) {
		errs = append(errs, fmt.Errorf("sim: model %s: %d attention heads and %d KV heads do not split across TP %d", m.ID, m.Heads, m.KVHeads, c.TP))
	}
	if !(c.ReserveFraction >= 0 && c.ReserveFraction < 1) {
		errs = append(errs, fmt.Errorf("sim: reserve fraction %v must be in [0, 1)", c.ReserveFraction))
	}
	if !isPow2(c.BlockSize) || c.BlockSize > 1024 {
		errs = append(errs, fmt.Errorf("sim: block size %d must be a power of two from 1 to 1024", c.BlockSize))
	}
	if c.StepOverhead < 0 || c.SeqOverhead < 0 {
		errs = append(errs, fmt.Errorf("sim: step overhead %v and sequence overhead %v must not be negative", c.StepOverhead, c.SeqOverhead))
	}
	if !(c.BandwidthEfficiency >= 0 && c.BandwidthEfficiency <= 1) || !(c.ComputeEfficiency >= 0 && c.ComputeEfficiency <= 1) {
		errs = append(errs, fmt.Errorf("sim: bandwidth efficiency %v and compute efficiency %v must be in [0, 1] (0 means 1)", c.BandwidthEfficiency, c.ComputeEfficiency))
	}
	if c.HostLinkBytesPerSec < 0 || c.HostLinkBytesPerSec == 0 && !(g.HostLinkBytesPerSec > 0) {
		errs = append(errs, fmt.Errorf("sim: host link bandwidth %v bytes/s must be positive (or 0 with a GPU that has one)", c.HostLinkBytesPerSec))
	}
	if c.HostSwapBytes < 0 {
		errs = append(errs, fmt.Errorf("sim: host swap space %d bytes must not be negative", c.HostSwapBytes))
	}
	if c.MeanOutputTokens < 0 {
		errs = append(errs, fmt.Errorf("sim: mean output tokens %d must not be negative", c.MeanOutputTokens))
	}
	if !(c.TimeScale > 0) || c.TimeScale > 1e6 {
		errs = append(errs, fmt.Errorf("sim: time scale %v must be positive and at most 1e6", c.TimeScale))
	}
	if !(c.SpecAcceptance >= 0 && c.SpecAcceptance <= 1) || !(c.DraftCost >= 0 && c.DraftCost <= 1) {
		errs = append(errs, fmt.Errorf("sim: speculative acceptance %v and draft cost %v must be in [0, 1]", c.SpecAcceptance, c.DraftCost))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if c.kvCapacityBytes() < c.blockBytes() {
		return &FitError{
			Model:           c.Model.ID,
			WeightBytes:     c.Model.WeightBytes(),
			GPU:             g.Name,
			TP:              c.TP,
			MemoryBytes:     c.memoryBytes(),
			ReserveFraction: c.ReserveFraction,
		}
	}
	return nil
}

// FitError reports a model whose weights, with the memory reserve, leave no
// room for even one KV block on the GPU group.
type FitError struct {
	// Model is the model id.
	Model string
	// WeightBytes is the size of the model's weights in bytes.
	WeightBytes int64
	// GPU is the GPU's display name and TP the number of GPUs.
	GPU string
	TP  int
	// MemoryBytes is the memory of the whole group in bytes.
	MemoryBytes int64
	// ReserveFraction is the share of memory kept from weights and KV.
	ReserveFraction float64
}

func (e *FitError) Error() string {
	return fmt.Sprintf("sim: model %s (%.1f GB of weights) does not fit on %dx %s: %.1f GB of memory less a %.0f%% reserve leaves no room for the KV cache; raise the tensor-parallel degree or pick a larger GPU",
		e.Model, gb(e.WeightBytes), e.TP, e.GPU, gb(e.MemoryBytes), 100*e.ReserveFraction)
}

func isPow2(n int) bool { return n > 0 && bits.OnesCount(uint(n)) == 1 }

// gb converts bytes to decimal gigabytes for messages.
func gb(n int64) float64 { return float64(n) / giga }

// memoryBytes is the memory of the whole tensor-parallel group.
func (c Config) memoryBytes() int64 { return c.GPU.MemoryBytes * int64(c.TP) }

// kvCapacityBytes is the memory left for the KV cache: the group's memory
// less the reserve and the weights. It may be negative.
func (c Config) kvCapacityBytes() int64 {
	mem := c.memoryBytes()
	return mem - int64(float64(mem)*c.ReserveFraction) - c.Model.WeightBytes()
}

// kvBytesPerToken is the KV cache one token takes across the group, with
// KV heads replicated when TP exceeds them.
func (c Config) kvBytesPerToken() int64 {
	kv := c.Model.KVBytesPerToken()
	if c.TP > c.Model.KVHeads && c.Model.KVHeads > 0 {
		kv = kv / int64(c.Model.KVHeads) * int64(c.TP)
	}
	return kv
}

// blockBytes is the KV cache one block takes across the group.
func (c Config) blockBytes() int64 { return c.kvBytesPerToken() * int64(c.BlockSize) }
