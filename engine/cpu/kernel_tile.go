package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/llmd/llmd/model/gguf"
)

// The tile kernels: a GEMM micro-kernel whose vector lanes are sixteen
// weight rows, for one to kernTileMax tokens at a time, over weights
// repacked in groups of kernTileRows rows (kernTile.pack). A (row, token)
// lane runs the same operations whatever the number of tokens, so one
// token (decode) and a batch (prefill) get the same bits.

const (
	kernTileRows = 16 // rows of a packed group: the lanes of a zmm register
	kernTileMax  = 8  // the most tokens a tile kernel takes at once
)

// kernTileFunc is a tile kernel for T tokens: for each of the groups
// packed in w (nb blocks each), out[t·ostride + 16g + i] = the dot of row i
// of group g with token t, where token t's quantized activations are
// xq[t·32nb:(t+1)·32nb] and its per-block words dc[t·2nb:(t+1)·2nb]
// (kernTile.dc).
type kernTileFunc func(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

// kernTile is a weight type's tile family.
type kernTile struct {
	// blockBytes is the size of one block of a packed group.
	blockBytes int
	// pack repacks rows [r0, r0+16·groups) of w (rows past w.Rows as
	// zeros) into dst, groups·nb·blockBytes bytes.
	pack func(dst []byte, w Weight, r0, groups int)
	// dc sets a token's two words per block: the bits of its scale xd[b],
	// then the integer correction the kernels start each block from.
	dc func(dc []int32, xq []int8, xd, xs []float32)
	// kern[T] takes T tokens (1..kernTileMax).
	kern [kernTileMax + 1]kernTileFunc
}

// kernTileGroups returns the number of packed groups of rows rows.
func kernTileGroups(rows int) int { return (rows + kernTileRows - 1) / kernTileRows }

// kernTilePack returns w's rows repacked for the tile family of the best
// kernel level, or nil where that level has none for w's type.
func kernTilePack(w Weight) []byte {
	tl := kernSetFor(kernBest).tile[w.Type]
	if tl == nil || w.Rows == 0 {
		return nil
	}
	nb := w.Cols / kernQK
	groups, gb := kernTileGroups(w.Rows), nb*tl.blockBytes
	buf := alignedMake[byte](groups * gb)
	// Large weights are packed by as many goroutines as there are CPUs
	// (loading a model packs each of its matrices).
	k := min(runtime.GOMAXPROCS(0), groups*gb/(1<<20)+1, groups)
	var wg sync.WaitGroup
	for i := range k {
		g0, g1 := i*groups/k, (i+1)*groups/k
		wg.Go(func() { tl.pack(buf[g0*gb:g1*gb], w, g0*kernTileRows, g1-g0) })
	}
	wg.Wait()
	return buf
}

// kernPackQ4_0 is the Q4_0 tile layout: per group and block, the sixteen
// rows' f16 scales (32 bytes), then for g = 0..3 each row's qs[4g:4g+4]
// (64 bytes). Missing rows are zeros (scale 0).
func kernPackQ4_0(dst []byte, w Weight, r0, groups int) {
	kernPackRows(dst, w, r0, groups, 18, kernQ4TileBlock, 0)
}

// kernPackRows packs groups of sixteen rows from r0 into dst, for blocks
// of bsz bytes (an f16 scale, then the quants) into tile blocks of tb
// bytes: the sixteen scales (32 bytes), then for each 4-byte word k of the
// quants, the sixteen rows' word k (64 bytes), XORed with flip. Missing
// rows are zeros (scale 0).
func kernPackRows(dst []byte, w Weight, r0, groups, bsz, tb int, flip uint32) {
	rb := w.rowBytes()
	nb := w.Cols / kernQK
	gb := nb * tb
	words := (bsz - 2) / 4
	dst = dst[:groups*gb]
	for g := range groups {
		out := dst[g*gb : (g+1)*gb]
		if r0+(g+1)*kernTileRows > w.Rows {
			clear(out) // missing rows
		}
		for i := range kernTileRows {
			r := r0 + g*kernTileRows + i
			if r >= w.Rows {
				break
			}
			row := w.Data[r*rb : (r+1)*rb]
			for b := range nb {
				blk := row[b*bsz : (b+1)*bsz : (b+1)*bsz]
				o := out[b*tb : (b+1)*tb : (b+1)*tb]
				o[2*i], o[2*i+1] = blk[0], blk[1]
				for k := range words {
					binary.LittleEndian.PutUint32(o[32+64*k+4*i:], binary.LittleEndian.Uint32(blk[2+4*k:])^flip)
				}
			}
		}
	}
}

// kernQ4TileBlock is the size of one block of a packed Q4_0 group.
const kernQ4TileBlock = 32 + 16*16

// kernDCQ4_0 sets, per block, the scale's bits and -8·Σxq (the kernels
// dot the unsigned nibbles q, and Σ(q-8)·x = Σq·x - 8·Σx). Σxq is read
// back from xs = fl(xd·Σxq): |Σxq| <= 32·127, so xs/xd is within far less
// than ½ of it and rounds to it exactly (and xd = 0 only for a block of
// zeros).
func kernDCQ4_0(dc []int32, xq []int8, xd, xs []float32) {
	kernDCOffset(dc, xd, xs, -8)
}

// kernDCOffset sets dc's words per block: xd's bits and off·Σxq, with Σxq
// read back from xs as kernDCQ4_0 says.
func kernDCOffset(dc []int32, xd, xs []float32, off int32) {
	for b, d := range xd {
		var sum int32
		if d != 0 {
			sum = int32(math.RoundToEven(float64(xs[b]) / float64(d)))
		}
		dc[2*b], dc[2*b+1] = int32(math.Float32bits(d)), off*sum
	}
}

// kernPackQ8_0 is the Q8_0 tile layout: per group and block, the sixteen
// rows' f16 scales (32 bytes), then for k = 0..7 each row's qs[4k:4k+4]
// (64 bytes), stored offset by 128 (q+128, the flip of the sign bit), as
// VPDPBUSD's unsigned operand. Missing rows are zeros (scale 0). The size
// is the file's.
func kernPackQ8_0(dst []byte, w Weight, r0, groups int) {
	kernPackRows(dst, w, r0, groups, 34, kernQ8TileBlock, 0x80808080)
}

// kernQ8TileBlock is the size of one block of a packed Q8_0 group.
const kernQ8TileBlock = 32 + 16*32

// kernDCQ8_0 sets, per block, the scale's bits and -128·Σxq (the kernels
// dot the weights stored as q+128: Σ(q+128)·x - 128·Σx = Σq·x).
func kernDCQ8_0(dc []int32, xq []int8, xd, xs []float32) {
	kernDCOffset(dc, xd, xs, -128)
}

// kernTileCall runs k on T tokens after checking every size the assembly
// relies on; a mismatch is a programming error and panics.
func kernTileCall(k kernTileFunc, tl *kernTile, T int, out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32) {
	if groups <= 0 {
		return
	}
	if len(w) < groups*nb*tl.blockBytes || len(xq) < T*nb*kernQK || len(dc) < 2*T*nb ||
		(T > 1 && ostride < groups*kernTileRows) || len(out) < (T-1)*ostride+groups*kernTileRows {
		panic(fmt.Sprintf("cpu: tile kernel of %d tokens, %d groups of %d blocks: w %d, xq %d, dc %d, out %d (stride %d)",
			T, groups, nb, len(w), len(xq), len(dc), len(out), ostride))
	}
	k(out, ostride, w, groups, nb, xq, dc)
}

var kernTileBufPool = sync.Pool{New: func() any { return new([]byte) }}

// kernMatMulTile is MatMul through tl: per tile of packed groups (from
// w.tiles, or packed here when w has none), the tokens in steps of eight.
func kernMatMulTile(p *Pool, ks *kernSet, tl *kernTile, out []float32, w Weight, x []float32, n int) {
	cols, rows := w.Cols, w.Rows
	nb := cols / kernQK
	gb := nb * tl.blockBytes
	groups := kernTileGroups(rows)
	packed := w.tiles
	if len(packed) != groups*gb {
		packed = nil
	}
	sc := kernGetScratch(n*cols, n*nb)
	defer kernScratchPool.Put(sc)
	xq, xd, xs := sc.xq, sc.xd, sc.xs
	dc := sc.lanes(2 * n * nb)
	quantize := func(t0, t1 int) {
		for t := t0; t < t1; t++ {
			q, d, s := xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb]
			ks.quantize(q, d, s, x[t*cols:(t+1)*cols])
			tl.dc(dc[2*t*nb:2*(t+1)*nb], q, d, s)
		}
	}
	if n*cols >= 1<<15 {
		p.Run(n, quantize)
	} else {
		quantize(0, n)
	}

	// Within a tile of groups (which stays in cache), eight tokens at a
	// time sweep the groups: their activations stay in L1 while the
	// weights come from L2, and from memory only for the first eight.
	tileG := max(1, kernTileBytes/max(gb, 1))
	full := rows / kernTileRows // groups without missing rows
	p.Share(groups, kernGrain(p, groups, tileG), func(g0, g1 int) {
		var buf []byte
		if packed == nil {
			bp := kernTileBufPool.Get().(*[]byte)
			defer kernTileBufPool.Put(bp)
			if cap(*bp) < min(tileG, g1-g0)*gb {
				*bp = alignedMake[byte](min(tileG, g1-g0) * gb)
			}
			buf = *bp
		}
		var last []float32 // the short last group's rows; most matrices have none
		for gt := g0; gt < g1; gt += tileG {
			ge := min(g1, gt+tileG)
			var wt []byte
			if packed != nil {
				wt = packed[gt*gb : ge*gb]
			} else {
				wt = buf[:(ge-gt)*gb]
				tl.pack(wt, w, gt*kernTileRows, ge-gt)
			}
			whole := min(ge, full) - gt // groups written straight into out
			for t := 0; t < n; t += kernTileMax {
				T := min(kernTileMax, n-t)
				q, d := xq[t*cols:(t+T)*cols], dc[2*t*nb:2*(t+T)*nb]
				if whole > 0 {
					kernTileCall(tl.kern[T], tl, T, out[t*rows+gt*kernTileRows:], rows, wt, whole, nb, q, d)
				}
				if whole < ge-gt { // the last group, short of rows
					if last == nil {
						last = make([]float32, kernTileMax*kernTileRows)
					}
					kernTileCall(tl.kern[T], tl, T, last, kernTileRows, wt[whole*gb:], 1, nb, q, d)
					r0 := (gt + whole) * kernTileRows
					for i := range T {
						copy(out[(t+i)*rows+r0:(t+i+1)*rows], last[i*kernTileRows:])
					}
				}
			}
		}
	})
}

