package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX-512 (F, BW, VL and VNNI) kernels of
// engine/cpu/kernel_avx512_amd64.s: the AVX2 algorithms with twice the
// width. Quantized dots take two weight blocks per zmm register and use
// VPDPBUSD (unsigned x signed bytes summed into int32) with the sign
// trick: |w| times x negated where w < 0 (K1). The int32 lanes of the two
// blocks (0..7 and 8..15) are converted to float32, scaled by the weight
// scales (Z4) and accumulated with each block's activation scale,
// broadcast from memory into its half of the lanes (masks K2 and K3).
//
// Constant registers (setup512): Z31 zero, Z14 0x0F bytes, Z13 8s, Z12
// 16s, Z24 kernNibShift.

var (
	// VPERMPS orders: each of four floats four times (Q6_K sub-block
	// scales over the lanes of two blocks), and each of eight floats
	// twice (activation scales over Q6_K sub-blocks).
	kernQ6Quad = static("kernQ6Quad", 0)
	kernQ6Pair = static("kernQ6Pair", 0)
	// VPSRLVW's per-word counts that turn two Q4_0 blocks, each broadcast
	// to two 128-bit lanes, into [lo0 hi0 lo1 hi1]: 0 in lanes 0 and 2, 4
	// in lanes 1 and 3.
	kernNibShift = static("kernNibShift", 0)
)

func genKernelsAVX512(a *asm) {
	a.data("kernQ6Quad", 0, 0, 0x0000000100000001, 0x0000000100000001,
		0x0000000200000002, 0x0000000200000002, 0x0000000300000003, 0x0000000300000003)
	a.data("kernQ6Pair", 0, 0x0000000100000001, 0x0000000200000002, 0x0000000300000003,
		0x0000000400000004, 0x0000000500000005, 0x0000000600000006, 0x0000000700000007)
	const s4 = 0x0004000400040004
	a.data("kernNibShift", 0, 0, s4, s4, 0, 0, s4, s4)

	for _, n := range []int{1, 4} {
		for _, f := range floatFmts {
			a.fxZ(n, f)
		}
	}
	a.dotQ0Z(1, q5Z)
	a.dotQ0Z(4, q5Z)
	a.dotQ4KZ(1)
	a.dotQ4KZ(4)
	a.dotQ6KZ(1)
	a.dotQ6KZ(4)
	a.dotQ0Z(8, q5Z)
	a.dotRowsZ(q5Z)
	a.dotF16x2x4Z()
	genKQuantsAVX512(a)
	genQ8KAVX512(a)
	genTilesAVX512(a)
}

// setup512 sets the constant registers, Z24 kernNibShift, and the half
// masks K2 (lanes 0..7) and K3 (lanes 8..15; as a word mask of a ymm
// register, its upper eight words).
func (a *asm) setup512() {
	a.VPXORD(Z31, Z31, Z31)
	a.bcastbZ(0x0f, Z14)
	a.bcastbZ(0x08, Z13)
	a.bcastbZ(0x10, Z12)
	a.MOVL(U32(0x00ff), EAX)
	a.KMOVW(EAX, K2)
	a.MOVL(U32(0xff00), EAX)
	a.KMOVW(EAX, K3)
	a.VMOVDQU64(kernNibShift, Z24)
}

// bcastbZ broadcasts the byte c to every byte of the zmm register z.
func (a *asm) bcastbZ(c uint32, z VecPhysical) {
	a.MOVL(U32(c), EAX)
	a.VPBROADCASTB(EAX, z)
}

// foldz adds the upper half of the zmm register z into its ymm half; t is
// a scratch ymm register.
func (a *asm) foldz(z, t VecPhysical) {
	a.VEXTRACTF64X4(U8(1), z, t)
	a.VADDPS(t, z.AsY(), z.AsY())
}

// foldSums sets each Z8+t to x[t]+y[t] and folds it into Y8+t (foldz,
// with Y0).
func (a *asm) foldSums(x, y []VecPhysical) {
	sum := []VecPhysical{Z8, Z9, Z10, Z11}[:len(x)]
	for t, z := range sum {
		a.VADDPS(y[t], x[t], z)
	}
	for _, z := range sum {
		a.foldz(z, Y0)
	}
}

