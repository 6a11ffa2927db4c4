package main

import (
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX-512 kernels of Q2_K, Q3_K, Q5_K, IQ4_XS and IQ4_NL (kquants_avx2.go's
// dotQ2K ... with z set): the same decoding into the stack, then two
// 32-value blocks per zmm register, blocks 2i and 2i+1 in Z16+i (kqWZ), and
// a shuffle tree (kqTreeZ) for the block sums.

func genKQuantsAVX512(a *asm) {
	a.kqTables()
	// kqTreeZ's VPERMD order: block 2i is dword i of the sums, block 2i+1
	// dword 8+i.
	a.data32("kernKqPerm", 0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0)
	for _, n := range []int{1, 4} {
		a.dotQ2K(n, true)
		a.dotQ3K(n, true)
		a.dotQ5K(n, true)
		a.dotIQ4XS(n, true)
		a.dotIQ4NL(n, true)
	}
	a.kqRowsTables()
	for _, gfni := range []bool{false, true} {
		a.dotQ4KRowsZ(gfni)
		a.dotQ6KRowsZ(gfni)
	}
}

// kqSetupZ sets the AVX-512 kernels' constants: Z30 kernKqPerm, Z31 zero.
func (a *asm) kqSetupZ() {
	a.VMOVDQU64(static("kernKqPerm", 0), Z30)
	a.VPXORD(Z31, Z31, Z31)
}

var (
	// kqWZ holds the weight bytes of blocks 2i and 2i+1 in Z16+i (the
	// unsigned operand of the dots), kqSignZ IQ4_XS's signed values.
	kqWZ    = []VecPhysical{Z16, Z17, Z18, Z19}
	kqSignZ = []VecPhysical{Z20, Z21, Z22, Z23}
)

// kqTreeZ sums the eight int32 lanes of each block that vec(i, y) computes
// into y, blocks 2i (lanes 0..7) and 2i+1 (lanes 8..15) for i = 0..3 into
// Z0..Z3, into lane b of Y0. Uses Z0..Z5 and Z30 (kernKqPerm).
func (a *asm) kqTreeZ(vec func(i int, y VecPhysical)) {
	for i, y := range []VecPhysical{Z0, Z1, Z2, Z3} {
		vec(i, y)
	}
	// Per 128-bit lane: pairwise sums of Z0 and Z1 interleaved, then of
	// Z2 and Z3; then each register's four dwords summed, dword i of
	// 128-bit lane k for Zi.
	a.VPUNPCKLDQ(Z1, Z0, Z4)
	a.VPUNPCKHDQ(Z1, Z0, Z5)
	a.VPADDD(Z5, Z4, Z0)
	a.VPUNPCKLDQ(Z3, Z2, Z4)
	a.VPUNPCKHDQ(Z3, Z2, Z5)
	a.VPADDD(Z5, Z4, Z1)
	a.VPUNPCKLQDQ(Z1, Z0, Z4)
	a.VPUNPCKHQDQ(Z1, Z0, Z5)
	a.VPADDD(Z5, Z4, Z0)
	// Lanes 0 and 1 of Zi are block 2i, lanes 2 and 3 block 2i+1.
	a.VSHUFI32X4(U8(0xb1), Z0, Z0, Z4)
	a.VPADDD(Z4, Z0, Z0)
	a.VPERMD(Z0, Z30, Z0)
}

// The rows kernels of Q4_K and Q6_K (kernDotQ4_KRowsAVX512,
// kernDotQ6_KRowsAVX512): one token's dot with each of len(out) weight
// rows, rb bytes apart, in one call. Each row gets exactly the bits of its
// one-token kernel (kernels_avx512.go's dotQ4KZ and dotQ6KZ, n = 1): every
// int32 lane covers the same four values, every float operation has the
// same operands in the same order. What changes is how they are reached:
//
//   - no Go call per row (which costs as much as the dot of a short row);
//   - the scale factors of a 64-value chunk or pair go to the lanes by one
//     VPERMPS from a register, and one unmasked FMA adds both blocks'
//     lanes, where the one-token kernels broadcast each block's factor
//     from the stack into a masked FMA: lanes 0..7 of the factor are block
//     2c's, lanes 8..15 block 2c+1's, so each lane gets the fused product
//     it got before, with half the FMAs on the accumulator's chain;
//   - Q4_K's sixteen 6-bit scales and mins are unpacked with two byte
//     shuffles and a shift per 16 bytes, not bytewise in general registers;
//   - Q6_K's values are the unsigned operand of VPDPBUSD (0..63) and the
//     activations its signed one, unchanged, with the accumulator starting
//     at −32·Σx per lane (xc, the kernLaneSums −8·Σx times four): the
//     integer Σ(q−32)·x of the sign trick, exactly, without it.
//
// Registers: R8 walks out, R9 counts the rows left, R10 is the row, R11
// rb, SI the block, DI the activations, DX their scales, R13 the sums (Q4_K:
// xs; Q6_K: xc), CX the 256-value blocks left. Z0, Z1 accumulate as the
// one-token kernels' do, Y2 Q4_K's mins.

// kqRowsTables declares the rows kernels' constant tables.
func (a *asm) kqRowsTables() {
	// VPSRLVW counts: the upper 32 bytes of a broadcast Q4_K chunk shifted
	// a nibble (its high nibbles, sub-block 2c+1).
	const s4 = 0x0004000400040004
	a.data("kernQ4KNib", 0, 0, 0, 0, s4, s4, s4, s4)
	// The 12 scale bytes s of a Q4_K block (loaded from its byte 4) as
	// [s0..s3 s8..s11 s4..s7 s8..s11] (low parts of sc and m) and
	// [0 0 0 0 s0..s3 0 0 0 0 s4..s7] (their top two bits).
	a.data("kernQ4KScLo", 0x0b0a090803020100, 0x0b0a090807060504)
	a.data("kernQ4KScHi", 0x0302010080808080, 0x0706050480808080)
	// The low parts' masks (6 bits, 4 bits) and VPSRLVW counts (the m
	// bytes 12..15 take s8..s11's high nibbles).
	a.data("kernQ4KScMask", 0x0f0f0f0f3f3f3f3f, 0x0f0f0f0f3f3f3f3f)
	a.data("kernQ4KScShift", 0, 0x0004000400000000)
	// VPERMPS orders: d in lanes 0..7 and dmin in 8..15; and, for chunk c,
	// the factor of sub-block 2c in lanes 0..7 and of 2c+1 in 8..15.
	var dm, chunks []uint32
	for l := range 16 {
		dm = append(dm, uint32(l/8))
	}
	for c := range 4 {
		for l := range 16 {
			chunks = append(chunks, uint32(2*c+l/8))
		}
	}
	a.data32("kernQ4KDmin", dm...)
	a.data32("kernKqChunk", chunks...)
	// VGF2P8AFFINEQB matrices (per qword; kqGF): the low nibble kept, the
	// high nibble moved down; Q6_K's high bits 0-1, 2-3, 4-5 and 6-7 of qh
	// moved to bits 4-5. Lower four qwords act on the lower 32 bytes.
	lo, hi := kqGF(0, 1, 2, 3), kqGF(4, 5, 6, 7)
	a.data("kernQ4KNibGF", lo, lo, lo, lo, hi, hi, hi, hi)
	a.data("kernKqHiGF", hi, hi, hi, hi, hi, hi, hi, hi)
	b01, b23 := kqGF(-1, -1, -1, -1, 0, 1), kqGF(-1, -1, -1, -1, 2, 3)
	b45, b67 := kqGF(-1, -1, -1, -1, 4, 5), kqGF(-1, -1, -1, -1, 6, 7)
	a.data("kernQ6KHEvenGF", b01, b01, b01, b01, b23, b23, b23, b23)
	a.data("kernQ6KHOddGF", b45, b45, b45, b45, b67, b67, b67, b67)
}

// kqGF returns the VGF2P8AFFINEQB matrix (one qword) whose result byte has
// bit j set to bit from[j] of the source byte, or 0 where from[j] < 0 or j
// is past from: bit j of the result is the parity of the source and byte
// 7−j of the matrix.
func kqGF(from ...int) uint64 {
	var m uint64
	for j, k := range from {
		if k >= 0 {
			m |= uint64(1) << k << (8 * (7 - j))
		}
	}
	return m
}

// VGF2P8AFFINEQB emits the GFNI affine transform, which avo v0.5.0's
// instruction database lacks (as VPDPBUSD): each byte of x becomes the
// matrix (per qword, memory or a register) times it, plus imm, in GF(2),
// into dst (zmm registers).
func (a *asm) VGF2P8AFFINEQB(imm U8, matrix Op, x, dst VecPhysical) {
	if x.Size() != 64 || dst.Size() != 64 {
		panic("asmgen: VGF2P8AFFINEQB: zmm registers only")
	}
	a.Instruction(&ir.Instruction{
		Opcode:   "VGF2P8AFFINEQB",
		Operands: []Op{imm, matrix, x, dst},
		Inputs:   []Op{matrix, x},
		Outputs:  []Op{dst},
		ISA:      []string{"AVX512F", "GFNI"},
	})
}

// kqRowsStart starts the rows kernel of the type called name (with GFNI:
// its variant that takes VGF2P8AFFINEQB) and loads R8 (out), R9 (rows),
// R10 (the first row) and R11 (rb).
func (a *asm) kqRowsStart(name string, gfni bool) {
	level := "AVX512"
	if gfni {
		level = "GFNIAVX512"
	}
	a.text("kernDot"+name+"Rows"+level, 0, sigDotRows)
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("out_len"), R9)
	a.MOVQ(a.arg("w_base"), R10)
	a.MOVQ(a.arg("rb"), R11)
}

// kqRowsRow places the row loop (to end when no row is left) and, per row,
// sets SI, DI, DX, R13 (from the argument sums: "xs_base" or "xc_base") and
// CX (the 256-value blocks), zeroes Z0, Z1 (and Y2 with min) and starts the
// block loop.
func (a *asm) kqRowsRow(sums string, min bool) {
	a.Label("row")
	a.jzero(R9, "end")
	a.MOVQ(R10, RSI)
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("xd_base"), RDX)
	a.MOVQ(a.arg(sums), R13)
	a.MOVQ(a.arg("xd_len"), RCX)
	a.SHRQ(U8(3), RCX)
	a.zeroD(Z0, Z1)
	if min {
		a.zero(Y2)
	}
	a.kLoop()
}

