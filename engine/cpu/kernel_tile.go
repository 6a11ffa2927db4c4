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
	// dc sets a token's words per block (dcWords of them, or 2 where
	// dcWords is 0): the bits of its scale xd[b], then what the kernels
	// start each block from (an integer correction) or also take (Q4_K's
	// sum xs[b]).
	dc      func(dc []int32, xq []int8, xd, xs []float32)
	dcWords int
	// kern[T] takes T tokens (1..kernTileMax).
	kern [kernTileMax + 1]kernTileFunc
	// streams, where not nil, is kern[1] over two streams of groups side
	// by side: for groups pairs, group j of the first half of w and group
	// j of the second, into out's rows 16j and 16(groups+j), with the
	// bits of kern[1] (kernTileCallStreams). One core reads two
	// sequential streams faster than one (BENCHMARKS.md, "Two streams per
	// core"). streams4, where not nil, is the same over four streams:
	// groups sets of four, group j of each quarter of w (Q8_0's, whose
	// work per byte is the least; "Four streams").
	streams, streams4 kernTileFunc
}

// kernTileCallStreams is kernTileCall of one token through tl.streams4
// and tl.streams where it has them: sets of four groups from the four
// quarters of w side by side, then pairs from the two halves of the
// rest, and the odd group left over alone.
func kernTileCallStreams(tl *kernTile, out []float32, w []byte, groups, nb int, xq []int8, dc []int32) {
	if tl.streams == nil || groups < 2 {
		kernTileCall(tl.kern[1], tl, 1, out, 0, w, groups, nb, xq, dc)
		return
	}
	gb := nb * tl.blockBytes
	if len(w) < groups*gb || len(xq) < nb*kernQK || len(dc) < tl.words()*nb || len(out) < groups*kernTileRows {
		panic(fmt.Sprintf("cpu: several-stream tile kernel of %d groups of %d blocks: w %d, xq %d, dc %d, out %d",
			groups, nb, len(w), len(xq), len(dc), len(out)))
	}
	k, width := tl.streams, 2
	if tl.streams4 != nil && groups >= 4 {
		k, width = tl.streams4, 4
	}
	k(out, 0, w, groups/width, nb, xq, dc)
	if done := groups / width * width; done < groups {
		kernTileCallStreams(tl, out[done*kernTileRows:], w[done*gb:], groups-done, nb, xq, dc)
	}
}

// words returns the number of dc words per block.
func (tl *kernTile) words() int { return max(tl.dcWords, 2) }

// dcOf returns the dc words of the T tokens whose activations are
// quantized in xq, xd and xs (cols values each).
func (tl *kernTile) dcOf(xq []int8, xd, xs []float32, T, cols int) []int32 {
	nb, w := cols/kernQK, tl.words()
	dc := make([]int32, w*T*nb)
	for t := range T {
		tl.dc(dc[w*t*nb:w*(t+1)*nb], xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb])
	}
	return dc
}

// kernTileGroups returns the number of packed groups of rows rows.
func kernTileGroups(rows int) int { return (rows + kernTileRows - 1) / kernTileRows }

// kernTilePack returns w's rows repacked for the tile family of the best
// kernel level (the quantized types' or F16's), or nil where that level has
// none for w.
func kernTilePack(w Weight) []byte {
	ks := kernSetFor(kernBest)
	var pack func(dst []byte, w Weight, r0, groups int)
	var gb int // bytes per group
	switch tl := ks.tile[w.Type]; {
	case w.Rows == 0:
		return nil
	case tl != nil:
		pack, gb = tl.pack, w.Cols/kernQK*tl.blockBytes
	case w.Type == gguf.TypeF16 && ks.tileF16 != nil && w.Cols%kernTileF16Cols == 0:
		pack, gb = kernPackF16, 32*w.Cols
	default:
		return nil
	}
	return kernPackAll(w, pack, gb)
}

