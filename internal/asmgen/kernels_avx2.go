package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX2 (with FMA and F16C) kernels of engine/cpu/kernel_amd64.s; see
// kernel_amd64.go for the Go declarations and kernel_go.go for the
// portable kernels they must agree with. Quantized dots use the sign trick
// for signed x signed bytes: |w| (unsigned) times x·sign(w) (signed) in
// VPMADDUBSW, whose pair sums stay below 2·128·127 < 2^15, then VPMADDWD by
// ones to int32 lanes, which are converted to float32 and scaled per block
// by d_w·d_x.
//
// The four-token kernels read each weight block once and dot it with the
// same block of four activation rows: xq holds four rows of cols values,
// xd and xs four rows of cols/32 floats (x4Setup's registers).

var (
	// Byte j of a Q5_0 block's 32 high bits: broadcast qh, take byte j/8,
	kernQ5Shuf = static("kernQ5Shuf", 0)
	// set every bit but bit j%8, and compare with all ones.
	kernQ5Bits = static("kernQ5Bits", 0)
	// Byte constants for operands that the four-token kernels, short of
	// registers, take from memory.
	kernBytes30 = static("kernBytes30", 0)
	kernBytesF0 = static("kernBytesF0", 0)
	kernBytesFF = static("kernBytesFF", 0)
	// VPERMD order that undoes the lane interleaving of VPACKSSDW+VPACKSSWB.
	kernPackPerm = static("kernPackPerm", 0)
	// VPERMPS orders that repeat each of four floats twice: the activation
	// scale of each 32-value block for its two 16-value Q6_K sub-blocks.
	kernQ6Dup0 = static("kernQ6Dup0", 0)
	kernQ6Dup1 = static("kernQ6Dup1", 0)
)

func genKernelsAVX2(a *asm) {
	a.data("kernQ5Shuf", 0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303)
	a.data("kernQ5Bits", rep4(0x7fbfdfeff7fbfdfe)...)
	a.data("kernBytes30", rep4(0x3030303030303030)...)
	a.data("kernBytesF0", rep4(0xf0f0f0f0f0f0f0f0)...)
	a.data("kernBytesFF", rep4(0xffffffffffffffff)...)
	a.data("kernPackPerm", 0x0000000400000000, 0x0000000500000001, 0x0000000600000002, 0x0000000700000003)
	a.data("kernQ6Dup0", 0x0000000000000000, 0x0000000100000001, 0x0000000200000002, 0x0000000300000003)
	a.data("kernQ6Dup1", 0x0000000400000004, 0x0000000500000005, 0x0000000600000006, 0x0000000700000007)

	a.cpuid()
	a.quantizeAVX2()
	for _, f := range floatFmts {
		a.fxAVX2(1, f)
	}
	a.convAVX2("kernF16ToF32AVX2", f16Fmt, func() {
		f16Fmt.one(a, X0)
		a.VMOVSS(X0, mem(RDI, 0))
	})
	a.convAVX2("kernBF16ToF32AVX2", bf16Fmt, func() {
		a.MOVWLZX(mem(RSI, 0), EAX)
		a.SHLL(U8(16), EAX)
		a.MOVL(EAX, mem(RDI, 0))
	})
	a.toHalfAVX2()
	for _, q := range []q0AVX2{q8AVX2, q4AVX2, q5AVX2} {
		a.dotQ0AVX2(q)
	}
	a.dotQ4KAVX2()
	a.dotQ6KAVX2()
	for _, q := range []q0AVX2{q8AVX2, q4AVX2, q5AVX2} {
		a.dotQ0x4AVX2(q)
	}
	a.dotQ4Kx4AVX2()
	a.dotQ6Kx4AVX2()
	for _, f := range floatFmts {
		a.fxAVX2(4, f)
	}
	genKQuantsAVX2(a)
}

// cpuid is func kernCPUID(leaf, sub uint32) (eax, ebx, ecx, edx uint32).
func (a *asm) cpuid() {
	a.text("kernCPUID", 0, "func(leaf, sub uint32) (eax, ebx, ecx, edx uint32)")
	a.MOVL(a.arg("leaf"), EAX)
	a.MOVL(a.arg("sub"), ECX)
	a.CPUID()
	for i, r := range []Register{EAX, EBX, ECX, EDX} {
		a.MOVL(r, a.ret([]string{"eax", "ebx", "ecx", "edx"}[i]))
	}
	a.RET()
}

