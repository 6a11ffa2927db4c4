package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
)

// Embedder computes embeddings: one vector per input of token ids, in
// order, the caller owning the result; *cpu.Embedder implements it. It
// refuses bad inputs with an error that the batcher passes on.
type Embedder interface {
	Embed(ctx context.Context, inputs [][]int32) ([][]float32, error)
}

// EmbedBatcher runs an embedding model's requests: the inputs of the
// requests that arrive while a forward pass runs are computed together
// in the next one, up to a token budget, so that the model's weights are
// read once for all of them, as the engine's step batches generation.
//
// It is its own small batcher rather than the engine's scheduler because
// an embedding needs none of what that scheduler is for: it is one
// forward pass with no KV cache (nothing is held between passes, so there
// are no blocks to allocate, preempt, swap or share as a cached prefix),
// no decode steps and nothing to sample; a request is done when its pass
// is. Admission (tier priority, the degradation ladder's shedding, quota
// reservation) happens in the pipeline before a request reaches the
// batcher, as for generation. What remains is a bounded FIFO queue, a
// token budget per pass and the hand-off of each request's vectors.
//
// Goroutines: Run is the only one; it owns the queue's order and calls
// the Embedder. Embed may be called from any goroutine.
type EmbedBatcher struct {
	exec      Embedder
	maxTokens int
	queue     chan *embedCall
	stopped   chan struct{}
	stopOnce  sync.Once

	waiting, running         atomic.Int64
	steps, completed, tokens atomic.Uint64
}

// embedCall is one Embed call waiting for its vectors. It carries its
// caller's ctx across the queue (the documented exception to keeping
// contexts out of structs): a call whose caller left is dropped unrun.
type embedCall struct {
	ctx    context.Context
	inputs [][]int32
	tokens int
	done   chan embedAnswer // capacity 1: Run never waits on a caller
}

type embedAnswer struct {
	vecs [][]float32
	err  error
}

// DefaultEmbedQueue is the most Embed calls an EmbedBatcher holds queued.
const DefaultEmbedQueue = 256

// NewEmbedBatcher returns a batcher over exec whose passes hold at most
// maxTokens tokens (a single call larger than that still runs, alone; the
// Embedder splits it) and whose queue holds queue calls (0:
// DefaultEmbedQueue). Start it with Run.
func NewEmbedBatcher(exec Embedder, maxTokens, queue int) *EmbedBatcher {
	if queue <= 0 {
		queue = DefaultEmbedQueue
	}
	return &EmbedBatcher{exec: exec, maxTokens: max(maxTokens, 1), queue: make(chan *embedCall, queue),
		stopped: make(chan struct{})}
}

// Embed queues inputs for the next pass and waits for their vectors. It
// returns engine.ErrQueueFull when the queue is full, engine.ErrClosed
// once Run has stopped, ctx's error when ctx ends first, or the
// Embedder's error for the pass.
func (b *EmbedBatcher) Embed(ctx context.Context, inputs [][]int32) ([][]float32, error) {
	c := &embedCall{ctx: ctx, inputs: inputs, done: make(chan embedAnswer, 1)}
	for _, in := range inputs {
		c.tokens += len(in)
	}
	select {
	case <-b.stopped:
		return nil, engine.ErrClosed
	default:
	}
	select {
	case b.queue <- c:
		b.waiting.Add(1)
	default:
		return nil, engine.ErrQueueFull
	}
	select {
	case a := <-c.done:
		return a.vecs, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stopped:
		// Run may have answered just before it stopped.
		select {
		case a := <-c.done:
			return a.vecs, a.err
		default:
			return nil, engine.ErrClosed
		}
	}
}