// kernTileDots returns the dotQ, dotQ4 and dotQ8 of tl: one weight row
// packed alone into a group and dotted with one, four or eight tokens by
// the tile kernels, so that they give exactly MatMul's bits.
func kernTileDots(typ gguf.TensorType, tl *kernTile) (
	func(w []byte, xq []int8, xd, xs []float32) float32,
	func(res *[4]float32, w []byte, xq []int8, xd, xs []float32),
	func(res *[8]float32, w []byte, xq []int8, xd, xs []float32),
) {
	dots := func(res []float32, w []byte, xq []int8, xd, xs []float32) {
		T := len(res)
		nb := len(xd) / T
		wt := Weight{Type: typ, Rows: 1, Cols: nb * kernQK, Data: w}
		buf := make([]byte, nb*tl.blockBytes)
		tl.pack(buf, wt, 0, 1)
		dc := make([]int32, 2*T*nb)
		cols := nb * kernQK
		for t := range T {
			tl.dc(dc[2*t*nb:2*(t+1)*nb], xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb])
		}
		out := make([]float32, T*kernTileRows)
		kernTileCall(tl.kern[T], tl, T, out, kernTileRows, buf, 1, nb, xq, dc)
		for t := range T {
			res[t] = out[t*kernTileRows]
		}
	}
	return func(w []byte, xq []int8, xd, xs []float32) float32 {
			var r [1]float32
			dots(r[:], w, xq, xd, xs)
			return r[0]
		}, func(res *[4]float32, w []byte, xq []int8, xd, xs []float32) {
			dots(res[:], w, xq, xd, xs)
		}, func(res *[8]float32, w []byte, xq []int8, xd, xs []float32) {
			dots(res[:], w, xq, xd, xs)
		}
}