// sum01 sets Y0 to the sum of Z0 and Z1, the one-token accumulators,
// folded (foldz, with Y1).
func (a *asm) sum01() {
	a.VADDPS(Z1, Z0, Z0)
	a.foldz(Z0, Y1)
}

// foldzTo sets the ymm register y to the sum of the halves of z, as foldz
// does (lower half plus upper half).
func (a *asm) foldzTo(z, y VecPhysical) {
	a.VEXTRACTF64X4(U8(1), z, y)
	a.VADDPS(y, z.AsY(), y)
}

// dwPair sets Z4 to the f16 weight scale at o0(SI) in lanes 0..7 and the
// one at o1(SI) in lanes 8..15.
func (a *asm) dwPair(o0, o1 int) {
	a.VPBROADCASTW(mem(RSI, o0), Y4)
	a.VPBROADCASTW(mem(RSI, o1), K3, Y4)
	a.VCVTPH2PS(Y4, Z4)
}

// signW sets K1 to the signs of the weight bytes in v (Z2 or Y2) and Z3
// (Y3) to their magnitudes.
func (a *asm) signW(v VecPhysical) {
	a.VPMOVB2M(v, K1)
	if v.Size() == 64 {
		a.VPABSB(Z2, Z3)
	} else {
		a.VPABSB(Y2, Y3)
	}
}

// oneW sets up one block's weights for tokOne: the signed values in Y2
// (already loaded), K1, Y3, and the f16 scale at (SI) in Y4.
func (a *asm) oneW() {
	a.signW(Y2)
	a.oneScale()
}

// oneScale sets every lane of Y4 to the f16 scale at (SI).
func (a *asm) oneScale() {
	a.VPBROADCASTW(mem(RSI, 0), X4)
	a.VCVTPH2PS(X4, Y4)
}

// q0Z describes a 32-value block type (Q5_0; Q4_0 and Q8_0 have tile
// kernels, tiles_avx512.go) for the AVX-512 kernels: bsz bytes a block;
// pair loads blocks b, b+1 at SI (signed values in Z2, K1 and Z3 as signW,
// scales in Z4 as dwPair) and one the single block b (Y2, K1, Y3, Y4 as
// oneW).
type q0Z struct {
	name      string
	bsz       int
	pair, one func(a *asm)
}

var (
	// Q5_0: nibbles as Q4_0's, minus 16 where the fifth bit (qh, one bit
	// per value) is clear.
	q5Z = q0Z{name: "Q5_0", bsz: 22,
		pair: func(a *asm) {
			a.VMOVDQU(mem(RSI, 6), X2)
			a.VINSERTI128(U8(1), mem(RSI, 28), Y2, Y2)
			a.VPSRLW(U8(4), Y2, Y3)
			a.VINSERTI64X4(U8(1), Y3, Z2, Z2)
			a.VSHUFI64X2(U8(0xd8), Z2, Z2, Z2)
			a.VPANDD(Z14, Z2, Z2)
			a.MOVL(mem(RSI, 2), EAX)
			a.MOVL(mem(RSI, 24), EBX)
			a.SHLQ(U8(32), RBX)
			a.ORQ(RBX, RAX)
			a.NOTQ(RAX)
			a.KMOVQ(RAX, K4)
			a.VPSUBB(Z12, Z2, K4, Z2)
			a.signW(Z2)
			a.dwPair(0, 22)
		},
		one: func(a *asm) {
			a.q4Nibbles(4, Y2, X3)
			a.VPAND(Y14, Y2, Y2)
			a.MOVL(mem(RSI, 2), EAX)
			a.NOTL(EAX)
			a.KMOVD(EAX, K4)
			a.VPSUBB(Y12, Y2, K4, Y2)
			a.oneW()
		},
	}
)