// quantizeAVX2 is kernQuantizeAVX2: each 32-value block of x to int8
// values q = round(x·127/amax) (xq), its scale d = amax/127 (xd) and d·Σq
// (xs).
func (a *asm) quantizeAVX2() {
	a.text("kernQuantizeAVX2", 0, "func(xq []int8, xd, xs []float32, x []float32)")
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("xd_base"), RDX)
	a.MOVQ(a.arg("xd_len"), RCX)
	a.MOVQ(a.arg("xs_base"), R8)
	a.MOVQ(a.arg("x_base"), RSI)
	a.MOVL(U32(0x7fffffff), EAX)
	a.VMOVD(EAX, X15)
	a.VPBROADCASTD(X15, Y15) // |x| mask
	a.MOVL(U32(0x42fe0000), EAX)
	a.VMOVD(EAX, X14) // 127
	a.MOVL(U32(0x0da24260), EAX)
	a.VMOVD(EAX, X13) // kernMinAmax, 1e-30
	a.VMOVDQU(kernPackPerm, Y12)
	a.TESTQ(RCX, RCX)
	a.JZ(lbl("qdone"))

	a.Label("qloop")
	v := []VecPhysical{Y0, Y1, Y2, Y3}
	for i, y := range v {
		a.VMOVUPS(mem(RSI, 32*i), y)
	}
	a.VANDPS(Y15, Y0, Y4)
	a.VANDPS(Y15, Y1, Y5)
	a.VMAXPS(Y5, Y4, Y4)
	a.VANDPS(Y15, Y2, Y5)
	a.VANDPS(Y15, Y3, Y6)
	a.VMAXPS(Y6, Y5, Y5)
	a.VMAXPS(Y5, Y4, Y4)
	a.VEXTRACTF128(U8(1), Y4, X5)
	a.VMAXPS(X5, X4, X4)
	for _, p := range []uint8{0x4e, 0xb1} {
		a.VPERMILPS(U8(p), X4, X5)
		a.VMAXPS(X5, X4, X4)
	} // amax in every lane
	a.VDIVSS(X14, X4, X6) // d = amax/127
	a.VDIVSS(X4, X14, X7) // id = 127/amax ...
	a.VCMPSS(U8(0x0d), X13, X4, X8)
	a.VANDPS(X8, X7, X7) // ... or 0 unless amax >= kernMinAmax
	a.VBROADCASTSS(X7, Y7)
	for _, y := range v {
		a.VMULPS(Y7, y, y)
	}
	for _, y := range v {
		a.VCVTPS2DQ(y, y) // round half to even
	}
	a.VPADDD(Y1, Y0, Y8)
	a.VPADDD(Y3, Y2, Y9)
	a.VPADDD(Y9, Y8, Y8)
	a.VEXTRACTI128(U8(1), Y8, X9)
	a.VPADDD(X9, X8, X8)
	for _, p := range []uint8{0x4e, 0xb1} {
		a.VPSHUFD(U8(p), X8, X9)
		a.VPADDD(X9, X8, X8)
	}
	a.VCVTDQ2PS(X8, X8)
	a.VMULSS(X6, X8, X8) // xs = d·Σq
	a.VPACKSSDW(Y1, Y0, Y0)
	a.VPACKSSDW(Y3, Y2, Y2)
	a.VPACKSSWB(Y2, Y0, Y0)
	a.VPERMD(Y0, Y12, Y0)
	a.VMOVDQU(Y0, mem(RDI, 0))
	a.VMOVSS(X6, mem(RDX, 0))
	a.VMOVSS(X8, mem(R8, 0))
	a.ADDQ(U32(128), RSI)
	a.ADDQ(U8(32), RDI)
	a.ADDQ(U8(4), RDX)
	a.ADDQ(U8(4), R8)
	a.DECQ(RCX)
	a.JNZ(lbl("qloop"))

	a.Label("qdone")
	a.VZEROUPPER()
	a.RET()
}

