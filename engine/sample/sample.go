package sample

import (
	"math"

	"github.com/llmd/llmd/engine"
)

// MinTemperature is the smallest temperature that samples: below it (and
// for 0, a negative value or NaN) Sample decodes greedily, as vLLM does.
const MinTemperature = 1e-5

var negInf = float32(math.Inf(-1))

// Sampler chooses tokens from logits. It holds scratch buffers sized to the
// vocabulary and reuses them across calls, so Sample allocates nothing once
// the buffers are grown. A Sampler is not safe for concurrent use: keep one
// per worker.
type Sampler struct {
	mark    []uint32  // per token: the epoch in which it was last counted
	count   []int32   // per token: occurrences in the generated tail
	touched []int32   // tokens counted in the current epoch
	epoch   uint32    // current epoch; never 0 once used
	probs   []float32 // per-token weights for the dense paths
	sums    []float64 // per block of blockLen weights of probs: their sum
	cands   []cand    // candidates: the top-k heap or the top-p nucleus
	edge    []cand    // top-p: tokens in the bucket that holds the boundary
	mass    [numBuckets]float64
}

// cand is a candidate token: its id, its logit and its unnormalized
// probability w = exp((logit-max)/temperature).
type cand struct {
	id int32
	l  float32
	w  float32
}

// NewSampler returns a Sampler with buffers for a vocabulary of vocab
// tokens. Longer logits are accepted later; the buffers grow once.
func NewSampler(vocab int) *Sampler {
	s := &Sampler{}
	s.grow(max(vocab, 0))
	return s
}

// grow makes the per-token buffers hold at least n tokens.
func (s *Sampler) grow(n int) {
	if len(s.mark) >= n {
		return
	}
	s.mark = make([]uint32, n)
	s.count = make([]int32, n)
	s.probs = make([]float32, n)
	s.sums = make([]float64, numBlocks(n))
}

// nextEpoch starts a new round of token marks, so that marking needs no
// clearing of the per-token buffers.
func (s *Sampler) nextEpoch() uint32 {
	s.epoch++
	if s.epoch == 0 {
		clear(s.mark)
		s.epoch = 1
	}
	return s.epoch
}

// Sample chooses the next token from logits, one entry per vocabulary id,
// and returns its id. history is every token of the sequence so far, the
// last generated of them its own output; seed is the sequence's seed and
// step the index of the token being chosen (SeqInput.Seed and
// SeqInput.Generated in an executor).
//
// It applies, in order: p.LogitBias; the repetition penalty over every
// distinct token of history (positive logits divided by the penalty,
// negative ones multiplied); the presence and frequency penalties over the
// last generated tokens of history (logit -= presence + frequency*count
// for each token that occurs count > 0 times). Then, if p.Temperature is
// below [MinTemperature], it returns the argmax, the lowest id on ties.
// Otherwise it divides by the temperature, keeps the TopK most likely
// tokens, then the smallest nucleus whose probability reaches TopP (the
// lowest ids first among equals), then the tokens whose probability is at
// least MinP times the most likely one's, and draws from what is left with
// a random number that depends only on (seed, step): the same logits,
// parameters, seed and step always give the same token, whatever the rest
// of the batch and whatever was sampled before.
//
// Sample works in place: it adds the bias and the penalties to logits
// (only the entries of tokens in LogitBias or history change) and writes
// nothing else there, not the temperature, not the truncation. So
// [Sampler.Logprobs] on the same slice afterwards reports the model's
// distribution after bias and penalties, before temperature; call it
// before Sample for the raw distribution.
//
// Probabilities are computed in float32 with an exponential accurate to
// 3e-7; a token whose tempered logit is more than 87 below the best one
// (a probability under 1.6e-38 of the best's) has probability 0. They are
// summed in float64 in a fixed order (16 interleaved partial sums per
// block of 256 tokens, then the blocks in order; see expShifted), with or
// without SIMD, so the draw is the same on every CPU.
//
// Sample never panics on odd input. History ids and LogitBias keys outside
// the vocabulary are ignored; NaN biases and NaN, infinite or
// non-positive penalties are off; generated is clamped to
// [0, len(history)]; out-of-range TopK, TopP and MinP are off (MinP above
// 1 is 1). NaN logits count as -Inf. If some logit is +Inf, Sample returns
// the lowest such id; if every logit is -Inf or NaN, or logits is empty, it
// returns 0.
func (s *Sampler) Sample(logits []float32, p engine.SamplingParams, seed uint64, step int, history []int32, generated int) int32 {
	if len(logits) == 0 {
		return 0
	}
	s.grow(len(logits))
	applyBias(logits, p.LogitBias)
	s.applyPenalties(logits, p, history, generated)
	q := normalize(p, len(logits))
	switch {
	case q.greedy:
		return int32(max(argmax(logits), 0))
	case q.topK > 0:
		c, best := s.topK(logits, q)
		switch m := float64(best.l); {
		case math.IsInf(m, 1):
			return best.id
		case math.IsInf(m, -1):
			return 0
		}
		return drawCands(c, uniform(seed, step))
	}
	best := argmax(logits)
	if best < 0 {
		return 0
	}
	m := logits[best]
	if math.IsInf(float64(m), 1) {
		return int32(best)
	}
	u := uniform(seed, step)
	if q.topP > 0 {
		return drawCands(s.nucleus(logits, q, m), u)
	}
	return s.drawDense(logits, q, m, best, u)
}