// Run computes the queued calls, pass after pass, until ctx ends; the
// calls still queued then get engine.ErrClosed. It returns nil.
func (b *EmbedBatcher) Run(ctx context.Context) error {
	defer b.stopOnce.Do(func() { close(b.stopped) })
	var pending []*embedCall
	defer func() {
		for _, c := range pending {
			c.done <- embedAnswer{err: engine.ErrClosed}
		}
		for {
			select {
			case c := <-b.queue:
				c.done <- embedAnswer{err: engine.ErrClosed}
			default:
				return
			}
		}
	}()
	for {
		if len(pending) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case c := <-b.queue:
				pending = append(pending, c)
			}
		}
	more:
		for {
			select {
			case c := <-b.queue:
				pending = append(pending, c)
			default:
				break more
			}
		}
		var batch []*embedCall
		tokens := 0
		for len(pending) > 0 {
			c := pending[0]
			if c.ctx.Err() != nil {
				// The caller left: nothing to compute.
				pending = pending[1:]
				b.waiting.Add(-1)
				c.done <- embedAnswer{err: c.ctx.Err()}
				continue
			}
			if len(batch) > 0 && tokens+c.tokens > b.maxTokens {
				break
			}
			batch, tokens = append(batch, c), tokens+c.tokens
			pending = pending[1:]
		}
		if len(batch) == 0 {
			continue
		}
		b.pass(ctx, batch, tokens)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// pass computes one batch of calls and answers each.
func (b *EmbedBatcher) pass(ctx context.Context, batch []*embedCall, tokens int) {
	b.waiting.Add(-int64(len(batch)))
	b.running.Store(int64(len(batch)))
	defer b.running.Store(0)
	var inputs [][]int32
	for _, c := range batch {
		inputs = append(inputs, c.inputs...)
	}
	vecs, err := b.exec.Embed(ctx, inputs)
	if err == nil && len(vecs) != len(inputs) {
		err = fmt.Errorf("pipeline: the embedder returned %d vectors for %d inputs", len(vecs), len(inputs))
	}
	b.steps.Add(1)
	if err == nil {
		b.tokens.Add(uint64(tokens))
	}
	for _, c := range batch {
		if err != nil {
			c.done <- embedAnswer{err: err}
			continue
		}
		c.done <- embedAnswer{vecs: vecs[:len(c.inputs):len(c.inputs)]}
		vecs = vecs[len(c.inputs):]
		b.completed.Add(1)
	}
}

// embedReplica is an embedding model's Replica: what its batcher
// reports, for /v1/stats, the snapshot and the gossip. Its jobs never
// reach an engine.
type embedReplica struct {
	id  string
	ctx int // context length in tokens
	b   *EmbedBatcher
}

// errNoGeneration refuses a generation job that reached an embedding
// model's replica (the pipeline refuses it before).
var errNoGeneration = errors.New("pipeline: an embedding model generates nothing")

// Submit implements Replica: an embedding model takes no generation job.
func (r embedReplica) Submit(context.Context, engine.Request) (EventStream, error) {
	return nil, errNoGeneration
}

// Info implements Replica.
func (r embedReplica) Info() engine.ExecutorInfo {
	return engine.ExecutorInfo{Model: r.id, ContextLength: r.ctx, BlockSize: embedBlockSize}
}

// embedBlockSize stands for a KV block size where one is asked for (an
// embedding model has no KV cache).
const embedBlockSize = 16

// MaxSeqTokens implements Replica: one input's most tokens.
func (r embedReplica) MaxSeqTokens() int { return r.ctx }

// Stats implements Replica: calls queued and in the running pass, passes
// (Steps), calls answered (Completed) and tokens computed.
func (r embedReplica) Stats() engine.Stats {
	st := engine.Stats{Model: r.id, BlockSize: embedBlockSize, Waiting: int(r.b.waiting.Load()),
		Running: int(r.b.running.Load())}
	st.Steps, st.Completed, st.ComputedTokens = r.b.steps.Load(), r.b.completed.Load(), r.b.tokens.Load()
	return st
}

// Requests implements Replica: none are inspectable.
func (r embedReplica) Requests(context.Context) ([]engine.RequestState, error) { return nil, nil }

// BlockSize implements Replica.
func (r embedReplica) BlockSize() int { return embedBlockSize }

// CachedPrefix implements Replica: an embedding model caches nothing.
func (r embedReplica) CachedPrefix([]kvcache.Hash) int { return 0 }

// RecentPrefixes implements Replica.
func (r embedReplica) RecentPrefixes(int) []kvcache.Hash { return nil }