// fxAVX2 is the float dot of n (1 or 4) tokens with a row of f: func(w, x)
// float32, or func(res *[4]float32, w []byte, x []float32, stride int) with
// four rows of x stride floats apart. The sums of 16-value steps go to
// Y8+t (first 8) and Y4+t (last 8), which are added after the 16s; the
// 8-value step goes to Y8+t, the tail to Y4+t. The one-token dot adds in
// exactly the four-token order.
func (a *asm) fxAVX2(n int, f floatFmt) {
	a.floatText(n, f, "AVX2")
	acc := []VecPhysical{Y8, Y9, Y10, Y11}[:n]
	hi := []VecPhysical{Y4, Y5, Y6, Y7}[:n]
	a.fxArgs(n, f)
	a.zero(acc...)
	a.zero(hi...)
	a.fxSteps(f, 8, Y0, Y1, acc, hi, func() {
		a.addInto(acc, hi)
		a.zero(hi...)
	})
	a.whileNZ("tail", RCX, "done", func() {
		f.one(a, X0)
		for t, y := range hi {
			a.VMOVSS(xqRow(0, t), X1)
			a.VFMADD231SS(X1, X0, y.AsX())
		}
		a.ADDQ(U8(f.es), RSI)
		a.ADDQ(U8(4), RDI)
	})

	a.Label("done")
	a.retAVX2(acc, hi, X0)
}

// convAVX2 is a conversion func(dst []float32, w []byte) of the 16-bit
// floats f: 8 values at a time, then one at a time with one.
func (a *asm) convAVX2(name string, f floatFmt, one func()) {
	a.text(name, 0, "func(dst []float32, w []byte)")
	a.MOVQ(a.arg("dst_base"), RDI)
	a.MOVQ(a.arg("dst_len"), RCX)
	a.MOVQ(a.arg("w_base"), RSI)
	a.whileN("loop8", RCX, 8, "tail", func() {
		f.wide(a, 0, Y0)
		a.VMOVUPS(Y0, mem(RDI, 0))
		a.ADDQ(U8(16), RSI)
		a.ADDQ(U8(32), RDI)
	})
	a.whileNZ("tail", RCX, "done", func() {
		one()
		a.ADDQ(U8(2), RSI)
		a.ADDQ(U8(4), RDI)
	})

	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}

// toHalfAVX2 is kernF32ToF16AVX2, func(dst []byte, src []float32):
// VCVTPS2PH rounding to nearest even (imm 0), eight values at a time, then
// one at a time. It is IEEE's conversion, as kernF32ToF16Go's, NaNs
// included (quieted, the payload's top bits kept).
func (a *asm) toHalfAVX2() {
	a.text("kernF32ToF16AVX2", 0, "func(dst []byte, src []float32)")
	a.MOVQ(a.arg("dst_base"), RDI)
	a.MOVQ(a.arg("src_len"), RCX)
	a.MOVQ(a.arg("src_base"), RSI)
	a.whileN("loop8", RCX, 8, "tail", func() {
		a.VMOVUPS(mem(RSI, 0), Y0)
		a.VCVTPS2PH(U8(0), Y0, mem(RDI, 0))
		a.ADDQ(U8(32), RSI)
		a.ADDQ(U8(16), RDI)
	})
	a.whileNZ("tail", RCX, "done", func() {
		a.VMOVSS(mem(RSI, 0), X0)
		a.VCVTPS2PH(U8(0), X0, X0)
		a.VMOVD(X0, EAX)
		a.MOVW(AX, mem(RDI, 0))
		a.ADDQ(U8(4), RSI)
		a.ADDQ(U8(2), RDI)
	})

	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}

// ones16 sets every int16 of y to 1.
func (a *asm) ones16(y VecPhysical) {
	a.VPCMPEQW(y, y, y)
	a.VPSRLW(U8(15), y, y)
}

// bcastb broadcasts the byte c to every byte of the ymm register y.
func (a *asm) bcastb(c uint32, y VecPhysical) {
	a.MOVL(U32(c), EAX)
	a.VMOVD(EAX, y.AsX())
	a.VPBROADCASTB(y.AsX(), y)
}

// dotSigned adds to acc the int8 dot product of w (signed bytes,
// clobbered) and the activation block at x, scaled by the float in every
// lane of s. Uses Y15 (int16 ones) and t.
func (a *asm) dotSigned(w VecPhysical, x Mem, s, t, acc VecPhysical) {
	a.VMOVDQU(x, t)
	a.VPSIGNB(w, t, t)
	a.VPABSB(w, w)
	a.VPMADDUBSW(t, w, w)
	a.VPMADDWD(Y15, w, w)
	a.VCVTDQ2PS(w, w)
	a.VFMADD231PS(s, w, acc)
}

