package cpu

import (
	"sync"

	"github.com/llmd/llmd/model/gguf"
)

// The tile loop: MatMul, and MatMuls of several matrices over the same
// activations, run every matrix that has tile kernels through one
// tileLoop: the activations prepared once (quantized for the quantized
// types, rounded to bfloat16 for weights packed for the BF16 kernels), then
// one Share over chunks of every matrix's groups. At one token a layer's
// small matrices (Q, K and V of 64-800 KB at the 0.5B shape) took 7-25 µs
// a call of which 5-6 µs was the call itself (quantizing, the hand-off to
// the other thread, the wait for the last chunk): one loop over the three
// pays that once. A token's outputs have the same bits either way: each
// group goes through the same kernel for the same number of tokens.

// kernTileBufPool holds buffers for weights packed as a tile loop goes
// (a Weight without its packed copy).
var kernTileBufPool = sync.Pool{New: func() any { return new([]byte) }}

// tileKind is how a tileMat's kernels take the activations.
type tileKind uint8

const (
	tileQuant tileKind = iota // quantized per 32 values (tileLoop.xq, and dc words of its kernTile)
	tileBF16                  // rounded to bfloat16 (tileLoop.xb)
	tileF16                   // as they are (float32)
)

// tileMat is one matrix of a tileLoop: out = w·x through the tile kernels
// of its kind.
type tileMat struct {
	w    Weight
	out  []float32
	kind tileKind
	tl   *kernTile                          // tileQuant
	bf16 *[kernTileMax + 1]kernTileBF16Func // tileBF16
	f16  *[kernTileF16Max + 1]kernTileF16Func
	ti   int // tileQuant: its kernTile's index in tileLoop.tiles
	// The loop's cut: gb bytes per packed group (pack packs them where w
	// holds no tiles), groups of them in tiles of tileG and chunks of
	// grain (multiples of gm, the groups a kernel takes at once), tokens
	// in steps of up to tmax; its chunks are numbered from chunk0.
	pack         func(dst []byte, w Weight, r0, groups int)
	packed       []byte
	gb, groups   int
	gm, tmax     int
	tileG, grain int
	chunk0       int
	full         int // groups without missing rows
}

// tileLoop is one tile loop in progress: n tokens of activations x
// through mats. Its buffers are reused (tileLoopPool); run is its Share
// function, bound once, so a loop allocates nothing.
type tileLoop struct {
	ks   *kernSet
	x    []float32
	n    int
	mats []tileMat
	// The activations as the kernels take them: xq, xd and xs for the
	// quantized types, and per kernTile used (tiles) its dc words at
	// tileLoop.dc[dcAt[i]:]; xb for the BF16 kernels.
	xq     []int8
	xd, xs []float32
	dc     []int32
	tiles  []*kernTile
	dcAt   []int
	xb     []uint16
	needXB bool

	run, prep func(start, end int)
}

// tileLoopPool holds the tile loops not in use, with their buffers (the
// activations of up to a prefill's tokens) and bound functions.
var tileLoopPool = sync.Pool{New: func() any {
	lp := new(tileLoop)
	lp.run, lp.prep = lp.chunks, lp.prepare
	return lp
}}

// kernGetTileLoop returns an empty tileLoop over n tokens of x.
func kernGetTileLoop(ks *kernSet, x []float32, n int) *tileLoop {
	lp := tileLoopPool.Get().(*tileLoop)
	lp.ks, lp.x, lp.n = ks, x, n
	return lp
}

// put empties lp and returns it to the pool.
func (lp *tileLoop) put() {
	clear(lp.mats)
	clear(lp.tiles)
	lp.mats, lp.tiles, lp.dcAt = lp.mats[:0], lp.tiles[:0], lp.dcAt[:0]
	lp.ks, lp.x, lp.needXB = nil, nil, false
	tileLoopPool.Put(lp)
}

