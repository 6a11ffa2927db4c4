package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX2 kernels of Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS. They compute the
// lane model of their portable kernels (engine/cpu/kernel_kquant_go.go) and
// agree with them bit for bit:
//
//   - A 32-value weight block's values, in their natural order, are bytes
//     of a ymm register; VPMADDUBSW with the token's 32 activations and
//     VPMADDWD with the block's integer scale as int16 words (ones where
//     there is none) give eight exact int32 lanes, lane l the sum over
//     values 4l..4l+3 times the scale of their 16-value half.
//   - The lanes are converted to float32, multiplied by f = d·xd (VMULPS)
//     and added (VADDPS) to the token's accumulator: never fused, as the Go
//     kernels round the product first.
//   - The accumulators are summed as hsumps and hsum4 do.
//
// Each kernel is written once for n tokens (1 or 4): the one-token kernel
// is the four-token one's instructions for token 0, so the two agree too.
// Registers: Y8..Y8+n-1 accumulate; Y0 holds the block's weight bytes, Y1
// its scale words; Y3 is f, Y4 the activations and Y5, Y6 products.

// kqAcc is the accumulators of an n-token kernel.
func kqAcc(n int) []VecPhysical { return []VecPhysical{Y8, Y9, Y10, Y11}[:n] }

// kqText starts the n-token kernel of the type called name with a frame of
// frame bytes, loads its arguments (with xs in R8 when xs), zeroes the
// accumulators and, when super, turns CX into a count of 256-value blocks.
func (a *asm) kqText(name string, n, frame int, xs, super bool) {
	if n == 1 {
		a.text("kernDot"+name+"AVX2", frame, sigDotQ)
		a.x1Setup()
		if xs {
			a.MOVQ(a.arg("xs_base"), R8)
		}
	} else {
		a.text("kernDot"+name+"x4AVX2", frame, sigDotQx4)
		a.x4Setup(xs)
	}
	if super {
		a.SHRQ(U8(3), RCX)
	}
	a.zero(kqAcc(n)...)
}

// kqRet returns the n-token kernel's sums (after "done", which kNext
// places).
func (a *asm) kqRet(n int) { a.retSums(kqAcc(n), X0) }

// kqHalf sets every lane of the ymm register y to the f16 value at off(SI),
// read as two bytes (a block may end right after it).
func (a *asm) kqHalf(off int, y VecPhysical) {
	a.MOVWLZX(mem(RSI, off), EAX)
	a.VMOVD(EAX, y.AsX())
	a.VCVTPH2PS(y.AsX(), y.AsX())
	a.VBROADCASTSS(y.AsX(), y)
}

// kqFactors stores each token's eight products d·xd (d in every lane of
// dv) of the current 256-value block at off+32t(SP); tmp is scratch.
func (a *asm) kqFactors(n int, dv VecPhysical, off int, tmp VecPhysical) {
	for t := range n {
		a.VMULPS(xdRow(0, t), dv, tmp)
		a.VMOVUPS(tmp, sp(off+32*t))
	}
}

// kqLanes converts the int32 lanes prod to float32, multiplies them by
// the float at f (broadcast into fr) and adds them to acc, or subtracts
// them with sub.
func (a *asm) kqLanes(prod VecPhysical, f Mem, fr, acc VecPhysical, sub bool) {
	a.VCVTDQ2PS(prod, prod)
	a.VBROADCASTSS(f, fr)
	a.VMULPS(fr, prod, prod)
	if sub {
		a.VSUBPS(prod, acc, acc)
	} else {
		a.VADDPS(prod, acc, acc)
	}
}

// kqBits sets y to bit bit of each byte of the 32 bytes at m, moved to bit
// to and masked with mask (the byte 1<<to in every byte). Word shifts are
// safe: the bit that lands at position to of a byte comes from the same
// byte.
func (a *asm) kqBits(m Mem, bit, to int, mask Op, y VecPhysical) {
	a.VMOVDQU(m, y)
	switch {
	case bit < to:
		a.VPSLLW(U8(to-bit), y, y)
	case bit > to:
		a.VPSRLW(U8(bit-to), y, y)
	}
	a.VPAND(mask, y, y)
}

