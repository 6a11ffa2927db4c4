package cpu

import (
	"encoding/binary"
	"math"

	"github.com/llmd/llmd/model/gguf"
)

// The BF16 tile kernels (Config.F16MatMul "bf16"): F16 or BF16 weights
// rounded to bfloat16 at load and packed by column pairs in groups of
// sixteen rows (kernPackBF16), the tokens' values rounded to bfloat16 once
// per MatMul (kernToBF16), and each pair of columns dotted with one
// VDPBF16PS per token (AVX512_BF16): two products per lane and
// instruction, where the F16 tile kernels take one fused multiply-add per
// column. Each (row, token) lane adds its column pairs in two chains
// (even pairs, odd pairs), summed at the end, whatever the number of
// tokens: MatMul stays batch-invariant, and a decode step and a prefill
// give a token the same bits.

// kernTileBF16Func is a BF16 tile kernel for T tokens: for each of the
// groups packed in w (cols columns each), out[t·ostride + 16g + i] = the
// dot of row i of group g with x[t·cols:(t+1)·cols] (bfloat16 bits).
type kernTileBF16Func func(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

// kernBF16 rounds f to bfloat16, to nearest, ties to even, as the kernels
// take it: a value whose bfloat16 would be subnormal becomes a zero of its
// sign (VDPBF16PS reads subnormal inputs as zeros anyway), and a NaN stays
// a (quiet) NaN.
func kernBF16(f float32) uint16 {
	b := math.Float32bits(f)
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return uint16(b>>16) | 0x40
	case b&0x7f800000 == 0: // zero or subnormal
		return uint16(b>>16) & 0x8000
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// kernToBF16Go sets dst[i] = kernBF16(src[i]).
func kernToBF16Go(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = kernBF16(v)
	}
}

// kernBF16ToF32 widens a bfloat16 to float32 (exactly).
func kernBF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// kernBF16Flush returns the bfloat16 h with a subnormal read as a zero of
// its sign, as the kernels read it.
func kernBF16Flush(h uint16) uint16 {
	if h&0x7f80 == 0 {
		return h & 0x8000
	}
	return h
}

// kernPackBF16 packs groups of sixteen F16 or BF16 rows from r0 into dst,
// rounded to bfloat16 (kernBF16, or kernBF16Flush for BF16): per group and pair of columns p,
// each row's values of columns 2p (low half) and 2p+1 (high half), 64
// bytes. Missing rows are zeros.
func kernPackBF16(dst []byte, w Weight, r0, groups int) {
	cols := w.Cols
	f16ToF32 := kernSetFor(kernUse).f16ToF32
	var tmp [kernPackCols]float32
	kernPackHalves(dst, w, r0, groups, 32*cols, func(out []byte, i int, row []byte, c0, c1 int) {
		o := kernHalves(out)[2*i:]
		if w.Type == gguf.TypeBF16 {
			for c := c0; c < c1; c++ {
				o[32*(c/2)+c%2] = kernBF16Flush(binary.LittleEndian.Uint16(row[2*c:]))
			}
			return
		}
		f16ToF32(tmp[:c1-c0], row[2*c0:2*c1])
		for c, v := range tmp[:c1-c0] {
			o[32*((c0+c)/2)+(c0+c)%2] = kernBF16(v)
		}
	})
}

// kernFMA32FTZ is kernFMA32 with a subnormal result flushed to a zero of
// its sign, as VDPBF16PS writes it.
func kernFMA32FTZ(a, b, c float32) float32 {
	r := kernFMA32(a, b, c)
	if math.Float32bits(r)&0x7f800000 == 0 {
		return math.Float32frombits(math.Float32bits(r) & 0x80000000)
	}
	return r
}

// kernTileBF16Go returns the BF16 tile kernel for T tokens in Go, the
// model of the assembly bit for bit: per lane and pair of columns p,
// acc[p%2] takes the odd column's product, then the even one's (each a
// fused multiply-add, flushed to zero where subnormal: VDPBF16PS), then
// acc[0] + acc[1].
func kernTileBF16Go(T int) kernTileBF16Func {
	return func(out []float32, ostride int, w []byte, groups, cols int, x []uint16) {
		gb := 32 * cols
		for g := range groups {
			for t := range T {
				xt := x[t*cols : (t+1)*cols]
				for i := range kernTileRows {
					var acc [2]float32
					for p := range cols / 2 {
						o := g*gb + 64*p + 4*i
						w0 := kernBF16ToF32(binary.LittleEndian.Uint16(w[o:]))
						w1 := kernBF16ToF32(binary.LittleEndian.Uint16(w[o+2:]))
						a := kernFMA32FTZ(w1, kernBF16ToF32(xt[2*p+1]), acc[p%2])
						acc[p%2] = kernFMA32FTZ(w0, kernBF16ToF32(xt[2*p]), a)
					}
					out[t*ostride+g*kernTileRows+i] = acc[0] + acc[1]
				}
			}
		}
	}
}

// kernTileBF16Gos are the Go models of the BF16 tile kernels, which MatMul
// runs on a CPU without them.
var kernTileBF16Gos = [kernTileMax + 1]kernTileBF16Func{nil,
	kernTileBF16Go(1), kernTileBF16Go(2), kernTileBF16Go(3), kernTileBF16Go(4),
	kernTileBF16Go(5), kernTileBF16Go(6), kernTileBF16Go(7), kernTileBF16Go(8)}

// kernTileBF16Groups is how many groups of sixteen rows the AVX-512 BF16
// kernel of T tokens takes at once (asmgen's tileBF16Groups), as
// kernTileF16Groups.
func kernTileBF16Groups(T int) int {
	if T <= 3 {
		return 4
	}
	return 1
}
