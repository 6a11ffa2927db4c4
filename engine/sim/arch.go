package sim

import "math"

// expertParams is the weights of one expert's gated MLP (gate, up, down).
func (m Model) expertParams() int64 {
	return 3 * int64(m.HiddenSize) * int64(m.ExpertFFNSize)
}

// ActiveParams is the number of weights one token multiplies by: Params
// less, in a mixture of experts, the experts it does not go to.
func (m Model) ActiveParams() int64 {
	if m.Experts == 0 {
		return m.Params
	}
	return m.Params - int64(m.Layers)*int64(m.Experts-m.ExpertsUsed)*m.expertParams()
}

// stepWeightBytes is the weight bytes a step of tokens tokens reads: all
// of a dense model's; in a mixture of experts, the shared weights and the
// experts the tokens go to, expected under uniform routing (each layer's
// E experts, a token taking K of them: E·(1 − (1 − K/E)^tokens) distinct).
func (m Model) stepWeightBytes(tokens float64) float64 {
	all := float64(m.WeightBytes())
	if m.Experts == 0 || tokens <= 0 {
		return all
	}
	e, k := float64(m.Experts), float64(m.ExpertsUsed)
	touched := e * (1 - math.Pow(1-k/e, tokens))
	expert := float64(m.expertParams()) * float64(m.WeightDTypeBytes) * float64(m.Layers)
	return all - expert*(e-touched)
}

// slidingLayers is the number of layers that attend over the window.
func (m Model) slidingLayers() int {
	if m.SlidingWindow <= 0 || m.SlidingPattern < 1 {
		return 0
	}
	n := 0
	for l := range m.Layers {
		if l%m.SlidingPattern < m.SlidingPattern-1 {
			n++
		}
	}
	return n
}

// kvReadTokens is the KV a sequence of context tokens reads per step, in
// tokens of all layers: the whole context in global layers, at most the
// window in sliding ones.
func (m Model) kvReadTokens(context float64) float64 {
	s := float64(m.slidingLayers())
	if s == 0 {
		return context
	}
	l := float64(m.Layers)
	return ((l-s)*context + s*min(context, float64(m.SlidingWindow))) / l
}

// attended is the number of (query, key) pairs per layer, averaged over
// the layers, of n queries at positions pos..pos+n−1 attending causally:
// the query at position p sees p+1 keys, at most SlidingWindow in a
// sliding layer.
func (m Model) attended(pos, n float64) float64 {
	global := n*pos + n*(n+1)/2
	s := float64(m.slidingLayers())
	if s == 0 || n <= 0 {
		return global
	}
	// Σ min(p, w) over p = a..b, the keys each query sees.
	w, a, b := float64(m.SlidingWindow), pos+1, pos+n
	var local float64
	switch {
	case b <= w:
		local = global
	case a > w:
		local = n * w
	default:
		local = (a+w)*(w-a+1)/2 + (b-w)*w
	}
	l := float64(m.Layers)
	return ((l-s)*global + s*local) / l
}
