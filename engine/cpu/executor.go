package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sample"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// ErrClosed is returned by Forward once the executor is closed.
var ErrClosed = errors.New("cpu: executor closed")

// Config configures an Executor. Start from DefaultConfig; zero fields take
// the defaults named in their comments.
type Config struct {
	// Name is the model id reported in Info; default the file's
	// general.name, else its architecture.
	Name string
	// Threads is the number of worker goroutines of the forward pass;
	// default runtime.NumCPU().
	Threads int
	// BlockSize is the number of tokens per KV block, a power of two;
	// default 16.
	BlockSize int
	// KVBlocks is the number of KV blocks; if 0 it is KVCacheBytes over the
	// bytes of one block, raised to hold one sequence of the model's full
	// context when that takes at most MaxAutoKVBytes (beyond, the engine
	// limits a sequence to the cache).
	KVBlocks int
	// KVCacheBytes sizes the KV cache when KVBlocks is 0; default 256 MiB.
	KVCacheBytes int64
	// KVType is the type the cache stores K and V as, llama.cpp's -ctk/-ctv
	// names: "f16" (default), "f32", "q8_0" (34 bytes per 32 values, about
	// half of f16) or "q4_0" (18 bytes per 32 values). The quantized types
	// need head dims that are multiples of 32; New refuses others.
	KVType string
	// F16MatMul is how MatMul multiplies F16 and BF16 weights (F16MatMuls):
	// "f32" (default) widens them to float32 exactly and multiplies in
	// float32; "bf16" rounds F16 weights to bfloat16 at load (8
	// significant bits where F16 has 11) and the activations at each
	// MatMul, and multiplies with the CPU's AVX512_BF16 dot products, two
	// products per lane and instruction: prompts run about 1.5 times as fast,
	// the results differ from "f32"'s by bfloat16's rounding. New refuses
	// "bf16" on a CPU without AVX512_BF16.
	F16MatMul string
	// SwapBytes is the host swap space for preempted sequences' blocks, in
	// bytes; default 256 MiB. NoSwap disables it.
	SwapBytes int64
	// NoSwap disables host swap space (preempted sequences recompute).
	NoSwap bool
	// EOS lists the token ids that end a generation (the tokenizer's
	// end-of-generation ids); each must be below the vocabulary size.
	EOS []int32
}

// Defaults of Config.
const (
	DefaultBlockSize          = 16
	DefaultKVCacheBytes int64 = 256 << 20
	DefaultSwapBytes    int64 = 256 << 20
	// MaxAutoKVBytes bounds how far New raises KVCacheBytes to hold one
	// sequence of the full context, so that a long-context model cannot
	// reserve more memory than the machine has.
	MaxAutoKVBytes int64 = 1 << 30
)

// DefaultConfig returns the documented defaults: runtime.NumCPU() threads,
// 16-token blocks, a 256 MiB F16 KV cache and 256 MiB of swap space.
func DefaultConfig() Config {
	return Config{
		Threads:      runtime.NumCPU(),
		BlockSize:    DefaultBlockSize,
		KVCacheBytes: DefaultKVCacheBytes,
		KVType:       "f16",
		SwapBytes:    DefaultSwapBytes,
	}
}

// Validate reports the first invalid field. Zero values are valid: they
// take the defaults.
func (c Config) Validate() error {
	switch {
	case c.Threads < 0:
		return fmt.Errorf("cpu: threads must not be negative, got %d", c.Threads)
	case c.BlockSize < 0 || c.BlockSize&(c.BlockSize-1) != 0 || c.BlockSize > 1<<16:
		return fmt.Errorf("cpu: block size %d is not a power of two up to 65536", c.BlockSize)
	case c.KVBlocks < 0 || c.KVBlocks > math.MaxInt32:
		return fmt.Errorf("cpu: KV blocks %d out of range", c.KVBlocks)
	case c.KVCacheBytes < 0:
		return fmt.Errorf("cpu: KV cache bytes must not be negative, got %d", c.KVCacheBytes)
	case c.SwapBytes < 0:
		return fmt.Errorf("cpu: swap bytes must not be negative, got %d", c.SwapBytes)
	}
	if _, err := parseKVType(c.KVType); err != nil {
		return err
	}
	return checkF16MatMul(c.F16MatMul)
}

// F16MatMuls lists Config.F16MatMul's values, the default first.
var F16MatMuls = []string{"f32", "bf16"}

