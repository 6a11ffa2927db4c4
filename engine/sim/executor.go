package sim

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/llmd/llmd/engine"
)

// Executor is the simulated executor: it keeps no tensors, sleeps each step
// for its roofline time on a clock and returns placeholder tokens.
//
// Locking: Forward holds a mutex for the whole step (a GPU runs one step at
// a time), so concurrent calls are safe though the engine makes none. The
// other methods read immutable state.
type Executor struct {
	cfg   Config
	clock engine.Clock
	tok   *Tokenizer
	gen   textGen
	info  engine.ExecutorInfo

	kvPerToken  float64 // bytes per token across the group
	blockBytes  float64 // bytes per block across the group
	weightBytes float64
	params      float64 // weights one token multiplies by (ActiveParams)
	attnPerCtx  float64 // attention FLOPs per query token per context token
	bandwidth   float64 // bytes/s across the group, as reached (BandwidthEfficiency)
	peakWeights float64 // FLOP/s for the weight matmuls across the group, as reached (ComputeEfficiency)
	peakAttn    float64 // FLOP/s for attention across the group, as reached
	hostLink    float64 // bytes/s across the group
	capacity    int64   // KV capacity in bytes
	swapSlots   int

	mu sync.Mutex
	// check validates each batch before anything is applied.
	check *engine.BatchChecker
	// util records the time spent in steps, for Utilization.
	util utilMeter
}

var (
	_ engine.Executor  = (*Executor)(nil)
	_ engine.CostModel = (*Executor)(nil)
)

