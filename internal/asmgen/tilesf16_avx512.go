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
// the rows. Per column, each group's column converted (VCVTPH2PS), then
// per token one FMA each with the token's value broadcast: even columns
// into one accumulator, odd ones into another, summed at the end, so that
// each lane adds its columns in the same two chains whatever the number of
// tokens.
//
// With few tokens a group's chains are too few to cover the FMA's latency
// (one token: two chains, two FMAs per 128 bytes in each, so 16 bytes a
// cycle from any cache), so those kernels take tileF16Groups(n) groups at
// once, their chains independent, each token's value broadcast once into
// a register for all of them; the groups left over go one at a time.
// Up to eight tokens (tileF16Max); seven and eight take one group at a
// time. Six tokens on two groups keep the two FMA pipes busier (eight
// loads per twelve FMAs) than twelve on one did (thirteen loads per
// twelve), 1.12x in BenchmarkTileFloatKernel, so a prompt goes by six.
func (a *asm) tileF16(n int) {
	a.tileFloat(fmt.Sprintf("kernTileF16x%dAVX512", n), "[]float32", 2, n, tileF16Groups(n),
		func(G int, x func(t, disp int) Mem, w func(g, disp int) Mem, acc func(g, t, p int) VecPhysical) {
			if G == 1 {
				ws := []VecPhysical{Z28, Z29, Z30, Z31}
				for c, z := range ws {
					a.VCVTPH2PS(w(0, 32*c), z)
				}
				for c, z := range ws {
					for t := range n {
						a.VFMADD231PS_BCST(x(t, 4*c), z, acc(0, t, c%2))
					}
				}
				return
			}
			// 2·G·n accumulators from Z0, then n broadcasts and G
			// conversions (registers renamed from column to column).
			next := 2 * G * n
			bc := make([]VecPhysical, n)
			for t := range bc {
				bc[t] = tileZ(next + t)
			}
			ws := make([]VecPhysical, G)
			for g := range ws {
				ws[g] = tileZ(next + n + g)
			}
			for c := range 4 {
				for t, z := range bc {
					a.VBROADCASTSS(x(t, 4*c), z)
				}
				for g, z := range ws {
					a.VCVTPH2PS(w(g, 32*c), z)
				}
				for g, z := range ws {
					for t, b := range bc {
						a.VFMADD231PS(b, z, acc(g, t, c%2))
					}
				}
			}
		})
}

// tileF16Groups is how many groups of sixteen rows the F16 kernel of n
// tokens takes at once (engine/cpu kernTileF16Groups): enough for eight
// chains or more, within the 32 registers (2·G·n accumulators, n
// broadcasts, G conversions).
func tileF16Groups(n int) int {
	switch {
	case n <= 3:
		return 4
	case n <= 6:
		return 2
	}
	return 1
}

// tileFloat is the frame of the F16 and BF16 tile kernels of n tokens
// (func(out []float32, ostride int, w []byte, groups, cols int, x xs)):
// per G groups of sixteen rows (then per group for the groups left over),
// two accumulators per group and token zeroed, then per step of four
// columns (128 bytes of each group's weights, 4·es bytes of each token's
// values, es = 1<<shift) the tilePrefetch of each group's lines and
// step(G, x, w, acc), where x(t, disp) addresses token t's values disp
// bytes into the step, w(g, disp) group g's weights disp bytes into it and
// acc(g, t, p) is group g's accumulator p of token t, then the two
// accumulators summed and stored.
//
// Registers: SI the weights, DI token 0's values, R14 = gb = 32·cols (a
// group's bytes) and DX = 3·gb where G > 1, R9 = es·cols (the tokens'
// stride) and R10..R13 as tile's, BX counts groups, CX four-column steps,
// R8 walks out. At most eight tokens.
func (a *asm) tileFloat(name, xs string, shift, n, G int,
	step func(G int, x func(t, disp int) Mem, w func(g, disp int) Mem, acc func(g, t, p int) VecPhysical)) {
	if n > 8 || G != 1 && G != 2 && G != 4 || 2*G*n > 32 {
		panic(fmt.Sprintf("asmgen: %s: %d groups of %d tokens", name, G, n))
	}
	a.text(name, 0, "func(out []float32, ostride int, w []byte, groups, cols int, x "+xs+")")
	x := func(t, disp int) Mem { return tileRow(RDI, t, disp) }
	w := func(g, disp int) Mem {
		switch g {
		case 0:
			return mem(RSI, disp)
		case 1:
			return memx(RSI, disp, R14, 1)
		case 2:
			return memx(RSI, disp, R14, 2)
		}
		return memx(RSI, disp, RDX, 1)
	}
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("groups"), RBX)
	a.MOVQ(a.arg("cols"), R9)
	if G > 1 {
		a.MOVQ(R9, R14)
		a.SHLQ(U8(5), R14)
		if G == 4 {
			a.LEAQ(memx(R14, 0, R14, 2), RDX)
		}
	}
	a.SHLQ(U8(shift), R9)
	a.LEAQ(memx(R9, 0, R9, 1), R10)
	a.LEAQ(memx(R9, 0, R9, 2), R11)
	a.LEAQ(memx(R9, 0, R9, 4), R12)
	a.LEAQ(memx(R11, 0, R10, 2), R13)

	// pass is one pass over g groups from SI, leaving SI at the next.
	pass := func(label string, g int) {
		acc := func(k, t, p int) VecPhysical { return tileZ(2*(g*t+k) + p) }
		a.MOVQ(a.arg("x_base"), RDI)
		a.MOVQ(a.arg("cols"), RCX)
		a.SHRQ(U8(2), RCX)
		for k := range g {
			for t := range n {
				for p := range 2 {
					a.VPXORD(acc(k, t, p), acc(k, t, p), acc(k, t, p))
				}
			}
		}
		a.jzero(RCX, label+"store")

		a.Label(label + "col")
		for k := range g {
			for i := range 2 {
				a.PREFETCHT0(w(k, tilePrefetchAhead+64*i))
			}
		}
		step(g, x, w, acc)
		a.ADDQ(U8(128), RSI)
		a.ADDQ(U8(4<<shift), RDI)
		a.DECQ(RCX)
		a.JNZ(lbl(label + "col"))

		a.Label(label + "store")
		a.MOVQ(a.arg("ostride"), RCX)
		a.SHLQ(U8(2), RCX)
		a.MOVQ(R8, RAX)
		for t := range n {
			if t > 0 {
				a.ADDQ(RCX, RAX)
			}
			for k := range g {
				a.VADDPS(acc(k, t, 1), acc(k, t, 0), acc(k, t, 0))
				a.VMOVUPS(acc(k, t, 0), mem(RAX, 64*k))
			}
		}
		a.ADDQ(U32(64*g), R8)
		switch g { // the column steps moved SI one group on
		case 2:
			a.ADDQ(R14, RSI)
		case 4:
			a.ADDQ(RDX, RSI)
		}
	}

	if G > 1 {
		a.Label("groups")
		a.CMPQ(RBX, U8(G))
		a.JB(lbl("group"))
		pass("g", G)
		a.SUBQ(U8(G), RBX)
		a.JMP(lbl("groups"))
	}
	a.Label("group")
	a.jzero(RBX, "end")
	pass("", 1)
	a.DECQ(RBX)
	a.JMP(lbl("group"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}
