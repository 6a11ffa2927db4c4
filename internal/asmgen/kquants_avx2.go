package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX2 kernels of Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS. They compute the
// models of their portable kernels (engine/cpu/kernel_kquant_go.go) and
// agree with them bit for bit. Each is written once for n tokens (1 or 4):
// the one-token kernel is the four-token one's instructions for token 0.
//
// The super-block types (Q2_K, Q3_K, Q5_K, IQ4_XS) go in two phases per
// 256-value block. First the weights are decoded once for all tokens: each
// 32-value block's values as 32 bytes at 32b(SP), in their natural order
// (Q2_K, short of frame, takes them from the block for each token), and
// its scales. Then each token's eight blocks are dotted: VPMADDUBSW
// with the activations and VPMADDWD with the scale words (or ones) give
// eight exact int32 lanes per block, and a VPHADDD tree (kqTree) sums
// block b's lanes into lane b of one register. That is converted to
// float32, multiplied by the eight d·xd (VMULPS) and added (VADDPS) to the
// token's accumulator: never fused, as the Go kernels round the product
// first.
//
// IQ4_NL goes so by groups of eight blocks, each with its own d; the
// blocks after the last group come one at a time: block b's eight lanes
// are converted, multiplied by d·xd[b] and added to the lane accumulators.
//
// Registers: Y8..Y8+n-1 accumulate, Y0..Y3 are the tree's, Y4..Y7 scratch
// or per-block values, Y12..Y15 constants and the super-block's d (Y14).

// kqLevel names the kernels' level: "AVX512" with z, else "AVX2".
func kqLevel(z bool) string {
	if z {
		return "AVX512"
	}
	return "AVX2"
}

// kqAcc is the accumulators of an n-token kernel.
func kqAcc(n int) []VecPhysical { return []VecPhysical{Y8, Y9, Y10, Y11}[:n] }

