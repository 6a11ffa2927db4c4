package cpu

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// layer holds one transformer block's weights.
type layer struct {
	attnNorm, ffnNorm []float32
	q, k, v, o        Weight
	qb, kb, vb        []float32 // q/k/v biases; nil without (llama)
	gate, up, down    Weight
}

// weights holds the model's weights. Matrices alias the model file's
// tensor data; norms, biases and rope_freqs are converted to float32.
type weights struct {
	embd      Weight // token_embd: Vocab rows of Dim
	layers    []layer
	outNorm   []float32
	output    Weight    // output.weight, or token_embd when tied
	outBias   []float32 // nil without output.bias
	ropeFreqs []float32 // nil without rope_freqs.weight
	// matmulParams is the number of weights one token multiplies by,
	// output head included.
	matmulParams int64
}

// loadWeights wraps f's tensors for spec, checking each matrix's type and
// size.
func loadWeights(f *gguf.File, spec model.Spec) (*weights, error) {
	matrix := func(name string) (Weight, error) {
		t, ok := f.Tensor(name)
		if !ok {
			return Weight{}, fmt.Errorf("cpu: tensor %q is missing", name)
		}
		if len(t.Dims) != 2 {
			return Weight{}, fmt.Errorf("cpu: tensor %q has shape %v, want a matrix", name, t.Dims)
		}
		data := f.TensorData(t)
		if data == nil {
			return Weight{}, fmt.Errorf("cpu: tensor %q has no data (is the file closed?)", name)
		}
		w, err := NewWeight(t.Type, int(t.Dims[1]), int(t.Dims[0]), data)
		if err != nil {
			return Weight{}, fmt.Errorf("cpu: tensor %q: %w", name, err)
		}
		return w, nil
	}
	vector := func(name string, n int) ([]float32, error) {
		t, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("cpu: tensor %q is missing", name)
		}
		if t.Elements() != uint64(n) {
			return nil, fmt.Errorf("cpu: tensor %q has %d values, want %d", name, t.Elements(), n)
		}
		data := f.TensorData(t)
		if data == nil {
			return nil, fmt.Errorf("cpu: tensor %q has no data (is the file closed?)", name)
		}
		v := make([]float32, n)
		if err := gguf.Dequantize(t.Type, data, v); err != nil {
			return nil, fmt.Errorf("cpu: tensor %q: %w", name, err)
		}
		return v, nil
	}
	var err error
	must := func(w Weight, e error) Weight {
		if err == nil {
			err = e
		}
		return w
	}
	vec := func(v []float32, e error) []float32 {
		if err == nil {
			err = e
		}
		return v
	}
	s := spec
	w := &weights{
		embd:    must(matrix("token_embd.weight")),
		outNorm: vec(vector("output_norm.weight", s.Dim)),
	}
	if s.TiedOutput {
		w.output = w.embd
	} else {
		w.output = must(matrix("output.weight"))
	}
	if s.OutputBias {
		w.outBias = vec(vector("output.bias", s.Vocab))
	}
	if s.RopeFreqs {
		w.ropeFreqs = vec(vector("rope_freqs.weight", s.RopeDims/2))
	}
	w.layers = make([]layer, s.Layers)
	for i := range w.layers {
		p := fmt.Sprintf("blk.%d.", i)
		l := &w.layers[i]
		l.attnNorm = vec(vector(p+"attn_norm.weight", s.Dim))
		l.q = must(matrix(p + "attn_q.weight"))
		l.k = must(matrix(p + "attn_k.weight"))
		l.v = must(matrix(p + "attn_v.weight"))
		l.o = must(matrix(p + "attn_output.weight"))
		if s.QKVBias {
			l.qb = vec(vector(p+"attn_q.bias", s.Heads*s.HeadDim))
			l.kb = vec(vector(p+"attn_k.bias", s.KVHeads*s.HeadDim))
			l.vb = vec(vector(p+"attn_v.bias", s.KVHeads*s.ValueDim))
		}
		l.ffnNorm = vec(vector(p+"ffn_norm.weight", s.Dim))
		l.gate = must(matrix(p + "ffn_gate.weight"))
		l.up = must(matrix(p + "ffn_up.weight"))
		l.down = must(matrix(p + "ffn_down.weight"))
		if err != nil {
			return nil, err
		}
		for _, m := range []Weight{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
			w.matmulParams += int64(m.Rows) * int64(m.Cols)
		}
	}
	if err != nil {
		return nil, err
	}
	w.matmulParams += int64(w.output.Rows) * int64(w.output.Cols)
	return w, nil
}