// signedDot sets v7 (Z7 or Y7) to the int32 dots, as float32, of the
// activations at x with the weights whose magnitudes are in w and signs in
// K1: x negated where w < 0 (under K1, from Z31 zero) times |w|. Uses Z6
// (Y6).
func (a *asm) signedDot(x Mem, w VecPhysical) {
	v6, v7, zero := Z6, Z7, Z31
	if w.Size() == 32 {
		v6, v7, zero = Y6, Y7, Y31
		a.VMOVDQU(x, v6)
	} else {
		a.VMOVDQU64(x, v6)
	}
	a.VPSUBB(v6, zero, K1, v6)
	a.VPXORD(v7, v7, v7)
	a.VPDPBUSD(v6, w, v7)
	a.VCVTDQ2PS(v7, v7)
}

// scalePair adds Z7, times the weight scales in Z4, times the activation
// scale at d (block b, lanes 0..7, into accA) and at d+4 (block b+1, lanes
// 8..15, into accB; accB may be accA).
func (a *asm) scalePair(d Mem, accA, accB VecPhysical) {
	a.VMULPS(Z4, Z7, Z7)
	a.VFMADD231PS_BCST(d, Z7, K2, accA)
	a.VFMADD231PS_BCST(d.Offset(4), Z7, K3, accB)
}

// scaleOne adds Y7, times the weight scale in Y4, times the activation
// scale at d into the ymm register acc.
func (a *asm) scaleOne(d Mem, acc VecPhysical) {
	a.VMULPS(Y4, Y7, Y7)
	a.VFMADD231PS_BCST(d, Y7, acc)
}

// tokPair adds one token's two blocks (activations at x, scales at d)
// into accA (block b's lanes) and accB (block b+1's).
func (a *asm) tokPair(x, d Mem, accA, accB VecPhysical) {
	a.signedDot(x, Z3)
	a.scalePair(d, accA, accB)
}

// tokOne adds one token's single block (activations at x, scale at d),
// loaded as oneW leaves it, into the ymm register acc.
func (a *asm) tokOne(x, d Mem, acc VecPhysical) {
	a.signedDot(x, Y3)
	a.scaleOne(d, acc)
}

// hsumOut stores the sum of the eight floats of Y0 (clobbered) at dst.
func (a *asm) hsumOut(dst Mem) {
	a.hsumps(Y0, X1)
	a.VMOVSS(X0, dst)
}

// dotQ0Z is the body of the n-token (1, 4, 8) kernel of q over blocks of
// q.bsz bytes: block pairs, then a last odd block. Each token has two
// accumulators (block b's lanes and block b+1's: Z0, Z1 for one token,
// Z16+2t, Z17+2t for four) whose sum is folded into a ymm register for
// the last odd block and the horizontal sums; eight tokens have one
// (Z16+t) that holds both blocks' lanes, exactly what adding the two gives
// there, so that a token gets the same bits from any of the kernels.
func (a *asm) dotQ0Z(n int, q q0Z) {
	var accA, accB, fold []VecPhysical
	switch n {
	case 1:
		a.text("kernDot"+q.name+"AVX512", 0, sigDotQ)
		a.x1Setup()
		accA, accB, fold = []VecPhysical{Z0}, []VecPhysical{Z1}, []VecPhysical{Y0}
	case 4:
		a.text("kernDot"+q.name+"x4AVX512", 0, sigDotQx4)
		a.xnSetup(4, false)
		accA = []VecPhysical{Z16, Z18, Z20, Z22}
		accB = []VecPhysical{Z17, Z19, Z21, Z23}
		fold = []VecPhysical{Y8, Y9, Y10, Y11}
	case 8:
		a.text("kernDot"+q.name+"x8AVX512", 0, sigDotQx8)
		a.xnSetup(8, false)
		accA = []VecPhysical{Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23}
		accB = accA
		fold = []VecPhysical{Y8, Y9, Y10, Y11, Y0, Y1, Y5, Y15}
	}
	a.setup512()
	if n == 8 {
		a.zeroD(accA...)
	} else {
		for t := range accA {
			a.zeroD(accA[t], accB[t])
		}
	}

	a.whileN("loop2", RCX, 2, "tail", func() {
		q.pair(a)
		for t := range n {
			a.tokPair(xqRow(0, t), xdRow(0, t), accA[t], accB[t])
		}
		a.ADDQ(U8(2*q.bsz), RSI)
		a.ADDQ(U8(64), RDI)
		if n == 8 {
			a.ADDQ(U8(64), R13)
		}
		a.ADDQ(U8(8), RDX)
		if n == 8 {
			a.ADDQ(U8(8), R8)
		}
	})

	a.Label("tail")
	switch n {
	case 1:
		a.sum01()
	case 4:
		a.foldSums(accA, accB)
	case 8:
		for t, y := range fold {
			a.foldzTo(accA[t], y)
		}
	}
	a.jzero(RCX, "done")
	q.one(a)
	for t, y := range fold {
		a.tokOne(xqRow(0, t), xdRow(0, t), y)
	}

	a.Label("done")
	if n == 1 {
		a.hsumOut(a.ret(""))
	} else {
		a.hsum4(Y8, Y9, Y10, Y11, 0)
		if n == 8 {
			a.hsum4(Y0, Y1, Y5, Y15, 16)
		}
	}
	a.VZEROUPPER()
	a.RET()
}

