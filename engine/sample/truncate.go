package sample

import "math"

// numBuckets is the size of the histograms of the radix selections: 2^11,
// enough for the 2033 first-level buckets of a weight's distance (16 per
// octave of probability, down to 0) and every 11-bit digit.
const numBuckets = 2048

// oneBits is the bit pattern of float32(1).
const oneBits = 0x3F800000

// histFloor is 2^-16, the weight that ends the first-level bucket 256.
const histFloor = 0x1p-16

// topK returns the TopK most likely tokens cut to the top-p nucleus and by
// min-p, with their weights, and the most likely token (the lowest id on
// ties). If best's logit is +Inf or -Inf, c means nothing and Sample does
// not draw.
//
// Up to heapMaxK, one pass with a heap selects them, most likely first, and
// finds the maximum on the way; top-p and min-p then keep a prefix. Above
// it, an argmax pass and a radix selection yield them unordered, and top-p
// refines them like the boundary bucket of nucleus.
func (s *Sampler) topK(logits []float32, q params) (c []cand, best cand) {
	if q.topK > heapMaxK {
		return s.topKRadix(logits, q)
	}
	h := selectTop(logits, q.topK, s.cands[:0])
	s.cands = h[:0]
	best = h[0]
	if math.IsInf(float64(best.l), 0) {
		return h, best
	}
	z := weigh(h, best.l, q.invT)
	n := len(h)
	if q.topP > 0 {
		target := q.topP * z
		var acc float64
		for i := range h {
			acc += float64(h[i].w)
			if acc >= target {
				n = i + 1
				break
			}
		}
	}
	// Weights fall along h, so min-p (and dropping -Inf logits) keeps a
	// prefix; h[0] has weight 1 and always stays.
	for n > 1 && (h[n-1].w == 0 || h[n-1].w < q.minP) {
		n--
	}
	return h[:n], best
}

// topKRadix is topK for a large TopK.
func (s *Sampler) topKRadix(logits []float32, q params) (c []cand, best cand) {
	i := argmax(logits)
	if i < 0 {
		return nil, cand{l: negInf}
	}
	best = cand{id: int32(i), l: logits[i]}
	if math.IsInf(float64(best.l), 1) {
		return nil, best
	}
	c = s.radixTopK(logits, q.topK, best.l)
	z := weigh(c, best.l, q.invT)
	if q.topP > 0 {
		// c lives in s.cands; the nucleus is gathered into s.edge.
		kept := s.refine(s.edge[:0], c, q.topP*z, 0, q.minP, weightLevels[:])
		s.edge = kept[:0]
		return kept, best
	}
	n := 0
	for _, x := range c {
		if x.w > 0 && x.w >= q.minP {
			c[n] = x
			n++
		}
	}
	return c[:n], best
}

// weigh sets each candidate's weight from its logit, the maximum m and
// 1/temperature, and returns their sum.
func weigh(c []cand, m, invT float32) float64 {
	var z float64
	for i := range c {
		c[i].w = fastExp((c[i].l - m) * invT)
		z += float64(c[i].w)
	}
	return z
}

// level is one digit of a radix selection: a key's bucket is
// (key >> shift) & mask.
type level struct{ shift, mask uint32 }

// weightLevels split the distance of a weight (30 bits, see distance) into
// the digits of the top-p selection: 11, 11 and 8 bits. The first gives 16
// buckets per octave of probability.
var weightLevels = [...]level{{19, 0x7ff}, {8, 0x7ff}, {0, 0xff}}

// nucleus returns the smallest set of most likely tokens whose probability
// reaches TopP, less those below min-p, with their weights, in no
// particular (but deterministic) order.
//
// It sorts nothing. The weights are in (0, 1], so the distance of their
// float32 bits from those of 1 orders them; a histogram of the probability
// mass over the top 11 of its 30 bits finds the bucket where the
// cumulative mass crosses TopP. Every token in a bucket before it is kept;
// refine sorts out the tokens in it.
func (s *Sampler) nucleus(logits []float32, q params, m float32) []cand {
	probs := s.probs[:len(logits)]
	sums := s.sums[:numBlocks(len(logits))]
	mass := &s.mass
	clear(mass[:])
	z := expShifted(probs, logits, m, q.invT, sums)
	target := q.topP * z
	// The first histogram counts only weights above 2^-16 (its first 256
	// buckets), which is cheap when, as usual, most of the vocabulary is
	// far less likely: only the blocks whose sum is above it can hold
	// one. Only if the nucleus reaches below does a second pass add the
	// rest.
	s.histAbove(probs, histFloor)
	cut, acc, ok := cutBucket(mass[:], target, 0)
	if !ok {
		for _, w := range probs {
			if w <= histFloor && w > 0 {
				mass[distance(w)>>weightLevels[0].shift] += float64(w)
			}
		}
		cut, acc, _ = cutBucket(mass[:], target, 0)
	}

	// Bucket b holds the weights in (lo(b+1), lo(b)] where lo(b) is the
	// float32 whose distance is b<<19; since floats order like their bits,
	// comparing weights with the cut bucket's ends finds its side. A block
	// whose sum is at most lo holds no weight above it.
	hi := math.Float32frombits(oneBits - uint32(cut)<<weightLevels[0].shift)
	lo := math.Float32frombits(oneBits - uint32(cut+1)<<weightLevels[0].shift)
	kept, edge := s.cands[:0], s.edge[:0]
	for b, sum := range sums {
		if sum <= float64(lo) {
			continue
		}
		start := b * blockLen
		for i, w := range blockOf(probs, b) {
			if w > lo {
				if w > hi {
					if w >= q.minP {
						kept = append(kept, cand{id: int32(start + i), w: w})
					}
				} else {
					edge = append(edge, cand{id: int32(start + i), w: w})
				}
			}
		}
	}
	s.edge = edge[:0]
	kept = s.refine(kept, edge, target, acc, q.minP, weightLevels[1:])
	s.cands = kept[:0]
	return kept
}