// blockScale sets every lane of the ymm register y to the f16 weight scale
// at w times the float activation scale at d.
func (a *asm) blockScale(w, d Mem, y VecPhysical) {
	a.VCVTPH2PS(w, y.AsX())
	a.VMULSS(d, y.AsX(), y.AsX())
	a.VBROADCASTSS(y.AsX(), y)
}

// q4Vals sets w to the 32 values q-8 of the Q4_0 block at off(SI): low
// nibbles then high nibbles; t is a scratch xmm register. Uses Y14 (0x0F
// bytes) and Y13 (8s).
func (a *asm) q4Vals(off int, w, t VecPhysical) {
	a.q4Nibbles(off, w, t)
	a.VPAND(Y14, w, w)
	a.VPSUBB(Y13, w, w)
}

// q4Nibbles loads the 16 bytes at off+2(SI) into the ymm register w: their
// low nibbles in the lower half, their high nibbles (shifted down, not
// yet masked) in the upper half; t is a scratch xmm register.
func (a *asm) q4Nibbles(off int, w, t VecPhysical) {
	a.VMOVDQU(mem(RSI, off+2), w.AsX())
	a.VPSRLW(U8(4), w.AsX(), t)
	a.VINSERTI128(U8(1), t, w, w)
}

// q5Vals sets w to the 32 signed values of the Q5_0 block at off(SI):
// (nibble | fifth bit<<4) - 16, computed as nibble | 0xF0 where the fifth
// bit is clear; t is a scratch xmm register, h a ymm one. The constants
// (registers or memory): shuf kernQ5Shuf, bits kernQ5Bits, ones all ones,
// f0 0xF0 bytes; Y14 holds 0x0F bytes.
func (a *asm) q5Vals(off int, w, t, h VecPhysical, shuf, bits, ones, f0 Op) {
	a.VPBROADCASTD(mem(RSI, off+2), h)
	a.VPSHUFB(shuf, h, h)
	a.VPOR(bits, h, h)
	a.VPCMPEQB(ones, h, h)
	a.VPANDN(f0, h, h)
	a.q4Nibbles(off+4, w, t)
	a.VPAND(Y14, w, w)
	a.VPOR(h, w, w)
}

// q0AVX2 describes a 32-value block type (Q8_0, Q4_0, Q5_0) for the AVX2
// kernels: bsz bytes a block, an f16 scale first. consts sets up the
// one-token kernel's constant registers after Y15 (ones) and consts4 the
// four-token kernel's; vals1 loads the signed values of the block at
// off(SI) into w for the one-token kernel (k: first or second of a pair),
// vals4 those of the block at SI into Y2 for the four-token kernel. A
// one-token pair step interleaves loads and dots when inter is set. odd4
// are the four-token kernel's accumulators of odd blocks.
type q0AVX2 struct {
	name    string
	bsz     int
	inter   bool
	consts  func(a *asm)
	consts4 func(a *asm)
	vals1   func(a *asm, off int, w VecPhysical, k int)
	vals4   func(a *asm)
	odd4    []VecPhysical
}

var (
	q8AVX2 = q0AVX2{
		name: "Q8_0", bsz: 34,
		consts:  func(a *asm) {},
		consts4: func(a *asm) {},
		vals1:   func(a *asm, off int, w VecPhysical, k int) { a.VMOVDQU(mem(RSI, off+2), w) },
		vals4:   func(a *asm) { a.VMOVDQU(mem(RSI, 2), Y2) },
		odd4:    []VecPhysical{Y6, Y7, Y12, Y13},
	}
	q4AVX2 = q0AVX2{
		name: "Q4_0", bsz: 18,
		consts: q4Consts, consts4: q4Consts,
		vals1: func(a *asm, off int, w VecPhysical, k int) { a.q4Vals(off, w, []VecPhysical{X8, X9}[k]) },
		vals4: func(a *asm) { a.q4Vals(0, Y2, X4) },
		odd4:  []VecPhysical{Y0, Y6, Y7, Y12},
	}
	q5AVX2 = q0AVX2{
		name: "Q5_0", bsz: 22, inter: true,
		consts: func(a *asm) {
			a.bcastb(0x0f, Y14)
			a.VMOVDQU(kernQ5Shuf, Y13)
			a.VMOVDQU(kernQ5Bits, Y12)
			a.VPCMPEQB(Y11, Y11, Y11)
			a.bcastb(0xf0, Y10)
		},
		consts4: func(a *asm) { a.bcastb(0x0f, Y14) },
		vals1: func(a *asm, off int, w VecPhysical, k int) {
			a.q5Vals(off, w, X8, Y9, Y13, Y12, Y11, Y10)
		},
		vals4: func(a *asm) { // constants from memory
			a.q5Vals(0, Y2, X4, Y5, kernQ5Shuf, kernQ5Bits, kernBytesFF, kernBytesF0)
		},
		odd4: []VecPhysical{Y0, Y6, Y7, Y12},
	}
)