// kernPackAll returns all of w's rows packed by pack, gb bytes per group.
func kernPackAll(w Weight, pack func(dst []byte, w Weight, r0, groups int), gb int) []byte {
	groups := kernTileGroups(w.Rows)
	buf := alignedMake[byte](groups * gb)
	// Large weights are packed by as many goroutines as there are CPUs
	// (loading a model packs each of its matrices).
	k := min(runtime.GOMAXPROCS(0), groups*gb/(1<<20)+1, groups)
	var wg sync.WaitGroup
	for i := range k {
		g0, g1 := i*groups/k, (i+1)*groups/k
		wg.Go(func() { pack(buf[g0*gb:g1*gb], w, g0*kernTileRows, g1-g0) })
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
	nb := w.Cols / kernQK
	gb := nb * tb
	words := (bsz - 2) / 4
	kernPackEach(dst, w, r0, groups, gb, func(out []byte, i int, row []byte) {
		for b := range nb {
			blk := row[b*bsz : (b+1)*bsz : (b+1)*bsz]
			o := out[b*tb : (b+1)*tb : (b+1)*tb]
			o[2*i], o[2*i+1] = blk[0], blk[1]
			for k := range words {
				binary.LittleEndian.PutUint32(o[32+64*k+4*i:], binary.LittleEndian.Uint32(blk[2+4*k:])^flip)
			}
		}
	})
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
	if len(w) < groups*nb*tl.blockBytes || len(xq) < T*nb*kernQK || len(dc) < tl.words()*T*nb ||
		(T > 1 && ostride < groups*kernTileRows) || len(out) < (T-1)*ostride+groups*kernTileRows {
		panic(fmt.Sprintf("cpu: tile kernel of %d tokens, %d groups of %d blocks: w %d, xq %d, dc %d, out %d (stride %d)",
			T, groups, nb, len(w), len(xq), len(dc), len(out), ostride))
	}
	k(out, ostride, w, groups, nb, xq, dc)
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
		dc := tl.dcOf(xq, xd, xs, T, nb*kernQK)
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

// The Q4_K tile layout, per group and 256-value super-block
// (kernQ4KTileSB bytes): the sixteen rows' f16 d (32 bytes) and f16 dmin
// (32), their 6-bit scales unpacked to bytes, sub-block j's sixteen at
// 64+16j (128), their mins the same at 192 (128), then for each 64-value
// chunk c = 0..3 and k = 0..7 each row's qs[32c+4k:32c+4k+4] (64 bytes,
// at 320+512c+64k): their low nibbles are values 4k..4k+3 of sub-block 2c,
// their high nibbles the same of sub-block 2c+1. One 32-value block of the
// tile kernels is an eighth of that (kernQ4KTileBlock); the size is the
// file's and 3% more.
const (
	kernQ4KTileSB    = 64 + 256 + 16*128
	kernQ4KTileBlock = kernQ4KTileSB / 8
)

// kernPackQ4_K packs groups of sixteen Q4_K rows from r0 into dst in the
// layout above. Missing rows are zeros (scales 0).
func kernPackQ4_K(dst []byte, w Weight, r0, groups int) {
	nsb := w.Cols / kernQKK
	gb := nsb * kernQ4KTileSB
	kernPackEach(dst, w, r0, groups, gb, func(out []byte, i int, row []byte) {
		for s := range nsb {
			blk := row[144*s : 144*(s+1) : 144*(s+1)]
			o := out[s*kernQ4KTileSB : (s+1)*kernQ4KTileSB : (s+1)*kernQ4KTileSB]
			o[2*i], o[2*i+1] = blk[0], blk[1]
			o[32+2*i], o[32+2*i+1] = blk[2], blk[3]
			sc, m := kernQ4KScales(blk[4:16])
			for j := range 8 {
				o[64+16*j+i], o[192+16*j+i] = sc[j], m[j]
			}
			for c := range 4 {
				for k := range 8 {
					copy(o[320+512*c+64*k+4*i:][:4], blk[16+32*c+4*k:])
				}
			}
		}
	})
}

// kernDCQ4_K sets, per block, the bits of the scale xd and of the block's
// sum xs: the kernels dot the unsigned nibbles q in integers and take the
// sub-block's minimum in floats, Σ(d·sc·q − dmin·m)·x = d·sc·Σq·xq·xd −
// dmin·m·xs.
func kernDCQ4_K(dc []int32, _ []int8, xd, xs []float32) {
	for b, d := range xd {
		dc[2*b], dc[2*b+1] = int32(math.Float32bits(d)), int32(math.Float32bits(xs[b]))
	}
}

// kernTileQ4_KGo returns the Q4_K tile kernel for T tokens in Go: the
// model of the assembly, bit for bit. Per row, token and 32-value
// sub-block j: S = Σ q·xq in integers, then acc = fma(fl(float(S)·A), xd,
// acc) and acc = fma(−B, xs, acc), with A = d·sc_j and B = dmin·m_j (both
// exact in float32), sub-block after sub-block.
func kernTileQ4_KGo(T int) kernTileFunc {
	return func(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32) {
		nsb := nb / 8
		gb := nsb * kernQ4KTileSB
		le := binary.LittleEndian
		for g := range groups {
			for t := range T {
				x, tdc := xq[t*nb*kernQK:(t+1)*nb*kernQK], dc[2*t*nb:2*(t+1)*nb]
				for i := range kernTileRows {
					var acc float32
					for s := range nsb {
						o := w[g*gb+s*kernQ4KTileSB : g*gb+(s+1)*kernQ4KTileSB]
						d := gguf.HalfToFloat32(le.Uint16(o[2*i:]))
						dmin := gguf.HalfToFloat32(le.Uint16(o[32+2*i:]))
						for j := range 8 {
							a := float32(d * float32(o[64+16*j+i]))
							bm := float32(dmin * float32(o[192+16*j+i]))
							var sum int32
							for v := range kernQK {
								q := o[320+512*(j/2)+64*(v/4)+4*i+v%4]
								if j%2 == 1 {
									q >>= 4
								}
								sum += int32(q&15) * int32(x[(8*s+j)*kernQK+v])
							}
							b := 8*s + j
							f := float32(float32(sum) * a)
							acc = kernFMA32(f, math.Float32frombits(uint32(tdc[2*b])), acc)
							acc = kernFMA32(-bm, math.Float32frombits(uint32(tdc[2*b+1])), acc)
						}
					}
					out[t*ostride+g*kernTileRows+i] = acc
				}
			}
		}
	}
}

// The Q6_K tile layout, per group and 256-value super-block
// (kernQ6KTileSB bytes, the file's size): the sixteen rows' f16 d (32
// bytes); their int8 scales, 16-value sub-block s's sixteen at 32+16s
// (256); then for each half h = 0, 1 (128 values) the low four bits,
// for c = 0, 1 and k = 0..7 each row's ql[64h+32c+4k:+4] (64 bytes, at
// 288+1024h+512c+64k), and the high two bits, for k = 0..7 each row's
// qh[32h+4k:+4] (64 bytes, at 2336+512h+64k). Block b = 0..3 of a half
// (32 values) takes low nibbles of c = b%2 (b < 2) or high ones (b >= 2)
// and bits 2b, 2b+1 of the qh bytes: values 4k..4k+3 from word k.
const (
	kernQ6KTileSB    = 32 + 256 + 16*192
	kernQ6KTileBlock = kernQ6KTileSB / 8
)

// kernPackQ6_K packs groups of sixteen Q6_K rows from r0 into dst in the
// layout above. Missing rows are zeros (scales 0).
func kernPackQ6_K(dst []byte, w Weight, r0, groups int) {
	nsb := w.Cols / kernQKK
	gb := nsb * kernQ6KTileSB
	kernPackEach(dst, w, r0, groups, gb, func(out []byte, i int, row []byte) {
		for s := range nsb {
			blk := row[210*s : 210*(s+1) : 210*(s+1)]
			o := out[s*kernQ6KTileSB : (s+1)*kernQ6KTileSB : (s+1)*kernQ6KTileSB]
			o[2*i], o[2*i+1] = blk[208], blk[209]
			for j := range 16 {
				o[32+16*j+i] = blk[192+j]
			}
			for h := range 2 {
				for k := range 8 {
					for c := range 2 {
						copy(o[288+1024*h+512*c+64*k+4*i:][:4], blk[64*h+32*c+4*k:])
					}
					copy(o[2336+512*h+64*k+4*i:][:4], blk[128+32*h+4*k:])
				}
			}
		}
	})
}

// kernDCQ6_K sets a token's four words per block: the bits of the scale
// xd, then −32 times the sums of the block's two halves of quants (the
// kernels dot the unsigned 6-bit values q, Σ(q−32)·x = Σq·x − 32·Σx, per
// 16-value sub-block of its own scale), then zero.
func kernDCQ6_K(dc []int32, xq []int8, xd, _ []float32) {
	for b, d := range xd {
		var lo, hi int32
		for i, v := range xq[b*kernQK : (b+1)*kernQK] {
			if i < 16 {
				lo += int32(v)
			} else {
				hi += int32(v)
			}
		}
		dc[4*b], dc[4*b+1], dc[4*b+2], dc[4*b+3] = int32(math.Float32bits(d)), -32*lo, -32*hi, 0
	}
}

// kernQ6KTileValue returns the unsigned 6-bit value v (0..31) of block b
// (0..7) of row i in a packed Q6_K super-block o.
func kernQ6KTileValue(o []byte, i, b, v int) int32 {
	h, bb, k := b/4, b%4, v/4
	lo := o[288+1024*h+512*(bb%2)+64*k+4*i+v%4]
	if bb >= 2 {
		lo >>= 4
	}
	hi := o[2336+512*h+64*k+4*i+v%4] >> (2 * bb)
	return int32(lo&15) | int32(hi&3)<<4
}

// kernTileQ6_KGo returns the Q6_K tile kernel for T tokens in Go: the
// model of the assembly, bit for bit. Per row, token and 16-value
// sub-block s (half h of 32-value block b): S = −32·Σxq + Σ q·xq in
// integers, then acc = fma(fl(float(S)·A), xd, acc) with A = d·sc_s
// (exact in float32), sub-block after sub-block.
func kernTileQ6_KGo(T int) kernTileFunc {
	return func(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32) {
		nsb := nb / 8
		gb := nsb * kernQ6KTileSB
		for g := range groups {
			for t := range T {
				x, tdc := xq[t*nb*kernQK:(t+1)*nb*kernQK], dc[4*t*nb:4*(t+1)*nb]
				for i := range kernTileRows {
					var acc float32
					for s := range nsb {
						o := w[g*gb+s*kernQ6KTileSB : g*gb+(s+1)*kernQ6KTileSB]
						d := gguf.HalfToFloat32(binary.LittleEndian.Uint16(o[2*i:]))
						for b := range 8 {
							blk := 8*s + b
							for h := range 2 {
								a := float32(d * float32(int8(o[32+16*(2*b+h)+i])))
								sum := tdc[4*blk+1+h]
								for v := 16 * h; v < 16*h+16; v++ {
									sum += kernQ6KTileValue(o, i, b, v) * int32(x[blk*kernQK+v])
								}
								f := float32(float32(sum) * a)
								acc = kernFMA32(f, math.Float32frombits(uint32(tdc[4*blk])), acc)
							}
						}
					}
					out[t*ostride+g*kernTileRows+i] = acc
				}
			}
		}
	}
}

// kernQ5TileBlock is the size of one block of a packed Q5_0 group: the
// sixteen rows' f16 scales (32 bytes), their high bits (64: byte b of row
// i holds in bit k the high bit of value 4k+b, at 32+4i+b), then Q4_0's
// nibbles (256, at 96). The size is the file's.
const kernQ5TileBlock = 32 + 64 + 16*16

// kernPackQ5_0 is the Q5_0 tile layout above. Missing rows are zeros.
func kernPackQ5_0(dst []byte, w Weight, r0, groups int) {
	nb := w.Cols / kernQK
	gb := nb * kernQ5TileBlock
	kernPackEach(dst, w, r0, groups, gb, func(out []byte, i int, row []byte) {
		for b := range nb {
			blk := row[22*b : 22*(b+1) : 22*(b+1)]
			o := out[b*kernQ5TileBlock : (b+1)*kernQ5TileBlock : (b+1)*kernQ5TileBlock]
			o[2*i], o[2*i+1] = blk[0], blk[1]
			qh := binary.LittleEndian.Uint32(blk[2:])
			for j := range 4 {
				var h byte
				for k := range 8 {
					h |= byte(qh>>(4*k+j)&1) << k
				}
				o[32+4*i+j] = h
			}
			for k := range 4 {
				copy(o[96+64*k+4*i:][:4], blk[6+4*k:])
			}
		}
	})
}

// kernDCQ5_0 sets, per block, the scale's bits and -16·Σxq (the kernels
// dot the unsigned 5-bit values q, and Σ(q-16)·x = Σq·x - 16·Σx).
func kernDCQ5_0(dc []int32, _ []int8, xd, xs []float32) {
	kernDCOffset(dc, xd, xs, -16)
}

// kernTileQ5_0Go returns the Q5_0 tile kernel for T tokens in Go, the
// model of the assembly bit for bit (and of Q4_0's, whose blocks add the
// same way): per row, token and block, S = dc's −16·Σxq + Σ q·xq in
// integers, then acc = fma(fl(float(S)·d), xd, acc).
func kernTileQ5_0Go(T int) kernTileFunc {
	return func(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32) {
		gb := nb * kernQ5TileBlock
		for g := range groups {
			for t := range T {
				x, tdc := xq[t*nb*kernQK:(t+1)*nb*kernQK], dc[2*t*nb:2*(t+1)*nb]
				for i := range kernTileRows {
					var acc float32
					for b := range nb {
						o := w[g*gb+b*kernQ5TileBlock : g*gb+(b+1)*kernQ5TileBlock]
						d := gguf.HalfToFloat32(binary.LittleEndian.Uint16(o[2*i:]))
						sum := tdc[2*b+1]
						for v := range kernQK {
							k := v / 4
							q := o[96+64*(k%4)+4*i+v%4]
							if k >= 4 {
								q >>= 4
							}
							hb := o[32+4*i+v%4] >> k & 1
							sum += (int32(q&15) | int32(hb)<<4) * int32(x[b*kernQK+v])
						}
						f := float32(float32(sum) * d)
						acc = kernFMA32(f, math.Float32frombits(uint32(tdc[2*b])), acc)
					}
					out[t*ostride+g*kernTileRows+i] = acc
				}
			}
		}
	}
}

// kernPackEach walks the rows of groups of sixteen from r0 for a pack
// function: for row i of each group (rows past w.Rows skipped), fill(out,
// i, row) with out the group's gb bytes of dst and row the row's bytes.
// The bytes of a group short of rows are zeroed first.
func kernPackEach(dst []byte, w Weight, r0, groups, gb int, fill func(out []byte, i int, row []byte)) {
	rb := w.rowBytes()
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
			fill(out, i, w.Data[r*rb:(r+1)*rb])
		}
	}
}
