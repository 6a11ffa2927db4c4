package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// DraftModel drafts for speculative decoding with a small model that shares
// the target's vocabulary (llama.cpp's and vLLM's "draft model"): it
// decodes greedily a few tokens ahead of each sequence, and the target
// verifies them in one step. It implements [engine.Drafter].
//
// It runs the draft model on its own [Executor], with its own KV cache:
// for each sequence the tokens whose K/V it holds and their blocks, keyed
// by the engine's sequence id. A Draft call first keeps the longest prefix
// of that state the sequence's history still agrees with (the drafts the
// target rejected fall away), computes the rest, then drafts. State is
// freed by Forget (the sequence ended or was preempted) or evicted, least
// recently used first, when the cache is full; a sequence whose state is
// gone is recomputed from its history.
//
// Locking: the engine calls it from its step goroutine only; Close may be
// called once that has stopped.
type DraftModel struct {
	exec  *Executor
	pool  *kvcache.Pool
	seqs  map[uint64]*draftSeq
	clock uint64
	batch engine.Batch
	act   []*draftSeq // the sequences of the pass being built
}

// draftSeq is the draft model's state for one sequence.
type draftSeq struct {
	id     uint64
	tokens []int32 // tokens whose K/V the draft cache holds, positions 0..len-1
	blocks []int32
	used   uint64 // clock of the last Draft that used it
	// Per call.
	req  *engine.DraftRequest
	next int32 // token to feed next
	in   []int32
}

var _ engine.Drafter = (*DraftModel)(nil)

// ErrVocabMismatch is returned by NewDraftModel when the draft model's
// vocabulary differs from the target's.
var ErrVocabMismatch = errors.New("cpu: the draft model's vocabulary differs from the target's")

// NewDraftModel returns a drafter running the model in draft for a target
// model in target, with cfg for its executor (threads, block size, KV
// cache; swap is off). It refuses, wrapping ErrVocabMismatch, a draft
// model whose vocabulary is not the target's: another size, or other token
// strings where both files list them. draft must stay open until Close.
func NewDraftModel(draft, target *gguf.File, cfg Config) (*DraftModel, error) {
	if draft == nil || target == nil {
		return nil, errors.New("cpu: nil model file")
	}
	ds, err := model.SpecFromFile(draft)
	if err != nil {
		return nil, fmt.Errorf("cpu: draft model: %w", err)
	}
	ts, err := model.SpecFromFile(target)
	if err != nil {
		return nil, fmt.Errorf("cpu: target model: %w", err)
	}
	if ds.Vocab != ts.Vocab {
		return nil, fmt.Errorf("%w: %d tokens against %d", ErrVocabMismatch, ds.Vocab, ts.Vocab)
	}
	const tokensKey = "tokenizer.ggml.tokens"
	dt, dok := draft.Strings(tokensKey)
	tt, tok := target.Strings(tokensKey)
	if dok && tok {
		if !slices.Equal(dt, tt) {
			for i := range min(len(dt), len(tt)) {
				if dt[i] != tt[i] {
					return nil, fmt.Errorf("%w: token %d is %q in the draft and %q in the target", ErrVocabMismatch, i, dt[i], tt[i])
				}
			}
			return nil, fmt.Errorf("%w: %d token strings against %d", ErrVocabMismatch, len(dt), len(tt))
		}
	}
	cfg.NoSwap, cfg.SwapBytes = true, 0
	cfg.EOS = nil
	exec, err := New(draft, cfg)
	if err != nil {
		return nil, fmt.Errorf("cpu: draft model: %w", err)
	}
	info := exec.Info()
	pool, err := kvcache.NewPool(info.NumBlocks, info.BlockSize)
	if err != nil {
		exec.Close()
		return nil, fmt.Errorf("cpu: draft model: %w", err)
	}
	return &DraftModel{exec: exec, pool: pool, seqs: make(map[uint64]*draftSeq)}, nil
}

// Spec returns the draft model's spec.
func (d *DraftModel) Spec() model.Spec { return d.exec.Spec() }

// Close stops the draft executor's workers.
func (d *DraftModel) Close() { d.exec.Close() }

// Forget implements [engine.Drafter]: it frees the sequence's state.
func (d *DraftModel) Forget(seqID uint64) {
	if st, ok := d.seqs[seqID]; ok {
		d.release(st, 0)
		delete(d.seqs, seqID)
	}
}