// stepBuffers are the activations of one step, reused across steps (they
// only grow). Rows are tokens.
type stepBuffers struct {
	x, xn    []float32 // residual stream and its norm, T x Dim
	q, k, v  []float32 // projections, T x Heads·HeadDim, T x KVHeads·HeadDim, T x KVHeads·ValueDim
	att      []float32 // attention output, T x Heads·ValueDim
	proj     []float32 // output projection or FFN down, T x Dim
	gate, up []float32 // FFN hidden, ffnRows x FFN
	logits   []float32 // sampled rows x Vocab

	seqStart []int      // first row of each sequence
	rowPos   []int32    // position of each row
	rowSeq   []int32    // sequence of each row
	tasks    []attnTask // attention work items
	sampled  []int      // rows that produce logits, in sequence order
}

// ffnRows bounds the rows of one FFN pass, so the hidden activations of a
// long prefill stay small; decode batches fit in one pass.
const ffnRows = 512

// attnChunk is the most query tokens of one attention work item.
const attnChunk = 16

// attnTask is one attention work item: query tokens [t0, t1) of sequence
// seq against KV head head, written to rows out.. of the attention output.
type attnTask struct {
	seq, head, t0, t1, out int
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return alignedMake[T](n)
	}
	return s[:n]
}

// alignedMake returns a slice of n zero values whose first element starts a
// 64-byte cache line. The float kernels load activations 64 bytes at a
// time straight into their multiply-adds; from an unaligned row every load
// straddles two lines, and a 4-token F16 dot runs about 1.5x slower.
func alignedMake[T any](n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n == 0 || size == 0 || 64%size != 0 {
		return make([]T, n)
	}
	buf := make([]T, n+64/size)
	skip := 0
	if off := int(uintptr(unsafe.Pointer(&buf[0])) % 64); off != 0 {
		if (64-off)%size != 0 {
			return buf[:n:n]
		}
		skip = (64 - off) / size
	}
	return buf[skip : skip+n : skip+n]
}