// dotRowsZ is the rows kernel of q: one token's dot with each of len(out)
// weight rows, rb bytes apart, in one call: dotQ0Z's one-token arithmetic
// row after row, without a Go call per row (which costs as much as the dot
// of a short row). R8 walks out, R9 counts the rows left, R10 is the row,
// R11 rb. (xc is unused.)
func (a *asm) dotRowsZ(q q0Z) {
	a.text("kernDot"+q.name+"RowsAVX512", 0, sigDotRows)
	pair, one := q.pair, q.one
	tok := func() { a.tokPair(mem(RDI, 0), mem(RDX, 0), Z0, Z1) }
	tokOne := func() { a.tokOne(mem(RDI, 0), mem(RDX, 0), Y0) }
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("out_len"), R9)
	a.MOVQ(a.arg("w_base"), R10)
	a.MOVQ(a.arg("rb"), R11)
	a.setup512()

	a.Label("row")
	a.jzero(R9, "end")
	a.MOVQ(R10, RSI)
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("xd_base"), RDX)
	a.MOVQ(a.arg("xd_len"), RCX)
	a.zeroD(Z0, Z1)

	a.whileN("loop2", RCX, 2, "tail", func() {
		pair(a)
		tok()
		a.ADDQ(U8(2*q.bsz), RSI)
		a.ADDQ(U8(64), RDI)
		a.ADDQ(U8(8), RDX)
	})

	a.Label("tail")
	a.sum01()
	a.jzero(RCX, "done")
	one(a)
	tokOne()

	a.Label("done")
	a.hsumOut(mem(R8, 0))
	a.ADDQ(U8(4), R8)
	a.ADDQ(R11, R10)
	a.DECQ(R9)
	a.JMP(lbl("row"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}

// fxZ is fxAVX2 in zmm registers, with a masked tail: the float dots of n
// (1 or 4) tokens, adding in the same order for either. The sums of
// 32-value steps go to Z16+t (first 16) and Z20+t (last 16); the 16-value
// step goes to Z16+t, the tail to Z20+t.
func (a *asm) fxZ(n int, f floatFmt) {
	a.floatText(n, f, "AVX512")
	acc := []VecPhysical{Z16, Z17, Z18, Z19}[:n]
	hi := []VecPhysical{Z20, Z21, Z22, Z23}[:n]
	a.fxArgs(n, f)
	a.zeroD(acc...)
	a.zeroD(hi...)
	a.fxSteps(f, 16, Z0, Z1, acc, hi, func() {})

	a.Label("tail")
	a.jzero(RCX, "sum")
	a.tailMask(K1)
	f.masked(a, mem(RSI, 0), Z0)
	for t, z := range hi {
		a.VMOVUPS_Z(xqRow(0, t), K1, Z1)
		a.VFMADD231PS(Z1, Z0, z)
	}

	a.Label("sum")
	a.foldSums(acc, hi)
	a.retSums([]VecPhysical{Y8, Y9, Y10, Y11}[:n], X0)
}

// dotF16x2x4Z is kernDotF16x2x4AVX512: fxZ for F16, four tokens and two
// weight rows at once (row A at SI, row B at BX): each activation load
// serves both rows, which halves what the four tokens' rows cost from L2
// when they outgrow L1. Every (row, token) adds in fxZ's order (even
// 16-value chunks into Z16.., odd ones and the tail into Z20..; row B's
// into Z24.. and Z28..), so each gets its four-token bits.
func (a *asm) dotF16x2x4Z() {
	a.text("kernDotF16x2x4AVX512", 0, "func(res *[8]float32, w []byte, x []float32, stride int)")
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("w_len"), RCX)
	a.SHRQ(U8(1), RCX)
	a.LEAQ(memx(RSI, 0, RCX, 1), RBX)
	a.SHRQ(U8(1), RCX)
	a.MOVQ(a.arg("x_base"), RDI)
	a.strideArg()
	accA := [][]VecPhysical{{Z16, Z17, Z18, Z19}, {Z20, Z21, Z22, Z23}}
	accB := [][]VecPhysical{{Z24, Z25, Z26, Z27}, {Z28, Z29, Z30, Z31}}
	for _, acc := range append(accA, accB...) {
		a.zeroD(acc...)
	}
	// tokens adds the 16 x values at disp(DI) of each token (loaded into
	// Z4, Z5 in turn; load(x, z) loads them) times row A's wa into
	// accA[k] and row B's wb into accB[k].
	tokens := func(disp int, wa, wb VecPhysical, k int, load func(x Mem, z VecPhysical)) {
		for t := range 4 {
			x := []VecPhysical{Z4, Z5}[t%2]
			load(xqRow(disp, t), x)
			a.VFMADD231PS(x, wa, accA[k][t])
			a.VFMADD231PS(x, wb, accB[k][t])
		}
	}
	load := func(x Mem, z VecPhysical) { a.VMOVUPS(x, z) }

	a.whileN("loop32", RCX, 32, "loop16", func() {
		a.VCVTPH2PS(mem(RSI, 0), Z0)
		a.VCVTPH2PS(mem(RSI, 32), Z1)
		a.VCVTPH2PS(mem(RBX, 0), Z2)
		a.VCVTPH2PS(mem(RBX, 32), Z3)
		tokens(0, Z0, Z2, 0, load)
		tokens(64, Z1, Z3, 1, load)
		a.ADDQ(U8(64), RSI)
		a.ADDQ(U8(64), RBX)
		a.ADDQ(U8(128), RDI)
	})

	a.Label("loop16")
	a.ifN(RCX, 16, "tail", func() {
		a.VCVTPH2PS(mem(RSI, 0), Z0)
		a.VCVTPH2PS(mem(RBX, 0), Z2)
		tokens(0, Z0, Z2, 0, load)
		a.ADDQ(U8(32), RSI)
		a.ADDQ(U8(32), RBX)
		a.ADDQ(U8(64), RDI)
	})

	a.Label("tail")
	a.jzero(RCX, "sum")
	a.tailMask(K1)
	a.VMOVDQU16_Z(mem(RSI, 0), K1, Y0)
	a.VCVTPH2PS(Y0, Z0)
	a.VMOVDQU16_Z(mem(RBX, 0), K1, Y2)
	a.VCVTPH2PS(Y2, Z2)
	tokens(0, Z0, Z2, 1, func(x Mem, z VecPhysical) { a.VMOVUPS_Z(x, K1, z) })

	a.Label("sum")
	for r, acc := range [][][]VecPhysical{accA, accB} {
		a.foldSums(acc[0], acc[1])
		a.hsum4(Y8, Y9, Y10, Y11, 16*r)
	}
	a.VZEROUPPER()
	a.RET()
}

