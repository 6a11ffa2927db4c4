package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tileF16 is kernTileF16x<n>AVX512(out []float32, ostride int, w []byte,
// groups, cols int, x []float32), engine/cpu kernTileF16Go bit for bit:
// F16 weights packed column by column in groups of sixteen rows (engine/cpu
// kernPackF16: per column the rows' halves, 32 bytes), the sixteen lanes
// the rows. Per four columns, Z28..Z31 the columns converted
// (VCVTPH2PS), then per token one FMA each with the token's value
// broadcast: even columns into Z(2t), odd ones into Z(2t+1), summed at the
// end, so that each lane adds its columns in the same two chains whatever
// the number of tokens.
//
// Up to twelve tokens (tileF16Max): more tokens per conversion than the
// quantized tiles' eight, 24 accumulators and the four columns.
// The frame and registers are tileFloat's.
func (a *asm) tileF16(n int) {
	a.tileFloat(fmt.Sprintf("kernTileF16x%dAVX512", n), "[]float32", 2, n, func(x func(t, disp int) Mem, acc func(t, p int) VecPhysical) {
		w := []VecPhysical{Z28, Z29, Z30, Z31}
		for c, z := range w {
			a.VCVTPH2PS(mem(RSI, 32*c), z)
		}
		for c, z := range w {
			for t := range n {
				a.VFMADD231PS_BCST(x(t, 4*c), z, acc(t, c%2))
			}
		}
	})
}

// tileFloat is the frame of the F16 and BF16 tile kernels of n tokens
// (func(out []float32, ostride int, w []byte, groups, cols int, x xs)):
// per group of sixteen rows, two accumulators per token zeroed, then per
// step of four columns (128 bytes of weights, 4·es bytes of each token's
// values, es = 1<<shift) the tilePrefetch and step(x, acc), where x(t,
// disp) addresses token t's values disp bytes into the step and acc(t, p)
// is token t's accumulator p, then the two accumulators summed and stored.
//
// Registers: SI the weights, DI token 0's values, DX token 8's, R9 =
// es·cols (the tokens' stride) and R10..R13 as tile's, BX counts groups,
// CX four-column steps, R8 walks out.
func (a *asm) tileFloat(name, xs string, shift, n int, step func(x func(t, disp int) Mem, acc func(t, p int) VecPhysical)) {
	a.text(name, 0, "func(out []float32, ostride int, w []byte, groups, cols int, x "+xs+")")
	acc := func(t, p int) VecPhysical { return tileZ(2*t + p) }
	x := func(t, disp int) Mem {
		if t >= 8 {
			return tileRow(RDX, t-8, disp)
		}
		return tileRow(RDI, t, disp)
	}
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("groups"), RBX)
	a.MOVQ(a.arg("cols"), R9)
	a.SHLQ(U8(shift), R9)
	a.LEAQ(memx(R9, 0, R9, 1), R10)
	a.LEAQ(memx(R9, 0, R9, 2), R11)
	a.LEAQ(memx(R9, 0, R9, 4), R12)
	a.LEAQ(memx(R11, 0, R10, 2), R13)

	a.Label("group")
	a.jzero(RBX, "end")
	a.MOVQ(a.arg("x_base"), RDI)
	if n > 8 {
		a.LEAQ(memx(RDI, 0, R9, 8), RDX)
	}
	a.MOVQ(a.arg("cols"), RCX)
	a.SHRQ(U8(2), RCX)
	for t := range n {
		for p := range 2 {
			a.VPXORD(acc(t, p), acc(t, p), acc(t, p))
		}
	}
	a.jzero(RCX, "store")

	a.Label("col")
	a.tilePrefetch(128)
	step(x, acc)
	a.ADDQ(U8(128), RSI)
	a.ADDQ(U8(4<<shift), RDI)
	if n > 8 {
		a.ADDQ(U8(4<<shift), RDX)
	}
	a.DECQ(RCX)
	a.JNZ(lbl("col"))

	a.Label("store")
	a.MOVQ(a.arg("ostride"), RCX)
	a.SHLQ(U8(2), RCX)
	a.MOVQ(R8, RAX)
	for t := range n {
		if t > 0 {
			a.ADDQ(RCX, RAX)
		}
		a.VADDPS(acc(t, 1), acc(t, 0), acc(t, 0))
		a.VMOVUPS(acc(t, 0), mem(RAX, 0))
	}
	a.ADDQ(U8(64), R8)
	a.DECQ(RBX)
	a.JMP(lbl("group"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}