// q4Consts sets Q4_0's constants: Y14 0x0F bytes, Y13 8s.
func q4Consts(a *asm) {
	a.bcastb(0x0f, Y14)
	a.bcastb(0x08, Y13)
}

// dotQ0AVX2 is the one-token kernel of q: pairs of blocks, even ones into
// Y0 and odd ones into Y1, then a last odd block into Y0.
func (a *asm) dotQ0AVX2(q q0AVX2) {
	a.text("kernDot"+q.name+"AVX2", 0, sigDotQ)
	a.x1Setup()
	a.zero(Y0, Y1)
	a.ones16(Y15)
	q.consts(a)
	w := []VecPhysical{Y4, Y5}
	dot := func(k int) {
		a.dotSigned(w[k], mem(RDI, 32*k), []VecPhysical{Y2, Y3}[k], []VecPhysical{Y6, Y7}[k], []VecPhysical{Y0, Y1}[k])
	}
	a.whileN("loop2", RCX, 2, "tail", func() {
		a.blockScale(mem(RSI, 0), mem(RDX, 0), Y2)
		a.blockScale(mem(RSI, q.bsz), mem(RDX, 4), Y3)
		if q.inter {
			for k := range 2 {
				q.vals1(a, k*q.bsz, w[k], k)
				dot(k)
			}
		} else {
			for k := range 2 {
				q.vals1(a, k*q.bsz, w[k], k)
			}
			for k := range 2 {
				dot(k)
			}
		}
		a.ADDQ(U8(2*q.bsz), RSI)
		a.ADDQ(U8(64), RDI)
		a.ADDQ(U8(8), RDX)
	})

	a.Label("tail")
	a.jzero(RCX, "done")
	a.blockScale(mem(RSI, 0), mem(RDX, 0), Y2)
	q.vals1(a, 0, Y4, 0)
	dot(0)

	a.Label("done")
	a.retDot1AVX2()
}

// retDot1AVX2 returns the sum of Y0 and Y1, the one-token quantized
// kernels' accumulators.
func (a *asm) retDot1AVX2() { a.retAVX2([]VecPhysical{Y0}, []VecPhysical{Y1}, X1) }

// retAVX2 adds odd[t] into acc[t] and returns their sums (retSums; t is
// the one-token scratch xmm register).
func (a *asm) retAVX2(acc, odd []VecPhysical, t Register) {
	a.addInto(acc, odd)
	a.retSums(acc, t)
}

// addInto adds each of v into the register of acc at the same index.
func (a *asm) addInto(acc, v []VecPhysical) {
	for t, y := range acc {
		a.VADDPS(v[t], y, y)
	}
}

// dotQ0x4AVX2 is the four-token kernel of q: vals4 loads one block's
// signed values into Y2 and its scale into Y1. As in the one-token kernel,
// even blocks go into Y8..Y11 and odd blocks into q.odd4, which are added
// to them at the end.
func (a *asm) dotQ0x4AVX2(q q0AVX2) {
	even := []VecPhysical{Y8, Y9, Y10, Y11}
	a.text("kernDot"+q.name+"x4AVX2", 0, sigDotQx4)
	a.x4Setup(true)
	a.zero(even...)
	a.zero(q.odd4...)
	a.ones16(Y15)
	q.consts4(a)

	// block loads one block and adds its dots with the four tokens to acc;
	// next steps past it.
	block := func(acc []VecPhysical) {
		a.VCVTPH2PS(mem(RSI, 0), X1)
		a.VBROADCASTSS(X1, Y1)
		q.vals4(a)
		a.VPABSB(Y2, Y3)
		for t, y := range acc {
			a.VMOVDQU(xqRow(0, t), Y4)
			a.VPSIGNB(Y2, Y4, Y4)
			a.VPMADDUBSW(Y4, Y3, Y4)
			a.VPMADDWD(Y15, Y4, Y4)
			a.VCVTDQ2PS(Y4, Y4)
			a.VBROADCASTSS(xdRow(0, t), Y5)
			a.VMULPS(Y1, Y5, Y5)
			a.VFMADD231PS(Y5, Y4, y)
		}
	}
	next := func() {
		a.ADDQ(U8(q.bsz), RSI)
		a.ADDQ(U8(32), RDI)
		a.ADDQ(U8(4), RDX)
	}
	a.whileN("loop2", RCX, 2, "tail", func() {
		block(even)
		next()
		block(q.odd4)
		next()
	})

	a.Label("tail")
	a.jzero(RCX, "done")
	block(even)

	a.Label("done")
	a.retAVX2(even, q.odd4, nil)
}

