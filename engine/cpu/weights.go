package cpu

import (
	"fmt"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// layer holds one transformer block's weights. Which fields are set
// follows the spec: q, k and v or the fused qkv; gate and up, up alone
// holding both (FusedGateUp), or the experts.
type layer struct {
	attnNorm, ffnNorm []float32
	q, k, v, o        Weight
	qkv               Weight    // fused Q, K, V rows (phi3); zero without
	qb, kb, vb        []float32 // q/k/v biases; nil without (llama)
	qNorm, kNorm      []float32 // per-head Q and K norms; nil without
	// postAttnNorm and postFFNNorm normalise the attention and FFN
	// outputs before the residual add; nil without (all but gemma3).
	postAttnNorm, postFFNNorm []float32
	gate, up, down            Weight
	moe                       *moeLayer // experts; nil for a dense FFN
}

// moeLayer is a mixture-of-experts feed-forward block: a float router
// and, per expert, its own gate, up and down matrices, each a view of the
// expert's slice of the 3-D stacks in the file.
type moeLayer struct {
	router         Weight // Experts rows of Dim
	gate, up, down []Weight
}

// weights holds the model's weights. Matrices alias the model file's
// tensor data (those of a type with tile kernels on this CPU also keep a
// copy repacked for them, heap about the size of those tensors, see
// Weight; untied token embeddings, only read by row, do not); norms,
// biases and rope_freqs are converted to float32.
type weights struct {
	embd      Weight // token_embd: Vocab rows of Dim
	layers    []layer
	outNorm   []float32
	output    Weight    // output.weight, or token_embd when tied
	outBias   []float32 // nil without output.bias
	ropeFreqs []float32 // nil without rope_freqs.weight
	// matmulParams is the number of weights one token multiplies by,
	// output head included; for a mixture of experts, the router and the
	// ExpertsUsed experts a token goes to.
	matmulParams int64
}

// weightLoader reads tensors of one file, keeping the first error.
type weightLoader struct {
	f    *gguf.File
	bf16 bool // pack F16 and BF16 matrices for the BF16 tile kernels
	err  error
}

func (ld *weightLoader) fail(err error) {
	if ld.err == nil {
		ld.err = err
	}
}

// tensor returns the tensor called name with dims dimensions and its data.
func (ld *weightLoader) tensor(name string, dims int) (gguf.TensorInfo, []byte, bool) {
	if ld.err != nil {
		return gguf.TensorInfo{}, nil, false
	}
	t, ok := ld.f.Tensor(name)
	if !ok {
		ld.fail(fmt.Errorf("cpu: tensor %q is missing", name))
		return t, nil, false
	}
	if dims > 0 && len(t.Dims) != dims {
		ld.fail(fmt.Errorf("cpu: tensor %q has shape %v, want %d dimensions", name, t.Dims, dims))
		return t, nil, false
	}
	data := ld.f.TensorData(t)
	if data == nil {
		ld.fail(fmt.Errorf("cpu: tensor %q has no data (is the file closed?)", name))
		return t, nil, false
	}
	return t, data, true
}

// matrix wraps the 2-D tensor name, checking its type and size.
func (ld *weightLoader) matrix(name string) Weight { return ld.weight(name, ld.pack()) }

// table wraps the 2-D tensor name as matrix does, for Row alone: without
// the copy repacked for MatMul.
func (ld *weightLoader) table(name string) Weight { return ld.weight(name, packNone) }

// pack is how the loader repacks a matrix for MatMul.
func (ld *weightLoader) pack() weightPack {
	if ld.bf16 {
		return packBF16
	}
	return packTiles
}

func (ld *weightLoader) weight(name string, pack weightPack) Weight {
	t, data, ok := ld.tensor(name, 2)
	if !ok {
		return Weight{}
	}
	w, err := newWeight(t.Type, int(t.Dims[1]), int(t.Dims[0]), data, pack)
	if err != nil {
		ld.fail(fmt.Errorf("cpu: tensor %q: %w", name, err))
	}
	return w
}

// experts splits the 3-D stack name ([cols, rows, n] in GGUF order) into n
// matrices of rows x cols, each a view of its expert's bytes.
func (ld *weightLoader) experts(name string, n int) []Weight {
	t, data, ok := ld.tensor(name, 3)
	if !ok {
		return nil
	}
	if t.Dims[2] != uint64(n) {
		ld.fail(fmt.Errorf("cpu: tensor %q holds %d experts, want %d", name, t.Dims[2], n))
		return nil
	}
	rows, cols := int(t.Dims[1]), int(t.Dims[0])
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		ld.fail(fmt.Errorf("cpu: tensor %q: %w", name, err))
		return nil
	}
	per := rows * rb
	if rows <= 0 || per/rows != rb || len(data) != n*per {
		ld.fail(fmt.Errorf("cpu: tensor %q: %d experts of %d x %d %s need %d bytes each, got %d in all", name, n, rows, cols, t.Type, per, len(data)))
		return nil
	}
	out := make([]Weight, n)
	for e := range out {
		w, err := newWeight(t.Type, rows, cols, data[e*per:(e+1)*per:(e+1)*per], ld.pack())
		if err != nil {
			ld.fail(fmt.Errorf("cpu: tensor %q expert %d: %w", name, e, err))
			return nil
		}
		out[e] = w
	}
	return out
}