// kqRowsNext ends a block (bsz bytes; the sums step by sumStep bytes) and,
// after the last, the row: Y0, the row's eight lanes, is summed as hsumps
// does into out.
func (a *asm) kqRowsNext(bsz, sumStep int, min bool) {
	a.ADDQ(U32(uint32(bsz)), RSI)
	a.ADDQ(U32(256), RDI)
	a.ADDQ(U8(32), RDX)
	a.ADDQ(U32(uint32(sumStep)), R13)
	a.DECQ(RCX)
	a.JNZ(lbl("loop"))
	a.Label("done")
	a.sum01()
	if min {
		a.VSUBPS(Y2, Y0, Y0)
	}
	a.hsumOut(mem(R8, 0))
	a.ADDQ(U8(4), R8)
	a.ADDQ(R11, R10)
	a.DECQ(R9)
	a.JMP(lbl("row"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}

// dotQ4KRowsZ is kernDotQ4_KRowsAVX512 (with gfni,
// kernDotQ4_KRowsGFNIAVX512): dotQ4KZ(1)'s arithmetic per row. Constants:
// Z14 0x0F bytes, Z24 kernQ4KNib (kernQ4KNibGF), Z15 kernQ4KDmin, Z20..Z23
// kernKqChunk's four orders, X25..X28 the scale tables, X29 0x30 bytes.
func (a *asm) dotQ4KRowsZ(gfni bool) {
	a.kqRowsStart("Q4_K", gfni)
	a.bcastbZ(0x0f, Z14)
	a.bcastbZ(0x30, Z29)
	if gfni {
		a.VMOVDQU64(static("kernQ4KNibGF", 0), Z24)
	} else {
		a.VMOVDQU64(static("kernQ4KNib", 0), Z24)
	}
	a.VMOVDQU64(static("kernQ4KDmin", 0), Z15)
	order := []VecPhysical{Z20, Z21, Z22, Z23}
	for c, z := range order {
		a.VMOVDQU64(static("kernKqChunk", 64*c), z)
	}
	a.VMOVDQU64(static("kernQ4KScLo", 0), X25)
	a.VMOVDQU64(static("kernQ4KScHi", 0), X26)
	a.VMOVDQU64(static("kernQ4KScMask", 0), X27)
	a.VMOVDQU64(static("kernQ4KScShift", 0), X28)
	a.kqRowsRow("xs_base", true)

	// Z4 = d in lanes 0..7, dmin in 8..15 (Z3's upper lanes are zero).
	a.VCVTPH2PS(mem(RSI, 0), X3)
	a.VPERMPS(Z3, Z15, Z4)
	// X6 = sc0..sc7 then m0..m7, as q4kScales unpacks them.
	a.q4kScalesX(X5, X6, X7)
	// Z6 = d·sc_j (lanes 0..7) and dmin·m_j (8..15), rounded as dotQ4KZ's
	// two VMULPS round them; Y8 = d·sc_j·xd_j, its stacked factors.
	a.VPMOVZXBD(X6, Z6)
	a.VCVTDQ2PS(Z6, Z6)
	a.VMULPS(Z4, Z6, Z6)
	a.VMULPS(mem(RDX, 0), Y6, Y8)
	a.VEXTRACTF64X4(U8(1), Z6, Y7)
	a.VFMADD231PS(mem(R13, 0), Y7, Y2)
	for c := range 4 {
		a.q4kChunk(c, Z9, Z24, Z14, gfni)
		a.VPXORD(Z10, Z10, Z10)
		a.VPDPBUSD(mem(RDI, 64*c), Z9, Z10)
		a.VCVTDQ2PS(Z10, Z10)
		a.VPERMPS(Z8, order[c], Z11)
		a.VFMADD231PS(Z11, Z10, []VecPhysical{Z0, Z1}[c%2])
	}
	a.kqRowsNext(144, 32, true)
}

// dotQ6KRowsZ is kernDotQ6_KRowsAVX512 (with gfni,
// kernDotQ6_KRowsGFNIAVX512): dotQ6KZ(1)'s arithmetic per row. Constants:
// Z14 0x0F bytes, Z12 0x30 bytes, Z15 kernQ6Pair, and Z10, Z28, Z29, Z30
// the orders kernQ6Quad+4p, as dotQ6KZ has them; with gfni, Z11, Z13 and
// Z12 the matrices kernQ6KHEvenGF, kernQ6KHOddGF and kernKqHiGF.
func (a *asm) dotQ6KRowsZ(gfni bool) {
	a.kqRowsStart("Q6_K", gfni)
	a.bcastbZ(0x0f, Z14)
	if gfni {
		a.VMOVDQU64(static("kernQ6KHEvenGF", 0), Z11)
		a.VMOVDQU64(static("kernQ6KHOddGF", 0), Z13)
		a.VMOVDQU64(static("kernKqHiGF", 0), Z12)
	} else {
		a.bcastbZ(0x30, Z12)
	}
	a.VMOVDQU64(static("kernQ6Pair", 0), Z15)
	a.VMOVDQU64(static("kernQ6Quad", 0), Z10)
	a.MOVL(U32(4), EAX)
	a.VPBROADCASTD(EAX, Z9)
	order := []VecPhysical{Z10, Z28, Z29, Z30}
	for p := 1; p < 4; p++ {
		a.VPADDD(Z9, order[p-1], order[p])
	}
	a.kqRowsRow("xc_base", false)

	a.q6kScales(Z2, Z3) // Z3 = d·sc for the sixteen sub-blocks
	a.VMOVUPS(mem(RDX, 0), Y4)
	a.VPERMPS(Z4, Z15, Z24)
	a.VMULPS(Z3, Z24, Z24)
	for p := range 4 {
		// Z8 = q (0..63) of blocks 2(p%2), 2(p%2)+1 of half p/2, as
		// dotQ6KZ builds q−32 before its sign trick.
		a.q6kValues(p, gfni, q6kRegs{ql: Z4, out: Z8, qh: Z5, t: Z6, t2: Z7,
			low: Z14, even: Z11, odd: Z13, hi: Z12})
		// The lanes' Σ(q−32)·x: from −32·Σx, plus Σq·x.
		a.VPSLLD(U8(2), mem(R13, 64*p), Z7)
		a.VPDPBUSD(mem(RDI, 64*p), Z8, Z7)
		a.VCVTDQ2PS(Z7, Z7)
		a.VPERMPS(Z24, order[p], Z9)
		a.VFMADD231PS(Z9, Z7, []VecPhysical{Z0, Z1}[p%2])
	}
	a.kqRowsNext(210, 256, false)
}

// q6kRegs names the registers q6kValues works in: ql keeps the ql bytes
// of an even chunk for the odd one after it, qh (its ymm half) the qh
// bytes, t and t2 are scratch; low holds 0x0F bytes, hi 0x30 bytes or,
// with GFNI, kernKqHiGF, and even and odd the matrices kernQ6KHEvenGF and
// kernQ6KHOddGF.
type q6kRegs struct {
	ql, out, qh, t, t2 VecPhysical
	low, even, odd, hi VecPhysical
}

// q6kValues sets r.out to the 6-bit values 0..63 of chunk p (of 64
// values, half p/2) of the Q6_K block at SI: ql's nibbles, with qh's two
// bits on top. An even chunk loads what the odd one after it reuses.
func (a *asm) q6kValues(p int, gfni bool, r q6kRegs) {
	h := p / 2
	switch {
	case gfni && p%2 == 0:
		// qh broadcast to both halves; its bits 0-1 (lower half) and 2-3
		// (upper) moved to bits 4-5 by one transform.
		a.VMOVDQU64(mem(RSI, 64*h), r.ql)
		a.VPANDD(r.low, r.ql, r.out)
		a.VBROADCASTI64X4(mem(RSI, 128+32*h), r.t)
		a.VGF2P8AFFINEQB(0, r.even, r.t, r.t)
		a.VPORD(r.t, r.out, r.out)
	case gfni:
		a.VGF2P8AFFINEQB(0, r.hi, r.ql, r.out)
		a.VBROADCASTI64X4(mem(RSI, 128+32*h), r.t)
		a.VGF2P8AFFINEQB(0, r.odd, r.t, r.t)
		a.VPORD(r.t, r.out, r.out)
	case p%2 == 0:
		a.VMOVDQU64(mem(RSI, 64*h), r.ql)
		a.VMOVDQU64(mem(RSI, 128+32*h), r.qh.AsY())
		a.VPSLLW(U8(4), r.qh.AsY(), r.t.AsY())
		a.VPSLLW(U8(2), r.qh.AsY(), r.t2.AsY())
		a.VINSERTI64X4(U8(1), r.t2.AsY(), r.t, r.t)
		a.VPANDD(r.low, r.ql, r.out)
	default:
		a.VPSRLW(U8(4), r.ql, r.out)
		a.VPANDD(r.low, r.out, r.out)
		a.VPSRLW(U8(2), r.qh.AsY(), r.t2.AsY())
		a.VINSERTI64X4(U8(1), r.t2.AsY(), r.qh, r.t)
	}
	if !gfni {
		a.VPTERNLOGD(U8(0xf8), r.hi, r.t, r.out) // out |= t & 0x30
	}
}

// q4kChunk sets z to the Q4_K block at SI's chunk c (its 32 bytes of
// quants) in both halves, low nibbles in the lower half and high ones in
// the upper: sub-block 2c's values, then 2c+1's. With gfni, one affine
// transform by the matrix in shift does the shift and the mask; without,
// shift holds the word shifts (0, then 4) and mask 0x0F bytes.
func (a *asm) q4kChunk(c int, z, shift, mask VecPhysical, gfni bool) {
	a.VBROADCASTI64X4(mem(RSI, 16+32*c), z)
	if gfni {
		a.VGF2P8AFFINEQB(0, shift, z, z)
	} else {
		a.VPSRLVW(shift, z, z)
		a.VPANDD(mask, z, z)
	}
}

// q4kScalesX sets out to the Q4_K block at SI's eight 6-bit scales then
// its eight mins, one per byte, with the shuffles and shifts the rows
// kernels keep in X25..X29 (kernQ4KScShift among them); raw and t are
// scratch.
func (a *asm) q4kScalesX(raw, out, t VecPhysical) {
	a.VMOVDQU64(mem(RSI, 4), raw)
	a.VPSHUFB(X25, raw, out)
	a.VPSHUFB(X26, raw, t)
	a.VPSRLVW(X28, out, out)
	a.VPANDD(X27, out, out)
	a.VPSRLW(U8(2), t, t)
	a.VPANDD(X29, t, t)
	a.VPORD(t, out, out)
}
