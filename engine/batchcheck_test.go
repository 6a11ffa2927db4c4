package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBatchChecker(t *testing.T) {
	info := ExecutorInfo{NumBlocks: 8, BlockSize: 4, ContextLength: 32, SwapBlocks: 4}
	seq := func(id uint64, pos, n int, blocks ...int32) SeqInput {
		return SeqInput{SeqID: id, Tokens: make([]int32, n), Pos: pos, Context: pos + n, Blocks: blocks}
	}
	for name, tc := range map[string]struct {
		b         Batch
		exclusive bool
		ok        bool
	}{
		"valid":                   {b: Batch{Seqs: []SeqInput{seq(1, 0, 5, 0, 1), seq(2, 4, 1, 0, 2)}}, exclusive: true, ok: true},
		"no tokens":               {b: Batch{Seqs: []SeqInput{seq(1, 0, 0, 0)}}},
		"context mismatch":        {b: Batch{Seqs: []SeqInput{{SeqID: 1, Tokens: []int32{1}, Pos: 0, Context: 3, Blocks: []int32{0}}}}},
		"beyond context":          {b: Batch{Seqs: []SeqInput{seq(1, 30, 4, 0, 1, 2, 3, 4, 5, 6, 7, 0)}}},
		"too few blocks":          {b: Batch{Seqs: []SeqInput{seq(1, 0, 5, 0)}}},
		"block out of range":      {b: Batch{Seqs: []SeqInput{seq(1, 0, 2, 9)}}},
		"token out of vocabulary": {b: Batch{Seqs: []SeqInput{{SeqID: 1, Tokens: []int32{50}, Pos: 0, Context: 1, Blocks: []int32{0}}}}},
		"shared write, exclusive": {b: Batch{Seqs: []SeqInput{seq(1, 0, 2, 3), seq(2, 0, 2, 3)}}, exclusive: true},
		"shared write allowed":    {b: Batch{Seqs: []SeqInput{seq(1, 0, 2, 3), seq(2, 0, 2, 3)}}, ok: true},
		"copy out of range":       {b: Batch{Copies: []BlockCopy{{Src: 0, Dst: 8}}}},
		"swap out twice":          {b: Batch{SwapOut: []BlockSwap{{Device: 0, Host: 1}, {Device: 1, Host: 1}}}},
		"swap in empty slot":      {b: Batch{SwapIn: []BlockSwap{{Device: 0, Host: 1}}}},
		"swap in used slot":       {b: Batch{SwapIn: []BlockSwap{{Device: 0, Host: 2}}}, ok: true},
		"swap in after out":       {b: Batch{SwapOut: []BlockSwap{{Device: 1, Host: 2}}, SwapIn: []BlockSwap{{Device: 0, Host: 2}}}},
	} {
		t.Run(name, func(t *testing.T) {
			c := NewBatchChecker(info, BatchCheckOptions{Vocab: 10, ExclusiveWrites: tc.exclusive})
			// Host slot 2 holds a block.
			require.NoError(t, c.Check(&Batch{SwapOut: []BlockSwap{{Device: 7, Host: 2}}}))
			err := c.Check(&tc.b)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			// The scratch is clean afterwards: a valid batch still passes.
			require.NoError(t, c.Check(&Batch{Seqs: []SeqInput{seq(1, 0, 2, 3), seq(2, 0, 8, 0, 1)}}))
		})
	}
}
