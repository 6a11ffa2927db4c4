package main

import (
	"math"

	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The Q8_K kernels of Q4_K and Q6_K (engine/cpu kernel_q8k.go): one token
// (kernQ8KQ4_KAVX512) or four (kernQ8KQ4_Kx4AVX512) dotted with each of a
// tile of weight rows, against activations quantized per 256 values
// (blocks of q8kBlock bytes: 256 int8 quants, 16 int16 sums of 16 quants,
// the float32 scale). They compute engine/cpu's kernQ8KDotQ4_K and
// kernQ8KDotQ6_K bit for bit:
//
//   - per pair of 64-value chunks of a super-block, the weights' unsigned
//     values (Q4_K's nibbles, Q6_K's 0..63) times a token's quants by one
//     VPDPBUSD per chunk (sums of four products, at most 4·63·127 in
//     magnitude), the two chunks' sums packed into words by VPACKSSDW
//     (never saturating), then VPDPWSSD with the sub-block scales as
//     words: the sixteen int32 lanes sum the whole super-block exactly,
//     the scales multiplied in integers; three multiplying instructions
//     per 128 values where VPMADDUBSW and VPDPWSSD per chunk took four;
//   - Q4_K's mins: VPMADDWD of the mins (each twice) with the token's sums
//     of 16 gives m_j·Σx of the eight sub-blocks; Q6_K's offset (its values
//     are q+32): VPMADDWD of the scales with the sums, times 32, comes off
//     the integer lanes;
//   - one convert and one fused multiply-add per lane per 256 values and
//     token (Q4_K: and one for the mins), a float32 factor d_w·d_x
//     broadcast.
//
// Each token's lanes go through the same instructions in both kernels, so
// a token gets the same bits from either.
//
// Registers: R8 walks out (token 0), DX the output stride (bytes), R13
// three times it; R9 counts the rows left, R10 is the row, R11 rb; SI the
// weight block, DI token 0's activation block, R12 the tokens' stride
// (nsb·q8kBlock), BX three times it; CX counts the blocks left. Z0+t is
// token t's float accumulator, Z10+t its integer lanes, Z14 and Z23
// scratch, Z19 the chunk pair's scale words, Z9 and Z22 its two chunks'
// weight values, Z20 and Z21 the pairs' VPERMW orders, Z31 0x0F bytes.

const (
	sigQ8K   = "func(out []float32, ostride int, w []byte, rows, rb int, x []byte, nsb int)"
	q8kBlock = 320 // bytes of one block of activations
	q8kSums  = 256 // offset of its sums
	q8kScale = 288 // offset of its scale
)

func genQ8KAVX512(a *asm) {
	// VPERMW orders per chunk pair k: word i of the packed sums is, in
	// 128-bit lane L = i/8, chunk c = 2k + (i%8)/4's values 16L+4(i%4) ..
	// +3; it takes Q4_K's scale 2c + L/2 (of sc0..7, m0..7 as words) or
	// Q6_K's 4c + L. And Q4_K's mins, each twice.
	var q4, q6, mins []uint32
	for k := range 2 {
		for i := 0; i < 32; i += 2 {
			l, c := i/8, 2*k+(i%8)/4 // the same for words i and i+1
			w := uint32(2*c + l/2)
			q4 = append(q4, w|w<<16)
			v := uint32(4*c + l)
			q6 = append(q6, v|v<<16)
		}
	}
	for i := 0; i < 16; i += 2 {
		mins = append(mins, uint32(8+i/2)|uint32(8+(i+1)/2)<<16)
	}
	a.data32("kernQ8KQ4Order", q4...)
	a.data32("kernQ8KQ6Order", q6...)
	a.data32("kernQ8KMinOrder", mins...)
	a.q8kQuantize()
	for _, gfni := range []bool{false, true} {
		for _, n := range []int{1, 4} {
			a.q8kQ4K(n, gfni)
			a.q8kQ6K(n, gfni)
		}
	}
}

// q8kX is token t's activation block, disp bytes in.
func q8kX(t, disp int) Mem {
	switch t {
	case 0:
		return mem(RDI, disp)
	case 1:
		return memx(RDI, disp, R12, 1)
	case 2:
		return memx(RDI, disp, R12, 2)
	}
	return memx(RDI, disp, RBX, 1)
}

// q8kOut is token t's output of the current row.
func q8kOut(t int) Mem {
	switch t {
	case 0:
		return mem(R8, 0)
	case 1:
		return memx(R8, 0, RDX, 1)
	case 2:
		return memx(R8, 0, RDX, 2)
	}
	return memx(R8, 0, R13, 1)
}

// q8kStart starts the n-token kernel of the type called name (with gfni,
// its variant that unpacks with VGF2P8AFFINEQB), loads the general
// registers and Z20, Z21 with the chunk pairs' orders at table.
func (a *asm) q8kStart(name string, n int, gfni bool, table string) {
	suffix := ""
	if n > 1 {
		suffix = "x4"
	}
	if gfni {
		suffix += "GFNI"
	}
	a.text("kernQ8K"+name+suffix+"AVX512", 0, sigQ8K)
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("ostride"), RDX)
	a.SHLQ(U8(2), RDX)
	a.LEAQ(memx(RDX, 0, RDX, 2), R13)
	a.MOVQ(a.arg("rows"), R9)
	a.MOVQ(a.arg("w_base"), R10)
	a.MOVQ(a.arg("rb"), R11)
	a.MOVQ(a.arg("nsb"), R12)
	a.IMUL3Q(U32(q8kBlock), R12, R12)
	a.LEAQ(memx(R12, 0, R12, 2), RBX)
	a.bcastbZ(0x0f, Z31)
	a.VMOVDQU64(static(table, 0), Z20)
	a.VMOVDQU64(static(table, 64), Z21)
}

