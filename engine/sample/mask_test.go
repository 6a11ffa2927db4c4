package sample

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

func TestApplyMask(t *testing.T) {
	logits := make([]float32, 200)
	for i := range logits {
		logits[i] = float32(i) / 10
	}
	mask := make([]uint64, 3) // 192 bits: tokens 192.. are refused
	for _, tok := range []int{3, 64, 100, 191} {
		mask[tok/64] |= 1 << (tok % 64)
	}
	ApplyMask(logits, mask)
	for i, l := range logits {
		allowed := i == 3 || i == 64 || i == 100 || i == 191
		require.Equal(t, allowed, !math.IsInf(float64(l), -1), "token %d", i)
	}
	s := NewSampler(len(logits))
	require.Equal(t, int32(191), s.Sample(logits, engine.SamplingParams{}, 1, 0, nil, 0), "greedy picks the best allowed")
	for step := range 50 {
		tok := s.Sample(logits, engine.SamplingParams{Temperature: 1.5, TopP: 0.9}, 1, step, nil, 0)
		require.Contains(t, []int32{3, 64, 100, 191}, tok)
	}

	untouched := []float32{1, 2}
	ApplyMask(untouched, nil)
	require.Equal(t, []float32{1, 2}, untouched)
}

// Whole words of refused tokens take the fast path; a partial last word
// and tokens past the mask are refused too.
func TestApplyMaskWords(t *testing.T) {
	logits := make([]float32, 300)
	mask := []uint64{^uint64(0), 0, 1 << 5, 0} // 256 bits: 256..299 are past the mask
	ApplyMask(logits, mask)
	for i, l := range logits {
		allowed := i < 64 || i == 133
		require.Equal(t, allowed, !math.IsInf(float64(l), -1), "token %d", i)
	}
	short := make([]float32, 100) // the mask is longer than the logits
	ApplyMask(short, []uint64{0, 0, 0})
	for i, l := range short {
		require.True(t, math.IsInf(float64(l), -1), "token %d", i)
	}
}