// vector converts the tensor name of n values to float32.
func (ld *weightLoader) vector(name string, n int) []float32 {
	t, data, ok := ld.tensor(name, 0)
	if !ok {
		return nil
	}
	if t.Elements() != uint64(n) {
		ld.fail(fmt.Errorf("cpu: tensor %q has %d values, want %d", name, t.Elements(), n))
		return nil
	}
	v := make([]float32, n)
	if err := gguf.Dequantize(t.Type, data, v); err != nil {
		ld.fail(fmt.Errorf("cpu: tensor %q: %w", name, err))
		return nil
	}
	return v
}

// loadWeights wraps f's tensors for spec, checking each matrix's type and
// size; with bf16, F16 and BF16 matrices are packed for the BF16 tile
// kernels (Config.F16MatMul "bf16").
func loadWeights(f *gguf.File, spec model.Spec, bf16 bool) (*weights, error) {
	ld := &weightLoader{f: f, bf16: bf16}
	s := spec
	w := &weights{outNorm: ld.vector("output_norm.weight", s.Dim)}
	if s.TiedOutput {
		w.embd = ld.matrix("token_embd.weight")
		w.output = w.embd
	} else {
		// Untied, the embeddings are only looked up by row.
		w.embd = ld.table("token_embd.weight")
		w.output = ld.matrix("output.weight")
	}
	if s.OutputBias {
		w.outBias = ld.vector("output.bias", s.Vocab)
	}
	if s.RopeFreqs {
		w.ropeFreqs = ld.vector("rope_freqs.weight", s.RopeDims/2)
	}
	w.layers = make([]layer, s.Layers)
	for i := range w.layers {
		loadLayer(ld, &w.layers[i], fmt.Sprintf("blk.%d.", i), s)
		if ld.err != nil {
			return nil, ld.err
		}
		w.matmulParams += w.layers[i].matmulParams(s)
	}
	if ld.err != nil {
		return nil, ld.err
	}
	if err := checkShapes(w, s); err != nil {
		return nil, err
	}
	w.matmulParams += int64(w.output.Rows) * int64(w.output.Cols)
	return w, nil
}

// loadLayer reads the block whose tensors start with p.
func loadLayer(ld *weightLoader, l *layer, p string, s model.Spec) {
	l.attnNorm = ld.vector(p+"attn_norm.weight", s.Dim)
	if s.FusedQKV {
		l.qkv = ld.matrix(p + "attn_qkv.weight")
	} else {
		l.q = ld.matrix(p + "attn_q.weight")
		l.k = ld.matrix(p + "attn_k.weight")
		l.v = ld.matrix(p + "attn_v.weight")
	}
	l.o = ld.matrix(p + "attn_output.weight")
	if s.QKVBias {
		l.qb = ld.vector(p+"attn_q.bias", s.Heads*s.HeadDim)
		l.kb = ld.vector(p+"attn_k.bias", s.KVHeads*s.HeadDim)
		l.vb = ld.vector(p+"attn_v.bias", s.KVHeads*s.ValueDim)
	}
	if s.QKNorm {
		l.qNorm = ld.vector(p+"attn_q_norm.weight", s.HeadDim)
		l.kNorm = ld.vector(p+"attn_k_norm.weight", s.HeadDim)
	}
	if s.PostNorms {
		l.postAttnNorm = ld.vector(p+"post_attention_norm.weight", s.Dim)
		l.postFFNNorm = ld.vector(p+"post_ffw_norm.weight", s.Dim)
	}
	l.ffnNorm = ld.vector(p+"ffn_norm.weight", s.Dim)
	switch {
	case s.Experts > 0:
		router := ld.matrix(p + "ffn_gate_inp.weight")
		if ld.err == nil && router.Type != gguf.TypeF32 && router.Type != gguf.TypeF16 && router.Type != gguf.TypeBF16 {
			// llama-quantize never quantizes the router.
			ld.fail(fmt.Errorf("cpu: tensor %q is %s, want a float type", p+"ffn_gate_inp.weight", router.Type))
		}
		l.moe = &moeLayer{
			router: router,
			gate:   ld.experts(p+"ffn_gate_exps.weight", s.Experts),
			up:     ld.experts(p+"ffn_up_exps.weight", s.Experts),
			down:   ld.experts(p+"ffn_down_exps.weight", s.Experts),
		}
	case s.FusedGateUp:
		l.up = ld.matrix(p + "ffn_up.weight")
		l.down = ld.matrix(p + "ffn_down.weight")
	default:
		l.gate = ld.matrix(p + "ffn_gate.weight")
		l.up = ld.matrix(p + "ffn_up.weight")
		l.down = ld.matrix(p + "ffn_down.weight")
	}
}

