package engine

import (
	"fmt"

	"github.com/llmd/llmd/engine/internal/bitset"
)

// BatchChecker validates batches for an executor before it touches any
// memory, so a malformed batch is an error, never a panic or a corrupted
// cache. Executors share it; it keeps reusable scratch and is not safe for
// concurrent use.
type BatchChecker struct {
	numBlocks, blockSize, contextLength, swapSlots, vocabSize int
	opts                                                      BatchCheckOptions
	// held marks the host slots that hold a swapped-out block, as the
	// batches checked so far leave them.
	held bitset.Set
	// Scratch, empty between calls.
	written, outMark, inMark, inDevice bitset.Set
	writer                             []int32
}

// BatchCheckOptions are the checks an executor asks for beyond the shape.
type BatchCheckOptions struct {
	// Vocab bounds token ids; 0 leaves them unchecked.
	Vocab int
	// ExclusiveWrites refuses a batch in which two sequences (or one
	// sequence twice) write into the same block: an executor that stores
	// K/V would mix them.
	ExclusiveWrites bool
}

// NewBatchChecker returns a checker for an executor of this shape.
func NewBatchChecker(info ExecutorInfo, opts BatchCheckOptions) *BatchChecker {
	return &BatchChecker{
		numBlocks: info.NumBlocks, blockSize: info.BlockSize, contextLength: info.ContextLength,
		swapSlots: info.SwapBlocks, vocabSize: info.VocabSize, opts: opts,
		written: bitset.New(info.NumBlocks), inDevice: bitset.New(info.NumBlocks),
		outMark: bitset.New(info.SwapBlocks), inMark: bitset.New(info.SwapBlocks), held: bitset.New(info.SwapBlocks),
		writer: make([]int32, info.NumBlocks),
	}
}