// forward runs the model over every token of seqs, writing K and V into the
// cache through the block tables, and returns the logits of the last token
// of each sequence whose Sample is set, in order (rows of Vocab values).
// The slice is reused by the next step. seqs are valid.
func (e *Executor) forward(ctx context.Context, seqs []engine.SeqInput) ([]float32, error) {
	s := &e.spec
	bf := &e.buf
	dim := s.Dim
	T := 0
	bf.seqStart = grow(bf.seqStart, len(seqs))
	bf.sampled = bf.sampled[:0]
	for i := range seqs {
		bf.seqStart[i] = T
		T += len(seqs[i].Tokens)
		if seqs[i].Sample {
			bf.sampled = append(bf.sampled, T-1)
		}
	}
	bf.rowPos = grow(bf.rowPos, T)
	bf.rowSeq = grow(bf.rowSeq, T)
	for i := range seqs {
		for j := range seqs[i].Tokens {
			bf.rowPos[bf.seqStart[i]+j] = int32(seqs[i].Pos + j)
			bf.rowSeq[bf.seqStart[i]+j] = int32(i)
		}
	}
	qd, kd, vd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.KVHeads*s.ValueDim
	bf.x = grow(bf.x, T*dim)
	bf.xn = grow(bf.xn, T*dim)
	bf.q = grow(bf.q, T*qd)
	bf.k = grow(bf.k, T*kd)
	bf.v = grow(bf.v, T*vd)
	bf.att = grow(bf.att, T*s.Heads*s.ValueDim)
	bf.proj = grow(bf.proj, T*dim)

	e.parallel(T, dim, func(a, b int) {
		for r := a; r < b; r++ {
			i := bf.rowSeq[r]
			tok := seqs[i].Tokens[r-bf.seqStart[i]]
			e.w.embd.Row(bf.x[r*dim:(r+1)*dim], int(tok))
		}
	})

	x := bf.x
	rows := T // rows of x still carried forward
	for li := range e.w.layers {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cpu: step interrupted: %w", err)
		}
		l := &e.w.layers[li]
		last := li == len(e.w.layers)-1
		e.rmsNorm(bf.xn[:T*dim], x[:T*dim], l.attnNorm, T)
		MatMul(e.pool, bf.q[:T*qd], l.q, bf.xn, T)
		MatMul(e.pool, bf.k[:T*kd], l.k, bf.xn, T)
		MatMul(e.pool, bf.v[:T*vd], l.v, bf.xn, T)
		var worker atomic.Int32
		e.parallel(T, qd+kd, func(a, b int) {
			sc := e.scratch[worker.Add(1)-1]
			cos, sin := sc.cos, sc.sin
			for r := a; r < b; r++ {
				q, k, v := bf.q[r*qd:(r+1)*qd], bf.k[r*kd:(r+1)*kd], bf.v[r*vd:(r+1)*vd]
				if l.qb != nil {
					addTo(q, l.qb)
					addTo(k, l.kb)
					addTo(v, l.vb)
				}
				e.rope.angles(int(bf.rowPos[r]), cos, sin)
				e.rope.apply(q, s.Heads, s.HeadDim, cos, sin)
				e.rope.apply(k, s.KVHeads, s.HeadDim, cos, sin)
				seq := &seqs[bf.rowSeq[r]]
				p := int(bf.rowPos[r])
				e.dev.write(li, int(seq.Blocks[p/e.info.BlockSize]), p%e.info.BlockSize, k, v)
			}
		})
		if last {
			// Only the sampled rows matter past the last layer's K/V.
			rows = len(bf.sampled)
			if rows == 0 {
				return nil, nil
			}
		}
		e.attention(li, seqs, last)
		MatMul(e.pool, bf.proj[:rows*dim], l.o, bf.att, rows)
		if last {
			// Gather the sampled rows of the residual stream.
			for j, r := range bf.sampled {
				copy(bf.xn[j*dim:(j+1)*dim], x[r*dim:(r+1)*dim])
			}
			x, bf.xn = bf.xn, x
			bf.x = x
		}
		addTo(x[:rows*dim], bf.proj[:rows*dim])
		e.rmsNorm(bf.xn[:rows*dim], x[:rows*dim], l.ffnNorm, rows)
		for a := 0; a < rows; a += ffnRows {
			n := min(ffnRows, rows-a)
			bf.gate = grow(bf.gate, n*s.FFN)
			bf.up = grow(bf.up, n*s.FFN)
			MatMul(e.pool, bf.gate, l.gate, bf.xn[a*dim:], n)
			MatMul(e.pool, bf.up, l.up, bf.xn[a*dim:], n)
			act := attnSetFor(kernUse).swiglu
			e.parallel(n, s.FFN, func(i, j int) {
				act(bf.gate[i*s.FFN:j*s.FFN], bf.up[i*s.FFN:j*s.FFN])
			})
			MatMul(e.pool, bf.proj[a*dim:(a+n)*dim], l.down, bf.gate, n)
		}
		addTo(x[:rows*dim], bf.proj[:rows*dim])
	}
	e.rmsNorm(bf.xn[:rows*dim], x[:rows*dim], e.w.outNorm, rows)
	V := s.Vocab
	bf.logits = grow(bf.logits, rows*V)
	MatMul(e.pool, bf.logits, e.w.output, bf.xn, rows)
	if e.w.outBias != nil {
		for j := range rows {
			addTo(bf.logits[j*V:(j+1)*V], e.w.outBias)
		}
	}
	return bf.logits, nil
}

