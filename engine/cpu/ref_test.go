package cpu

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// refModel is a plain float64 reference of the forward pass of every
// supported architecture, written from llama.cpp's description
// (src/models/llama.cpp, qwen2.cpp, qwen3.cpp, qwen3moe.cpp, phi3.cpp,
// gemma3.cpp, build_moe_ffn and ggml's rope) and the fixtures' README,
// with none of the executor's machinery: every weight
// dequantized with gguf.Dequantize into float64, one token at a time, a
// contiguous KV cache, no batching, paging or worker pool. The executor is
// checked against it.
//
// With kvHalf set, keys and values are rounded to IEEE half floats as an
// F16 cache stores them; otherwise the reference is exact math on the
// stored weights.
type refModel struct {
	spec    model.Spec
	kvHalf  bool
	embd    []float64 // Vocab x Dim
	layers  []refLayer
	outNorm []float64
	output  []float64 // Vocab x Dim (token_embd when tied)
	outBias []float64
	freqs   []float64 // rope_freqs, nil without
}

type refLayer struct {
	attnNorm, ffnNorm []float64
	q, k, v, o        []float64 // rows x cols, row-major
	qb, kb, vb        []float64
	qNorm, kNorm      []float64 // per-head norms; nil without
	postAttn, postFFN []float64 // gemma3's post-norms; nil without
	gate, up, down    []float64
	// A mixture of experts: the router (Experts x Dim) and per expert its
	// gate, up and down matrices; router is nil for a dense FFN.
	router            []float64
	gateE, upE, downE [][]float64
}

// newRefModel dequantizes every tensor of f.
func newRefModel(t testing.TB, f *gguf.File) *refModel {
	t.Helper()
	spec, err := model.SpecFromFile(f)
	require.NoError(t, err)
	load := func(name string) []float64 {
		ti, ok := f.Tensor(name)
		require.True(t, ok, name)
		out := make([]float32, ti.Elements())
		require.NoError(t, gguf.Dequantize(ti.Type, f.TensorData(ti), out), name)
		v := make([]float64, len(out))
		for i, x := range out {
			v[i] = float64(x)
		}
		return v
	}
	mat := load
	m := &refModel{spec: spec, embd: mat("token_embd.weight"), outNorm: load("output_norm.weight")}
	m.output = m.embd
	if !spec.TiedOutput {
		m.output = mat("output.weight")
	}
	if spec.OutputBias {
		m.outBias = load("output.bias")
	}
	if spec.RopeFreqs {
		m.freqs = load("rope_freqs.weight")
	}
	s := spec
	for l := range spec.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		rl := refLayer{
			attnNorm: load(p + "attn_norm.weight"), ffnNorm: load(p + "ffn_norm.weight"),
			o: mat(p + "attn_output.weight"),
		}
		if s.FusedQKV {
			// Output rows: Q, then K, then V.
			qkv := mat(p + "attn_qkv.weight")
			nq, nk := s.Heads*s.HeadDim*s.Dim, s.KVHeads*s.HeadDim*s.Dim
			rl.q, rl.k, rl.v = qkv[:nq], qkv[nq:nq+nk], qkv[nq+nk:]
		} else {
			rl.q, rl.k, rl.v = mat(p+"attn_q.weight"), mat(p+"attn_k.weight"), mat(p+"attn_v.weight")
		}
		if spec.QKVBias {
			rl.qb, rl.kb, rl.vb = load(p+"attn_q.bias"), load(p+"attn_k.bias"), load(p+"attn_v.bias")
		}
		if s.QKNorm {
			rl.qNorm, rl.kNorm = load(p+"attn_q_norm.weight"), load(p+"attn_k_norm.weight")
		}
		if s.PostNorms {
			rl.postAttn, rl.postFFN = load(p+"post_attention_norm.weight"), load(p+"post_ffw_norm.weight")
		}
		switch {
		case s.Experts > 0:
			rl.router = load(p + "ffn_gate_inp.weight")
			split := func(all []float64) [][]float64 {
				per := len(all) / s.Experts
				out := make([][]float64, s.Experts)
				for e := range out {
					out[e] = all[e*per : (e+1)*per]
				}
				return out
			}
			rl.gateE = split(load(p + "ffn_gate_exps.weight"))
			rl.upE = split(load(p + "ffn_up_exps.weight"))
			rl.downE = split(load(p + "ffn_down_exps.weight"))
		case s.FusedGateUp:
			// Output rows: the gate, then the up projection.
			gu := mat(p + "ffn_up.weight")
			rl.gate, rl.up = gu[:len(gu)/2], gu[len(gu)/2:]
			rl.down = mat(p + "ffn_down.weight")
		default:
			rl.gate, rl.up, rl.down = mat(p+"ffn_gate.weight"), mat(p+"ffn_up.weight"), mat(p+"ffn_down.weight")
		}
		m.layers = append(m.layers, rl)
	}
	return m
}