// kSetup loads a K-quant kernel's arguments (one token; n = 4 tokens, as
// x4Setup, with its accumulators Z16..Z23 zeroed), with CX = 256-value
// blocks and R8 = xs.
func (a *asm) kSetup(n int) {
	if n == 1 {
		a.x1Setup()
	} else {
		a.x4Setup(false)
	}
	a.SHRQ(U8(3), RCX)
	a.MOVQ(a.arg("xs_base"), R8)
	a.setup512()
	if n == 4 {
		a.zeroD(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)
	}
}

// kEnd returns the sum of Z0 and Z1 (n = 1) or stores the sums of each
// token's Z16+t and Z20+t (n = 4) at res, less min[t] (if any).
func (a *asm) kEnd(n int, min []VecPhysical) {
	sum := []VecPhysical{Y0}
	if n == 1 {
		a.sum01()
	} else {
		sum = []VecPhysical{Y8, Y9, Y10, Y11}
		a.foldSums([]VecPhysical{Z16, Z17, Z18, Z19}, []VecPhysical{Z20, Z21, Z22, Z23})
	}
	for t := range min {
		a.VSUBPS(min[t], sum[t], sum[t])
	}
	a.retSums(sum, X1)
}

// kAcc is the accumulator of token t for chunk or pair c of a K-quant
// block: Z0 (even c) and Z1 (odd c) for one token; Z16+t and Z20+t for
// four.
func kAcc(n, c, t int) VecPhysical {
	if n == 1 {
		return []VecPhysical{Z0, Z1}[c%2]
	}
	return [][]VecPhysical{{Z16, Z17, Z18, Z19}, {Z20, Z21, Z22, Z23}}[c%2][t]
}