// parallel runs fn over [0, n) on the pool when the work (n items of about
// cost values each) is worth splitting, else inline.
func (e *Executor) parallel(n, cost int, fn func(start, end int)) {
	if n <= 0 {
		return
	}
	if n == 1 || n*cost < 1<<14 || e.pool.Threads() < 2 {
		fn(0, n)
		return
	}
	e.pool.Run(n, fn)
}

// rmsNorm writes x/sqrt(mean(x²)+eps)·w to out, per row of len(w) values.
func (e *Executor) rmsNorm(out, x, w []float32, rows int) {
	d := len(w)
	eps := e.spec.RMSEps
	e.parallel(rows, d, func(a, b int) {
		for r := a; r < b; r++ {
			xr, or := x[r*d:(r+1)*d], out[r*d:(r+1)*d]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			scale := float32(1 / math.Sqrt(ss/float64(d)+eps))
			for i, v := range xr {
				or[i] = v * scale * w[i]
			}
		}
	})
}

// attention computes softmax(q·kᵀ/√headDim)·v for every query row, causally,
// reading K and V of layer li through each sequence's block table. With
// last set it computes only the sampled rows, packed in order. Work is
// split across (sequence, KV head, chunk of queries).
func (e *Executor) attention(li int, seqs []engine.SeqInput, last bool) {
	s := &e.spec
	bf := &e.buf
	bf.tasks = bf.tasks[:0]
	for i := range seqs {
		n := len(seqs[i].Tokens)
		if last {
			if !seqs[i].Sample {
				continue
			}
			out := len(bf.tasks) / s.KVHeads
			for h := range s.KVHeads {
				bf.tasks = append(bf.tasks, attnTask{seq: i, head: h, t0: n - 1, t1: n, out: out})
			}
			continue
		}
		for t0 := 0; t0 < n; t0 += attnChunk {
			t1 := min(n, t0+attnChunk)
			for h := range s.KVHeads {
				bf.tasks = append(bf.tasks, attnTask{seq: i, head: h, t0: t0, t1: t1, out: bf.seqStart[i] + t0})
			}
		}
	}
	tasks := bf.tasks
	ks, as := kernSetFor(kernUse), attnSetFor(kernUse)
	var worker atomic.Int32
	e.pool.Run(len(tasks), func(a, b int) {
		// Run calls fn at most Threads() times: one scratch each.
		sc := e.scratch[worker.Add(1)-1]
		for _, t := range tasks[a:b] {
			e.attend(as, ks, li, &seqs[t.seq], bf.seqStart[t.seq], t, sc)
		}
	})
}

// scratch is one worker's scratch space for attention and RoPE. The
// executor keeps one per pool thread; a parallel call hands them out in the
// order its chunks start.
type scratch struct {
	k, v     []float32 // one block of one head, converted from F16
	scores   []float32 // one block's scores for one query head
	acc      []float32 // attnChunk x group x ValueDim
	mx       []float32 // running max per query head
	sum      []float32 // running softmax denominator per query head
	cos, sin []float32 // RoPE angles of one position
}

func newScratch(s *model.Spec, bs, ropeDims int) *scratch {
	g := s.Heads / s.KVHeads
	return &scratch{
		k:      make([]float32, bs*s.HeadDim),
		v:      make([]float32, bs*s.ValueDim),
		scores: make([]float32, bs),
		acc:    make([]float32, attnChunk*g*s.ValueDim),
		mx:     make([]float32, attnChunk*g),
		sum:    make([]float32, attnChunk*g),
		cos:    make([]float32, ropeDims/2),
		sin:    make([]float32, ropeDims/2),
	}
}

// attnConvertMin is the fewest (query token, query head) pairs of a work
// item for which attend converts an F16 block to float32 once; fewer read
// it in place with the F16 kernels. Both give the same bits (attnSet).
const attnConvertMin = 4