// q8kRow places the row loop (to end when no row is left) and, per row,
// sets SI, DI and CX, zeroes the n float accumulators and starts the
// block loop.
func (a *asm) q8kRow(n int) {
	a.Label("row")
	a.jzero(R9, "end")
	a.MOVQ(R10, RSI)
	a.MOVQ(a.arg("x_base"), RDI)
	a.MOVQ(a.arg("nsb"), RCX)
	for t := range n {
		a.VPXORD(zAcc(t), zAcc(t), zAcc(t))
	}
	a.kLoop()
}

func zAcc(t int) VecPhysical { return []VecPhysical{Z0, Z1, Z2, Z3}[t] }
func yAcc(t int) VecPhysical { return []VecPhysical{Y0, Y1, Y2, Y3}[t] }
func zInt(t int) VecPhysical { return []VecPhysical{Z10, Z11, Z12, Z13}[t] }

// q8kPair adds chunk pair k's products of the weight values in Z9 (chunk
// 2k) and Z22 (2k+1) with each token's quants, times the scale words in
// Z19, into the integer lanes (set by the first pair).
func (a *asm) q8kPair(k, n int) {
	for t := range n {
		a.VPXORD(Z14, Z14, Z14)
		a.VPDPBUSD(q8kX(t, 128*k), Z9, Z14)
		a.VPXORD(Z23, Z23, Z23)
		a.VPDPBUSD(q8kX(t, 128*k+64), Z22, Z23)
		a.VPACKSSDW(Z23, Z14, Z14)
		if k == 0 {
			a.VPMADDWD(Z19, Z14, zInt(t))
		} else {
			a.VPDPWSSD(Z19, Z14, zInt(t))
		}
	}
}

// q8kLanes adds token t's integer lanes, converted and times the factor
// in f, to its accumulator (one fused multiply-add).
func (a *asm) q8kLanes(t int, f VecPhysical) {
	a.VCVTDQ2PS(zInt(t), zInt(t))
	a.VFMADD231PS(f, zInt(t), zAcc(t))
}

