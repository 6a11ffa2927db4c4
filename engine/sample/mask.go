package sample

import (
	"math"
	"math/bits"
)

// negInf64 is a word of the mask's worth of -Inf logits.
var negInf64 = func() (a [64]float32) {
	for i := range a {
		a[i] = float32(math.Inf(-1))
	}
	return a
}()

// ApplyMask sets to -Inf the logits of the tokens mask does not allow: bit
// t%64 of word t/64 allows token t, and tokens past the mask's end are not
// allowed. A nil mask allows everything. Called before Sample, it confines
// every truncation and the draw to the allowed tokens (structured output);
// Logprobs afterwards reports the masked distribution.
func ApplyMask(logits []float32, mask []uint64) {
	if mask == nil {
		return
	}
	n := len(logits)
	for w, word := range mask {
		base := w * 64
		if base >= n {
			return
		}
		switch word {
		case ^uint64(0):
			continue
		case 0:
			if base+64 <= n {
				copy(logits[base:base+64], negInf64[:])
				continue
			}
		}
		for off := ^word; off != 0; off &= off - 1 {
			t := base + bits.TrailingZeros64(off)
			if t >= n {
				break
			}
			logits[t] = negInf
		}
	}
	for t := len(mask) * 64; t < n; t++ {
		logits[t] = negInf
	}
}
