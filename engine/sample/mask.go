package sample

import "math/bits"

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