// kqScalePair sets the ymm register y to the int16 word at m in its lower
// eight words and the one at m+2 in its upper eight: the scales of a
// 32-value block's two 16-value halves. t is a scratch xmm register.
func (a *asm) kqScalePair(m Mem, y, t VecPhysical) {
	a.VPBROADCASTW(m, y.AsX())
	a.VPBROADCASTW(m.Offset(2), t)
	a.VINSERTI128(U8(1), t, y, y)
}

// kqWord sets every word of the ymm register y to the low 16 bits of EAX.
func (a *asm) kqWord(y VecPhysical) {
	a.VMOVD(EAX, y.AsX())
	a.VPBROADCASTW(y.AsX(), y)
}

func genKQuantsAVX2(a *asm) {
	var tab [4]uint64
	for i, v := range iq4Values {
		tab[i/8%2] |= uint64(uint8(v)) << (8 * (i % 8))
	}
	tab[2], tab[3] = tab[0], tab[1]
	a.data("kernIQ4Table", tab[:]...)
	for _, n := range []int{1, 4} {
		a.dotQ2KAVX2(n)
		a.dotQ3KAVX2(n)
		a.dotQ5KAVX2(n)
		a.dotIQ4NLAVX2(n)
		a.dotIQ4XSAVX2(n)
	}
}

// iq4Values is the IQ4_NL codebook (ggml kvalues_iq4nl; gguf.IQ4NLValues).
var iq4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// dotQ2KAVX2 is kernDotQ2_KAVX2 (n 1) or kernDotQ2_Kx4AVX2 (n 4): per
// 256-value block, d·xd at 32t(SP) and dmin·xd at 32n+32t(SP), the sixteen
// scales (sc&15) as words at 64n(SP) and mins (sc>>4) at 64n+32(SP).
func (a *asm) dotQ2KAVX2(n int) {
	sc, mn := 64*n, 64*n+32
	a.kqText("Q2_K", n, 64*n+64, false, true)
	a.bcastb(0x03, Y12)
	a.bcastb(0x01, Y13)
	a.kLoop()
	a.MOVL(mem(RSI, 80), EAX) // d, dmin
	a.VMOVD(EAX, X14)
	a.VCVTPH2PS(X14, X14)
	a.VMOVSHDUP(X14, X15)
	a.VBROADCASTSS(X14, Y14)
	a.VBROADCASTSS(X15, Y15)
	a.kqFactors(n, Y14, 0, Y3)
	a.kqFactors(n, Y15, 32*n, Y3)
	a.bcastb(0x0f, Y6)
	a.VMOVDQU(mem(RSI, 0), X1)
	a.VPAND(X6, X1, X2)
	a.VPMOVZXBW(X2, Y2)
	a.VMOVDQU(Y2, sp(sc))
	a.VPSRLW(U8(4), X1, X1)
	a.VPAND(X6, X1, X1)
	a.VPMOVZXBW(X1, Y1)
	a.VMOVDQU(Y1, sp(mn))
	for b := range 8 {
		a.kqScalePair(sp(sc+4*b), Y1, X5)
		a.kqScalePair(sp(mn+4*b), Y2, X5)
		a.VMOVDQU(mem(RSI, 16+32*(b/4)), Y0)
		if j := b % 4; j > 0 {
			a.VPSRLW(U8(2*j), Y0, Y0)
		}
		a.VPAND(Y12, Y0, Y0)
		for t, acc := range kqAcc(n) {
			a.VMOVDQU(xqRow(32*b, t), Y4)
			a.VPMADDUBSW(Y4, Y0, Y5)
			a.VPMADDWD(Y1, Y5, Y5)
			a.VPMADDUBSW(Y4, Y13, Y6)
			a.VPMADDWD(Y2, Y6, Y6)
			a.kqLanes(Y5, sp(32*t+4*b), Y3, acc, false)
			a.kqLanes(Y6, sp(32*n+32*t+4*b), Y7, acc, true)
		}
	}
	a.kNext(84, false)
	a.kqRet(n)
}