// kSetupAVX2 starts a K-quant kernel of n (1 or 4) tokens: its arguments
// (x1Setup, with R8 = xs if xs; x4Setup(true), R8 = xs whatever xs), CX =
// 256-value blocks, the accumulators acc zeroed, Y15 int16 ones and Y14
// 0x0F bytes.
func (a *asm) kSetupAVX2(n int, xs bool, acc ...VecPhysical) {
	if n == 1 {
		a.x1Setup()
		a.SHRQ(U8(3), RCX)
		if xs {
			a.MOVQ(a.arg("xs_base"), R8)
		}
	} else {
		a.x4Setup(true)
		a.SHRQ(U8(3), RCX)
	}
	a.zero(acc...)
	a.ones16(Y15)
	a.bcastb(0x0f, Y14)
}

// q4kHeadAVX2 decodes the header of the Q4_K block at SI: the eight 6-bit
// scales and mins as llama.cpp unpacks them (kmask1..3), scales·d into sc
// and, with mn, mins·dmin into mn. d and dmin are converted into the xmm
// register h; b is a scratch ymm register. For the four-token kernel
// (mins later) the steps are split: q4kHeadAVX2 then q4kMinsAVX2.
func (a *asm) q4kHeadAVX2(h, sc, mn, b VecPhysical, mins bool) {
	a.VCVTPH2PS(mem(RSI, 0), h)
	a.q4kScales(sc.AsX(), mn.AsX())
	a.VPMOVZXBD(sc.AsX(), sc)
	a.VCVTDQ2PS(sc, sc)
	a.VBROADCASTSS(h, b)
	a.VMULPS(b, sc, sc)
	if mins {
		a.q4kMinsAVX2(h, mn, b)
	}
}

func (a *asm) q4kMinsAVX2(h, mn, b VecPhysical) {
	a.VPMOVZXBD(mn.AsX(), mn)
	a.VCVTDQ2PS(mn, mn)
	a.VMOVSHDUP(h, h)
	a.VBROADCASTSS(h, b)
	a.VMULPS(b, mn, mn)
}

// q4kChunkAVX2 dots 64-value chunk c of the Q4_K block at SI (32 bytes:
// low nibbles are sub-block 2c, high nibbles 2c+1) with each token's two
// activation blocks, scaled by the per-block scales stored at 32t+8c(SP):
// low nibbles into lo[t], high into hi[t]. The nibbles go to nib (two
// registers); the products to prod (prod may be nib: one token) and the
// broadcast scales to sc. Uses Y15 (ones), Y14 (0x0F).
func (a *asm) q4kChunkAVX2(c int, nib, prod, sc, lo, hi []VecPhysical) {
	a.VMOVDQU(mem(RSI, 16+32*c), nib[0])
	a.VPSRLW(U8(4), nib[0], nib[1])
	a.VPAND(Y14, nib[0], nib[0])
	a.VPAND(Y14, nib[1], nib[1])
	for t := range lo {
		for k := range 2 {
			a.VPMADDUBSW(xqRow(64*c+32*k, t), nib[k], prod[k])
		}
		for k := range 2 {
			a.VPMADDWD(Y15, prod[k], prod[k])
		}
		for k := range 2 {
			a.VCVTDQ2PS(prod[k], prod[k])
		}
		for k := range 2 {
			a.VBROADCASTSS(sp(32*t+8*c+4*k), sc[k])
		}
		a.VFMADD231PS(sc[0], prod[0], lo[t])
		a.VFMADD231PS(sc[1], prod[1], hi[t])
	}
}