// HasBF16MatMul reports whether this CPU runs Config.F16MatMul "bf16"
// (AVX-512 with AVX512_BF16, and the kernels not limited below AVX-512).
func HasBF16MatMul() bool { return kernSetFor(kernUse).tileBF16 != nil }

// checkF16MatMul returns an error unless m is one of F16MatMuls (or empty)
// and this CPU runs it.
func checkF16MatMul(m string) error {
	switch m {
	case "", "f32":
		return nil
	case "bf16":
		if !HasBF16MatMul() {
			return fmt.Errorf("cpu: F16 matmul bf16 needs a CPU with AVX-512 BF16 (AVX512_BF16); this one lacks it or its kernels are limited below AVX-512: use f32")
		}
		return nil
	}
	return fmt.Errorf("cpu: unknown F16 matmul %q (want one of %s)", m, strings.Join(F16MatMuls, ", "))
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Threads == 0 {
		c.Threads = runtime.NumCPU()
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.KVCacheBytes == 0 {
		c.KVCacheBytes = DefaultKVCacheBytes
	}
	if c.KVType == "" {
		c.KVType = "f16"
	}
	if c.SwapBytes == 0 && !c.NoSwap {
		c.SwapBytes = DefaultSwapBytes
	}
	if c.NoSwap {
		c.SwapBytes = 0
	}
	return c
}

// Estimates for the cost model before the first measured step.
const (
	// memcpyBytesPerSec is the host memory copy rate a swap runs at.
	memcpyBytesPerSec = 8e9
	// flopsPerThread is a first guess at one core's matmul rate.
	flopsPerThread = 4e9
)

// Executor runs the generative architectures of model.Architectures on
// the CPU (the embedding encoders run on an [Embedder]). It implements
// [engine.Executor] and [engine.CostModel].
//
// Locking: Forward holds a mutex for the whole step, so concurrent calls are
// safe though the engine makes none; Info, SwapTime and PrefillTime may be
// called from any goroutine. The executor reads the model file's tensor
// data for its whole life: close the file only after Close.
type Executor struct {
	cfg  Config
	spec model.Spec
	info engine.ExecutorInfo
	w    *weights
	rope *rope
	// ropeSWA rotates the sliding-window layers (their own base, no
	// scaling); it is rope when the model has none.
	ropeSWA *rope
	// attnScale multiplies q·k: the spec's AttnScale or 1/√HeadDim.
	attnScale float32
	pool      *Pool

	blockBytes int64   // KV bytes of one block, all layers
	flopsTok   float64 // matmul FLOPs per token
	flopRate   atomic.Uint64

	mu     sync.Mutex
	closed bool
	dev    *kvCache // one block per engine block id
	host   *kvCache // one block per swap slot; nil without swap
	buf    stepBuffers
	// scratch holds one worker scratch space per pool thread.
	scratch []*scratch
	// attn is the attention call in progress (attention).
	attn attnCall
	// check validates each batch before anything is touched.
	check *engine.BatchChecker

	// samplers holds one sampler per pool thread: sampled rows are
	// sampled in parallel.
	samplers []*sample.Sampler
	// sample picks the token of sampled row row with sampler w
	// (sampleSeq); tests wrap it to see the logits. It is called from the
	// pool's workers, one row each, rows of a batch in parallel.
	sample func(w, row int, logits []float32, s *engine.SeqInput) int32
}

var (
	_ engine.Executor  = (*Executor)(nil)
	_ engine.CostModel = (*Executor)(nil)
)

// New returns an executor for the model in f (any of
// model.Architectures; others are refused with the list) with
// configuration cfg. It reads the spec with model.SpecFromFile, checks
// every tensor's type and size, and allocates the KV cache and swap space;
// it starts cfg.Threads worker goroutines, stopped by Close. f must stay
// open until Close. New needs no tokenizer: EOS ids come in cfg.EOS.
func New(f *gguf.File, cfg Config) (*Executor, error) {
	if f == nil {
		return nil, errors.New("cpu: nil model file")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	spec, err := model.SpecFromFile(f)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if spec.Encoder {
		return nil, fmt.Errorf("cpu: %s is an embedding model, which generates nothing: load it with NewEmbedder", spec.Arch)
	}
	for _, id := range cfg.EOS {
		if id < 0 || int(id) >= spec.Vocab {
			return nil, fmt.Errorf("cpu: EOS token %d outside the vocabulary of %d", id, spec.Vocab)
		}
	}
	w, err := loadWeights(f, spec, cfg.F16MatMul == "bf16")
	if err != nil {
		return nil, err
	}
	r, err := newRope(spec, w.ropeFreqs)
	if err != nil {
		return nil, err
	}
	rSWA := r
	if spec.SlidingWindow > 0 {
		local := spec
		local.RopeBase, local.RopeScaling = spec.RopeBaseSWA, model.RopeScaling{}
		if rSWA, err = newRope(local, nil); err != nil {
			return nil, err
		}
	}
	attnScale := spec.AttnScale
	if attnScale == 0 {
		attnScale = 1 / math.Sqrt(float64(spec.HeadDim))
	}
	kvt, _ := parseKVType(cfg.KVType)
	if err := checkKVType(kvt, spec); err != nil {
		return nil, err
	}
	bs := cfg.BlockSize
	blockBytes := kvBytesPerBlock(spec, bs, kvt)
	blocks := kvBlocks(cfg, spec.ContextLength, blockBytes)
	if blocks > math.MaxInt32 || blocks > math.MaxInt64/blockBytes {
		return nil, fmt.Errorf("cpu: %d KV blocks of %d bytes is too large", blocks, blockBytes)
	}
	swap := cfg.SwapBytes / blockBytes
	swap = min(swap, math.MaxInt32)

	name := cfg.Name
	if name == "" {
		name = spec.Name
	}
	if name == "" {
		name = spec.Arch
	}
	e := &Executor{
		cfg:        cfg,
		spec:       spec,
		w:          w,
		rope:       r,
		ropeSWA:    rSWA,
		attnScale:  float32(attnScale),
		blockBytes: blockBytes,
		flopsTok:   2 * float64(w.matmulParams),
		dev:        newKVCache(kvt, spec.Layers, int(blocks), bs, spec.KVHeads, spec.HeadDim, spec.ValueDim),
	}
	if swap > 0 {
		e.host = newKVCache(kvt, spec.Layers, int(swap), bs, spec.KVHeads, spec.HeadDim, spec.ValueDim)
	}
	e.info = engine.ExecutorInfo{
		Model:         name,
		NumBlocks:     int(blocks),
		BlockSize:     bs,
		ContextLength: spec.ContextLength,
		EOS:           append([]int32(nil), cfg.EOS...),
		SwapBlocks:    int(swap),
		Logprobs:      true,
		VocabSize:     spec.Vocab,
	}
	e.flopRate.Store(math.Float64bits(flopsPerThread * float64(cfg.Threads)))
	e.check = engine.NewBatchChecker(e.info, engine.BatchCheckOptions{Vocab: spec.Vocab, ExclusiveWrites: true})
	e.samplers = make([]*sample.Sampler, cfg.Threads)
	for i := range e.samplers {
		e.samplers[i] = sample.NewSampler(spec.Vocab)
	}
	e.sample = e.sampleSeq
	e.pool = NewPool(cfg.Threads)
	for range e.pool.Threads() {
		e.scratch = append(e.scratch, newScratch(&e.spec, bs, r.dims))
	}
	return e, nil
}

// kvBlocks is the number of KV blocks cfg (with defaults) asks for, for a
// model of contextLength tokens whose blocks take blockBytes each.
func kvBlocks(cfg Config, contextLength int, blockBytes int64) int64 {
	if cfg.KVBlocks > 0 {
		return int64(cfg.KVBlocks)
	}
	full := int64((contextLength + cfg.BlockSize - 1) / cfg.BlockSize)
	return max(cfg.KVCacheBytes/blockBytes, min(full, MaxAutoKVBytes/blockBytes), 1)
}

// Info describes the model and the KV capacity: NumBlocks device blocks of
// BlockSize tokens and SwapBlocks host slots. The caller owns the returned
// EOS slice.
func (e *Executor) Info() engine.ExecutorInfo {
	info := e.info
	info.EOS = append([]int32(nil), e.info.EOS...)
	return info
}

// KVType returns the type the KV cache stores keys and values as (one of
// KVTypes).
func (e *Executor) KVType() string { return e.dev.typ.String() }

// Spec returns the model's spec.
func (e *Executor) Spec() model.Spec { return e.spec }

// Close stops the worker goroutines. Forward returns ErrClosed afterwards.
// Close is idempotent.
func (e *Executor) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	e.pool.Close()
}

// SwapTime estimates copying n blocks one way between the KV cache and host
// memory at a memory copy rate of 8 GB/s. It implements [engine.CostModel].
func (e *Executor) SwapTime(blocks int) time.Duration {
	return seconds(float64(max(blocks, 0)) * float64(e.blockBytes) / memcpyBytesPerSec)
}

// PrefillTime estimates the compute time of prefilling n tokens: two FLOPs
// per weight per token at the rate the last steps achieved (a first guess
// of 4 GFLOP/s per thread before any). Attention is not counted. It
// implements [engine.CostModel].
func (e *Executor) PrefillTime(tokens int) time.Duration {
	rate := math.Float64frombits(e.flopRate.Load())
	return seconds(float64(max(tokens, 0)) * e.flopsTok / rate)
}

// observe folds the rate of a step of tokens tokens that took d into the
// FLOP rate estimate (an exponential moving average).
func (e *Executor) observe(tokens int, d time.Duration) {
	if d <= 0 || tokens < 8 {
		// Decode steps of a few tokens are memory bound: they say
		// little about prefill.
		return
	}
	rate := float64(tokens) * e.flopsTok / d.Seconds()
	old := math.Float64frombits(e.flopRate.Load())
	e.flopRate.Store(math.Float64bits(0.8*old + 0.2*rate))
}

// maxDuration bounds estimates so absurd inputs cannot overflow.
const maxDuration = 24 * time.Hour

func seconds(s float64) time.Duration {
	d := s * float64(time.Second)
	if !(d < float64(maxDuration)) {
		return maxDuration
	}
	return time.Duration(math.Round(d))
}

// Forward validates b, applies its block operations (SwapOut, then SwapIn,
// then Copies, on the K/V bytes of every layer), runs one forward step over
// all of b's tokens and samples a token for every sequence whose Sample is
// set (-1 elsewhere). A sequence with drafts (SeqInput.Draft) is verified
// (verify): Output.Accepted holds the drafts accepted and Output.Tokens the
// token after them. Output.Duration is the measured wall time.
//
// It returns an error, and changes nothing, when b is malformed: a
// sequence with no tokens or a token outside the vocabulary, a Context
// other than Pos+len(Tokens) or beyond the context length, a block table
// too short for Context or naming a block out of range, two sequences
// writing one block, a copy or swap naming a block or host slot out of
// range, two swaps out to one host slot, two swaps in from one slot or to
// one device block, a swap in from a slot that holds no block or that the
// same batch swaps out to. If ctx ends during the step it returns ctx's
// error; the block operations stay applied and the K/V of the step's
// positions are undefined.
func (e *Executor) Forward(ctx context.Context, b *engine.Batch) (out *engine.Output, err error) {
	if b == nil {
		return nil, errors.New("cpu: nil batch")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() {
		// Validation makes a panic a bug; fail the batch, not the
		// process.
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("cpu: internal error in forward step: %v", r)
		}
	}()
	if e.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cpu: step interrupted: %w", err)
	}
	if err := e.check.Check(b); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	start := time.Now()
	e.applyBlockOps(b)
	out = &engine.Output{Tokens: make([]int32, len(b.Seqs))}
	if len(b.Seqs) > 0 {
		logits, err := e.forward(ctx, b.Seqs)
		if err != nil {
			return nil, err
		}
		e.sampleRows(b, logits, out)
	}
	out.Duration = time.Since(start)
	e.observe(b.NumTokens(), out.Duration)
	return out, nil
}

