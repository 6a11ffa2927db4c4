package cpu

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// encLayer holds one encoder block's weights (bert, nomic-bert). Biases
// are nil where the file has none.
type encLayer struct {
	q, k, v, qkv, o    Weight // q, k and v, or the fused qkv (rows Q, K, V)
	qb, kb, vb, qkvb   []float32
	ob                 []float32
	attnNormW, attnNrB []float32 // attn_output_norm
	outNormW, outNormB []float32 // layer_output_norm
	up, gate, down     Weight    // gate only for nomic-bert (SwiGLU)
	upB, downB         []float32
}

// encWeights holds an encoder's weights. Matrices alias the file's data.
type encWeights struct {
	embd Weight    // token_embd: Vocab rows of Dim
	pos  Weight    // position_embd: ContextLength rows (bert); zero without
	typ0 []float32 // token_types row 0, added to every token; nil without
	// normW and normB are token_embd_norm, applied to the embeddings.
	normW, normB []float32
	layers       []encLayer
	matmulParams int64
}

// loadEncoderWeights wraps f's tensors for the encoder spec s.
func loadEncoderWeights(f *gguf.File, s model.Spec) (*encWeights, error) {
	ld := &weightLoader{f: f}
	w := &encWeights{
		embd:  ld.table("token_embd.weight"),
		normW: ld.vector("token_embd_norm.weight", s.Dim),
		normB: ld.vector("token_embd_norm.bias", s.Dim),
	}
	if s.PosEmbed {
		w.pos = ld.matrix("position_embd.weight")
	}
	if s.TokenTypes > 0 {
		if tt := ld.matrix("token_types.weight"); ld.err == nil {
			if tt.Cols != s.Dim || tt.Rows < 1 {
				return nil, fmt.Errorf("cpu: tensor %q is %d x %d, want rows of %d", "token_types.weight", tt.Rows, tt.Cols, s.Dim)
			}
			w.typ0 = make([]float32, s.Dim)
			tt.Row(w.typ0, 0)
		}
	}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	w.layers = make([]encLayer, s.Layers)
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		if s.FusedQKV {
			l.qkv = ld.matrix(p + "attn_qkv.weight")
			if s.QKVBias {
				l.qkvb = ld.vector(p+"attn_qkv.bias", q+2*kv)
			}
		} else {
			l.q, l.k, l.v = ld.matrix(p+"attn_q.weight"), ld.matrix(p+"attn_k.weight"), ld.matrix(p+"attn_v.weight")
			if s.QKVBias {
				l.qb, l.kb, l.vb = ld.vector(p+"attn_q.bias", q), ld.vector(p+"attn_k.bias", kv), ld.vector(p+"attn_v.bias", kv)
			}
		}
		l.o = ld.matrix(p + "attn_output.weight")
		if s.AttnOutBias {
			l.ob = ld.vector(p+"attn_output.bias", s.Dim)
		}
		l.attnNormW, l.attnNrB = ld.vector(p+"attn_output_norm.weight", s.Dim), ld.vector(p+"attn_output_norm.bias", s.Dim)
		l.outNormW, l.outNormB = ld.vector(p+"layer_output_norm.weight", s.Dim), ld.vector(p+"layer_output_norm.bias", s.Dim)
		l.up, l.down = ld.matrix(p+"ffn_up.weight"), ld.matrix(p+"ffn_down.weight")
		if !s.GELU {
			l.gate = ld.matrix(p + "ffn_gate.weight")
		}
		if s.FFNBias {
			l.upB, l.downB = ld.vector(p+"ffn_up.bias", s.FFN), ld.vector(p+"ffn_down.bias", s.Dim)
		}
		if ld.err != nil {
			return nil, ld.err
		}
		for _, m := range []Weight{l.q, l.k, l.v, l.qkv, l.o, l.up, l.gate, l.down} {
			w.matmulParams += int64(m.Rows) * int64(m.Cols)
		}
	}
	if ld.err != nil {
		return nil, ld.err
	}
	return w, checkEncoderShapes(w, s)
}