// dotQ4KAVX2 is kernDotQ4_KAVX2. Per 256-value block, (d·sc_j)·xd_j go to
// the stack for the nibble dots (low nibbles into Y0, high into Y1), and
// (dmin·m_j)·xs_j is taken off Y0 first, exactly as the four-token kernel
// does.
func (a *asm) dotQ4KAVX2() {
	a.text("kernDotQ4_KAVX2", 32, sigDotQ)
	a.kSetupAVX2(1, true, Y0, Y1)
	a.kLoop()
	a.q4kHeadAVX2(X5, Y2, Y4, Y3, true)
	a.VMULPS(mem(RDX, 0), Y2, Y3)
	a.VMOVUPS(Y3, sp(0))               // (d·sc_j)·xd_j
	a.VFNMADD231PS(mem(R8, 0), Y4, Y0) // -= (dmin·m_j)·xs_j
	for c := range 4 {
		a.q4kChunkAVX2(c, []VecPhysical{Y8, Y9}, []VecPhysical{Y8, Y9}, []VecPhysical{Y10, Y11}, []VecPhysical{Y0}, []VecPhysical{Y1})
	}
	a.kNext(144, true)
	a.retDot1AVX2()
}

// dotQ4Kx4AVX2 is kernDotQ4_KAVX2 for four tokens: each token's
// (d·sc_j)·xd_j at 32t(SP), low nibbles and min terms into Y8+t, high
// nibbles into Y4+t.
func (a *asm) dotQ4Kx4AVX2() {
	lo := []VecPhysical{Y8, Y9, Y10, Y11}
	hi := []VecPhysical{Y4, Y5, Y6, Y7}
	a.text("kernDotQ4_Kx4AVX2", 128, sigDotQx4)
	a.kSetupAVX2(4, true, append(lo, hi...)...)
	a.kLoop()
	a.q4kHeadAVX2(X1, Y2, Y0, Y3, false) // sc_j·d
	for t := range 4 {
		a.VMULPS(xdRow(0, t), Y2, Y3)
		a.VMOVUPS(Y3, sp(32*t))
	}
	a.q4kMinsAVX2(X1, Y0, Y3) // m_j·dmin
	for t, y := range lo {
		a.VFNMADD231PS(xsRow(t), Y0, y)
	}
	for c := range 4 {
		a.q4kChunkAVX2(c, []VecPhysical{Y12, Y13}, []VecPhysical{Y0, Y1}, []VecPhysical{Y2, Y3}, lo, hi)
	}
	a.kNext(144, true)
	a.retAVX2(lo, hi, nil)
}

// q6kValsAVX2 sets q to the 32 6-bit values of block k (0..3) of a Q6_K
// half: the low (k < 2) or high (k >= 2) nibbles of ql (a ymm register, or
// memory that q receives first: AVX2 shifts registers only), with bit pair
// k of the ymm register qh as bits 4 and 5 (and-ed with m30, 0x30 bytes); h
// is scratch. Uses Y14 (0x0F).
func (a *asm) q6kValsAVX2(k int, ql Op, qh VecPhysical, m30 Op, q, h VecPhysical) {
	_, inMem := ql.(Mem)
	switch {
	case k < 2 && inMem:
		a.VPAND(ql, Y14, q)
	case k < 2:
		a.VPAND(Y14, ql, q)
	default:
		if inMem {
			a.VMOVDQU(ql, q)
			ql = q
		}
		a.VPSRLW(U8(4), ql, q)
		a.VPAND(Y14, q, q)
	}
	switch k {
	case 0, 1:
		a.VPSLLW(U8(4-2*k), qh, h)
		a.VPAND(m30, h, h)
	case 2:
		a.VPAND(m30, qh, h)
	case 3:
		a.VPSRLW(U8(2), qh, h)
		a.VPAND(m30, h, h)
	}
	a.VPOR(h, q, q)
}

// q6kDotAVX2 dots the 32 6-bit values q (0..63) with the activation block
// at x, subtracting 32·Σx, and adds to acc scaled by the two sub-block
// scales at s (first 16 values) and s+4 (last 16). xr receives the
// activations, prod the products (it may be q), t and b are scratch. Uses
// Y15 (ones), Y12 (32s).
func (a *asm) q6kDotAVX2(x, s Mem, q, prod, xr, t, b, acc VecPhysical) {
	a.VMOVDQU(x, xr)
	a.VPMADDUBSW(xr, q, prod)
	a.VPMADDUBSW(xr, Y12, t)
	a.VPSUBW(t, prod, prod)
	a.VPMADDWD(Y15, prod, prod)
	a.VCVTDQ2PS(prod, prod)
	a.VBROADCASTSS(s, t.AsX())
	a.VBROADCASTSS(s.Offset(4), b)
	a.VBLENDPS(U8(0x0f), t, b, b)
	a.VFMADD231PS(b, prod, acc)
}