// refSeq is one sequence run through the reference, with its own
// contiguous KV cache.
type refSeq struct {
	m    *refModel
	k, v [][][]float64 // [layer][pos] KVHeads·HeadDim / KVHeads·ValueDim
}

func (m *refModel) newSeq() *refSeq {
	return &refSeq{m: m, k: make([][][]float64, m.spec.Layers), v: make([][][]float64, m.spec.Layers)}
}

// pos is the number of tokens the sequence holds.
func (r *refSeq) pos() int { return len(r.k[0]) }

// feed runs tokens and returns the logits after the last one.
func (r *refSeq) feed(tokens ...int32) []float64 {
	var logits []float64
	for i, tok := range tokens {
		logits = r.step(tok, i == len(tokens)-1)
	}
	return logits
}

// step runs one token at the next position; it returns the logits when
// want is set.
func (r *refSeq) step(tok int32, want bool) []float64 {
	m := r.m
	s := m.spec
	pos := r.pos()
	x := append([]float64(nil), m.embd[int(tok)*s.Dim:(int(tok)+1)*s.Dim]...)
	if s.EmbedScale != 0 {
		for i := range x {
			x[i] *= s.EmbedScale
		}
	}
	for li, l := range m.layers {
		xn := refRMSNorm(x, l.attnNorm, s.RMSEps)
		q := refMatVec(l.q, xn)
		k := refMatVec(l.k, xn)
		v := refMatVec(l.v, xn)
		if l.qb != nil {
			refAdd(q, l.qb)
			refAdd(k, l.kb)
			refAdd(v, l.vb)
		}
		sliding := s.SlidingLayer(li)
		for h := range s.Heads {
			qh := q[h*s.HeadDim : (h+1)*s.HeadDim]
			if l.qNorm != nil {
				copy(qh, refRMSNorm(qh, l.qNorm, s.RMSEps))
			}
			m.ropeLayer(qh, pos, sliding)
		}
		for h := range s.KVHeads {
			kh := k[h*s.HeadDim : (h+1)*s.HeadDim]
			if l.kNorm != nil {
				copy(kh, refRMSNorm(kh, l.kNorm, s.RMSEps))
			}
			m.ropeLayer(kh, pos, sliding)
		}
		if m.kvHalf {
			refHalf(k)
			refHalf(v)
		}
		r.k[li] = append(r.k[li], k)
		r.v[li] = append(r.v[li], v)
		att := make([]float64, s.Heads*s.ValueDim)
		group := s.Heads / s.KVHeads
		scale := 1 / math.Sqrt(float64(s.HeadDim))
		if s.AttnScale != 0 {
			scale = s.AttnScale
		}
		// A sliding-window layer sees positions p' with pos − p' < window.
		first := 0
		if sliding {
			first = max(0, pos-s.SlidingWindow+1)
		}
		for h := range s.Heads {
			kh := h / group
			qh := q[h*s.HeadDim : (h+1)*s.HeadDim]
			scores := make([]float64, pos+1)
			mx := math.Inf(-1)
			for p := first; p <= pos; p++ {
				kp := r.k[li][p][kh*s.HeadDim : (kh+1)*s.HeadDim]
				var d float64
				for i := range qh {
					d += qh[i] * kp[i]
				}
				scores[p] = d * scale
				mx = max(mx, scores[p])
			}
			var sum float64
			for p := first; p <= pos; p++ {
				scores[p] = math.Exp(scores[p] - mx)
				sum += scores[p]
			}
			out := att[h*s.ValueDim : (h+1)*s.ValueDim]
			for p := first; p <= pos; p++ {
				vp := r.v[li][p][kh*s.ValueDim : (kh+1)*s.ValueDim]
				for i := range out {
					out[i] += scores[p] / sum * vp[i]
				}
			}
		}
		ao := refMatVec(l.o, att)
		if l.postAttn != nil {
			ao = refRMSNorm(ao, l.postAttn, s.RMSEps)
		}
		refAdd(x, ao)
		xn = refRMSNorm(x, l.ffnNorm, s.RMSEps)
		var fo []float64
		if l.router != nil {
			fo = m.moe(l, xn)
		} else {
			fo = m.ffn(l.gate, l.up, l.down, xn)
		}
		if l.postFFN != nil {
			fo = refRMSNorm(fo, l.postFFN, s.RMSEps)
		}
		refAdd(x, fo)
	}
	if !want {
		return nil
	}
	logits := refMatVec(m.output, refRMSNorm(x, m.outNorm, s.RMSEps))
	if m.outBias != nil {
		refAdd(logits, m.outBias)
	}
	if c := s.LogitSoftcap; c != 0 {
		for i, v := range logits {
			logits[i] = c * math.Tanh(v/c)
		}
	}
	return logits
}