// dotQ4KZ is kernDotQ4_KAVX512 (n = 1) or kernDotQ4_Kx4AVX512 (n = 4). Per
// 256-value block, each token's d·sc_j·xd_j go to the stack (at 32t(SP))
// for the nibble dots and its dmin·m_j·xs_j accumulate in Y2 (Y24+t), as
// in kernDotQ4_KAVX2, taken off at the end.
func (a *asm) dotQ4KZ(n int) {
	min := []VecPhysical{Y2}
	if n == 1 {
		a.text("kernDotQ4_KAVX512", 32, sigDotQ)
		a.kSetup(1)
		a.zeroD(Z0, Z1)
	} else {
		min = []VecPhysical{Y24, Y25, Y26, Y27}
		a.text("kernDotQ4_Kx4AVX512", 128, sigDotQx4)
		a.kSetup(4)
	}
	a.zero(min...)
	a.kLoop()
	// The header: Y6 = d·sc_j and Y7 = dmin·m_j for the eight sub-blocks.
	a.VCVTPH2PS(mem(RSI, 0), X3)
	a.VBROADCASTSS(X3, Y4)
	a.VMOVSHDUP(X3, X5)
	a.VBROADCASTSS(X5, Y5)
	a.q4kScales(X6, X7)
	for i, y := range []VecPhysical{Y6, Y7} {
		a.VPMOVZXBD(y.AsX(), y)
		a.VCVTDQ2PS(y, y)
		a.VMULPS([]VecPhysical{Y4, Y5}[i], y, y)
	}
	for t := range n {
		a.VMULPS(xdRow(0, t), Y6, Y8)
		a.VMOVUPS(Y8, sp(32*t))
	}
	for t := range n {
		a.VFMADD231PS(xsRow(t), Y7, min[t])
	}
	for c := range 4 {
		// Chunk c's nibbles in Z8: sub-block 2c (low) then 2c+1
		// (high), unsigned 0..15, in the activations' order.
		a.VMOVDQU(mem(RSI, 16+32*c), Y8)
		a.VPSRLW(U8(4), Y8, Y9)
		a.VINSERTI64X4(U8(1), Y9, Z8, Z8)
		a.VPANDD(Z14, Z8, Z8)
		// Each token's dot with them (no sign trick: the nibbles are
		// the unsigned operand), scaled by its two sub-blocks' scales.
		for t := range n {
			acc := kAcc(n, c, t)
			a.VPXORD(Z9, Z9, Z9)
			a.VPDPBUSD(xqRow(64*c, t), Z8, Z9)
			a.VCVTDQ2PS(Z9, Z9)
			a.VFMADD231PS_BCST(sp(32*t+8*c), Z9, K2, acc)
			a.VFMADD231PS_BCST(sp(32*t+8*c+4), Z9, K3, acc)
		}
	}
	a.kNext(144, true)
	a.kEnd(n, min)
}