// applyBlockOps runs b's swaps and copies; b is valid.
func (e *Executor) applyBlockOps(b *engine.Batch) {
	for _, s := range b.SwapOut {
		e.host.copyBlock(int(s.Host), e.dev, int(s.Device))
	}
	for _, s := range b.SwapIn {
		e.dev.copyBlock(int(s.Device), e.host, int(s.Host))
	}
	for _, c := range b.Copies {
		if c.Src != c.Dst {
			e.dev.copyBlock(int(c.Dst), e.dev, int(c.Src))
		}
	}
}

// sampleRows samples every sampled sequence of b (its rows of logits in
// order: one, or Draft+1 for a verification step), in parallel across the
// pool, and fills out.Tokens, out.Logprobs and out.Accepted.
func (e *Executor) sampleRows(b *engine.Batch, logits []float32, out *engine.Output) {
	type job struct{ seq, row int }
	jobs := make([]job, 0, len(b.Seqs))
	row := 0
	for i := range b.Seqs {
		out.Tokens[i] = -1
		s := &b.Seqs[i]
		if !s.Sample {
			continue
		}
		jobs = append(jobs, job{i, row})
		row += s.Draft + 1
		if s.Logprobs && out.Logprobs == nil {
			out.Logprobs = make([]*engine.Logprobs, len(b.Seqs))
		}
		if s.Draft > 0 && out.Accepted == nil {
			out.Accepted = make([]int, len(b.Seqs))
		}
	}
	V := e.spec.Vocab
	k := min(len(jobs), e.pool.Threads())
	e.pool.Run(len(jobs), func(start, end int) {
		// Run hands chunk w the jobs [w*n/k, (w+1)*n/k): find w to pick
		// this worker's own sampler.
		w := 0
		for w+1 < k && (w+1)*len(jobs)/k <= start {
			w++
		}
		for _, j := range jobs[start:end] {
			s := &b.Seqs[j.seq]
			if s.Draft > 0 {
				out.Tokens[j.seq], out.Accepted[j.seq] = e.verify(w, j.row, logits[j.row*V:], s)
				continue
			}
			l := logits[j.row*V : (j.row+1)*V]
			out.Tokens[j.seq] = e.sample(w, j.row, l, s)
			if s.Logprobs {
				// After Sample: penalties and bias applied, no temperature.
				out.Logprobs[j.seq] = e.logprobs(w, l, out.Tokens[j.seq], s.TopLogprobs)
			}
		}
	})
}