// checkEncoderShapes checks every matrix against the spec's sizes (the
// executor's own guard; model.SpecFromFile checks the same).
func checkEncoderShapes(w *encWeights, s model.Spec) error {
	type want struct {
		name       string
		m          Weight
		rows, cols int
	}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	checks := []want{{"token_embd.weight", w.embd, s.Vocab, s.Dim}}
	if s.PosEmbed {
		checks = append(checks, want{"position_embd.weight", w.pos, s.ContextLength, s.Dim})
	}
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		if s.FusedQKV {
			checks = append(checks, want{p + "attn_qkv.weight", l.qkv, q + 2*kv, s.Dim})
		} else {
			checks = append(checks, want{p + "attn_q.weight", l.q, q, s.Dim}, want{p + "attn_k.weight", l.k, kv, s.Dim},
				want{p + "attn_v.weight", l.v, kv, s.Dim})
		}
		checks = append(checks, want{p + "attn_output.weight", l.o, s.Dim, q}, want{p + "ffn_up.weight", l.up, s.FFN, s.Dim},
			want{p + "ffn_down.weight", l.down, s.Dim, s.FFN})
		if !s.GELU {
			checks = append(checks, want{p + "ffn_gate.weight", l.gate, s.FFN, s.Dim})
		}
	}
	for _, c := range checks {
		if c.m.Rows != c.rows || c.m.Cols != c.cols {
			return fmt.Errorf("cpu: tensor %q is %d x %d, want %d x %d", c.name, c.m.Rows, c.m.Cols, c.rows, c.cols)
		}
	}
	return nil
}

// encBuffers are one forward pass's activations, reused (they only grow).
// Rows are tokens.
type encBuffers struct {
	x, proj  []float32 // residual stream and sublayer output, T x Dim
	q, k, v  []float32 // T x Heads·HeadDim, T x KVHeads·HeadDim (twice)
	qkv      []float32 // fused projection, T x (q + 2·kv)
	att      []float32 // attention output, T x Heads·HeadDim
	gate, up []float32 // FFN hidden, ffnRows x FFN
	start    []int     // first row of each input
	rowPos   []int32   // position of each row within its input
	rowSeq   []int32   // input of each row
	tasks    []encTask
}

// encTask is one attention work item: every query of input seq against
// KV head head.
type encTask struct{ seq, head int }

// encScratch is one worker's attention scratch: one KV head's keys and
// values of one input, contiguous, and one query's scores. It grows to
// the longest input.
type encScratch struct {
	k, v, scores []float32
	cos, sin     []float32
}