// q8kNext ends a block (bsz bytes of weights) and, after the last, the
// row: each token's lanes folded (foldz) and summed (hsumps) into out.
func (a *asm) q8kNext(bsz, n int) {
	a.ADDQ(U32(uint32(bsz)), RSI)
	a.ADDQ(U32(q8kBlock), RDI)
	a.DECQ(RCX)
	a.JNZ(lbl("loop"))
	a.Label("done")
	for t := range n {
		a.foldz(zAcc(t), Y14)
		a.hsumps(yAcc(t), X14)
		a.VMOVSS(zAcc(t).AsX(), q8kOut(t))
	}
	a.ADDQ(U8(4), R8)
	a.ADDQ(R11, R10)
	a.DECQ(R9)
	a.JMP(lbl("row"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}

// q8kQ4K is kernQ8KQ4_KAVX512 (n = 1) or kernQ8KQ4_Kx4AVX512 (n = 4), or
// with gfni their GFNI variants. More constants: Z30 kernQ4KNib
// (kernQ4KNibGF), Y24 kernQ8KMinOrder, X25..X28 the scale tables of
// dotQ4KRowsZ, X29 0x30 bytes.
func (a *asm) q8kQ4K(n int, gfni bool) {
	a.q8kStart("Q4_K", n, gfni, "kernQ8KQ4Order")
	if gfni {
		a.VMOVDQU64(static("kernQ4KNibGF", 0), Z30)
	} else {
		a.VMOVDQU64(static("kernQ4KNib", 0), Z30)
	}
	a.VMOVDQU64(static("kernQ8KMinOrder", 0), Y24)
	a.VMOVDQU64(static("kernQ4KScLo", 0), X25)
	a.VMOVDQU64(static("kernQ4KScHi", 0), X26)
	a.VMOVDQU64(static("kernQ4KScMask", 0), X27)
	a.VMOVDQU64(static("kernQ4KScShift", 0), X28)
	a.bcastbZ(0x30, Z29)
	a.q8kRow(n)

	// Z4 = d and Z5 = dmin in every lane.
	a.VCVTPH2PS(mem(RSI, 0), X17)
	a.VBROADCASTSS(X17, Z4)
	a.VMOVSHDUP(X17, X17)
	a.VBROADCASTSS(X17, Z5)
	// Y18 = sc0..sc7, m0..m7 as words (dotQ4KRowsZ's unpacking); Y15 =
	// the mins, each twice.
	a.q4kScalesX(X16, X18, X19)
	a.VPMOVZXBW(X18, Y18)
	a.VPERMW(Y18, Y24, Y15)
	for k := range 2 {
		a.q4kChunk(2*k, Z9, Z30, Z31, gfni)
		a.q4kChunk(2*k+1, Z22, Z30, Z31, gfni)
		a.VPERMW(Z18, []VecPhysical{Z20, Z21}[k], Z19)
		a.q8kPair(k, n)
	}
	for t := range n {
		// Z6 = d·d_x, Z7 = dmin·d_x; Z14 = the mins' lanes (0..7).
		a.VMULPS_BCST(q8kX(t, q8kScale), Z4, Z6)
		a.VMULPS_BCST(q8kX(t, q8kScale), Z5, Z7)
		a.VPMADDWD(q8kX(t, q8kSums), Y15, Y14)
		a.q8kLanes(t, Z6)
		a.VCVTDQ2PS(Z14, Z14)
		a.VFNMADD231PS(Z7, Z14, zAcc(t))
	}
	a.q8kNext(144, n)
}

// q8kQ6K is kernQ8KQ6_KAVX512 (n = 1) or kernQ8KQ6_Kx4AVX512 (n = 4), or
// with gfni their GFNI variants. More constants: Z30 0x30 bytes, or with
// gfni Z28, Z29 and Z30 the matrices kernQ6KHEvenGF, kernQ6KHOddGF and
// kernKqHiGF.
func (a *asm) q8kQ6K(n int, gfni bool) {
	a.q8kStart("Q6_K", n, gfni, "kernQ8KQ6Order")
	if gfni {
		a.VMOVDQU64(static("kernQ6KHEvenGF", 0), Z28)
		a.VMOVDQU64(static("kernQ6KHOddGF", 0), Z29)
		a.VMOVDQU64(static("kernKqHiGF", 0), Z30)
	} else {
		a.bcastbZ(0x30, Z30)
	}
	a.q8kRow(n)

	// Z4 = d in every lane; Y18 = the sixteen scales as words.
	a.MOVWLZX(mem(RSI, 208), EAX)
	a.VMOVD(EAX, X17)
	a.VCVTPH2PS(X17, X17)
	a.VBROADCASTSS(X17, Z4)
	a.VPMOVSXBW(mem(RSI, 192), Y18)
	for h := range 2 {
		// Z9 and Z22 = the values 0..63 of chunks 2h and 2h+1 (half h),
		// as dotQ6KRowsZ builds them.
		for i, z := range []VecPhysical{Z9, Z22} {
			a.q6kValues(2*h+i, gfni, q6kRegs{ql: Z16, out: z, qh: Z25, t: Z26, t2: Z27,
				low: Z31, even: Z28, odd: Z29, hi: Z30})
		}
		a.VPERMW(Z18, []VecPhysical{Z20, Z21}[h], Z19)
		a.q8kPair(h, n)
	}
	for t := range n {
		// The offset: 32·Σ sc·bsum off lanes 0..7; Z6 = d·d_x.
		a.VPMADDWD(q8kX(t, q8kSums), Y18, Y14)
		a.VPSLLD(U8(5), Z14, Z14)
		a.VPSUBD(Z14, zInt(t), zInt(t))
		a.VMULPS_BCST(q8kX(t, q8kScale), Z4, Z6)
		a.q8kLanes(t, Z6)
	}
	a.q8kNext(210, n)
}

// q8kQuantize is kernQuantizeQ8KAVX512(dst []byte, x []float32): engine/cpu
// kernQuantizeQ8K's quantization of len(x)/256 super-blocks, bit for bit.
// Per super-block: m = max|x| (VPANDD, a VMAXPS tree, then across the
// lanes); id = 127/m, or 0 where m < 1e-30 (VCMPSS's mask); d = m/127; the
// quants VCVTPS2DQ(x·id) (round half to even, MXCSR's default) narrowed
// by VPMOVSDB; the sums of 16 by VPDPBUSD of the stored quants with 1s,
// then across each 128-bit lane, gathered by VPERMT2D and narrowed by
// VPMOVDW. Constants: Z31 0x7FFFFFFF, Z30 0x01 bytes, Z29 the VPERMT2D
// order.
func (a *asm) q8kQuantize() {
	var order []uint32
	for i := range 16 {
		order = append(order, uint32(4*i))
	}
	a.data32("kernQ8KSumOrder", order...)
	a.text("kernQuantizeQ8KAVX512", 0, "func(dst []byte, x []float32)")
	a.MOVQ(a.arg("dst_base"), RDI)
	a.MOVQ(a.arg("x_base"), RSI)
	a.MOVQ(a.arg("x_len"), RCX)
	a.SHRQ(U8(8), RCX)
	a.MOVL(U32(0x7fffffff), EAX)
	a.VPBROADCASTD(EAX, Z31)
	a.bcastbZ(0x01, Z30)
	a.VMOVDQU64(static("kernQ8KSumOrder", 0), Z29)
	a.kLoop()

	z := []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15}
	for k, v := range z {
		a.VPANDD(mem(RSI, 64*k), Z31, v)
	}
	for w := 8; w >= 1; w /= 2 {
		for k := range w {
			a.VMAXPS(z[k+w], z[k], z[k])
		}
	}
	a.VEXTRACTF64X4(U8(1), Z0, Y1)
	a.VMAXPS(Y1, Y0, Y0)
	a.VEXTRACTF128(U8(1), Y0, X1)
	a.VMAXPS(X1, X0, X0)
	a.VPSHUFD(U8(0x4e), X0, X1)
	a.VMAXPS(X1, X0, X0)
	a.VPSHUFD(U8(0xb1), X0, X1)
	a.VMAXPS(X1, X0, X0) // m in every lane of X0
	// X1 = id, X2 = d (X4 = 1e-30, X5 = 127: VCMPSS's xmm form takes
	// only X0..X15); the padding, then d.
	a.MOVL(U32(math.Float32bits(1e-30)), EAX)
	a.VMOVD(EAX, X4)
	a.MOVL(U32(math.Float32bits(127)), EAX)
	a.VMOVD(EAX, X5)
	a.VDIVSS(X0, X5, X1)
	a.VCMPSS(U8(0x0d), X4, X0, X3) // m >= 1e-30
	a.VANDPS(X3, X1, X1)
	a.VDIVSS(X5, X0, X2)
	a.VPXORD(Y3, Y3, Y3)
	a.VMOVDQU64(Y3, mem(RDI, q8kScale))
	a.VMOVSS(X2, mem(RDI, q8kScale))
	a.VBROADCASTSS(X1, Z16)
	for k, v := range z {
		a.VMULPS(mem(RSI, 64*k), Z16, v)
		a.VCVTPS2DQ(v, v)
		a.VPMOVSDB(v, mem(RDI, 16*k))
	}
	// The sums of 16: group 4j+k in every dword of 128-bit lane k of
	// Z20+j.
	sums := []VecPhysical{Z20, Z21, Z22, Z23}
	for j, v := range sums {
		a.VPXORD(v, v, v)
		a.VPDPBUSD(mem(RDI, 64*j), Z30, v)
		a.VPSHUFD(U8(0x4e), v, Z24)
		a.VPADDD(Z24, v, v)
		a.VPSHUFD(U8(0xb1), v, Z24)
		a.VPADDD(Z24, v, v)
	}
	a.VPERMT2D(Z21, Z29, Z20) // groups 0..7 in dwords 0..7
	a.VPERMT2D(Z23, Z29, Z22) // groups 8..15
	a.VINSERTI64X4(U8(1), Y22, Z20, Z20)
	a.VPMOVDW(Z20, mem(RDI, q8kSums))

	a.ADDQ(U32(1024), RSI)
	a.ADDQ(U32(q8kBlock), RDI)
	a.DECQ(RCX)
	a.JNZ(lbl("loop"))
	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}