// ffn is the gated feed-forward down(act(gate·x) ⊙ up·x), act SiLU or, for
// GELU models, the tanh approximation of GELU as ggml's CPU takes it (the
// fixtures' README): from its half-float table, so the input and the
// result are rounded to half floats, 0 at or below −10 and the input
// itself from 10 on.
func (m *refModel) ffn(gate, up, down, x []float64) []float64 {
	g := refMatVec(gate, x)
	u := refMatVec(up, x)
	for i, v := range g {
		if m.spec.GELU {
			g[i] = refGELUHalf(v) * u[i]
		} else {
			g[i] = v / (1 + math.Exp(-v)) * u[i]
		}
	}
	return refMatVec(down, g)
}

func refGELUHalf(v float64) float64 {
	half := func(x float64) float64 { return float64(gguf.HalfToFloat32(gguf.Float32ToHalf(float32(x)))) }
	switch {
	case v <= -10:
		return 0
	case v >= 10:
		return v
	}
	h := half(v)
	return half(0.5 * h * (1 + math.Tanh(math.Sqrt(2/math.Pi)*h*(1+0.044715*h*h))))
}

// moe is build_moe_ffn for a softmax router: the ExpertsUsed experts of
// highest probability, their probabilities renormalised to sum to 1 when
// ExpertWeightsNorm, the experts' outputs summed with those weights.
func (m *refModel) moe(l refLayer, x []float64) []float64 {
	s := m.spec
	logits := refMatVec(l.router, x)
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, v)
	}
	probs := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		probs[i] = math.Exp(v - mx)
		sum += probs[i]
	}
	idx := make([]int, len(probs))
	for i := range idx {
		idx[i] = i
		probs[i] /= sum
	}
	sort.SliceStable(idx, func(a, b int) bool { return probs[idx[a]] > probs[idx[b]] })
	chosen := idx[:s.ExpertsUsed]
	var wsum float64
	for _, e := range chosen {
		wsum += probs[e]
	}
	out := make([]float64, s.Dim)
	for _, e := range chosen {
		w := probs[e]
		if s.ExpertWeightsNorm {
			w /= wsum
		}
		if c := s.ExpertWeightsScale; c != 0 && c != 1 {
			w *= c
		}
		for i, v := range m.ffn(l.gateE[e], l.upE[e], l.downE[e], x) {
			out[i] += w * v
		}
	}
	return out
}

