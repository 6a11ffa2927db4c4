package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/llmd/llmd/model/gguf"
)

// The F16 tile kernels: F16 weights repacked column by column in groups of
// sixteen rows (kernPackF16), dotted in float32 with one to
// kernTileF16Max tokens at a time. Per column the sixteen rows are converted once and
// take one fused multiply-add per token, the token's value broadcast:
// the conversion is shared by the tokens where the row-wise kernels
// (dotFloat2x4) convert each row for every four. Each (row, token) lane
// adds its even columns and its odd ones in two chains, summed at the end,
// whatever the number of tokens: MatMul stays batch-invariant.

// kernTileF16Func is an F16 tile kernel for T tokens: for each of the
// groups packed in w (cols columns each), out[t·ostride + 16g + i] = the
// dot of row i of group g with x[t·cols:(t+1)·cols].
type kernTileF16Func func(out []float32, ostride int, w []byte, groups, cols int, x []float32)

// kernTileF16Max is the most tokens an F16 tile kernel takes, and
// kernTileF16Step the most MatMul gives one when it has more tokens than
// that: the AVX-512 kernels of up to six tokens take two groups of rows
// at once (four for up to three tokens), each token's broadcast value
// shared by both, and keep the FMA pipes busier than those of seven or
// more on one group. Up to kernTileF16Max tokens go in one step all the
// same: the weights then come from memory once, with all the tokens' work
// to hide it, where two steps would read them from memory in the first
// and then compute the second from the cache.
const (
	kernTileF16Max  = 8
	kernTileF16Step = 6
)

// kernTileF16Groups is how many groups of sixteen rows the AVX-512 F16
// kernel of T tokens takes at once (asmgen's tileF16Groups; then one at a
// time for the groups left over): MatMul gives it tiles and shares of
// that many groups.
func kernTileF16Groups(T int) int {
	switch {
	case T <= 3:
		return 4
	case T <= 6:
		return 2
	}
	return 1
}

// kernTileF16Cols is what an F16 tile kernel's cols must be a multiple of
// (its step).
const kernTileF16Cols = 4

// kernPackF16 packs groups of sixteen F16 rows from r0 into dst: per group
// and column, the sixteen rows' halves (32 bytes). Missing rows are zeros.
func kernPackF16(dst []byte, w Weight, r0, groups int) {
	cols := w.Cols
	gb := 32 * cols
	kernPackHalves(dst, w, r0, groups, gb, func(out []byte, i int, row []byte, c0, c1 int) {
		o := kernHalves(out)[i:]
		for c, h := range kernHalves(row)[c0:c1] {
			o[16*(c0+c)] = h
		}
	})
}

// kernPackCols is how many columns kernPackHalves packs of each row of a
// group before the next row: the group's bytes of them stay in the L1
// cache (16 KiB for BF16's layout, where whole rows of 4,864 columns would
// spread a row's two-byte stores over 155 KB).
const kernPackCols = 256

// kernPackHalves is kernPackEach for F16 and BF16 rows (2 bytes per value),
// kernPackCols columns at a time: fill(out, i, row, c0, c1) packs columns
// [c0, c1) of the group's row i into out.
func kernPackHalves(dst []byte, w Weight, r0, groups, gb int, fill func(out []byte, i int, row []byte, c0, c1 int)) {
	rb := w.rowBytes()
	dst = dst[:groups*gb]
	for g := range groups {
		out := dst[g*gb : (g+1)*gb]
		rows := min(kernTileRows, w.Rows-r0-g*kernTileRows)
		if rows < kernTileRows {
			clear(out) // missing rows
		}
		for c0 := 0; c0 < w.Cols; c0 += kernPackCols {
			c1 := min(w.Cols, c0+kernPackCols)
			for i := range rows {
				r := r0 + g*kernTileRows + i
				fill(out, i, w.Data[r*rb:(r+1)*rb], c0, c1)
			}
		}
	}
}

// kernTileF16Go returns the F16 tile kernel for T tokens in Go, the model
// of the assembly bit for bit: per lane, acc[c%2] = fma(w, x, acc[c%2])
// column after column, then acc[0] + acc[1].
func kernTileF16Go(T int) kernTileF16Func {
	return func(out []float32, ostride int, w []byte, groups, cols int, x []float32) {
		gb := 32 * cols
		for g := range groups {
			for t := range T {
				xt := x[t*cols : (t+1)*cols]
				for i := range kernTileRows {
					var acc [2]float32
					for c, v := range xt {
						h := binary.LittleEndian.Uint16(w[g*gb+32*c+2*i:])
						acc[c%2] = kernFMA32(gguf.HalfToFloat32(h), v, acc[c%2])
					}
					out[t*ostride+g*kernTileRows+i] = acc[0] + acc[1]
				}
			}
		}
	}
}

// kernTileFloatCall runs the F16 (x float32) or BF16 (x bfloat16 bits)
// tile kernel k on T tokens after checking every size the assembly relies
// on (32 bytes of weights per row group and column); a mismatch is a
// programming error and panics.
func kernTileFloatCall[X float32 | uint16](k func(out []float32, ostride int, w []byte, groups, cols int, x []X),
	T int, out []float32, ostride int, w []byte, groups, cols int, x []X) {
	if groups <= 0 {
		return
	}
	if cols%kernTileF16Cols != 0 || len(w) < groups*32*cols || len(x) < T*cols ||
		(T > 1 && ostride < groups*kernTileRows) || len(out) < (T-1)*ostride+groups*kernTileRows {
		panic(fmt.Sprintf("cpu: %T tile kernel of %d tokens, %d groups of %d columns: w %d, x %d, out %d (stride %d)",
			x, T, groups, cols, len(w), len(x), len(out), ostride))
	}
	k(out, ostride, w, groups, cols, x)
}
