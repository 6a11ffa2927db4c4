package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX-512 kernels of engine/cpu/kernel_avx512_amd64.s that are not
// tiles: the float dots of one and four tokens (fxAVX2 in zmm registers)
// and F16's two-row variant, the K-quant dots of kquants_avx512.go, then
// the tile kernels (tiles_avx512.go, tilesf16_avx512.go), which compute
// Q4_0, Q5_0, Q8_0, Q4_K, Q6_K and F16 matrices.

func genKernelsAVX512(a *asm) {
	for _, n := range []int{1, 4} {
		for _, f := range floatFmts {
			a.fxZ(n, f)
		}
	}
	a.dotF16x2x4Z()
	genKQuantsAVX512(a)
	genTilesAVX512(a)
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