// add adds out = w·x to lp when w has tile kernels at lp's level, and
// reports whether it did.
func (lp *tileLoop) add(out []float32, w Weight) bool {
	ks, n, cols := lp.ks, lp.n, w.Cols
	m := tileMat{w: w, out: out, gb: 32 * cols, tmax: kernTileMax}
	switch w.Type {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		switch {
		case w.bf16:
			m.kind, m.bf16, m.pack = tileBF16, ks.tileBF16, kernPackBF16
			if m.bf16 == nil {
				m.bf16 = &kernTileBF16Gos
			}
			m.gm = kernTileBF16Groups(kernTileFewest(n, kernTileMax))
			lp.needXB = true
		case w.Type == gguf.TypeF16 && ks.tileF16 != nil && cols%kernTileF16Cols == 0:
			m.kind, m.f16, m.pack = tileF16, ks.tileF16, kernPackF16
			if n > kernTileF16Max {
				m.tmax = kernTileF16Step
			}
			m.gm = kernTileF16Groups(kernTileFewest(n, m.tmax))
		default:
			return false
		}
	default:
		tl := ks.tile[w.Type]
		if tl == nil {
			return false
		}
		m.kind, m.tl, m.pack, m.gb = tileQuant, tl, tl.pack, cols/kernQK*tl.blockBytes
		// One token goes through tl.streams (tl.streams4) two (four)
		// groups at a time: chunks of whole sets, however wide the rows
		// (a 152 KiB group of 8,960 Q8_0 columns would otherwise make a
		// tile, and a chunk, of one).
		m.gm = 1
		switch {
		case n == 1 && tl.streams4 != nil:
			m.gm = 4
		case n == 1 && tl.streams != nil:
			m.gm = 2
		}
		m.ti = -1
		for i, t := range lp.tiles {
			if t == tl {
				m.ti = i
			}
		}
		if m.ti < 0 {
			m.ti = len(lp.tiles)
			lp.tiles = append(lp.tiles, tl)
		}
	}
	lp.mats = append(lp.mats, m)
	return true
}

// exec computes lp's products on p: the activations first, then the
// matrices' chunks.
func (lp *tileLoop) exec(p *Pool) {
	if len(lp.mats) == 0 {
		return
	}
	n, cols := lp.n, lp.mats[0].w.Cols
	nb := cols / kernQK
	if len(lp.tiles) > 0 {
		lp.xq = grow(lp.xq, n*cols)
		lp.xd, lp.xs = grow(lp.xd, n*nb), grow(lp.xs, n*nb)
		words := 0
		for _, tl := range lp.tiles {
			lp.dcAt = append(lp.dcAt, words)
			words += tl.words() * n * nb
		}
		lp.dc = grow(lp.dc, words)
	}
	if lp.needXB {
		lp.xb = grow(lp.xb, n*cols)
	}
	if len(lp.tiles) > 0 || lp.needXB {
		if n*cols >= 1<<15 {
			p.Run(n, lp.prep)
		} else {
			lp.prepare(0, n)
		}
	}
	cnt := 0
	for i := range lp.mats {
		m := &lp.mats[i]
		m.groups = kernTileGroups(m.w.Rows)
		m.packed = m.w.tiles
		if len(m.packed) != m.groups*m.gb {
			m.packed = nil
		}
		m.tileG = (max(1, kernTileBytes/max(m.gb, 1)) + m.gm - 1) / m.gm * m.gm
		m.grain = (kernGrain(p, m.groups, m.tileG) + m.gm - 1) / m.gm * m.gm
		m.full = m.w.Rows / kernTileRows
		m.chunk0 = cnt
		cnt += (m.groups + m.grain - 1) / m.grain
	}
	p.Share(cnt, 1, lp.run)
}

// prepare sets the activations of tokens [t0, t1) as the kernels take
// them.
func (lp *tileLoop) prepare(t0, t1 int) {
	cols := lp.mats[0].w.Cols
	nb := cols / kernQK
	for t := t0; t < t1; t++ {
		x := lp.x[t*cols : (t+1)*cols]
		if lp.needXB {
			lp.ks.toBF16(lp.xb[t*cols:(t+1)*cols], x)
		}
		if len(lp.tiles) == 0 {
			continue
		}
		q, d, s := lp.xq[t*cols:(t+1)*cols], lp.xd[t*nb:(t+1)*nb], lp.xs[t*nb:(t+1)*nb]
		lp.ks.quantize(q, d, s, x)
		for i, tl := range lp.tiles {
			w := tl.words()
			tl.dc(lp.dc[lp.dcAt[i]+w*t*nb:][:w*nb], q, d, s)
		}
	}
}

