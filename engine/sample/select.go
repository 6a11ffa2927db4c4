package sample

import "math"

// heapMaxK is the largest top-k selected with a heap. Above it the heap's
// insertions cost more than the passes of a radix selection (measured over
// 128,256 model-like logits: about even between 512 and 1024).
const heapMaxK = 512

// selectTop returns the k largest logits, largest first and the lowest id
// first on ties, built in h's storage. NaN counts as -Inf. It keeps a heap
// of k entries whose root is the worst, so a pass over a large vocabulary
// mostly compares against the root: firstAbove skips to the next logit
// above it.
func selectTop(logits []float32, k int, h []cand) []cand {
	k = min(k, len(logits))
	h = h[:0]
	if k <= 0 {
		return h
	}
	for i, l := range logits[:k] {
		if l != l {
			l = negInf
		}
		h = append(h, cand{id: int32(i), l: l})
	}
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	floor := h[0].l
	for i := k; i < len(logits); i++ {
		// A later id never displaces an equal logit, so ties keep the
		// lowest ids; NaN is never above.
		if i += firstAbove(logits[i:], floor); i == len(logits) {
			break
		}
		h[0] = cand{id: int32(i), l: logits[i]}
		siftDown(h, 0)
		floor = h[0].l
	}
	for n := len(h) - 1; n > 0; n-- {
		h[0], h[n] = h[n], h[0]
		siftDown(h[:n], 0)
	}
	return h
}

// firstAboveGo returns the index of the first of x above floor, or len(x)
// if none is; NaN compares false, so it is never above. firstAbove is the
// same, with SIMD where the CPU has it.
func firstAboveGo(x []float32, floor float32) int {
	for i, l := range x {
		if l > floor {
			return i
		}
	}
	return len(x)
}

// worse reports whether a ranks below b: a lower logit, or the same logit
// and a higher id.
func worse(a, b cand) bool {
	return a.l < b.l || (a.l == b.l && a.id > b.id)
}

// siftDown restores the heap below i, whose root is the worst entry.
func siftDown(h []cand, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && worse(h[r], h[c]) {
			c = r
		}
		if !worse(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// logitKey maps a logit to a key that sorts the other way round: the
// larger the logit, the smaller the key. NaN maps like -Inf and -0 like
// +0, so the keys order exactly as the comparisons of selectTop do.
func logitKey(l float32) uint32 {
	b := math.Float32bits(l)
	switch {
	case l != l:
		b = math.Float32bits(negInf)
	case b == 1<<31:
		b = 0
	}
	if b>>31 == 0 {
		return b ^ 0x7FFFFFFF // non-negative: flip all but the sign bit
	}
	return b // negative: the bits already grow as the value falls
}

// logitLevels split a logit key into the digits of a radix selection: 11,
// 11 and 10 bits.
var logitLevels = [...]level{{21, 0x7ff}, {10, 0x7ff}, {0, 0x3ff}}

// gapScale is the resolution of radixTopK's first histogram: 64 buckets
// per unit of logit below the maximum, so 2048 buckets span 32.
const gapScale = 64

// gapBucket returns the first-level bucket of logit l below the maximum m:
// (m-l)*gapScale, the last bucket for anything 32 or more below and for
// NaN. It never decreases as l falls.
func gapBucket(m, l float32) int {
	d := (m - l) * gapScale
	if !(d < numBuckets-1) {
		return numBuckets - 1
	}
	return int(d)
}

// radixTopK returns the k largest logits (NaN as -Inf, the lowest ids
// first on ties), in no particular order, for 0 < k < len(logits); m is
// the largest logit. It is a most-significant-digit radix selection: a
// histogram of the counts by the gap below m, at 1/64 resolution, finds
// the bucket where the count reaches k. Every token before it is kept; the
// tokens in it are refined by the 11, 11 and 10 bits of logitKey, after
// which the tokens left have the same logit and the lowest ids among them
// complete the k.
func (s *Sampler) radixTopK(logits []float32, k int, m float32) []cand {
	hist := s.mass[:]
	clear(hist)
	for _, l := range logits {
		hist[gapBucket(m, l)]++
	}
	cut, acc, _ := cutBucket(hist, float64(k), 0)
	kept, edge := s.cands[:0], s.edge[:0]
	for i, l := range logits {
		switch b := gapBucket(m, l); {
		case b < cut:
			kept = append(kept, cand{id: int32(i), l: l})
		case b == cut:
			edge = append(edge, cand{id: int32(i), l: l})
		}
	}
	for _, lv := range logitLevels {
		hist := s.mass[:lv.mask+1]
		clear(hist)
		for _, x := range edge {
			hist[(logitKey(x.l)>>lv.shift)&lv.mask]++
		}
		cut, acc, _ = cutBucket(hist, float64(k), acc)
		n := 0
		for _, x := range edge {
			switch b := int((logitKey(x.l) >> lv.shift) & lv.mask); {
			case b < cut:
				kept = append(kept, x)
			case b == cut:
				edge[n] = x
				n++
			}
		}
		edge = edge[:n]
	}
	kept = append(kept, edge[:min(k-int(acc), len(edge))]...)
	for i := range kept {
		if kept[i].l != kept[i].l {
			kept[i].l = negInf
		}
	}
	s.cands, s.edge = kept[:0], edge[:0]
	return kept
}
