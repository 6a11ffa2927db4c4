package cpu

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model"
)

// stepBuffers are the activations of one step, reused across steps (they
// only grow). Rows are tokens.
type stepBuffers struct {
	x, xn    []float32 // residual stream and its norm, T x Dim
	q, k, v  []float32 // projections, T x Heads·HeadDim, T x KVHeads·HeadDim, T x KVHeads·ValueDim
	qkv      []float32 // fused projection (FusedQKV), T x (q + k + v widths)
	att      []float32 // attention output, T x Heads·ValueDim
	proj     []float32 // output projection or FFN down, T x Dim
	gate, up []float32 // FFN hidden, ffnRows x FFN (up: x 2·FFN when FusedGateUp)
	moe      moeBuffers
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
// cache through the block tables, and returns the logits of the last
// Draft+1 tokens of each sequence whose Sample is set, in order (rows of
// Vocab values).
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
			// A verification step samples at every draft position too.
			for r := T - 1 - seqs[i].Draft; r < T; r++ {
				bf.sampled = append(bf.sampled, r)
			}
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

	embScale := float32(s.EmbedScale)
	e.parallel(T, dim, func(a, b int) {
		for r := a; r < b; r++ {
			i := bf.rowSeq[r]
			tok := seqs[i].Tokens[r-bf.seqStart[i]]
			xr := bf.x[r*dim : (r+1)*dim]
			e.w.embd.Row(xr, int(tok))
			if embScale != 0 {
				for j := range xr {
					xr[j] *= embScale
				}
			}
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
		fused := l.qkv.Rows > 0
		if fused {
			bf.qkv = grow(bf.qkv, T*(qd+kd+vd))
			MatMul(e.pool, bf.qkv, l.qkv, bf.xn, T)
		} else {
			MatMuls(e.pool, bf.xn, T, MatOut{bf.q[:T*qd], l.q}, MatOut{bf.k[:T*kd], l.k}, MatOut{bf.v[:T*vd], l.v})
		}
		if e.split(T, qd+kd) {
			var worker atomic.Int32
			e.pool.Run(T, func(a, b int) {
				e.qkvRows(seqs, l, li, e.scratch[worker.Add(1)-1], a, b)
			})
		} else {
			e.qkvRows(seqs, l, li, e.scratch[0], 0, T)
		}
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
		if l.postAttnNorm != nil {
			e.rmsNorm(bf.proj[:rows*dim], bf.proj[:rows*dim], l.postAttnNorm, rows)
		}
		addTo(x[:rows*dim], bf.proj[:rows*dim])
		e.rmsNorm(bf.xn[:rows*dim], x[:rows*dim], l.ffnNorm, rows)
		if l.moe != nil {
			e.moeFFN(l.moe, rows)
		} else {
			e.denseFFN(l, rows)
		}
		if l.postFFNNorm != nil {
			e.rmsNorm(bf.proj[:rows*dim], bf.proj[:rows*dim], l.postFFNNorm, rows)
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
	if c := float32(s.LogitSoftcap); c != 0 {
		e.parallel(rows, V, func(a, b int) { softcap(bf.logits[a*V:b*V], c) })
	}
	return bf.logits, nil
}

// qkvRows finishes rows [a, b) of a layer's projections, on one worker's
// scratch: Q, K and V out of the fused projection, the biases, the heads'
// norms and RoPE; then it writes K and V into the cache.
func (e *Executor) qkvRows(seqs []engine.SeqInput, l *layer, li int, sc *scratch, a, b int) {
	s := &e.spec
	bf := &e.buf
	qd, kd, vd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.KVHeads*s.ValueDim
	fused := l.qkv.Rows > 0
	rp := e.rope
	if s.SlidingLayer(li) {
		rp = e.ropeSWA
	}
	ks := kernSetFor(kernUse)
	cos, sin := sc.cos, sc.sin
	for r := a; r < b; r++ {
		q, k, v := bf.q[r*qd:(r+1)*qd], bf.k[r*kd:(r+1)*kd], bf.v[r*vd:(r+1)*vd]
		if fused {
			row := bf.qkv[r*(qd+kd+vd) : (r+1)*(qd+kd+vd)]
			copy(q, row[:qd])
			copy(k, row[qd:qd+kd])
			copy(v, row[qd+kd:])
		}
		if l.qb != nil {
			addTo(q, l.qb)
			addTo(k, l.kb)
			addTo(v, l.vb)
		}
		if l.qNorm != nil {
			headNorm(q, s.Heads, l.qNorm, s.RMSEps)
			headNorm(k, s.KVHeads, l.kNorm, s.RMSEps)
		}
		// One token's angles serve every layer of its rope: a decode
		// step computes them once.
		p := int(bf.rowPos[r])
		if sc.anglesOf != rp || sc.anglesPos != p {
			rp.angles(p, cos, sin)
			sc.anglesOf, sc.anglesPos = rp, p
		}
		rp.apply(q, s.Heads, s.HeadDim, cos, sin)
		rp.apply(k, s.KVHeads, s.HeadDim, cos, sin)
		seq := &seqs[bf.rowSeq[r]]
		e.dev.write(ks, li, int(seq.Blocks[p/e.info.BlockSize]), p%e.info.BlockSize, k, v)
	}
}

// denseFFN computes the gated feed-forward of the first rows rows of the
// normed stream into proj: down(act(gate·x) ⊙ up·x), with gate and up from
// one fused matrix when the layer has no gate of its own.
func (e *Executor) denseFFN(l *layer, rows int) {
	s := &e.spec
	bf := &e.buf
	dim, F := s.Dim, s.FFN
	act := e.activation()
	fused := l.gate.Rows == 0
	for a := 0; a < rows; a += ffnRows {
		n := min(ffnRows, rows-a)
		bf.gate = grow(bf.gate, n*F)
		if fused {
			bf.up = grow(bf.up, n*2*F)
			MatMul(e.pool, bf.up, l.up, bf.xn[a*dim:], n)
			if e.split(n, F) {
				e.pool.Run(n, func(i, j int) { gatedRows(act, bf.gate, bf.up, F, i, j) })
			} else {
				gatedRows(act, bf.gate, bf.up, F, 0, n)
			}
		} else {
			bf.up = grow(bf.up, n*F)
			MatMuls(e.pool, bf.xn[a*dim:], n, MatOut{bf.gate, l.gate}, MatOut{bf.up, l.up})
			if e.split(n, F) {
				e.pool.Run(n, func(i, j int) { act(bf.gate[i*F:j*F], bf.up[i*F:j*F]) })
			} else {
				act(bf.gate[:n*F], bf.up[:n*F])
			}
		}
		MatMul(e.pool, bf.proj[a*dim:(a+n)*dim], l.down, bf.gate, n)
	}
}

// gatedRows writes act(gate, up) of rows [a, b) of a fused gate-and-up
// projection gu (rows of 2·F: gate, then up) into gate (rows of F).
func gatedRows(act func(gate, up []float32), gate, gu []float32, F, a, b int) {
	for r := a; r < b; r++ {
		row := gu[r*2*F : (r+1)*2*F]
		act(row[:F], row[F:])
		copy(gate[r*F:(r+1)*F], row[:F])
	}
}

// activation returns the gated activation of the model's feed-forward:
// gelu(gate)·up for GELU models, else silu(gate)·up.
func (e *Executor) activation() func(gate, up []float32) {
	if e.spec.GELU {
		return gegluGo
	}
	return attnSetFor(kernUse).swiglu
}

// parallel runs fn over [0, n) on the pool when the work (n items of about
// cost values each) is worth splitting, else inline.
func (e *Executor) parallel(n, cost int, fn func(start, end int)) { runParallel(e.pool, n, cost, fn) }

// split reports whether n items of about cost values each are worth
// splitting over the pool. The hot paths of a step test it before they make
// a closure for the pool, so that a decode step allocates nothing.
func (e *Executor) split(n, cost int) bool { return worthSplit(e.pool, n, cost) }

// worthSplit reports whether n items of about cost values each are worth
// splitting over pool.
func worthSplit(pool *Pool, n, cost int) bool { return n > 1 && n*cost >= 1<<14 && pool.Threads() > 1 }

// runParallel runs fn over [0, n) on pool when the work is worth splitting.
func runParallel(pool *Pool, n, cost int, fn func(start, end int)) {
	if n <= 0 {
		return
	}
	if !worthSplit(pool, n, cost) {
		fn(0, n)
		return
	}
	pool.Run(n, fn)
}

// rmsNorm writes x/sqrt(mean(x²)+eps)·w to out, per row of len(w) values.
func (e *Executor) rmsNorm(out, x, w []float32, rows int) {
	d, eps := len(w), e.spec.RMSEps
	if !e.split(rows, d) {
		rmsNormRows(out, x, w, eps, 0, rows)
		return
	}
	e.pool.Run(rows, func(a, b int) { rmsNormRows(out, x, w, eps, a, b) })
}

// rmsNormRows is rmsNorm of rows [a, b).
func rmsNormRows(out, x, w []float32, eps float64, a, b int) {
	d := len(w)
	for r := a; r < b; r++ {
		xr, or := x[r*d:(r+1)*d], out[r*d:(r+1)*d]
		scale := float32(1 / math.Sqrt(sumSquares(xr)/float64(d)+eps))
		for i, v := range xr {
			or[i] = v * scale * w[i]
		}
	}
}

// attention computes softmax(scale·q·kᵀ)·v for every query row, causally
// (and over the last SlidingWindow positions only in a sliding-window
// layer), reading K and V of layer li through each sequence's block
// table; scale is the spec's AttnScale, by default 1/√headDim. With
// last set it computes only the sampled rows, packed in order. Work is
// split across (sequence, KV head, chunk of queries).
func (e *Executor) attention(li int, seqs []engine.SeqInput, last bool) {
	s := &e.spec
	bf := &e.buf
	bf.tasks = bf.tasks[:0]
	out := 0 // next packed output row when last
	for i := range seqs {
		n := len(seqs[i].Tokens)
		if last {
			if !seqs[i].Sample {
				continue
			}
			// The sampled rows: the last token and the drafts before it.
			first := n - 1 - seqs[i].Draft
			for t0 := first; t0 < n; t0 += attnChunk {
				t1 := min(n, t0+attnChunk)
				for h := range s.KVHeads {
					bf.tasks = append(bf.tasks, attnTask{seq: i, head: h, t0: t0, t1: t1, out: out + t0 - first})
				}
			}
			out += n - first
			continue
		}
		for t0 := 0; t0 < n; t0 += attnChunk {
			t1 := min(n, t0+attnChunk)
			for h := range s.KVHeads {
				bf.tasks = append(bf.tasks, attnTask{seq: i, head: h, t0: t0, t1: t1, out: bf.seqStart[i] + t0})
			}
		}
	}
	c := &e.attn
	c.li, c.window, c.seqs = li, 0, seqs
	if s.SlidingLayer(li) {
		c.window = s.SlidingWindow
	}
	c.worker.Store(0)
	if c.run == nil {
		c.run = e.attendTasks
	}
	e.pool.Run(len(bf.tasks), c.run)
	c.seqs = nil
}

// attnCall is the attention call in progress: the layer, its window and
// the step's sequences for attendTasks, which is bound to run on first
// use, so that a step allocates nothing.
type attnCall struct {
	li, window int
	seqs       []engine.SeqInput
	worker     atomic.Int32 // hands out the scratch spaces
	run        func(a, b int)
}

// attendTasks runs attention work items [a, b) of the call in progress
// (Pool.Run's function).
func (e *Executor) attendTasks(a, b int) {
	c := &e.attn
	// Run calls it at most Threads() times: one scratch each.
	sc := e.scratch[c.worker.Add(1)-1]
	ks, as := kernSetFor(kernUse), attnSetFor(kernUse)
	for _, t := range e.buf.tasks[a:b] {
		e.attend(as, ks, c.li, c.window, &c.seqs[t.seq], e.buf.seqStart[t.seq], t, sc)
	}
}

// scratch is one worker's scratch space for attention and RoPE. The
// executor keeps one per pool thread; a parallel call hands them out in the
// order its chunks start.
type scratch struct {
	span     int         // keys of one softmax step of attend (attnSpan)
	k, v     []float32   // one step's keys and values of one head, converted from F16 or dequantized
	kf, vf   [][]float32 // per block of a step, an F32 cache's keys and values (views)
	kb, vb   [][]byte    // per block of a step, an F16 cache's keys and values in place
	scores   []float32   // one step's scores for one query head
	acc      []float32   // attnChunk x group x ValueDim
	mx       []float32   // running max per query head
	sum      []float32   // running softmax denominator per query head
	cos, sin []float32   // RoPE angles of one position
	// anglesOf's angles of position anglesPos are in cos and sin (none
	// while anglesOf is nil).
	anglesOf  *rope
	anglesPos int
}

func newScratch(s *model.Spec, bs, ropeDims int) *scratch {
	g := s.Heads / s.KVHeads
	sp := attnSpan(bs, s.HeadDim, s.ValueDim)
	return &scratch{
		span:   sp,
		k:      make([]float32, sp*s.HeadDim),
		v:      make([]float32, sp*s.ValueDim),
		kf:     make([][]float32, sp/bs),
		vf:     make([][]float32, sp/bs),
		kb:     make([][]byte, sp/bs),
		vb:     make([][]byte, sp/bs),
		scores: make([]float32, sp),
		acc:    make([]float32, attnChunk*g*s.ValueDim),
		mx:     make([]float32, attnChunk*g),
		sum:    make([]float32, attnChunk*g),
		cos:    make([]float32, ropeDims/2),
		sin:    make([]float32, ropeDims/2),
	}
}

// attnSpanBytes bounds the float32 keys and values of one softmax step of
// attend: every query of a work item reads them in turn, from L1.
const attnSpanBytes = 32 << 10

// attnSpan returns the keys of one softmax step of attend for blocks of bs
// keys of hd dimensions and values of vd: the most blocks, a power of two,
// whose float32 keys and values fit attnSpanBytes, and at least one. With
// 16-key blocks of 64-dimension heads that is 64 keys, with 128-dimension
// heads 32.
func attnSpan(bs, hd, vd int) int {
	sp := bs
	for 2*sp*(hd+vd)*4 <= attnSpanBytes {
		sp *= 2
	}
	return sp
}

// attnConvertMin is the fewest (query token, query head) pairs of a work
// item for which attend converts an F16 block to float32 once; fewer read
// it in place with the F16 kernels. Both give the same bits (attnSet).
const attnConvertMin = 4

// attend runs one attention work item with an online softmax over steps of
// sc.span keys (attnSpan: whole blocks, at positions that are multiples of
// the span), in one pass over K and V: each block of the work item's KV
// head is read from the cache once and serves every query token and query
// head of the item, with the kernels of as (and ks's F16 conversion). A
// Q8_0 or Q4_0 block is always dequantized into scratch first (as's
// dequantizers), whatever the item's size, so its queries get the same bits
// in any batch.
//
// A query's result depends only on the query, its position and the cache,
// never on the other queries of the item: per step its scores are computed
// (key by key), the running maximum, denominator and weighted sum of values
// are rescaled when the step raises the maximum, and the step's terms are
// added in key order. A step spans several blocks so that the maximum, the
// exponentials and their sum are taken over many keys per kernel call, not
// sixteen: with 16-key blocks the calls cost more than the arithmetic.
//
// With window > 0 a query at position p sees only the keys at positions
// p' > p − window; blocks wholly before every query's window are not read.
func (e *Executor) attend(as *attnSet, ks *kernSet, li, window int, seq *engine.SeqInput, start int, t attnTask, sc *scratch) {
	s := &e.spec
	bs, sp := e.info.BlockSize, sc.span
	hd, vd := s.HeadDim, s.ValueDim
	g := s.Heads / s.KVHeads
	qd := s.Heads * hd
	scale := e.attnScale
	nq := t.t1 - t.t0
	acc := sc.acc[:nq*g*vd]
	clear(acc)
	mx, sum := sc.mx[:nq*g], sc.sum[:nq*g]
	for i := range mx {
		mx[i] = float32(math.Inf(-1))
		sum[i] = 0
	}
	c := e.dev
	// The keys and values are read from the cache block by block where
	// it holds float32 (views) or the item has few queries for an F16
	// block (in place), else converted into scratch, one run per step.
	f32 := c.typ == kvF32
	inPlace := c.typ == kvF16 && nq*g < attnConvertMin
	perBlock := f32 || inPlace
	maxPos := seq.Pos + t.t1 - 1
	seen := 0 // the first key any query of the item sees
	if window > 0 {
		seen = max(0, seq.Pos+t.t0-window+1)
	}
	for base := seen / sp * sp; base <= maxPos; base += sp {
		nkeys := min(sp, maxPos+1-base)
		for b := max(0, seen-base) / bs; b*bs < nkeys; b++ {
			n := min(bs, nkeys-b*bs)
			blk := int(seq.Blocks[(base+b*bs)/bs])
			switch {
			case f32:
				sc.kf[b] = c.keys(ks, as, li, blk, t.head, n, nil)
				sc.vf[b] = c.values(ks, as, li, blk, t.head, n, nil)
			case inPlace:
				sc.kb[b] = c.keyBytes(li, blk, t.head, n)
				sc.vb[b] = c.valueBytes(li, blk, t.head, n)
			default: // one run in scratch for the whole step
				c.keys(ks, as, li, blk, t.head, n, sc.k[b*bs*hd:])
				c.values(ks, as, li, blk, t.head, n, sc.v[b*bs*vd:])
			}
		}
		for qt := t.t0; qt < t.t1; qt++ {
			// The query sees keys [from, lim) of this step.
			lim := min(nkeys, seq.Pos+qt+1-base)
			from := 0
			if window > 0 {
				from = max(0, seq.Pos+qt-window+1-base)
			}
			if lim <= from {
				continue
			}
			row := start + qt
			for hh := range g {
				qh := e.buf.q[row*qd+(t.head*g+hh)*hd:][:hd]
				idx := (qt-t.t0)*g + hh
				scores := sc.scores[from:lim]
				if !perBlock {
					as.dotsF32(scores, qh, sc.k[from*hd:lim*hd], scale)
				}
				// Block b holds keys [b·bs, b·bs+bs) of the step; the
				// query's part of it is [lo, hi), at o within the block.
				for b := from / bs; perBlock && b*bs < lim; b++ {
					lo, hi := max(from, b*bs), min(lim, b*bs+bs)
					o := lo - b*bs
					if f32 {
						as.dotsF32(sc.scores[lo:hi], qh, sc.kf[b][o*hd:(o+hi-lo)*hd], scale)
					} else {
						as.dotsF16(sc.scores[lo:hi], qh, sc.kb[b][2*o*hd:2*(o+hi-lo)*hd], scale)
					}
				}
				bm := as.max(scores)
				corr := float32(1)
				if m := mx[idx]; bm > m {
					corr = expNeg(m - bm)
					mx[idx] = bm
				}
				sum[idx] = sum[idx]*corr + as.expSum(scores, mx[idx])
				a := acc[idx*vd : (idx+1)*vd]
				if !perBlock {
					as.accF32(a, scores, sc.v[from*vd:lim*vd], corr)
					continue
				}
				// The first block rescales the sum; the rest add to it
				// (times 1, exact), so the keys go in order as in one
				// call.
				for b := from / bs; b*bs < lim; b++ {
					lo, hi := max(from, b*bs), min(lim, b*bs+bs)
					o := lo - b*bs
					if f32 {
						as.accF32(a, sc.scores[lo:hi], sc.vf[b][o*vd:(o+hi-lo)*vd], corr)
					} else {
						as.accF16(a, sc.scores[lo:hi], sc.vb[b][2*o*vd:2*(o+hi-lo)*vd], corr)
					}
					corr = 1
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