// dotQ6KAVX2 is kernDotQ6_KAVX2. Per 256-value block the sixteen
// (sc·d)·xd products (one per 16 values) are kept on the stack; blocks 0
// and 2 of each half go into Y0, 1 and 3 into Y1, as in the four-token
// kernel.
func (a *asm) dotQ6KAVX2() {
	a.text("kernDotQ6_KAVX2", 64, sigDotQ)
	a.kSetupAVX2(1, false, Y0, Y1)
	a.bcastb(0x30, Y13)
	a.bcastb(0x20, Y12)
	a.VMOVDQU(kernQ6Dup0, Y11)
	a.VMOVDQU(kernQ6Dup1, Y10)
	a.kLoop()
	a.q6kScales(Y2, Y3, Y4)
	a.VPERMPS(mem(RDX, 0), Y11, Y6) // xd, one per sub-block
	a.VPERMPS(mem(RDX, 0), Y10, Y7)
	a.VMULPS(Y6, Y3, Y3) // (sc·d)·xd
	a.VMULPS(Y7, Y4, Y4)
	a.VMOVUPS(Y3, sp(0))
	a.VMOVUPS(Y4, sp(32))
	for h := range 2 {
		// Half h: ql[64h:64h+64] in Y2, Y3 and qh[32h:32h+32] in Y4;
		// block k's values are nibbles of ql (low nibbles of Y2, Y3 for
		// k = 0, 1, high ones for 2, 3) and bit pair k of qh.
		a.VMOVDQU(mem(RSI, 64*h), Y2)
		a.VMOVDQU(mem(RSI, 64*h+32), Y3)
		a.VMOVDQU(mem(RSI, 128+32*h), Y4)
		for k := range 4 {
			a.q6kValsAVX2(k, []VecPhysical{Y2, Y3}[k%2], Y4, Y13, Y5, Y6)
			a.q6kDotAVX2(mem(RDI, 128*h+32*k), sp(32*h+8*k), Y5, Y5, Y7, Y8, Y9, []VecPhysical{Y0, Y1}[k%2])
		}
	}
	a.kNext(210, false)
	a.retDot1AVX2()
}

// dotQ6Kx4AVX2 is kernDotQ6_KAVX2 for four tokens: token t's sixteen
// (sc·d)·xd at 64t(SP), blocks 0 and 2 of each half into Y8..Y11, 1 and 3
// into Y5, Y6, Y7, Y13 (the one-token kernel's split). For want of
// registers, qh is kept in Y3 but ql is read from memory for each block,
// and 0x30 from kernBytes30.
func (a *asm) dotQ6Kx4AVX2() {
	even := []VecPhysical{Y8, Y9, Y10, Y11}
	odd := []VecPhysical{Y5, Y6, Y7, Y13}
	a.text("kernDotQ6_Kx4AVX2", 256, sigDotQx4)
	a.kSetupAVX2(4, false, append(even, odd...)...)
	a.bcastb(0x20, Y12)
	a.kLoop()
	a.q6kScales(Y1, Y2, Y3)
	for t := range 4 {
		// Token t's sixteen (sc·d)·xd, from sc·d in Y2 and Y3.
		for k, dup := range []Mem{kernQ6Dup0, kernQ6Dup1} {
			a.VMOVDQU(dup, Y0)
			a.VPERMPS(xdRow(0, t), Y0, Y1)
			a.VMULPS(Y1, []VecPhysical{Y2, Y3}[k], Y1)
			a.VMOVUPS(Y1, sp(64*t+32*k))
		}
	}
	for h := range 2 {
		a.VMOVDQU(mem(RSI, 128+32*h), Y3)
		for k := range 4 {
			a.q6kValsAVX2(k, mem(RSI, 64*h+32*(k%2)), Y3, kernBytes30, Y4, Y0)
			acc := [][]VecPhysical{even, odd}[k%2]
			for t := range 4 {
				a.q6kDotAVX2(xqRow(128*h+32*k, t), sp(64*t+32*h+8*k), Y4, Y1, Y0, Y0, Y2, acc[t])
			}
		}
	}
	a.kNext(210, false)
	a.retAVX2(even, odd, nil)
}
