package sample

import "math"

// TokenLogprob is a token and its log probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Logprobs returns the log probability of token under the softmax of
// logits, and the top most likely tokens with theirs, most likely first
// (the lowest id first on ties). It reads logits and does not modify them.
//
// Called on the slice Sample has just worked on, it reports vLLM's
// convention: the model's distribution after logit bias and penalties,
// before temperature and truncation (top-k, top-p, min-p). Called before
// Sample, it reports the raw distribution.
//
// NaN logits count as -Inf. If some logits are +Inf, they share the
// probability equally; if all are -Inf, every log probability is -Inf. A
// token outside the vocabulary has log probability -Inf. tops has
// min(top, len(logits)) entries, is nil when that is 0, and is newly
// allocated and owned by the caller.
func (s *Sampler) Logprobs(logits []float32, token int32, top int) (lp float32, tops []TokenLogprob) {
	m, nInf := negInf, 0
	if best := argmax(logits); best >= 0 {
		m = logits[best]
	}
	if math.IsInf(float64(m), 1) {
		for _, l := range logits {
			if math.IsInf(float64(l), 1) {
				nInf++
			}
		}
	}
	var logZ float64
	if nInf == 0 && m > negInf {
		s.grow(len(logits))
		z := expShifted(s.probs, logits, m, 1, s.sums)
		logZ = float64(m) + math.Log(z)
	}
	logprob := func(l float32) float32 {
		switch {
		case nInf > 0 && math.IsInf(float64(l), 1):
			return float32(-math.Log(float64(nInf)))
		case nInf > 0 || !(l > negInf):
			return negInf
		default:
			return float32(float64(l) - logZ)
		}
	}

	lp = negInf
	if uint32(token) < uint32(len(logits)) {
		lp = logprob(logits[token])
	}
	if top = min(top, len(logits)); top <= 0 {
		return lp, nil
	}
	h := selectTop(logits, top, s.cands[:0])
	s.cands = h[:0]
	tops = make([]TokenLogprob, len(h))
	for i, x := range h {
		tops[i] = TokenLogprob{Token: x.id, Logprob: logprob(x.l)}
	}
	return lp, tops
}