// params are SamplingParams checked against the vocabulary: every
// truncation that is off is zero.
type params struct {
	greedy bool
	invT   float32 // 1 / temperature
	topK   int     // 0: off
	topP   float64 // 0: off; else in (0, 1)
	minP   float32 // 0: off; else in (0, 1]
}

// normalize turns the caller's parameters into params, treating every
// out-of-range value as off.
func normalize(p engine.SamplingParams, vocab int) params {
	if !(p.Temperature >= MinTemperature) {
		return params{greedy: true}
	}
	q := params{invT: float32(1 / p.Temperature)}
	if p.TopK > 0 && p.TopK < vocab {
		q.topK = p.TopK
	}
	if q.topK == 1 {
		return params{greedy: true}
	}
	if p.TopP > 0 && p.TopP < 1 {
		q.topP = p.TopP
	}
	if p.MinP > 0 { // false for NaN
		q.minP = float32(min(p.MinP, 1))
	}
	return q
}

// applyBias adds each bias to its token's logit, skipping ids outside the
// vocabulary and NaN biases.
func applyBias(logits []float32, bias map[int32]float32) {
	for t, b := range bias {
		if uint32(t) < uint32(len(logits)) && b == b {
			logits[t] += b
		}
	}
}

// applyPenalties applies the repetition penalty over every distinct token
// of history, then the presence and frequency penalties over its last
// generated tokens.
func (s *Sampler) applyPenalties(logits []float32, p engine.SamplingParams, history []int32, generated int) {
	if rp := p.RepetitionPenalty; rp > 0 && rp != 1 && !math.IsInf(rp, 0) {
		e := s.nextEpoch()
		r := float32(rp)
		for _, t := range history {
			if uint32(t) >= uint32(len(logits)) || s.mark[t] == e {
				continue
			}
			s.mark[t] = e
			if l := logits[t]; l > 0 {
				logits[t] = l / r
			} else {
				logits[t] = l * r
			}
		}
	}

	presence, frequency := finiteOrZero(p.PresencePenalty), finiteOrZero(p.FrequencyPenalty)
	generated = min(max(generated, 0), len(history))
	if (presence == 0 && frequency == 0) || generated == 0 {
		return
	}
	e := s.nextEpoch()
	s.touched = s.touched[:0]
	for _, t := range history[len(history)-generated:] {
		if uint32(t) >= uint32(len(logits)) {
			continue
		}
		if s.mark[t] != e {
			s.mark[t] = e
			s.count[t] = 0
			s.touched = append(s.touched, t)
		}
		s.count[t]++
	}
	for _, t := range s.touched {
		logits[t] = float32(float64(logits[t]) - presence - frequency*float64(s.count[t]))
	}
}

// finiteOrZero returns x, or 0 if x is NaN or infinite.
func finiteOrZero(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// argmaxGo returns the index of the largest logit, the lowest on ties, in
// one pass; NaN compares false, so it counts as -Inf. It returns -1 if no
// entry is above -Inf. argmax is the same, with SIMD where the CPU has it.
func argmaxGo(logits []float32) int {
	best, m := -1, negInf
	for i, l := range logits {
		if l > m {
			best, m = i, l
		}
	}
	return best
}