// matmulParams counts the weights one token multiplies by in l.
func (l *layer) matmulParams(s model.Spec) int64 {
	var n int64
	for _, m := range []Weight{l.q, l.k, l.v, l.qkv, l.o, l.gate, l.up, l.down} {
		n += int64(m.Rows) * int64(m.Cols)
	}
	if l.moe != nil {
		n += int64(l.moe.router.Rows) * int64(l.moe.router.Cols)
		if len(l.moe.gate) > 0 {
			per := int64(l.moe.gate[0].Rows)*int64(l.moe.gate[0].Cols) +
				int64(l.moe.up[0].Rows)*int64(l.moe.up[0].Cols) +
				int64(l.moe.down[0].Rows)*int64(l.moe.down[0].Cols)
			n += int64(s.ExpertsUsed) * per
		}
	}
	return n
}

// checkShapes checks every matrix against the spec's sizes, so that a
// file whose tensors disagree with its metadata is refused at load, not
// met by a panic in a step. (model.SpecFromFile checks the same shapes;
// this is the executor's own guard.)
func checkShapes(w *weights, s model.Spec) error {
	type want struct {
		name       string
		m          Weight
		rows, cols int
	}
	q, k, v := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.KVHeads*s.ValueDim
	checks := []want{{"token_embd.weight", w.embd, s.Vocab, s.Dim}, {"output.weight", w.output, s.Vocab, s.Dim}}
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		if s.FusedQKV {
			checks = append(checks, want{p + "attn_qkv.weight", l.qkv, q + k + v, s.Dim})
		} else {
			checks = append(checks, want{p + "attn_q.weight", l.q, q, s.Dim}, want{p + "attn_k.weight", l.k, k, s.Dim}, want{p + "attn_v.weight", l.v, v, s.Dim})
		}
		checks = append(checks, want{p + "attn_output.weight", l.o, s.Dim, s.Heads * s.ValueDim})
		switch {
		case l.moe != nil:
			checks = append(checks, want{p + "ffn_gate_inp.weight", l.moe.router, s.Experts, s.Dim})
			for e := range s.Experts {
				checks = append(checks,
					want{p + "ffn_gate_exps.weight", l.moe.gate[e], s.ExpertFFN, s.Dim},
					want{p + "ffn_up_exps.weight", l.moe.up[e], s.ExpertFFN, s.Dim},
					want{p + "ffn_down_exps.weight", l.moe.down[e], s.Dim, s.ExpertFFN})
			}
		case s.FusedGateUp:
			checks = append(checks, want{p + "ffn_up.weight", l.up, 2 * s.FFN, s.Dim}, want{p + "ffn_down.weight", l.down, s.Dim, s.FFN})
		default:
			checks = append(checks, want{p + "ffn_gate.weight", l.gate, s.FFN, s.Dim}, want{p + "ffn_up.weight", l.up, s.FFN, s.Dim}, want{p + "ffn_down.weight", l.down, s.Dim, s.FFN})
		}
	}
	for _, c := range checks {
		if c.m.Rows != c.rows || c.m.Cols != c.cols {
			return fmt.Errorf("cpu: tensor %q is %d x %d, want %d x %d", c.name, c.m.Rows, c.m.Cols, c.rows, c.cols)
		}
	}
	return nil
}