// verify runs the verification step of s (s.Draft > 0) over its Draft+1
// rows of logits from row: at each position it samples the token exactly
// as a decode step at that position would (seed and step Generated+j,
// history extended by the drafts accepted so far), and accepts the draft
// there while the two agree. It returns the first sampled token that is
// not an accepted draft and the number of drafts accepted.
//
// For a deterministic draft (prompt lookup, a greedy draft model: the
// draft distribution q is one-hot) this is the rejection sampling of
// Leviathan et al. (2023): the draft d is accepted with probability
// p(d) = min(1, p(d)/q(d)), and on rejection the token is drawn from p
// without d, which is the normalized max(0, p-q). Each position's draw
// uses the seed stream of its output index, so the tokens are the ones
// decoding without speculation gives, not only their distribution.
func (e *Executor) verify(w, row int, logits []float32, s *engine.SeqInput) (tok int32, accepted int) {
	V := e.spec.Vocab
	drafts := s.Tokens[len(s.Tokens)-s.Draft:]
	at := *s
	at.Draft = 0
	at.History = make([]int32, len(s.History), len(s.History)+len(drafts))
	copy(at.History, s.History)
	for j := 0; ; j++ {
		at.Generated = s.Generated + j
		tok = e.sample(w, row+j, logits[j*V:(j+1)*V], &at)
		if j == len(drafts) || tok != drafts[j] {
			return tok, j
		}
		at.History = append(at.History, tok)
	}
}

// logprobs is the sampled token's log-probability and the top alternatives.
func (e *Executor) logprobs(w int, logits []float32, tok int32, top int) *engine.Logprobs {
	lp, tops := e.samplers[w].Logprobs(logits, tok, min(top, maxTopLogprobs))
	out := &engine.Logprobs{Logprob: lp, Top: make([]engine.TokenLogprob, len(tops))}
	for i, t := range tops {
		out.Top[i] = engine.TokenLogprob{Token: t.Token, Logprob: t.Logprob}
	}
	return out
}

// maxTopLogprobs bounds the alternatives per token (OpenAI allows 20).
const maxTopLogprobs = 20

// sampleSeq chooses s's next token from its logits with s's sampling
// parameters, seed and history; the draw depends only on (Seed,
// Generated), so a sequence gets the same tokens whatever batch it runs in
// and however often it is preempted. It may change logits (bias and
// penalties are applied in place).
func (e *Executor) sampleSeq(w, _ int, logits []float32, s *engine.SeqInput) int32 {
	if s.Mask != nil {
		sample.ApplyMask(logits, s.Mask)
	}
	return e.samplers[w].Sample(logits, s.Sampling, s.Seed, s.Generated, s.History, s.Generated)
}