// New returns a simulated executor for cfg that sleeps on clock. It returns
// cfg.Validate's error if cfg is not valid.
func New(cfg Config, clock engine.Clock) (*Executor, error) {
	if clock == nil {
		return nil, fmt.Errorf("sim: nil clock")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tp := float64(cfg.TP)
	m := cfg.Model
	link := cfg.HostLinkBytesPerSec
	if link == 0 {
		link = cfg.GPU.HostLinkBytesPerSec
	}
	effBW, effFLOPS := cfg.BandwidthEfficiency, cfg.ComputeEfficiency
	if effBW == 0 {
		effBW = 1
	}
	if effFLOPS == 0 {
		effFLOPS = 1
	}
	e := &Executor{
		cfg:         cfg,
		clock:       clock,
		tok:         NewTokenizer(m),
		gen:         textGen{meanOutput: cfg.MeanOutputTokens},
		kvPerToken:  float64(cfg.kvBytesPerToken()),
		blockBytes:  float64(cfg.blockBytes()),
		weightBytes: float64(m.WeightBytes()),
		params:      float64(m.ActiveParams()),
		attnPerCtx:  4 * float64(m.Layers) * float64(m.Heads) * float64(m.HeadDim),
		bandwidth:   cfg.GPU.BandwidthBytesPerSec * tp * effBW,
		peakWeights: cfg.GPU.PeakFLOPS(m.WeightDTypeBytes) * tp * effFLOPS,
		peakAttn:    cfg.GPU.PeakFLOPS(2) * tp * effFLOPS,
		hostLink:    link * tp,
		capacity:    cfg.kvCapacityBytes(),
	}
	slots := cfg.HostSwapBytes / cfg.blockBytes()
	e.swapSlots = int(min(slots, math.MaxInt32))
	e.info = engine.ExecutorInfo{
		Model:         m.ID,
		NumBlocks:     int(min(e.capacity/cfg.blockBytes(), math.MaxInt32)),
		BlockSize:     cfg.BlockSize,
		ContextLength: m.ContextLength,
		EOS:           []int32{e.tok.EOS()},
		SwapBlocks:    e.swapSlots,
		VocabSize:     e.tok.VocabSize(),
	}
	// The simulator keeps no K/V, so blocks shared by sequences are harmless.
	e.check = engine.NewBatchChecker(e.info, engine.BatchCheckOptions{})
	return e, nil
}

// Info describes the simulated model and its KV capacity: NumBlocks is the
// KV capacity in bytes over the bytes of one block, rounded down, and
// SwapBlocks is SwapSlots.
func (e *Executor) Info() engine.ExecutorInfo {
	info := e.info
	info.EOS = append([]int32(nil), e.info.EOS...)
	return info
}

// Config returns the executor's configuration.
func (e *Executor) Config() Config { return e.cfg }

// Tokenizer returns the tokenizer of the simulated model.
func (e *Executor) Tokenizer() *Tokenizer { return e.tok }

// KVCapacityBytes is the memory of the GPU group left for the KV cache in
// bytes: memory x TP, less the reserve and the weights.
func (e *Executor) KVCapacityBytes() int64 { return e.capacity }

// CapacityTokens is the number of tokens whose KV fits in the cache
// (KVCapacityBytes over the KV bytes per token, rounded down; at least
// Info().NumBlocks x BlockSize).
func (e *Executor) CapacityTokens() int {
	return int(min(e.capacity/e.cfg.kvBytesPerToken(), math.MaxInt32))
}

// SwapSlots is the number of host swap slots, each holding one block:
// HostSwapBytes over the bytes of a block. BlockSwap.Host must be below it.
func (e *Executor) SwapSlots() int { return e.swapSlots }

// NaturalLength returns the output index at which a sequence seeded with
// seed emits EOS (its answer then has that many tokens), and false if it
// never does (MeanOutputTokens 0).
func (e *Executor) NaturalLength(seed uint64) (int, bool) { return e.gen.length(seed) }

// TokenAt returns the token a sequence seeded with seed produces at output
// index i (SeqInput.Generated); Forward returns exactly this.
func (e *Executor) TokenAt(seed uint64, i int) int32 {
	if i < 0 {
		return -1
	}
	return e.gen.token(seed, i)
}

// Cost is the roofline breakdown of one step.
type Cost struct {
	// Bytes is the device memory traffic: the weights once (of a mixture
	// of experts, the shared weights and the experts the step's tokens go
	// to), the KV every sequence reads (its whole context; at most the
	// window in sliding-window layers) and writes (its new tokens), and
	// block copies (read and write).
	Bytes float64
	// FLOPs is the work: 2 per active parameter per token, plus attention
	// (4 x layers x heads x head dim per query token per context token it
	// attends to, causally and within the window of sliding layers).
	FLOPs float64
	// MemoryTime is Bytes over the group's bandwidth (times
	// BandwidthEfficiency).
	MemoryTime time.Duration
	// ComputeTime is FLOPs over the group's peak (the weight dtype's rate
	// for the matmuls, BF16 for attention; times ComputeEfficiency).
	ComputeTime time.Duration
	// TransferTime is the time to move swapped blocks over the host links.
	TransferTime time.Duration
	// Overhead is the per-step overhead: StepOverhead, plus SeqOverhead
	// for each sequence in the batch.
	Overhead time.Duration
	// DraftTime is the draft model's time for the step's drafts
	// (speculative decoding): the longest draft's tokens, each a batched
	// draft step of DraftCost times the weight-read time.
	DraftTime time.Duration
}

// Total is the step time: max(MemoryTime, ComputeTime) + TransferTime +
// Overhead + DraftTime.
func (c Cost) Total() time.Duration {
	return max(c.MemoryTime, c.ComputeTime) + c.TransferTime + c.Overhead + c.DraftTime
}

// ComputeBound reports whether compute, not memory bandwidth, limits the
// step.
func (c Cost) ComputeBound() bool { return c.ComputeTime > c.MemoryTime }

// Cost returns the roofline breakdown of b. It is a pure function of b and
// the configuration; it does not validate b (odd values count as zero). An
// empty or nil batch costs nothing.
func (e *Executor) Cost(b *engine.Batch) Cost {
	if b == nil || len(b.Seqs) == 0 && len(b.Copies) == 0 && len(b.SwapIn) == 0 && len(b.SwapOut) == 0 {
		return Cost{}
	}
	m := &e.cfg.Model
	var tokens, ctxTokens, attended float64
	maxDraft := 0
	for i := range b.Seqs {
		s := &b.Seqs[i]
		maxDraft = max(maxDraft, s.Draft)
		n := float64(len(s.Tokens))
		pos := float64(max(s.Pos, 0))
		tokens += n
		ctxTokens += m.kvReadTokens(float64(max(s.Context, 0)))
		// Query j of the chunk attends to positions 0..pos+j (the last
		// SlidingWindow of them in a sliding layer).
		attended += m.attended(pos, n)
	}
	c := Cost{Overhead: e.cfg.StepOverhead + time.Duration(len(b.Seqs))*e.cfg.SeqOverhead}
	if len(b.Seqs) > 0 {
		c.Bytes = m.stepWeightBytes(tokens) + (ctxTokens+tokens)*e.kvPerToken
	}
	c.Bytes += 2 * float64(len(b.Copies)) * e.blockBytes
	matmul := 2 * e.params * tokens
	attn := e.attnPerCtx * attended
	c.FLOPs = matmul + attn
	c.MemoryTime = seconds(c.Bytes / e.bandwidth)
	c.ComputeTime = seconds(matmul/e.peakWeights + attn/e.peakAttn)
	c.TransferTime = seconds(float64(len(b.SwapIn)+len(b.SwapOut)) * e.blockBytes / e.hostLink)
	if maxDraft > 0 && e.cfg.DraftCost > 0 {
		c.DraftTime = seconds(float64(maxDraft) * e.cfg.DraftCost * e.weightBytes / e.bandwidth)
	}
	return c
}

// StepTime returns the roofline time of b, unscaled: Cost(b).Total().
func (e *Executor) StepTime(b *engine.Batch) time.Duration { return e.Cost(b).Total() }

// SwapTime estimates copying n blocks one way over the host links, scaled
// by Config.TimeScale like Forward's sleep. It implements
// [engine.CostModel].
func (e *Executor) SwapTime(blocks int) time.Duration {
	return e.scale(seconds(float64(max(blocks, 0)) * e.blockBytes / e.hostLink))
}

// PrefillTime estimates the compute time of prefilling n tokens of one
// sequence from position 0 (weight matmuls and causal attention; the
// weights are read anyway by the step it joins), scaled by
// Config.TimeScale. It implements [engine.CostModel].
func (e *Executor) PrefillTime(tokens int) time.Duration {
	n := float64(max(tokens, 0))
	matmul := 2 * e.params * n
	attn := e.attnPerCtx * e.cfg.Model.attended(0, n)
	return e.scale(seconds(matmul/e.peakWeights + attn/e.peakAttn))
}

// scale applies Config.TimeScale to d.
func (e *Executor) scale(d time.Duration) time.Duration {
	if e.cfg.TimeScale == 1 {
		return d
	}
	return seconds(d.Seconds() * e.cfg.TimeScale)
}

// maxStep bounds one step's time, so absurd batches cannot overflow a
// Duration.
const maxStep = 24 * time.Hour

func seconds(s float64) time.Duration {
	d := s * float64(time.Second)
	if !(d < float64(maxStep)) {
		return maxStep
	}
	return time.Duration(math.Round(d))
}

// Forward validates b, applies its block operations (SwapOut, then SwapIn,
// then Copies: a device block swapped out may be the target of a swap in
// the same batch, a host slot freed by a swap-in may not be reused before
// the next batch), sleeps for the step time scaled by Config.TimeScale and
// returns one token per sequence: TokenAt(Seed, Generated) where Sample is
// set, -1 elsewhere. Output.Duration is the time slept.
//
// It returns an error, and changes nothing, when b is malformed: a sequence
// with no tokens, a Context other than Pos+len(Tokens) or beyond the
// context length, a block table too short for Context or naming a block
// out of range (only the blocks this step writes are checked), a copy or
// swap naming a block or host slot out of range, two swaps out to one host
// slot, two swaps in from one slot or to one device block, a swap in from a
// slot that holds no block, or a swap in from a slot the same batch swaps
// out to (the swap out, running first, would overwrite it). A sequence
// with a draft gets TokenAt at each position in turn, its drafts accepted
// while they equal it (Output.Accepted). If ctx ends
// during the sleep it returns ctx's error; the block operations stay
// applied.
func (e *Executor) Forward(ctx context.Context, b *engine.Batch) (*engine.Output, error) {
	if b == nil {
		return nil, fmt.Errorf("sim: nil batch")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check.Check(b); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	d := e.scale(e.Cost(b).Total())
	if d > 0 {
		start := e.clock.Now()
		if err := e.clock.Sleep(ctx, d); err != nil {
			e.util.add(start, e.clock.Now().Sub(start))
			return nil, fmt.Errorf("sim: step interrupted: %w", err)
		}
		e.util.add(start, d)
	}
	out := &engine.Output{Tokens: make([]int32, len(b.Seqs)), Duration: d}
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if s.Draft > 0 {
			e.verify(out, i, s)
			continue
		}
		if s.Sample {
			out.Tokens[i] = e.gen.token(s.Seed, s.Generated)
			if s.Mask != nil {
				out.Tokens[i] = e.gen.masked(out.Tokens[i], s.Seed, s.Generated, s.Mask)
			}
		} else {
			out.Tokens[i] = -1
		}
	}
	return out, nil
}