// dotQ6KZ is kernDotQ6_KAVX512 (n = 1) or kernDotQ6_Kx4AVX512 (n = 4).
// Each token's sixteen d·sc·xd of a 256-value block are kept in Z24+t.
func (a *asm) dotQ6KZ(n int) {
	if n == 1 {
		a.text("kernDotQ6_KAVX512", 0, sigDotQ)
	} else {
		a.text("kernDotQ6_Kx4AVX512", 0, sigDotQx4)
	}
	a.kSetup(n)
	// Q6_K's constants: Z12 0x30s, Z11 0x20s, Z15 the VPERMPS order
	// kernQ6Pair, and Z10, Z28, Z29, Z30 the orders kernQ6Quad+4p that
	// pick the scales of the p-th pair of blocks.
	a.bcastbZ(0x30, Z12)
	a.bcastbZ(0x20, Z11)
	a.VMOVDQU64(kernQ6Pair, Z15)
	a.VMOVDQU64(kernQ6Quad, Z10)
	a.MOVL(U32(4), EAX)
	a.VPBROADCASTD(EAX, Z9)
	order := []VecPhysical{Z10, Z28, Z29, Z30}
	for p := 1; p < 4; p++ {
		a.VPADDD(Z9, order[p-1], order[p])
	}
	if n == 1 {
		a.zeroD(Z0, Z1)
	}
	a.kLoop()
	a.q6kScales(Z2, Z3) // Z3 = d·sc for the sixteen sub-blocks
	sc := []VecPhysical{Z24, Z25, Z26, Z27}
	for t := range n {
		// Token t's eight activation scales, each for two sub-blocks.
		a.VMOVUPS(xdRow(0, t), Y4)
		a.VPERMPS(Z4, Z15, sc[t])
		a.VMULPS(Z3, sc[t], sc[t])
	}
	for p := range 4 {
		// Z8 = |q-32| and K1 = the signs of q-32 for blocks 2(p%2),
		// 2(p%2)+1 of half p/2: the low bits from Z4, the high bits
		// from Y5 (loaded for pair 0 of each half).
		h := p / 2
		if p%2 == 0 {
			a.VMOVDQU64(mem(RSI, 64*h), Z4)
			a.VMOVDQU(mem(RSI, 128+32*h), Y5)
			a.VPSLLW(U8(4), Y5, Y6)
			a.VPSLLW(U8(2), Y5, Y7)
			a.VINSERTI64X4(U8(1), Y7, Z6, Z6)
			a.VPANDD(Z14, Z4, Z8)
		} else {
			a.VPSRLW(U8(4), Z4, Z8)
			a.VPANDD(Z14, Z8, Z8)
			a.VPSRLW(U8(2), Y5, Y7)
			a.VINSERTI64X4(U8(1), Y7, Z5, Z6)
		}
		a.VPANDD(Z12, Z6, Z6)
		a.VPORD(Z6, Z8, Z8)
		a.VPSUBB(Z11, Z8, Z8)
		a.VPMOVB2M(Z8, K1)
		a.VPABSB(Z8, Z8)
		// Each token's dot with the pair, scaled per 16 values by the
		// four scales that order[p] picks from its sc.
		for t := range n {
			a.signedDot(xqRow(64*p, t), Z8)
			a.VPERMPS(sc[t], order[p], Z9)
			a.VFMADD231PS(Z9, Z7, kAcc(n, p, t))
		}
	}
	a.kNext(210, false)
	a.kEnd(n, nil)
}