// histAbove adds each weight of probs above floor to the first-level
// bucket of its distance in s.mass. It scans only the blocks whose sum
// (in s.sums) is above floor: a sum of weights is at least each of them.
func (s *Sampler) histAbove(probs []float32, floor float32) {
	for b, sum := range s.sums[:numBlocks(len(probs))] {
		if sum <= float64(floor) {
			continue
		}
		for _, w := range blockOf(probs, b) {
			if w > floor {
				s.mass[distance(w)>>weightLevels[0].shift] += float64(w)
			}
		}
	}
}

// refine completes a top-p selection whose boundary lies among the
// candidates of edge, given the mass acc already kept, and appends the
// tokens it keeps (at least minP) to kept. Each level histograms the mass
// of edge by one digit of the weights' distance, keeps the tokens before
// the bucket where the cumulative mass reaches target and refines that
// bucket's tokens by the next digit; after the last digit the tokens left
// have the same weight and are kept in the order of edge (by id, when edge
// comes from a pass over the vocabulary) until the mass reaches target. It
// overwrites edge.
func (s *Sampler) refine(kept, edge []cand, target, acc float64, minP float32, levels []level) []cand {
	for _, lv := range levels {
		hist := s.mass[:lv.mask+1]
		clear(hist)
		for _, x := range edge {
			hist[(distance(x.w)>>lv.shift)&lv.mask] += float64(x.w)
		}
		var cut int
		cut, acc, _ = cutBucket(hist, target, acc)
		n := 0
		for _, x := range edge {
			switch b := int((distance(x.w) >> lv.shift) & lv.mask); {
			case b < cut:
				if x.w >= minP {
					kept = append(kept, x)
				}
			case b == cut:
				edge[n] = x
				n++
			}
		}
		edge = edge[:n]
	}
	for _, x := range edge {
		if x.w >= minP {
			kept = append(kept, x)
		}
		acc += float64(x.w)
		if acc >= target {
			break
		}
	}
	return kept
}

// cutBucket walks hist from the first bucket, starting from the total acc
// already kept, and returns the bucket where the cumulative total reaches
// target, the total before it, and true. If the total never reaches target
// (the histogram is partial, or rounding), it returns the last non-empty
// bucket and false.
func cutBucket(hist []float64, target, acc float64) (int, float64, bool) {
	last, before := 0, acc
	for b, w := range hist {
		if w == 0 {
			continue
		}
		if acc+w >= target {
			return b, acc, true
		}
		last, before = b, acc
		acc += w
	}
	return last, before, false
}

// distance orders weights in [0, 1]: it is 0 for 1 and grows as the weight
// falls, up to 0x3F800000 for 0.
func distance(w float32) uint32 {
	b := math.Float32bits(w)
	if b >= oneBits {
		return 0
	}
	return oneBits - b
}

// drawDense samples over the whole vocabulary, after min-p only. The drawn
// point t = u*z is found in two steps: the block whose span of the
// cumulative block sums holds it, then the token within that block.
func (s *Sampler) drawDense(logits []float32, q params, m float32, best int, u float64) int32 {
	probs := s.probs[:len(logits)]
	sums := s.sums[:numBlocks(len(logits))]
	z := expShifted(probs, logits, m, q.invT, sums)
	if q.minP > 0 {
		z = cutMinP(probs, sums, q.minP)
	}
	t := u * z
	var acc float64
	for b, sum := range sums {
		if t < acc+sum {
			return int32(b*blockLen + drawBlock(blockOf(probs, b), t, acc))
		}
		acc += sum
	}
	return int32(best) // only when rounding puts t at z
}

// cutMinP sets the weights below minP to 0, sums each block again (in
// laneSum's order) and returns the new total.
func cutMinP(probs []float32, sums []float64, minP float32) float64 {
	var z float64
	for b := range sums {
		block := blockOf(probs, b)
		for i, w := range block {
			if w < minP {
				block[i] = 0
			}
		}
		sums[b] = laneSum(block)
		z += sums[b]
	}
	return z
}

// drawBlock returns the index in w of the token where the running total,
// starting from acc, first exceeds t. The caller has found that t lies
// below acc plus the block's sum; if rounding (the block's sum adds in
// another order) leaves the running total at or below t, it returns the
// last token of positive weight.
func drawBlock(w []float32, t, acc float64) int {
	last := 0
	for i, x := range w {
		if x > 0 {
			last = i
		}
		acc += float64(x)
		if t < acc {
			return i
		}
	}
	return last
}

// drawCands samples one of c in proportion to the weights.
func drawCands(c []cand, u float64) int32 {
	var z float64
	for _, x := range c {
		z += float64(x.w)
	}
	t := u * z
	var acc float64
	for _, x := range c {
		acc += float64(x.w)
		if t < acc {
			return x.id
		}
	}
	for i := len(c) - 1; i >= 0; i-- { // only when rounding puts t at z
		if c[i].w > 0 {
			return c[i].id
		}
	}
	return 0
}