// dotQ3KAVX2 is kernDotQ3_KAVX2 or kernDotQ3_Kx4AVX2: per 256-value block,
// d·xd at 32t(SP), the sixteen 6-bit scales as bytes at 32n(SP) and less
// 32 as words at 32n+16(SP). A value is its two bits of qs and its hmask
// bit as bit 2 (0..7), dotted as value·x − 4·x.
func (a *asm) dotQ3KAVX2(n int) {
	sb, sw := 32*n, 32*n+16
	a.kqText("Q3_K", n, 32*n+48, false, true)
	a.bcastb(0x03, Y12)
	a.bcastb(0x04, Y13)
	a.MOVL(U32(0x00200020), EAX)
	a.VMOVD(EAX, X15)
	a.VPBROADCASTD(X15, Y15) // words of 32
	a.kLoop()
	a.kqHalf(108, Y14)
	a.kqFactors(n, Y14, 0, Y3)
	// Scales 4k..4k+3: four bits of bytes 0..7 (low nibbles for k < 2),
	// two of bytes 8..11.
	for k := range 4 {
		a.MOVL(mem(RSI, 96+4*(k%2)), EAX)
		if k >= 2 {
			a.SHRL(U8(4), EAX)
		}
		a.ANDL(U32(0x0f0f0f0f), EAX)
		a.MOVL(mem(RSI, 104), EBX)
		if k > 0 {
			a.SHRL(U8(2*k), EBX)
		}
		a.ANDL(U32(0x03030303), EBX)
		a.SHLL(U8(4), EBX)
		a.ORL(EBX, EAX)
		a.MOVL(EAX, sp(sb+4*k))
	}
	a.VPMOVZXBW(sp(sb), Y1)
	a.VPSUBW(Y15, Y1, Y1)
	a.VMOVDQU(Y1, sp(sw))
	for b := range 8 {
		a.kqScalePair(sp(sw+4*b), Y1, X5)
		a.VMOVDQU(mem(RSI, 32+32*(b/4)), Y0)
		if j := b % 4; j > 0 {
			a.VPSRLW(U8(2*j), Y0, Y0)
		}
		a.VPAND(Y12, Y0, Y0)
		a.kqBits(mem(RSI, 0), b, 2, Y13, Y6)
		a.VPOR(Y6, Y0, Y0)
		for t, acc := range kqAcc(n) {
			a.VMOVDQU(xqRow(32*b, t), Y4)
			a.VPMADDUBSW(Y4, Y0, Y5)
			a.VPMADDUBSW(Y4, Y13, Y6)
			a.VPSUBW(Y6, Y5, Y5)
			a.VPMADDWD(Y1, Y5, Y5)
			a.kqLanes(Y5, sp(32*t+4*b), Y3, acc, false)
		}
	}
	a.kNext(110, false)
	a.kqRet(n)
}

// dotQ5KAVX2 is kernDotQ5_KAVX2 or kernDotQ5_Kx4AVX2: per 256-value block,
// first each token's min terms (dmin·m_b)·xs_b into lane b, then d·xd at
// 32t(SP) and the eight 6-bit scales as bytes at 32n(SP). A value is its
// nibble of qs and its qh bit as bit 4 (0..31).
func (a *asm) dotQ5KAVX2(n int) {
	sb := 32 * n
	a.kqText("Q5_K", n, 32*n+16, true, true)
	a.bcastb(0x0f, Y12)
	a.bcastb(0x10, Y13)
	a.kLoop()
	a.VCVTPH2PS(mem(RSI, 0), X14) // d, dmin
	a.VMOVSHDUP(X14, X7)
	a.VBROADCASTSS(X14, Y14)
	a.VBROADCASTSS(X7, Y7)
	a.q4kScales(X1, X2)
	a.VMOVQ(X1, sp(sb))
	a.VPMOVZXBD(X2, Y2)
	a.VCVTDQ2PS(Y2, Y2)
	a.VMULPS(Y7, Y2, Y2) // dmin·m
	for t, acc := range kqAcc(n) {
		a.VMULPS(xsRow(t), Y2, Y3)
		a.VSUBPS(Y3, acc, acc)
	}
	a.kqFactors(n, Y14, 0, Y3)
	for b := range 8 {
		a.MOVBLZX(sp(sb+b), EAX)
		a.kqWord(Y1)
		a.VMOVDQU(mem(RSI, 48+32*(b/2)), Y0)
		if b%2 == 1 {
			a.VPSRLW(U8(4), Y0, Y0)
		}
		a.VPAND(Y12, Y0, Y0)
		a.kqBits(mem(RSI, 16), b, 4, Y13, Y6)
		a.VPOR(Y6, Y0, Y0)
		for t, acc := range kqAcc(n) {
			a.VPMADDUBSW(xqRow(32*b, t), Y0, Y5)
			a.VPMADDWD(Y1, Y5, Y5)
			a.kqLanes(Y5, sp(32*t+4*b), Y3, acc, false)
		}
	}
	a.kNext(176, true)
	a.kqRet(n)
}