// chunks runs chunks [c0, c1) of lp's matrices (Share's function): per
// tile of groups (which stays in cache), tokens in steps of up to tmax (of
// nearly equal size, kernTileStep). The tokens' activations stay in L1
// while the weights come from L2, and from memory only for the first step.
func (lp *tileLoop) chunks(c0, c1 int) {
	var bp *[]byte // a buffer for weights packed on the fly
	for c := c0; c < c1; c++ {
		i := 0
		for i+1 < len(lp.mats) && lp.mats[i+1].chunk0 <= c {
			i++
		}
		m := &lp.mats[i]
		g0 := (c - m.chunk0) * m.grain
		g1 := min(m.groups, g0+m.grain)
		var buf []byte
		if m.packed == nil {
			if bp == nil {
				bp = kernTileBufPool.Get().(*[]byte)
			}
			if cap(*bp) < min(m.tileG, g1-g0)*m.gb {
				*bp = alignedMake[byte](min(m.tileG, g1-g0) * m.gb)
			}
			buf = *bp
		}
		lp.groups(m, g0, g1, buf)
	}
	if bp != nil {
		kernTileBufPool.Put(bp)
	}
}

// groups runs groups [g0, g1) of m, packing them into buf where m has no
// packed weights.
func (lp *tileLoop) groups(m *tileMat, g0, g1 int, buf []byte) {
	rows, n, gb := m.w.Rows, lp.n, m.gb
	var last []float32 // the short last group's rows; most matrices have none
	for gt := g0; gt < g1; gt += m.tileG {
		ge := min(g1, gt+m.tileG)
		var wt []byte
		if m.packed != nil {
			wt = m.packed[gt*gb : ge*gb]
		} else {
			wt = buf[:(ge-gt)*gb]
			m.pack(wt, m.w, gt*kernTileRows, ge-gt)
		}
		whole := min(ge, m.full) - gt // groups written straight into out
		steps := (n + m.tmax - 1) / m.tmax
		for i, t := 0, 0; i < steps; i++ {
			T := kernTileStep(n, steps, i)
			if whole > 0 {
				lp.call(m, T, m.out[t*rows+gt*kernTileRows:], rows, wt, whole, t)
			}
			if whole < ge-gt { // the last group, short of rows
				if last == nil {
					last = make([]float32, m.tmax*kernTileRows)
				}
				lp.call(m, T, last, kernTileRows, wt[whole*gb:], 1, t)
				r0 := (gt + whole) * kernTileRows
				for j := range T {
					copy(m.out[(t+j)*rows+r0:(t+j+1)*rows], last[j*kernTileRows:])
				}
			}
			t += T
		}
	}
}

// call computes tokens t..t+T-1 of the groups of m packed in wt into out
// (token i's outputs at out[i·ostride:]).
func (lp *tileLoop) call(m *tileMat, T int, out []float32, ostride int, wt []byte, groups, t int) {
	cols := m.w.Cols
	switch m.kind {
	case tileQuant:
		nb, words := cols/kernQK, m.tl.words()
		q, d := lp.xq[t*cols:(t+T)*cols], lp.dc[lp.dcAt[m.ti]+words*t*nb:][:words*T*nb]
		if T == 1 {
			kernTileCallStreams(m.tl, out, wt, groups, nb, q, d)
			return
		}
		kernTileCall(m.tl.kern[T], m.tl, T, out, ostride, wt, groups, nb, q, d)
	case tileBF16:
		kernTileFloatCall(m.bf16[T], T, out, ostride, wt, groups, cols, lp.xb[t*cols:(t+T)*cols])
	default:
		kernTileFloatCall(m.f16[T], T, out, ostride, wt, groups, cols, lp.x[t*cols:(t+T)*cols])
	}
}

// kernTileStep is how many tokens step i of steps takes when a tileLoop
// splits n tokens into steps of nearly equal size (the first n%steps one
// more): fourteen tokens in steps of up to six are five, five and four,
// not six, six and two, whose kernel keeps fewer chains busy.
func kernTileStep(n, steps, i int) int {
	T := n / steps
	if i < n%steps {
		T++
	}
	return T
}

// kernTileFewest is the fewest tokens of one of a tileLoop's steps over
// n tokens in steps of up to tmax.
func kernTileFewest(n, tmax int) int { return n / ((n + tmax - 1) / tmax) }