// encForward runs the encoder over inputs (each at positions 0..) and
// returns the last hidden states, one row of Dim per token, inputs one
// after the other; the slice is reused by the next pass. The inputs are
// valid: non-empty, within the context, tokens in the vocabulary.
func (e *Embedder) encForward(ctx context.Context, inputs [][]int32) ([]float32, error) {
	s := &e.spec
	bf := &e.buf
	dim := s.Dim
	T := 0
	bf.start = grow(bf.start, len(inputs))
	for i, in := range inputs {
		bf.start[i] = T
		T += len(in)
	}
	bf.rowPos, bf.rowSeq = grow(bf.rowPos, T), grow(bf.rowSeq, T)
	for i, in := range inputs {
		for j := range in {
			bf.rowPos[bf.start[i]+j] = int32(j)
			bf.rowSeq[bf.start[i]+j] = int32(i)
		}
	}
	qd, kd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	bf.x = grow(bf.x, T*dim)
	bf.proj = grow(bf.proj, T*dim)
	bf.q, bf.k, bf.v = grow(bf.q, T*qd), grow(bf.k, T*kd), grow(bf.v, T*kd)
	bf.att = grow(bf.att, T*qd)

	w := e.w
	e.parallel(T, dim, func(a, b int) {
		var tmp []float32
		if s.PosEmbed {
			tmp = make([]float32, dim)
		}
		for r := a; r < b; r++ {
			xr := bf.x[r*dim : (r+1)*dim]
			pos := int(bf.rowPos[r])
			w.embd.Row(xr, int(inputs[bf.rowSeq[r]][pos]))
			if w.typ0 != nil {
				addTo(xr, w.typ0)
			}
			if s.PosEmbed {
				w.pos.Row(tmp, pos)
				addTo(xr, tmp)
			}
		}
	})
	e.layerNorm(bf.x[:T*dim], bf.x[:T*dim], w.normW, w.normB, T)

	for li := range w.layers {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cpu: embedding interrupted: %w", err)
		}
		l := &w.layers[li]
		if l.qkv.Rows > 0 {
			bf.qkv = grow(bf.qkv, T*(qd+2*kd))
			MatMul(e.pool, bf.qkv, l.qkv, bf.x, T)
		} else {
			MatMul(e.pool, bf.q[:T*qd], l.q, bf.x, T)
			MatMul(e.pool, bf.k[:T*kd], l.k, bf.x, T)
			MatMul(e.pool, bf.v[:T*kd], l.v, bf.x, T)
		}
		var worker atomic.Int32
		e.parallel(T, qd+2*kd, func(a, b int) {
			sc := e.scratch[worker.Add(1)-1]
			for r := a; r < b; r++ {
				q, k, v := bf.q[r*qd:(r+1)*qd], bf.k[r*kd:(r+1)*kd], bf.v[r*kd:(r+1)*kd]
				if l.qkv.Rows > 0 {
					row := bf.qkv[r*(qd+2*kd) : (r+1)*(qd+2*kd)]
					if l.qkvb != nil {
						addTo(row, l.qkvb)
					}
					copy(q, row[:qd])
					copy(k, row[qd:qd+kd])
					copy(v, row[qd+kd:])
				} else if l.qb != nil {
					addTo(q, l.qb)
					addTo(k, l.kb)
					addTo(v, l.vb)
				}
				if e.rope != nil {
					e.rope.angles(int(bf.rowPos[r]), sc.cos, sc.sin)
					e.rope.apply(q, s.Heads, s.HeadDim, sc.cos, sc.sin)
					e.rope.apply(k, s.KVHeads, s.HeadDim, sc.cos, sc.sin)
				}
			}
		})
		e.encAttention(inputs)
		MatMul(e.pool, bf.proj[:T*dim], l.o, bf.att, T)
		if l.ob != nil {
			addRows(bf.proj[:T*dim], l.ob)
		}
		addTo(bf.x[:T*dim], bf.proj[:T*dim])
		e.layerNorm(bf.x[:T*dim], bf.x[:T*dim], l.attnNormW, l.attnNrB, T)
		e.encFFN(l, T)
		addTo(bf.x[:T*dim], bf.proj[:T*dim])
		e.layerNorm(bf.x[:T*dim], bf.x[:T*dim], l.outNormW, l.outNormB, T)
	}
	return bf.x[:T*dim], nil
}

// encFFN computes the feed-forward of the T rows of x into proj, ffnRows
// rows at a time: down·gelu(up·x + b) + b for bert, down·(silu(gate·x) ⊙
// up·x) for nomic-bert.
func (e *Embedder) encFFN(l *encLayer, T int) {
	s := &e.spec
	bf := &e.buf
	dim, F := s.Dim, s.FFN
	for a := 0; a < T; a += ffnRows {
		n := min(ffnRows, T-a)
		bf.up = grow(bf.up, n*F)
		MatMul(e.pool, bf.up, l.up, bf.x[a*dim:], n)
		if l.upB != nil {
			addRows(bf.up, l.upB)
		}
		h := bf.up
		if l.gate.Rows > 0 {
			bf.gate = grow(bf.gate, n*F)
			MatMul(e.pool, bf.gate, l.gate, bf.x[a*dim:], n)
			swiglu := attnSetFor(kernUse).swiglu
			e.parallel(n, F, func(i, j int) { swiglu(bf.gate[i*F:j*F], bf.up[i*F:j*F]) })
			h = bf.gate
		} else {
			e.parallel(n, F, func(i, j int) { geluGo(bf.up[i*F : j*F]) })
		}
		out := bf.proj[a*dim : (a+n)*dim]
		MatMul(e.pool, out, l.down, h, n)
		if l.downB != nil {
			addRows(out, l.downB)
		}
	}
}