// ropeLayer rotates one head at pos as the layer does: a sliding-window
// layer with its own base and no scaling or frequency factors.
func (m *refModel) ropeLayer(x []float64, pos int, sliding bool) {
	if !sliding {
		m.rope(x, pos)
		return
	}
	local := *m
	local.spec.RopeBase, local.spec.RopeScaling, local.freqs = m.spec.RopeBaseSWA, model.RopeScaling{}, nil
	local.rope(x, pos)
}

// rope rotates one head at pos as ggml_rope_ext does: pair i turns by
// pos·base^(-2i/n)/freq_factor[i], divided by the factor under linear
// scaling; YaRN blends the interpolated and trained angles by a ramp over
// the pairs and scales the magnitude by 1+0.1·ln(factor). NORM pairs are
// (x[2i], x[2i+1]), NEOX pairs (x[i], x[i+n/2]).
func (m *refModel) rope(x []float64, pos int) {
	s := m.spec
	n := s.RopeDims
	sc := s.RopeScaling
	for i := range n / 2 {
		extrap := float64(pos) * math.Pow(s.RopeBase, -2*float64(i)/float64(n))
		if m.freqs != nil {
			extrap /= m.freqs[i]
		}
		theta, mag := extrap, 1.0
		switch sc.Type {
		case "linear":
			theta = extrap / sc.Factor
		case "yarn":
			orig := float64(sc.OriginalContext)
			if orig == 0 {
				orig = float64(s.ContextLength)
			}
			corr := func(rot float64) float64 {
				return float64(n) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(s.RopeBase))
			}
			lo := math.Max(0, math.Floor(corr(32)))
			hi := math.Min(float64(n-1), math.Ceil(corr(1)))
			ramp := 1 - math.Min(1, math.Max(0, (float64(i)-lo)/math.Max(0.001, hi-lo)))
			theta = extrap/sc.Factor*(1-ramp) + extrap*ramp
			mag = 1 + 0.1*math.Log(sc.Factor)
		}
		c, sn := math.Cos(theta)*mag, math.Sin(theta)*mag
		a, b := 2*i, 2*i+1
		if s.RopeNeox {
			a, b = i, i+n/2
		}
		x0, x1 := x[a], x[b]
		x[a] = x0*c - x1*sn
		x[b] = x0*sn + x1*c
	}
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * scale * w[i]
	}
	return out
}

// refHalf rounds x to IEEE half floats, in place.
func refHalf(x []float64) {
	for i, v := range x {
		x[i] = float64(gguf.HalfToFloat32(gguf.Float32ToHalf(float32(v))))
	}
}

// refMatVec returns W·x for W of len(W)/len(x) rows of len(x).
func refMatVec(w, x []float64) []float64 {
	out := make([]float64, len(w)/len(x))
	for r := range out {
		row := w[r*len(x) : (r+1)*len(x)]
		var s float64
		for c, v := range row {
			s += v * x[c]
		}
		out[r] = s
	}
	return out
}

func refAdd(dst, src []float64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// TestRefRopePairs pins the reference's RoPE pairing on a hand-checked
// case, so that a wrong reference cannot bless a wrong executor: at
// position 1 with one pair per half, NORM turns (x0, x1) and NEOX turns
// (x0, x2) by one radian.
func TestRefRopePairs(t *testing.T) {
	for name, neox := range map[string]bool{"norm": false, "neox": true} {
		t.Run(name, func(t *testing.T) {
			m := &refModel{spec: model.Spec{RopeDims: 4, HeadDim: 4, RopeBase: 1e30, RopeNeox: neox}}
			x := []float64{1, 2, 3, 4}
			m.rope(x, 1)
			c, s := math.Cos(1), math.Sin(1)
			// Pair 1 turns by base^(-1/2) ≈ 1e-15 radians: unchanged.
			want := []float64{c - 2*s, s + 2*c, 3, 4}
			if neox {
				want = []float64{c - 3*s, 2, s + 3*c, 4}
			}
			require.InDeltaSlice(t, want, x, 1e-12)
		})
	}
}
