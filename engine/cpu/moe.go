package cpu

import (
	"math"
)

// moeBuffers are the mixture-of-experts activations of one step, reused
// across steps.
type moeBuffers struct {
	logits []float32 // router logits, rows x Experts
	choice []int32   // chosen experts, rows x ExpertsUsed
	weight []float32 // their weights, rows x ExpertsUsed
	count  []int     // tokens per expert, then (prefix sums) start offsets
	next   []int     // fill position per expert while grouping
	order  []int32   // rows grouped by expert: order[start[e]:start[e+1]]
	orderW []float32 // the weight of each entry of order
	x, out []float32 // one expert's gathered inputs and outputs, ffnRows x Dim
}

// moeFFN computes the mixture-of-experts feed-forward of the first rows
// rows of the normed stream into proj. Each row goes to the ExpertsUsed
// experts of highest router probability (softmax over the router's
// logits; ties to the lower index); its output is the weighted sum of
// those experts' SwiGLU feed-forwards.
//
// The rows are grouped by expert, and each expert that any row chose runs
// once over all its rows (in chunks of ffnRows): its weights are read once
// per step, and the weights of experts no row chose are not read at all.
// A row's sum adds its experts in increasing expert order whatever else is
// in the batch, so the result stays batch-invariant.
func (e *Executor) moeFFN(m *moeLayer, rows int) {
	s := &e.spec
	bf := &e.buf
	mb := &bf.moe
	dim, E, K, F := s.Dim, s.Experts, s.ExpertsUsed, s.ExpertFFN
	mb.logits = grow(mb.logits, rows*E)
	mb.choice = grow(mb.choice, rows*K)
	mb.weight = grow(mb.weight, rows*K)
	MatMul(e.pool, mb.logits, m.router, bf.xn, rows)
	e.parallel(rows, E*K, func(a, b int) {
		for r := a; r < b; r++ {
			moeRoute(mb.logits[r*E:(r+1)*E], mb.choice[r*K:(r+1)*K], mb.weight[r*K:(r+1)*K], s.ExpertWeightsNorm, float32(s.ExpertWeightsScale))
		}
	})

	// Group the rows by expert (counting sort, rows in order within an
	// expert).
	mb.count = grow(mb.count, E+1)
	clear(mb.count)
	for _, c := range mb.choice[:rows*K] {
		mb.count[c+1]++
	}
	for ex := range E {
		mb.count[ex+1] += mb.count[ex]
	}
	mb.order = grow(mb.order, rows*K)
	mb.orderW = grow(mb.orderW, rows*K)
	mb.next = grow(mb.next, E)
	next := mb.next
	copy(next, mb.count[:E])
	for r := range rows {
		for j := range K {
			ex := mb.choice[r*K+j]
			mb.order[next[ex]] = int32(r)
			mb.orderW[next[ex]] = mb.weight[r*K+j]
			next[ex]++
		}
	}

	proj := bf.proj[:rows*dim]
	clear(proj)
	act := attnSetFor(kernUse).swiglu
	for ex := range E {
		toks := mb.order[mb.count[ex]:mb.count[ex+1]]
		ws := mb.orderW[mb.count[ex]:mb.count[ex+1]]
		for a := 0; a < len(toks); a += ffnRows {
			n := min(ffnRows, len(toks)-a)
			mb.x = grow(mb.x, n*dim)
			mb.out = grow(mb.out, n*dim)
			bf.gate = grow(bf.gate, n*F)
			bf.up = grow(bf.up, n*F)
			for j, r := range toks[a : a+n] {
				copy(mb.x[j*dim:(j+1)*dim], bf.xn[int(r)*dim:(int(r)+1)*dim])
			}
			MatMul(e.pool, bf.gate, m.gate[ex], mb.x, n)
			MatMul(e.pool, bf.up, m.up[ex], mb.x, n)
			e.parallel(n, F, func(i, j int) {
				act(bf.gate[i*F:j*F], bf.up[i*F:j*F])
			})
			MatMul(e.pool, mb.out, m.down[ex], bf.gate, n)
			// Rows are distinct within an expert: add in parallel.
			e.parallel(n, dim, func(i, j int) {
				for k := i; k < j; k++ {
					r := int(toks[a+k])
					axpy(proj[r*dim:(r+1)*dim], ws[a+k], mb.out[k*dim:(k+1)*dim])
				}
			})
		}
	}
}

// moeRoute picks the len(choice) experts of highest softmax probability
// from one row's router logits (ties to the lower index), in increasing
// expert order, and sets their weights: the probabilities, divided by
// their sum when norm is set (the sum clamped below at 2⁻¹⁴ as llama.cpp
// does), then multiplied by scale unless it is 0 or 1.
func moeRoute(logits []float32, choice []int32, weight []float32, norm bool, scale float32) {
	mx := float32(math.Inf(-1))
	for _, v := range logits {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - mx))
	}
	k := len(choice)
	// Selection of the top k (k is small): repeatedly take the largest
	// logit not yet taken. The softmax is monotonic, so logits order the
	// probabilities.
	for j := range k {
		best := -1
		for ex, v := range logits {
			if moeTaken(choice[:j], ex) {
				continue
			}
			if best < 0 || v > logits[best] || (math.IsNaN(float64(logits[best])) && !math.IsNaN(float64(v))) {
				best = ex
			}
		}
		choice[j] = int32(best)
	}
	// Increasing expert order, so that a row's sum is formed the same way
	// in every batch.
	for i := 1; i < k; i++ {
		for j := i; j > 0 && choice[j] < choice[j-1]; j-- {
			choice[j], choice[j-1] = choice[j-1], choice[j]
		}
	}
	var wsum float32
	for j, ex := range choice {
		weight[j] = float32(math.Exp(float64(logits[ex]-mx)) / sum)
		wsum += weight[j]
	}
	if norm {
		wsum = max(wsum, 6.103515625e-5)
		for j := range weight {
			weight[j] /= wsum
		}
	}
	if scale != 0 && scale != 1 {
		for j := range weight {
			weight[j] *= scale
		}
	}
}

func moeTaken(taken []int32, ex int) bool {
	for _, t := range taken {
		if int(t) == ex {
			return true
		}
	}
	return false
}
