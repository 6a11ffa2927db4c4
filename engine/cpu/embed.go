package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// EmbedConfig configures an Embedder. Zero fields take the defaults named
// in their comments.
type EmbedConfig struct {
	// Threads is the number of worker goroutines; default
	// runtime.NumCPU().
	Threads int
	// MaxBatchTokens bounds the tokens of one forward pass, and so its
	// activations: Embed splits larger calls into passes of whole inputs.
	// Default DefaultEmbedBatchTokens, raised to the context length (one
	// input of the longest length must fit).
	MaxBatchTokens int
}

// DefaultEmbedBatchTokens is EmbedConfig.MaxBatchTokens's default.
const DefaultEmbedBatchTokens = 4096

// Embedder runs an embedding encoder (bert, nomic-bert) on the CPU: one
// forward pass over several inputs at once, every weight matrix read once
// per pass for all their tokens, attention within each input, the token
// states pooled as the model's pooling type says and L2-normalised. It
// holds no KV cache: nothing outlives a pass.
//
// Locking: Embed holds a mutex for a whole call, so concurrent calls are
// safe (they run one after the other; a batcher in front merges them).
// The embedder reads the model file's tensor data for its whole life:
// close the file only after Close.
type Embedder struct {
	spec      model.Spec
	w         *encWeights
	rope      *rope // nil for bert (absolute positions)
	attnScale float32
	maxBatch  int
	pool      *Pool

	mu      sync.Mutex
	closed  bool
	buf     encBuffers
	scratch []*encScratch
}

// ErrEmbedInput is the class of Embed's refusals of its inputs (an empty
// input, a token outside the vocabulary, an input longer than the
// context); errors.Is tells them from failures of the pass.
var ErrEmbedInput = errors.New("cpu: invalid embedding input")

// NewEmbedder returns an embedder for the encoder in f (bert or
// nomic-bert; generative models are refused: they run on an Executor). It
// checks every tensor's type and size and starts cfg.Threads worker
// goroutines, stopped by Close. f must stay open until Close.
func NewEmbedder(f *gguf.File, cfg EmbedConfig) (*Embedder, error) {
	if f == nil {
		return nil, errors.New("cpu: nil model file")
	}
	if cfg.Threads < 0 || cfg.MaxBatchTokens < 0 {
		return nil, fmt.Errorf("cpu: embedder threads (%d) and batch tokens (%d) must not be negative", cfg.Threads, cfg.MaxBatchTokens)
	}
	spec, err := model.SpecFromFile(f)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if !spec.Encoder {
		return nil, fmt.Errorf("cpu: %s is a generative model, not an embedding encoder: load it with New", spec.Arch)
	}
	w, err := loadEncoderWeights(f, spec)
	if err != nil {
		return nil, err
	}
	e := &Embedder{spec: spec, w: w, attnScale: float32(1 / math.Sqrt(float64(spec.HeadDim)))}
	ropeDims := 2
	if !spec.PosEmbed {
		if e.rope, err = newRope(spec, nil); err != nil {
			return nil, err
		}
		ropeDims = e.rope.dims
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	e.maxBatch = cfg.MaxBatchTokens
	if e.maxBatch == 0 {
		e.maxBatch = DefaultEmbedBatchTokens
	}
	e.maxBatch = max(e.maxBatch, spec.ContextLength)
	e.pool = NewPool(threads)
	for range e.pool.Threads() {
		e.scratch = append(e.scratch, &encScratch{cos: make([]float32, ropeDims/2), sin: make([]float32, ropeDims/2)})
	}
	return e, nil
}

// Spec returns the model's spec.
func (e *Embedder) Spec() model.Spec { return e.spec }

// Dim is the length of an embedding.
func (e *Embedder) Dim() int { return e.spec.Dim }

// MaxBatchTokens is the most tokens of one forward pass.
func (e *Embedder) MaxBatchTokens() int { return e.maxBatch }

// FLOPsPerToken estimates the matmul work of one token (two per weight),
// attention not counted.
func (e *Embedder) FLOPsPerToken() float64 { return 2 * float64(e.w.matmulParams) }

// Close stops the worker goroutines; Embed fails afterwards. Close is
// idempotent.
func (e *Embedder) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		e.pool.Close()
	}
}

// Embed returns the embedding of each input, a sequence of token ids
// (with the [CLS]/[SEP] the tokenizer adds): the model's last hidden
// states pooled (mean, first token or last token, by the model's pooling
// type) and scaled to unit L2 norm (a zero vector stays zero). The caller
// owns the result.
//
// Inputs are computed together in forward passes of up to
// MaxBatchTokens tokens; an input's embedding does not depend on the
// other inputs of its pass (the kernels are batch-invariant). Embed
// refuses, with an error wrapping ErrEmbedInput and computing nothing, no
// inputs, an empty input, an input longer than the context length and a
// token outside the vocabulary. If ctx ends it returns ctx's error.
func (e *Embedder) Embed(ctx context.Context, inputs [][]int32) (out [][]float32, err error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("%w: no inputs", ErrEmbedInput)
	}
	for i, in := range inputs {
		switch {
		case len(in) == 0:
			return nil, fmt.Errorf("%w: input %d is empty", ErrEmbedInput, i)
		case len(in) > e.spec.ContextLength:
			return nil, fmt.Errorf("%w: input %d has %d tokens, more than the context length of %d", ErrEmbedInput, i, len(in), e.spec.ContextLength)
		}
		for _, t := range in {
			if t < 0 || int(t) >= e.spec.Vocab {
				return nil, fmt.Errorf("%w: input %d holds token %d, outside the vocabulary of %d", ErrEmbedInput, i, t, e.spec.Vocab)
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() {
		// Validation makes a panic a bug: fail the call, not the process.
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("cpu: internal error in embedding pass: %v", r)
		}
	}()
	if e.closed {
		return nil, ErrClosed
	}
	out = make([][]float32, 0, len(inputs))
	for len(inputs) > 0 {
		n, tokens := 0, 0
		for n < len(inputs) && (n == 0 || tokens+len(inputs[n]) <= e.maxBatch) {
			tokens += len(inputs[n])
			n++
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cpu: embedding interrupted: %w", err)
		}
		states, err := e.encForward(ctx, inputs[:n])
		if err != nil {
			return nil, err
		}
		for i, in := range inputs[:n] {
			out = append(out, e.pool1(states, e.buf.start[i], len(in)))
		}
		inputs = inputs[n:]
	}
	return out, nil
}

// pool1 pools the n token states of one input, whose first row is start,
// and normalises the result.
func (e *Embedder) pool1(states []float32, start, n int) []float32 {
	dim := e.spec.Dim
	acc := make([]float64, dim)
	switch e.spec.Pooling {
	case model.PoolingCLS:
		n = 1
	case model.PoolingLast:
		start, n = start+n-1, 1
	}
	for r := start; r < start+n; r++ {
		for i, v := range states[r*dim : (r+1)*dim] {
			acc[i] += float64(v)
		}
	}
	var ss float64
	for i := range acc {
		acc[i] /= float64(n)
		ss += acc[i] * acc[i]
	}
	scale := 0.0
	if ss > 0 {
		scale = 1 / math.Sqrt(ss)
	}
	out := make([]float32, dim)
	for i, v := range acc {
		out[i] = float32(v * scale)
	}
	return out
}