// release frees st's blocks past those holding its first keep tokens and
// forgets the tokens after them.
func (d *DraftModel) release(st *draftSeq, keep int) {
	n := d.pool.BlocksFor(keep)
	for len(st.blocks) > n {
		last := len(st.blocks) - 1
		d.pool.Release(st.blocks[last])
		st.blocks = st.blocks[:last]
	}
	st.tokens = st.tokens[:keep]
}

// Draft implements [engine.Drafter]: for each request, greedy tokens of
// the draft model after History, Max of them. It runs Max batched passes
// of the draft model: the first computes what each sequence's state lacks
// (the whole prompt for a new sequence, else the tokens accepted since the
// last call), the others one drafted token each. A request for which the
// draft cache has no room, after evicting other sequences' state, gets no
// draft. An error of the draft executor is returned (no drafts this step).
func (d *DraftModel) Draft(ctx context.Context, reqs []engine.DraftRequest) error {
	d.clock++
	d.act = d.act[:0]
	for i := range reqs {
		r := &reqs[i]
		r.Tokens = r.Tokens[:0]
		if len(r.History) == 0 || r.Max < 1 {
			continue
		}
		st := d.seqs[r.SeqID]
		if st == nil {
			st = &draftSeq{id: r.SeqID}
			d.seqs[r.SeqID] = st
		}
		st.used = d.clock
		// Keep the K/V of the prefix the history agrees with, short of the
		// last token, which must be fed to get the next token's logits.
		keep := min(commonPrefix(st.tokens, r.History), len(r.History)-1)
		d.release(st, keep)
		st.req = r
		st.in = append(st.in[:0], r.History[keep:]...)
		if !d.reserve(st, len(r.History)+r.Max-1) {
			d.release(st, keep)
			continue
		}
		d.act = append(d.act, st)
	}
	for step := 0; len(d.act) > 0; step++ {
		b := &d.batch
		b.Seqs = b.Seqs[:0]
		for _, st := range d.act {
			pos := len(st.tokens)
			b.Seqs = append(b.Seqs, engine.SeqInput{
				SeqID: st.id, Tokens: st.in, Pos: pos, Context: pos + len(st.in),
				Blocks: st.blocks, Sample: true,
			})
		}
		out, err := d.exec.Forward(ctx, b)
		if err != nil {
			// The K/V of this pass is undefined: drop the state of every
			// sequence in it.
			for _, st := range d.act {
				d.Forget(st.id)
			}
			d.act = d.act[:0]
			return fmt.Errorf("cpu: draft model: %w", err)
		}
		n := 0
		for i, st := range d.act {
			st.tokens = append(st.tokens, st.in...)
			tok := out.Tokens[i]
			st.req.Tokens = append(st.req.Tokens, tok)
			if len(st.req.Tokens) < st.req.Max {
				st.in = append(st.in[:0], tok)
				d.act[n] = st
				n++
			} else {
				st.req = nil
			}
		}
		clear(d.act[n:])
		d.act = d.act[:n]
	}
	return nil
}

// reserve gives st blocks for its first n positions, evicting the state of
// sequences not used by this call, least recently used first; it reports
// false when even that leaves too few.
func (d *DraftModel) reserve(st *draftSeq, n int) bool {
	if n > d.exec.info.ContextLength {
		return false
	}
	for len(st.blocks) < d.pool.BlocksFor(n) {
		b, err := d.pool.Allocate()
		if err != nil {
			if !d.evict() {
				return false
			}
			continue
		}
		st.blocks = append(st.blocks, b)
	}
	return true
}

// evict frees the least recently used sequence state not used by the
// current call; it reports false when there is none.
func (d *DraftModel) evict() bool {
	var victim *draftSeq
	for _, st := range d.seqs {
		if st.used != d.clock && len(st.blocks) > 0 && (victim == nil || st.used < victim.used) {
			victim = st
		}
	}
	if victim == nil {
		return false
	}
	d.Forget(victim.id)
	return true
}

// NumSeqs is the number of sequences whose state the drafter holds.
func (d *DraftModel) NumSeqs() int { return len(d.seqs) }

// BlocksUsed is the number of draft cache blocks in use.
func (d *DraftModel) BlocksUsed() int { return d.pool.NumUsed() }

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