// Check returns the first problem of b: a sequence whose positions, tokens
// or block table do not add up, a block written by two sequences (their K/V
// would mix), block operations out of range, two swaps to one host slot, or
// a swap in from a slot that holds nothing. A batch that passes is taken to
// be applied: its swaps update which host slots hold a block. Its errors
// read "batch: ..."; the executor wraps them with its own name.
func (c *BatchChecker) Check(b *Batch) error {
	bs, nb := c.blockSize, int32(c.numBlocks)
	defer c.clear(b)
	for i := range b.Seqs {
		s := &b.Seqs[i]
		switch {
		case len(s.Tokens) == 0:
			return fmt.Errorf("batch: sequence %d has no tokens", s.SeqID)
		case s.Pos < 0 || s.Pos > c.contextLength || s.Context != s.Pos+len(s.Tokens):
			return fmt.Errorf("batch: sequence %d: context %d is not position %d plus %d tokens", s.SeqID, s.Context, s.Pos, len(s.Tokens))
		case s.Context > c.contextLength:
			return fmt.Errorf("batch: sequence %d: context %d exceeds the context length %d", s.SeqID, s.Context, c.contextLength)
		case s.Generated < 0:
			return fmt.Errorf("batch: sequence %d: negative generated count %d", s.SeqID, s.Generated)
		case len(s.Blocks) < (s.Context+bs-1)/bs:
			return fmt.Errorf("batch: sequence %d: %d blocks cannot hold %d tokens", s.SeqID, len(s.Blocks), s.Context)
		case s.Draft < 0 || s.Draft >= len(s.Tokens) || s.Draft > 0 && (!s.Sample || s.Mask != nil || s.Logprobs):
			return fmt.Errorf("batch: sequence %d: %d drafts among %d tokens (sample %v, mask %v, logprobs %v)",
				s.SeqID, s.Draft, len(s.Tokens), s.Sample, s.Mask != nil, s.Logprobs)
		case s.Mask != nil && (!s.Sample || len(s.Mask) != MaskWords(c.vocabSize)):
			return fmt.Errorf("batch: sequence %d: a mask of %d words on a vocabulary of %d tokens (sample %v)", s.SeqID, len(s.Mask), c.vocabSize, s.Sample)
		}
		if c.opts.Vocab > 0 {
			for _, t := range s.Tokens {
				if t < 0 || int(t) >= c.opts.Vocab {
					return fmt.Errorf("batch: sequence %d: token %d outside the vocabulary of %d", s.SeqID, t, c.opts.Vocab)
				}
			}
		}
		used := s.Blocks[:(s.Context+bs-1)/bs]
		for _, blk := range used {
			if blk < 0 || blk >= nb {
				return fmt.Errorf("batch: sequence %d: block %d out of range [0, %d)", s.SeqID, blk, nb)
			}
		}
		if !c.opts.ExclusiveWrites {
			continue
		}
		for _, blk := range used[s.Pos/bs:] {
			if c.written.Has(blk) {
				if c.writer[blk] != int32(i+1) {
					return fmt.Errorf("batch: block %d is written by two sequences in one batch", blk)
				}
				return fmt.Errorf("batch: sequence %d: block %d appears twice among the blocks it writes", s.SeqID, blk)
			}
			c.written.Add(blk)
			c.writer[blk] = int32(i + 1)
		}
	}
	for _, cp := range b.Copies {
		if cp.Src < 0 || cp.Src >= nb || cp.Dst < 0 || cp.Dst >= nb {
			return fmt.Errorf("batch: block copy %d -> %d out of range [0, %d)", cp.Src, cp.Dst, nb)
		}
	}
	slots := int32(c.swapSlots)
	for _, s := range b.SwapOut {
		switch {
		case s.Device < 0 || s.Device >= nb:
			return fmt.Errorf("batch: swap out of block %d out of range [0, %d)", s.Device, nb)
		case s.Host < 0 || s.Host >= slots:
			return fmt.Errorf("batch: swap out to host slot %d outside the swap space of %d slots", s.Host, slots)
		case c.outMark.Has(s.Host):
			return fmt.Errorf("batch: two swaps out to host slot %d in one batch", s.Host)
		}
		c.outMark.Add(s.Host)
	}
	for _, s := range b.SwapIn {
		switch {
		case s.Device < 0 || s.Device >= nb:
			return fmt.Errorf("batch: swap in to block %d out of range [0, %d)", s.Device, nb)
		case s.Host < 0 || s.Host >= slots:
			return fmt.Errorf("batch: swap in from host slot %d out of range [0, %d)", s.Host, slots)
		case c.inMark.Has(s.Host):
			return fmt.Errorf("batch: two swaps in from host slot %d in one batch", s.Host)
		case c.inDevice.Has(s.Device):
			return fmt.Errorf("batch: two swaps in to block %d in one batch", s.Device)
		case c.outMark.Has(s.Host):
			return fmt.Errorf("batch: swap in from host slot %d, which the same batch swaps out to first", s.Host)
		case !c.held.Has(s.Host):
			return fmt.Errorf("batch: swap in from host slot %d, which holds no block", s.Host)
		}
		c.inMark.Add(s.Host)
		c.inDevice.Add(s.Device)
	}
	for _, s := range b.SwapOut {
		c.held.Add(s.Host)
	}
	for _, s := range b.SwapIn {
		c.held.Remove(s.Host)
	}
	return nil
}

// clear zeroes the bits Check may have set for b.
func (c *BatchChecker) clear(b *Batch) {
	nb, slots, bs := int32(c.numBlocks), int32(c.swapSlots), c.blockSize
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if s.Pos < 0 || s.Context < s.Pos {
			continue
		}
		hi := min((s.Context+bs-1)/bs, len(s.Blocks))
		for _, blk := range s.Blocks[min(s.Pos/bs, hi):hi] {
			if blk >= 0 && blk < nb {
				c.written.Remove(blk)
			}
		}
	}
	for _, s := range b.SwapOut {
		if s.Host >= 0 && s.Host < slots {
			c.outMark.Remove(s.Host)
		}
	}
	for _, s := range b.SwapIn {
		if s.Host >= 0 && s.Host < slots {
			c.inMark.Remove(s.Host)
		}
		if s.Device >= 0 && s.Device < nb {
			c.inDevice.Remove(s.Device)
		}
	}
}