// kqText starts the n-token kernel of the type called name at the level
// ("AVX2" or "AVX512") with a frame of frame bytes, loads its arguments
// (with xs in R8 when xs), zeroes the accumulators and, when super, turns
// CX into a count of 256-value blocks.
func (a *asm) kqText(name, level string, n, frame int, xs, super bool) {
	if n == 1 {
		a.text("kernDot"+name+level, frame, sigDotQ)
		a.x1Setup()
		if xs {
			a.MOVQ(a.arg("xs_base"), R8)
		}
	} else {
		a.text("kernDot"+name+"x4"+level, frame, sigDotQx4)
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

// kqBits sets y to bit bit of each of the 32 bytes src (memory or a ymm
// register), moved to bit to and masked with mask (the byte 1<<to in every
// byte). Word shifts are safe: the bit that lands at position to of a byte
// comes from the same byte.
func (a *asm) kqBits(src Op, bit, to int, mask Op, y VecPhysical) {
	if _, ok := src.(Mem); ok || bit == to {
		a.VMOVDQU(src, y)
		src = y
	}
	switch {
	case bit < to:
		a.VPSLLW(U8(to-bit), src, y)
	case bit > to:
		a.VPSRLW(U8(bit-to), src, y)
	}
	a.VPAND(mask, y, y)
}

// kqScalePair sets the ymm register y to the int16 word at m in its lower
// eight words and the one at m+2 in its upper eight: the scales of a
// 32-value block's two 16-value halves.
func (a *asm) kqScalePair(m Mem, y VecPhysical) {
	a.VPBROADCASTD(m, y)
	a.VPSHUFB(static("kernPairShuf", 0), y, y)
}

func genKQuantsAVX2(a *asm) {
	a.kqTables()
	for _, n := range []int{1, 4} {
		a.dotQ2K(n, false)
		a.dotQ3K(n, false)
		a.dotQ5K(n, false)
		a.dotIQ4NL(n, false)
		a.dotIQ4XS(n, false)
	}
}

// kqTables declares the kernels' constant tables in the file being
// generated.
func (a *asm) kqTables() {
	var tab [4]uint64
	for i, v := range iq4Values {
		tab[i/8%2] |= uint64(uint8(v)) << (8 * (i % 8))
	}
	tab[2], tab[3] = tab[0], tab[1]
	a.data("kernIQ4Table", tab[:]...)
	// kqScalePair's VPSHUFB: word 0 of each dword in the lower half, word
	// 1 in the upper half.
	a.data("kernPairShuf", 0x0100010001000100, 0x0100010001000100, 0x0302030203020302, 0x0302030203020302)
	// Q3_K's scale bits: VPSRLVD counts 0, 2, 4, 6.
	a.data32("kernQ3Shift", 0, 2, 4, 6)
	// IQ4_XS's scales: VPSRLVD counts of the low nibbles (4b) and the
	// high bit pairs (2b), their masks, and 32s.
	a.data32("kernXSShift", 0, 4, 8, 12, 16, 20, 24, 28, 0, 2, 4, 6, 8, 10, 12, 14)
	a.data32("kernXSMask", 15, 15, 15, 15, 15, 15, 15, 15, 3, 3, 3, 3, 3, 3, 3, 3,
		32, 32, 32, 32, 32, 32, 32, 32)
}

// iq4Values is the IQ4_NL codebook (ggml kvalues_iq4nl; gguf.IQ4NLValues).
var iq4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// kqTree sums the eight int32 lanes of each of the vectors that vec(b, y)
// computes for blocks b = 0..7 (into y, any of Y1..Y3 or Y0 first) into
// lane b of Y0. Uses Y0..Y3.
func (a *asm) kqTree(vec func(b int, y VecPhysical)) {
	vec(0, Y0)
	vec(1, Y1)
	a.VPHADDD(Y1, Y0, Y0)
	vec(2, Y1)
	vec(3, Y2)
	a.VPHADDD(Y2, Y1, Y1)
	a.VPHADDD(Y1, Y0, Y0) // blocks 0..3: low halves' sums, then high halves'
	vec(4, Y1)
	vec(5, Y2)
	a.VPHADDD(Y2, Y1, Y1)
	vec(6, Y2)
	vec(7, Y3)
	a.VPHADDD(Y3, Y2, Y2)
	a.VPHADDD(Y2, Y1, Y1) // blocks 4..7
	a.VPERM2I128(U8(0x20), Y1, Y0, Y2)
	a.VPERM2I128(U8(0x31), Y1, Y0, Y0)
	a.VPADDD(Y2, Y0, Y0)
}

// kqSuperAcc converts the per-block sums in Y0 to float32, multiplies
// them by token t's eight d·xd (d in every lane of dv; the products in
// Y5) and adds them to acc, or subtracts them with sub.
func (a *asm) kqSuperAcc(t int, dv, acc VecPhysical, sub bool) {
	a.VCVTDQ2PS(Y0, Y0)
	a.VMULPS(xdRow(0, t), dv, Y5)
	a.VMULPS(Y5, Y0, Y0)
	if sub {
		a.VSUBPS(Y0, acc, acc)
	} else {
		a.VADDPS(Y0, acc, acc)
	}
}

// kqSink puts block b's 32 weight bytes y where phase 2 finds them: at
// off+32b(SP) for the AVX2 kernels, or for the AVX-512 ones (z) into half
// b%2 of the zmm register regs[b/2] (never through the stack: a zmm load
// of two ymm stores would miss store forwarding).
func (a *asm) kqSink(z bool, b int, y VecPhysical, off int, regs []VecPhysical) {
	if !z {
		a.VMOVDQU(y, sp(off+32*b))
		return
	}
	r := regs[b/2]
	if b%2 == 0 {
		a.VMOVDQU64(y, r.AsY())
	} else {
		a.VINSERTI64X4(U8(1), y, r, r)
	}
}

// kqPairs makes block b's scale pair (kqScalePair) from the sixteen words
// at words(SP) for b = 0..7 and sinks them (kqSink at off) into regs.
// Uses Y1.
func (a *asm) kqPairs(z bool, words, off int, regs []VecPhysical) {
	for b := range 8 {
		a.kqScalePair(sp(words+4*b), Y1)
		a.kqSink(z, b, Y1, off, regs)
	}
}

var (
	kqScaleZ = []VecPhysical{Z20, Z21, Z22, Z23} // AVX-512 scale pairs
	kqMinZ   = []VecPhysical{Z24, Z25, Z26, Z27} // AVX-512 Q2_K min pairs
)

// dotQ2K is kernDotQ2_KAVX2 (n 1) or kernDotQ2_Kx4AVX2 (n 4), or with z
// their AVX512 namesakes. Per 256-value block: the scale pairs (sc&15) of
// block b at 32b(SP) (Z20..Z23) and the min pairs (sc>>4) at 256+32b(SP)
// (Z24..Z27), from words at 512(SP) and 544(SP). The AVX2 kernels take the
// values from the block for each token (a NOSPLIT frame has no room for
// them too); the AVX-512 ones keep them in Z16..Z19.
func (a *asm) dotQ2K(n int, z bool) {
	a.kqText("Q2_K", kqLevel(z), n, 576, false, true)
	a.bcastb(0x03, Y12)
	if z {
		a.kqSetupZ()
		a.bcastbZ(0x01, Z13)
	} else {
		a.bcastb(0x01, Y13)
	}
	a.kLoop()
	a.MOVL(mem(RSI, 80), EAX) // d, dmin
	a.VMOVD(EAX, X14)
	a.VCVTPH2PS(X14, X14)
	a.VMOVSHDUP(X14, X15)
	a.VBROADCASTSS(X14, Y14)
	a.VBROADCASTSS(X15, Y15)
	a.bcastb(0x0f, Y6)
	a.VMOVDQU(mem(RSI, 0), X1)
	a.VPAND(X6, X1, X2)
	a.VPMOVZXBW(X2, Y2)
	a.VMOVDQU(Y2, sp(512))
	a.VPSRLW(U8(4), X1, X1)
	a.VPAND(X6, X1, X1)
	a.VPMOVZXBW(X1, Y1)
	a.VMOVDQU(Y1, sp(544))
	a.kqPairs(z, 512, 0, kqScaleZ)
	a.kqPairs(z, 544, 256, kqMinZ)
	if z {
		for b := range 8 {
			a.VMOVDQU(mem(RSI, 16+32*(b/4)), Y4)
			if j := b % 4; j > 0 {
				a.VPSRLW(U8(2*j), Y4, Y4)
			}
			a.VPAND(Y12, Y4, Y4)
			a.kqSink(true, b, Y4, 0, kqWZ)
		}
		for t, acc := range kqAcc(n) {
			a.kqTreeZ(func(i int, y VecPhysical) {
				a.VPMADDUBSW(xqRow(64*i, t), kqWZ[i], y)
				a.VPMADDWD(kqScaleZ[i], y, y)
			})
			a.kqSuperAcc(t, Y14, acc, false)
			a.kqTreeZ(func(i int, y VecPhysical) {
				a.VPMADDUBSW(xqRow(64*i, t), Z13, y)
				a.VPMADDWD(kqMinZ[i], y, y)
			})
			a.kqSuperAcc(t, Y15, acc, true)
		}
	} else {
		for t, acc := range kqAcc(n) {
			a.kqTree(func(b int, y VecPhysical) {
				a.VMOVDQU(mem(RSI, 16+32*(b/4)), y)
				if j := b % 4; j > 0 {
					a.VPSRLW(U8(2*j), y, y)
				}
				a.VPAND(Y12, y, y)
				a.VPMADDUBSW(xqRow(32*b, t), y, y)
				a.VPMADDWD(sp(32*b), y, y)
			})
			a.kqSuperAcc(t, Y14, acc, false)
			a.kqTree(func(b int, y VecPhysical) {
				a.VPMADDUBSW(xqRow(32*b, t), Y13, y)
				a.VPMADDWD(sp(256+32*b), y, y)
			})
			a.kqSuperAcc(t, Y15, acc, true)
		}
	}
	a.kNext(84, false)
	a.kqRet(n)
}

// dotQ3K is kernDotQ3_KAVX2 or kernDotQ3_Kx4AVX2 (or with z their AVX512
// namesakes, two blocks per zmm register). Per 256-value block: values
// (two bits of qs and the hmask bit as bit 2: 0..7) at 32b(SP) (Z16..Z19),
// dotted as value·x − 4·x; block b's scale pair (less 32) at 256+32b(SP)
// (Z20..Z23), from the sixteen scale words at 528(SP).
func (a *asm) dotQ3K(n int, z bool) {
	a.kqText("Q3_K", kqLevel(z), n, 560, false, true)
	a.bcastb(0x03, Y12)
	if z {
		a.kqSetupZ()
		a.bcastbZ(0x04, Z13)
	} else {
		a.bcastb(0x04, Y13)
	}
	a.bcastb(0x0f, Y6)
	a.MOVL(U32(0x00200020), EAX)
	a.VMOVD(EAX, X15)
	a.VPBROADCASTD(X15, Y15) // words of 32
	a.kLoop()
	a.kqHalf(108, Y14)
	// Scale i: the low (i < 8) or high nibble of byte i%8, and bits
	// 2(i/4).. of byte 8+i%4 as bits 4..5.
	a.VMOVQ(mem(RSI, 96), X1)
	a.VPSRLW(U8(4), X1, X2)
	a.VPUNPCKLQDQ(X2, X1, X1)
	a.VPAND(X6, X1, X1)
	a.VPBROADCASTD(mem(RSI, 104), X2)
	a.VPSRLVD(static("kernQ3Shift", 0), X2, X2)
	a.VPAND(X12, X2, X2)
	a.VPSLLD(U8(4), X2, X2)
	a.VPOR(X2, X1, X1)
	a.VPMOVZXBW(X1, Y1)
	a.VPSUBW(Y15, Y1, Y1)
	a.VMOVDQU(Y1, sp(528))
	a.kqPairs(z, 528, 256, kqScaleZ)
	a.VMOVDQU(mem(RSI, 0), Y7) // hmask
	for b := range 8 {
		a.VMOVDQU(mem(RSI, 32+32*(b/4)), Y4)
		if j := b % 4; j > 0 {
			a.VPSRLW(U8(2*j), Y4, Y4)
		}
		a.VPAND(Y12, Y4, Y4)
		a.kqBits(Y7, b, 2, Y13, Y5)
		a.VPOR(Y5, Y4, Y4)
		a.kqSink(z, b, Y4, 0, kqWZ)
	}
	for t, acc := range kqAcc(n) {
		if z {
			a.kqTreeZ(func(i int, y VecPhysical) {
				a.VPMADDUBSW(xqRow(64*i, t), kqWZ[i], y)
				a.VPMADDUBSW(xqRow(64*i, t), Z13, Z4)
				a.VPSUBW(Z4, y, y)
				a.VPMADDWD(kqScaleZ[i], y, y)
			})
		} else {
			a.kqTree(func(b int, y VecPhysical) {
				a.VMOVDQU(sp(32*b), y)
				a.VPMADDUBSW(xqRow(32*b, t), y, y)
				a.VPMADDUBSW(xqRow(32*b, t), Y13, Y4)
				a.VPSUBW(Y4, y, y)
				a.VPMADDWD(sp(256+32*b), y, y)
			})
		}
		a.kqSuperAcc(t, Y14, acc, false)
	}
	a.kNext(110, false)
	a.kqRet(n)
}

// dotQ5K is kernDotQ5_KAVX2 or kernDotQ5_Kx4AVX2 (or with z their AVX512
// namesakes, which dot with VPDPBUSD). Per 256-value block: first each
// token's min terms (dmin·m_b)·xs_b come off lane b; the values (nibble of
// qs and qh bit as bit 4: 0..31) go to 32b(SP) (Z16..Z19) and the eight
// 6-bit scales as int32 to Y6, which multiply the tree's sums.
func (a *asm) dotQ5K(n int, z bool) {
	a.kqText("Q5_K", kqLevel(z), n, 256, true, true)
	if z {
		a.kqSetupZ()
	}
	a.bcastb(0x0f, Y12)
	a.bcastb(0x10, Y13)
	a.ones16(Y15)
	a.kLoop()
	a.VCVTPH2PS(mem(RSI, 0), X14) // d, dmin
	a.VMOVSHDUP(X14, X7)
	a.VBROADCASTSS(X14, Y14)
	a.VBROADCASTSS(X7, Y7)
	a.q4kScales(X1, X2)
	a.VPMOVZXBD(X1, Y6)
	a.VPMOVZXBD(X2, Y2)
	a.VCVTDQ2PS(Y2, Y2)
	a.VMULPS(Y7, Y2, Y2) // dmin·m
	for t, acc := range kqAcc(n) {
		a.VMULPS(xsRow(t), Y2, Y3)
		a.VSUBPS(Y3, acc, acc)
	}
	for b := range 8 {
		a.VMOVDQU(mem(RSI, 48+32*(b/2)), Y4)
		if b%2 == 1 {
			a.VPSRLW(U8(4), Y4, Y4)
		}
		a.VPAND(Y12, Y4, Y4)
		a.kqBits(mem(RSI, 16), b, 4, Y13, Y5)
		a.VPOR(Y5, Y4, Y4)
		a.kqSink(z, b, Y4, 0, kqWZ)
	}
	for t, acc := range kqAcc(n) {
		if z {
			a.kqTreeZ(func(i int, y VecPhysical) {
				a.VPXORD(y, y, y)
				a.VPDPBUSD(xqRow(64*i, t), kqWZ[i], y)
			})
		} else {
			a.kqTree(func(b int, y VecPhysical) {
				a.VMOVDQU(sp(32*b), y)
				a.VPMADDUBSW(xqRow(32*b, t), y, y)
				a.VPMADDWD(Y15, y, y)
			})
		}
		a.VPMULLD(Y6, Y0, Y0)
		a.kqSuperAcc(t, Y14, acc, false)
	}
	a.kNext(176, true)
	a.kqRet(n)
}

// iq4Dot adds the dots of the 32 IQ4 codes at off(SI) (16 bytes: low
// nibbles, then high nibbles) with each token's activation block at disp,
// its lanes times the words of Y1, times the float at f(t) (broadcast into
// Y3). Uses Y12 (0x0F bytes) and Y13 (the codebook).
func (a *asm) iq4Dot(n, off, disp int, f func(t int) Mem) {
	a.iq4Values(off, Y2, X0)
	a.VPABSB(Y2, Y0)
	for t, acc := range kqAcc(n) {
		a.VMOVDQU(xqRow(disp, t), Y4)
		a.VPSIGNB(Y2, Y4, Y4)
		a.VPMADDUBSW(Y4, Y0, Y5)
		a.VPMADDWD(Y1, Y5, Y5)
		a.kqLanes(Y5, f(t), Y3, acc, false)
	}
}

// iq4Values sets the ymm register y to the 32 signed codebook values of
// the 16 code bytes at off(SI): low nibbles, then high nibbles; t is a
// scratch xmm register. Uses Y12 (0x0F bytes) and Y13 (the codebook).
func (a *asm) iq4Values(off int, y, t VecPhysical) {
	a.VMOVDQU(mem(RSI, off), t)
	a.VPSRLW(U8(4), t, y.AsX())
	a.VINSERTI128(U8(1), y.AsX(), t.AsY(), y)
	a.VPAND(Y12, y, y)
	a.VPSHUFB(y, Y13, y)
}

// dotIQ4NL is kernDotIQ4_NLAVX2 or kernDotIQ4_NLx4AVX2 (or with z their
// AVX512 namesakes). Each group of eight 32-value blocks goes as an
// IQ4_XS super-block does (dotIQ4XS), with the eight blocks' own scales d
// in Y14 and no sub-block scales; the blocks left after the groups, one at
// a time, by lanes (iq4Dot, d·xd at 512+4t(SP)).
func (a *asm) dotIQ4NL(n int, z bool) {
	a.kqText("IQ4_NL", kqLevel(z), n, 528, false, false)
	if z {
		a.kqSetupZ()
	}
	a.bcastb(0x0f, Y12)
	a.VMOVDQU(static("kernIQ4Table", 0), Y13)
	a.ones16(Y15)
	a.whileN("loop8", RCX, 8, "tail", func() {
		a.MOVWLZX(mem(RSI, 0), EAX)
		a.VMOVD(EAX, X14)
		for b := 1; b < 8; b++ {
			a.VPINSRW(U8(b), mem(RSI, 18*b), X14, X14)
		}
		a.VCVTPH2PS(X14, Y14)
		a.iq4Group(n, z, func(b int) int { return 2 + 18*b }, nil)
		a.ADDQ(U8(144), RSI)
		a.ADDQ(U32(256), RDI)
		a.ADDQ(U8(32), RDX)
	})
	a.Label("tail")
	a.ones16(Y1)
	a.whileNZ("loop1", RCX, "done", func() {
		a.kqHalf(0, Y14)
		for t := range n {
			a.VMULSS(xdRow(0, t), X14, X3)
			a.VMOVSS(X3, sp(512+4*t))
		}
		a.iq4Dot(n, 2, 0, func(t int) Mem { return sp(512 + 4*t) })
		a.ADDQ(U8(18), RSI)
		a.ADDQ(U8(32), RDI)
		a.ADDQ(U8(4), RDX)
	})
	a.Label("done")
	a.kqRet(n)
}

// iq4Group dots eight blocks of IQ4 codes, block b's 16 code bytes at
// off(b)(SI), with each token's eight activation blocks at DI: their
// values are decoded (signed at 32b(SP) or Z20..Z23, magnitudes at
// 256+32b(SP) or Z16..Z19), each block's dot summed by the tree, times the
// int32 scales in scale (if not nil), times d·xd (d in Y14) into the
// token's accumulator.
func (a *asm) iq4Group(n int, z bool, off func(b int) int, scale Op) {
	for b := range 8 {
		a.iq4Values(off(b), Y4, X5)
		a.kqSink(z, b, Y4, 0, kqSignZ)
		a.VPABSB(Y4, Y4)
		a.kqSink(z, b, Y4, 256, kqWZ)
	}
	masks := []Register{K4, K5, K6, K7}
	if z {
		for i := range 4 {
			a.VPMOVB2M(kqSignZ[i], masks[i])
		}
	}
	for t, acc := range kqAcc(n) {
		if z {
			a.kqTreeZ(func(i int, y VecPhysical) {
				a.VMOVDQU64(xqRow(64*i, t), Z4)
				a.VPSUBB(Z4, Z31, masks[i], Z4)
				a.VPXORD(y, y, y)
				a.VPDPBUSD(Z4, kqWZ[i], y)
			})
		} else {
			a.kqTree(func(b int, y VecPhysical) {
				a.VMOVDQU(xqRow(32*b, t), y)
				a.VPSIGNB(sp(32*b), y, y)
				a.VMOVDQU(sp(256+32*b), Y4)
				a.VPMADDUBSW(y, Y4, y)
				a.VPMADDWD(Y15, y, y)
			})
		}
		if scale != nil {
			a.VPMULLD(scale, Y0, Y0)
		}
		a.kqSuperAcc(t, Y14, acc, false)
	}
}

// dotIQ4XS is kernDotIQ4_XSAVX2 or kernDotIQ4_XSx4AVX2 (or with z their
// AVX512 namesakes: VPDPBUSD, with the activations negated under the
// weights' sign masks K4..K7 instead of VPSIGNB). Per 256-value block: the
// signed values at 32b(SP) (Z20..Z23), their magnitudes at 256+32b(SP)
// (Z16..Z19) and the eight 6-bit scales less 32 as int32 in Y7, which
// multiply the tree's sums.
func (a *asm) dotIQ4XS(n int, z bool) {
	a.kqText("IQ4_XS", kqLevel(z), n, 512, false, true)
	if z {
		a.kqSetupZ()
	}
	a.bcastb(0x0f, Y12)
	a.VMOVDQU(static("kernIQ4Table", 0), Y13)
	a.ones16(Y15)
	a.kLoop()
	a.kqHalf(0, Y14)
	// Scale b: nibble b of the u32 at 4(SI), and bits 2b..2b+1 of the
	// u16 at 2(SI) as bits 4..5.
	a.VPBROADCASTD(mem(RSI, 4), Y7)
	a.VPSRLVD(static("kernXSShift", 0), Y7, Y7)
	a.VPBROADCASTD(mem(RSI, 2), Y6)
	a.VPSRLVD(static("kernXSShift", 32), Y6, Y6)
	a.VPAND(static("kernXSMask", 0), Y7, Y7)
	a.VPAND(static("kernXSMask", 32), Y6, Y6)
	a.VPSLLD(U8(4), Y6, Y6)
	a.VPOR(Y6, Y7, Y7)
	a.VPSUBD(static("kernXSMask", 64), Y7, Y7)
	a.iq4Group(n, z, func(b int) int { return 8 + 16*b }, Y7)
	a.kNext(136, false)
	a.kqRet(n)
}