// iq4Dot adds the dots of the 32 IQ4 codes at off(SI) (16 bytes: low
// nibbles, then high nibbles) with each token's activation block at disp,
// its lanes times the words of Y1, times the float at f(t) (broadcast into
// Y3). Uses Y12 (0x0F bytes) and Y13 (the codebook).
func (a *asm) iq4Dot(n, off, disp int, f func(t int) Mem) {
	a.VMOVDQU(mem(RSI, off), X0)
	a.VPSRLW(U8(4), X0, X2)
	a.VINSERTI128(U8(1), X2, Y0, Y0)
	a.VPAND(Y12, Y0, Y0)
	a.VPSHUFB(Y0, Y13, Y2) // the signed values
	a.VPABSB(Y2, Y0)
	for t, acc := range kqAcc(n) {
		a.VMOVDQU(xqRow(disp, t), Y4)
		a.VPSIGNB(Y2, Y4, Y4)
		a.VPMADDUBSW(Y4, Y0, Y5)
		a.VPMADDWD(Y1, Y5, Y5)
		a.kqLanes(Y5, f(t), Y3, acc, false)
	}
}

// dotIQ4NLAVX2 is kernDotIQ4_NLAVX2 or kernDotIQ4_NLx4AVX2: one 32-value
// block at a time, d·xd at 4t(SP).
func (a *asm) dotIQ4NLAVX2(n int) {
	a.kqText("IQ4_NL", n, 16, false, false)
	a.bcastb(0x0f, Y12)
	a.VMOVDQU(static("kernIQ4Table", 0), Y13)
	a.ones16(Y1)
	a.kLoop()
	a.kqHalf(0, Y14)
	for t := range n {
		a.VMULSS(xdRow(0, t), X14, X3)
		a.VMOVSS(X3, sp(4*t))
	}
	a.iq4Dot(n, 2, 0, func(t int) Mem { return sp(4 * t) })
	a.ADDQ(U8(18), RSI)
	a.ADDQ(U8(32), RDI)
	a.ADDQ(U8(4), RDX)
	a.DECQ(RCX)
	a.JNZ(lbl("loop"))
	a.Label("done")
	a.kqRet(n)
}

// dotIQ4XSAVX2 is kernDotIQ4_XSAVX2 or kernDotIQ4_XSx4AVX2: per 256-value
// block d·xd at 32t(SP); each 32-value block's 6-bit scale less 32 is put
// together in AX.
func (a *asm) dotIQ4XSAVX2(n int) {
	a.kqText("IQ4_XS", n, 32*n, false, true)
	a.bcastb(0x0f, Y12)
	a.VMOVDQU(static("kernIQ4Table", 0), Y13)
	a.kLoop()
	a.kqHalf(0, Y14)
	a.kqFactors(n, Y14, 0, Y3)
	for b := range 8 {
		a.MOVBLZX(mem(RSI, 4+b/2), EAX)
		if b%2 == 1 {
			a.SHRL(U8(4), EAX)
		}
		a.ANDL(U8(0x0f), EAX)
		a.MOVWLZX(mem(RSI, 2), EBX)
		if b > 0 {
			a.SHRL(U8(2*b), EBX)
		}
		a.ANDL(U8(3), EBX)
		a.SHLL(U8(4), EBX)
		a.ORL(EBX, EAX)
		a.SUBL(U8(32), EAX)
		a.kqWord(Y1)
		a.iq4Dot(n, 8+16*b, 32*b, func(t int) Mem { return sp(32*t + 4*b) })
	}
	a.kNext(136, false)
	a.kqRet(n)
}