// attend runs one attention work item with an online softmax over the
// blocks (one pass over K and V): each block of the work item's KV head is
// read from the cache once and serves every query token and query head of
// the item, with the kernels of as (and ks's F16 conversion).
//
// A query's result depends only on the query, its position and the cache,
// never on the other queries of the item: per block its scores are
// computed, the running maximum, denominator and weighted sum of values are
// rescaled when the block raises the maximum, and the block's terms are
// added in key order.
func (e *Executor) attend(as *attnSet, ks *kernSet, li int, seq *engine.SeqInput, start int, t attnTask, sc *scratch) {
	s := &e.spec
	bs := e.info.BlockSize
	hd, vd := s.HeadDim, s.ValueDim
	g := s.Heads / s.KVHeads
	qd := s.Heads * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	nq := t.t1 - t.t0
	acc := sc.acc[:nq*g*vd]
	clear(acc)
	mx, sum := sc.mx[:nq*g], sc.sum[:nq*g]
	for i := range mx {
		mx[i] = float32(math.Inf(-1))
		sum[i] = 0
	}
	c := e.dev
	inPlace := c.f16 && nq*g < attnConvertMin
	maxPos := seq.Pos + t.t1 - 1
	for bi := 0; bi*bs <= maxPos; bi++ {
		base := bi * bs
		nslot := min(bs, maxPos+1-base)
		blk := int(seq.Blocks[bi])
		var K, V []float32
		var K16, V16 []byte
		if inPlace {
			K16 = c.keyHalves(li, blk, t.head, nslot)
			V16 = c.valueHalves(li, blk, t.head, nslot)
		} else {
			K = c.keys(ks, li, blk, t.head, nslot, sc.k)
			V = c.values(ks, li, blk, t.head, nslot, sc.v)
		}
		for qt := t.t0; qt < t.t1; qt++ {
			lim := min(nslot, seq.Pos+qt+1-base)
			if lim <= 0 {
				continue
			}
			row := start + qt
			for hh := range g {
				qh := e.buf.q[row*qd+(t.head*g+hh)*hd:][:hd]
				idx := (qt-t.t0)*g + hh
				scores := sc.scores[:lim]
				if inPlace {
					as.dotsF16(scores, qh, K16[:2*lim*hd], scale)
				} else {
					as.dotsF32(scores, qh, K[:lim*hd], scale)
				}
				bm := float32(math.Inf(-1))
				for _, v := range scores {
					bm = max(bm, v)
				}
				corr := float32(1)
				if m := mx[idx]; bm > m {
					corr = expNeg(m - bm)
					mx[idx] = bm
				}
				sum[idx] = sum[idx]*corr + as.expSum(scores, mx[idx])
				a := acc[idx*vd : (idx+1)*vd]
				if inPlace {
					as.accF16(a, scores, V16[:2*lim*vd], corr)
				} else {
					as.accF32(a, scores, V[:lim*vd], corr)
				}
			}
		}
	}
	att := e.buf.att
	hv := s.Heads * vd
	for qt := t.t0; qt < t.t1; qt++ {
		orow := t.out + qt - t.t0
		for hh := range g {
			idx := (qt-t.t0)*g + hh
			inv := 1 / sum[idx]
			dst := att[orow*hv+(t.head*g+hh)*vd:][:vd]
			for i, v := range acc[idx*vd : (idx+1)*vd] {
				dst[i] = v * inv
			}
		}
	}
}

// expNeg returns e^x for x <= 0 (0 for -Inf or below about -87.3, where
// the result underflows), to within 2e-7 relative: x = n·ln2 + r with
// |r| <= ln2/2, e^r by a degree-6 Taylor polynomial, then scaled by 2^n.
func expNeg(x float32) float32 {
	if !(x > -87.3) {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125
		ln2lo = 1.42860682030941723212e-6
	)
	n := float32(int32(x*log2e - 0.5)) // round to nearest (x*log2e <= 0)
	r := (x - n*ln2hi) - n*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// axpy adds a·x to y.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}

// addTo adds src to dst, element by element (len(src) >= len(dst), or src
// repeats: a bias added to one row).
func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

// swigluGo writes silu(gate)·up into gate, silu(g) = g·sigmoid(g), with the
// exponential taken of -|g| so that it never overflows.
func swigluGo(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		var sig float32
		if g >= 0 {
			sig = 1 / (1 + expNeg(-g))
		} else {
			e := expNeg(g)
			sig = e / (1 + e)
		}
		gate[i] = g * sig * up[i]
	}
}
