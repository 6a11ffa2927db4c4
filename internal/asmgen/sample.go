package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX-512 (F) kernels of engine/sample/simd_amd64.s, the
// vocabulary-wide passes; simd_amd64.go documents their contracts. Each
// computes exactly what its Go namesake does: the same IEEE float32
// operations in the same order, no fused multiply-adds, so the results are
// the same bits.

func genSample(a *asm) {
	// argmaxIota holds the int32s 0 to 15, the indices of the first 16
	// lanes.
	iota := make([]uint64, 8)
	for i := range iota {
		iota[i] = uint64(2*i+1)<<32 | uint64(2*i)
	}
	a.data("argmaxIota", iota...)
	a.argmax()
	a.firstAbove()
	a.expBlocks()
}

// argmax is argmaxAVX512. Z0-Z3 hold the lanes' maxima (-Inf at first),
// Z4-Z7 their indices, Z8-Z11 the indices of the current 64 logits and Z12
// 64s. A lane takes a logit only if it is greater (GT_OQ: false for NaN),
// so it keeps the first index of its maximum.
func (a *asm) argmax() {
	a.text("argmaxAVX512", 0, "func(x []float32, vals *[64]float32, ids *[64]int32)")
	maxs := []VecPhysical{Z0, Z1, Z2, Z3}
	ids := []VecPhysical{Z4, Z5, Z6, Z7}
	cur := []VecPhysical{Z8, Z9, Z10, Z11}
	x := []VecPhysical{Z13, Z14, Z15, Z16}
	gt := []Register{K1, K2, K3, K4}
	a.MOVQ(a.arg("x_base"), RSI)
	a.MOVQ(a.arg("x_len"), RCX)
	a.MOVQ(a.arg("vals"), RDI)
	a.MOVQ(a.arg("ids"), RDX)
	a.MOVL(U32(0xff800000), EAX)
	a.VPBROADCASTD(EAX, Z0)
	for _, z := range maxs[1:] {
		a.VMOVAPS(Z0, z)
	}
	a.zeroD(ids...)
	a.VMOVDQU32(static("argmaxIota", 0), Z8)
	a.MOVL(U32(16), EAX)
	a.VPBROADCASTD(EAX, Z12)
	for i := 1; i < 4; i++ {
		a.VPADDD(Z12, cur[i-1], cur[i])
	}
	a.MOVL(U32(64), EAX)
	a.VPBROADCASTD(EAX, Z12)

	a.Label("argmaxLoop")
	for i, z := range x {
		a.VMOVUPS(mem(RSI, 64*i), z)
	}
	for i, z := range x {
		a.VCMPPS(U8(0x1e), maxs[i], z, gt[i])
	}
	for i, z := range x {
		a.VMOVAPS(z, gt[i], maxs[i])
	}
	for i, z := range cur {
		a.VMOVDQA32(z, gt[i], ids[i])
	}
	for _, z := range cur {
		a.VPADDD(Z12, z, z)
	}
	a.ADDQ(U32(256), RSI)
	a.SUBQ(U8(64), RCX)
	a.JNZ(lbl("argmaxLoop"))

	for i, z := range maxs {
		a.VMOVUPS(z, mem(RDI, 64*i))
	}
	for i, z := range ids {
		a.VMOVDQU32(z, mem(RDX, 64*i))
	}
	a.VZEROUPPER()
	a.RET()
}

// firstAbove is firstAboveAVX512. floor < x (LT_OQ) is x > floor with the
// memory operand second.
func (a *asm) firstAbove() {
	a.text("firstAboveAVX512", 0, "func(x []float32, floor float32) int")
	a.MOVQ(a.arg("x_base"), RSI)
	a.MOVQ(a.arg("x_len"), RCX)
	a.VBROADCASTSS(a.arg("floor"), Z0)
	a.XORQ(RAX, RAX)

	a.Label("aboveLoop")
	a.VCMPPS(U8(0x11), memx(RSI, 0, RAX, 4), Z0, K1)
	a.KORTESTW(K1, K1)
	a.JNZ(lbl("aboveFound"))
	a.ADDQ(U8(16), RAX)
	a.CMPQ(RAX, RCX)
	a.JLT(lbl("aboveLoop"))
	a.JMP(lbl("aboveDone"))

	a.Label("aboveFound")
	a.KMOVW(K1, EDX)
	a.BSFL(EDX, EDX)
	a.ADDQ(RDX, RAX)

	a.Label("aboveDone")
	a.MOVQ(RAX, a.ret(""))
	a.VZEROUPPER()
	a.RET()
}