// encAttention computes softmax(q·kᵀ/√HeadDim)·v for every token, over
// all the tokens of its own input (no mask: the encoder is
// bidirectional). Work is split across (input, KV head).
func (e *Embedder) encAttention(inputs [][]int32) {
	s := &e.spec
	bf := &e.buf
	bf.tasks = bf.tasks[:0]
	for i := range inputs {
		for h := range s.KVHeads {
			bf.tasks = append(bf.tasks, encTask{seq: i, head: h})
		}
	}
	tasks := bf.tasks
	as := attnSetFor(kernUse)
	var worker atomic.Int32
	e.pool.Run(len(tasks), func(a, b int) {
		sc := e.scratch[worker.Add(1)-1]
		for _, t := range tasks[a:b] {
			e.encAttend(as, len(inputs[t.seq]), bf.start[t.seq], t.head, sc)
		}
	})
}

// encAttend runs one work item: the n tokens of the input whose first row
// is start, against KV head kh, for each of the query heads that share it.
func (e *Embedder) encAttend(as *attnSet, n, start, kh int, sc *encScratch) {
	s := &e.spec
	bf := &e.buf
	hd := s.HeadDim
	qd, kd := s.Heads*hd, s.KVHeads*hd
	sc.k, sc.v, sc.scores = grow(sc.k, n*hd), grow(sc.v, n*hd), grow(sc.scores, n)
	for j := range n {
		r := start + j
		copy(sc.k[j*hd:(j+1)*hd], bf.k[r*kd+kh*hd:])
		copy(sc.v[j*hd:(j+1)*hd], bf.v[r*kd+kh*hd:])
	}
	g := s.Heads / s.KVHeads
	for t := range n {
		r := start + t
		for hh := range g {
			h := kh*g + hh
			q := bf.q[r*qd+h*hd : r*qd+(h+1)*hd]
			as.dotsF32(sc.scores, q, sc.k, e.attnScale)
			m := float32(math.Inf(-1))
			for _, v := range sc.scores {
				m = max(m, v)
			}
			sum := as.expSum(sc.scores, m)
			out := bf.att[r*qd+h*hd : r*qd+(h+1)*hd]
			clear(out)
			as.accF32(out, sc.scores, sc.v, 1)
			inv := 1 / sum
			for i := range out {
				out[i] *= inv
			}
		}
	}
}

// layerNorm writes (x − mean)/√(var + eps)·w + b to out, per row of
// len(w) values (ggml_norm, then the weight and bias); out may be x.
func (e *Embedder) layerNorm(out, x, w, b []float32, rows int) {
	d := len(w)
	eps := e.spec.NormEps
	e.parallel(rows, d, func(a, c int) {
		for r := a; r < c; r++ {
			xr, or := x[r*d:(r+1)*d], out[r*d:(r+1)*d]
			var sum float64
			for _, v := range xr {
				sum += float64(v)
			}
			mean := sum / float64(d)
			var ss float64
			for _, v := range xr {
				dv := float64(v) - mean
				ss += dv * dv
			}
			scale := 1 / math.Sqrt(ss/float64(d)+eps)
			for i, v := range xr {
				or[i] = float32((float64(v)-mean)*scale)*w[i] + b[i]
			}
		}
	})
}

// parallel runs fn over [0, n) on the pool when the work is worth
// splitting (as Executor.parallel).
func (e *Embedder) parallel(n, cost int, fn func(start, end int)) { runParallel(e.pool, n, cost, fn) }

// addRows adds bias to each row of x (len(bias) values per row).
func addRows(x, bias []float32) {
	for r := 0; r+len(bias) <= len(x); r += len(bias) {
		addTo(x[r:r+len(bias)], bias)
	}
}

// geluGo replaces each x by GELU(x) (tanh approximation), read from
// geluTable at x rounded to a half float, 0 below −10 and x from 10 on,
// as ggml's CPU computes it.
func geluGo(x []float32) {
	tab := geluTable()
	for i, g := range x {
		switch {
		case g <= -10:
			x[i] = 0
		case g >= 10:
		default:
			x[i] = tab[gguf.Float32ToHalf(g)]
		}
	}
}