// expBlocks is expBlocksAVX512. R9 counts the logits left, CX those left
// in the block (256 is blockLen); only the last block can end with fewer
// than 16, taken under a partial mask K7.
func (a *asm) expBlocks() {
	a.text("expBlocksAVX512", 0, "func(dst, src []float32, m, invT float32, sums []float64)")
	a.MOVQ(a.arg("dst_base"), RDI)
	a.MOVQ(a.arg("src_base"), RSI)
	a.MOVQ(a.arg("src_len"), R9)
	a.MOVQ(a.arg("sums_base"), R8)
	a.VBROADCASTSS(a.arg("m"), Z16)
	a.VBROADCASTSS(a.arg("invT"), Z17)
	for i, z := range []VecPhysical{Z18, Z19, Z20, Z21, Z22, Z23, Z24} {
		a.VBROADCASTSS(sym("expConsts", 4*i), z)
	}
	for i, z := range []VecPhysical{Z26, Z27, Z28, Z29} {
		a.VMOVDQU32(sym("exp2Table", 64*i), z)
	}
	a.MOVL(U32(32), EAX)
	a.VPBROADCASTD(EAX, Z30)
	a.jzero(R9, "expDone")

	a.Label("expBlock")
	a.MOVQ(U32(256), RCX)
	a.CMPQ(R9, RCX)
	a.CMOVQLT(R9, RCX)
	a.SUBQ(RCX, R9)
	a.VPXORQ(Z8, Z8, Z8)
	a.VPXORQ(Z9, Z9, Z9)
	a.KXNORW(K7, K7, K7)

	a.Label("expChunk")
	a.CMPQ(RCX, U8(16))
	a.JLT(lbl("expTail"))
	a.exp16()
	a.ADDQ(U8(64), RSI)
	a.ADDQ(U8(64), RDI)
	a.SUBQ(U8(16), RCX)
	a.JMP(lbl("expChunk"))

	a.Label("expTail")
	a.jzero(RCX, "expSum")
	a.tailMask(K7)
	a.exp16()

	a.Label("expSum")
	a.Comment("laneSum's order: lane j+8 into j, then j+4, j+2 and j+1.")
	a.VADDPD(Z9, Z8, Z8)
	a.VEXTRACTF64X4(U8(1), Z8, Y9)
	a.VADDPD(Y9, Y8, Y8)
	a.VEXTRACTF128(U8(1), Y8, X9)
	a.VADDPD(X9, X8, X8)
	a.VPERMILPD(U8(1), X8, X9)
	a.VADDSD(X9, X8, X8)
	a.VMOVSD(X8, mem(R8, 0))
	a.ADDQ(U8(8), R8)
	a.TESTQ(R9, R9)
	a.JNZ(lbl("expBlock"))

	a.Label("expDone")
	a.VZEROUPPER()
	a.RET()
}

// exp16 is one iteration of expBlocksGo's inner loop over the 16 logits
// at SI, in the lanes of K7: it stores their weights at DI and adds them,
// as float64, to the lane sums Z8 (lanes 0-7) and Z9 (lanes 8-15). The
// constants: Z16 m, Z17 invT, Z18 log2e64, Z19 roundMagic (whose bits are
// roundMagicBits), Z20 ln2Hi64, Z21 ln2Lo64, Z22 0.5, Z23 1, Z24 -87,
// Z26-Z29 exp2Table and Z30 32s. The table is read with two two-register
// permutes (index bits 0-4), bit 5 choosing between them; a weight is 0
// where !(x >= -87) (GE_OQ: false for NaN) and in the lanes outside K7.
func (a *asm) exp16() {
	a.VMOVUPS_Z(mem(RSI, 0), K7, Z0)
	a.VSUBPS(Z16, Z0, Z0)
	a.VMULPS(Z17, Z0, Z0)
	a.VCMPPS(U8(0x1d), Z24, Z0, K7, K1)
	a.VMULPS(Z18, Z0, Z1)
	a.VADDPS(Z19, Z1, Z1)
	a.VPSUBD(Z19, Z1, Z2)
	a.VSUBPS(Z19, Z1, Z1)
	a.VMULPS(Z20, Z1, Z3)
	a.VSUBPS(Z3, Z0, Z3)
	a.VMULPS(Z21, Z1, Z1)
	a.VSUBPS(Z1, Z3, Z3)
	a.VMULPS(Z22, Z3, Z4)
	a.VADDPS(Z23, Z4, Z4)
	a.VMULPS(Z3, Z4, Z4)
	a.VADDPS(Z23, Z4, Z4)
	a.VMOVDQA32(Z2, Z5)
	a.VPERMI2PS(Z27, Z26, Z5)
	a.VMOVDQA32(Z2, Z6)
	a.VPERMI2PS(Z29, Z28, Z6)
	a.VPTESTMD(Z30, Z2, K2)
	a.VMOVAPS(Z6, K2, Z5)
	a.VPSRAD(U8(6), Z2, Z2)
	a.VPSLLD(U8(23), Z2, Z2)
	a.VPADDD(Z2, Z5, Z5)
	a.VMULPS_Z(Z4, Z5, K1, Z5)
	a.VMOVUPS(Z5, K7, mem(RDI, 0))
	a.VCVTPS2PD(Y5, Z6)
	a.VEXTRACTF64X4(U8(1), Z5, Y7)
	a.VCVTPS2PD(Y7, Z7)
	a.VADDPD(Z6, Z8, Z8)
	a.VADDPD(Z7, Z9, Z9)
}
