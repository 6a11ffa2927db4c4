package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The Q4_0 and Q8_0 tile kernels of engine/cpu/kernel_avx512_amd64.s: a
// GEMM micro-kernel whose sixteen int32 lanes are sixteen weight rows, for
// one to eight tokens at a time (kernTileQ4_0x1AVX512 .. x8; Q8_0 as
// q8Tile says).
//
// The weights come repacked in groups of sixteen rows (engine/cpu
// kernPackQ4_0): per 32-value block, the sixteen rows' f16 scales (32
// bytes), then for g = 0..3 the bytes qs[4g:4g+4] of each row (64 bytes),
// so that the low nibbles of the g-th 64 bytes are values 4g..4g+3 of
// every row and the high nibbles values 16+4g..16+4g+3: one VPDPBUSD with
// a token's four activation bytes broadcast adds four products to every
// row's lane. Eight of them finish the block's integer dot Σ q·x (q the
// unsigned nibbles), which starts from the token's -8·Σx of the block (dc),
// so that the lane holds Σ (q-8)·x exactly. Then, per block and lane, one
// convert, one multiply by the row's scale and one FMA with the token's
// scale (broadcast): acc = fma(float(Σ)·d_w, d_x, acc), block after block.
// Every (row, token) lane runs exactly these operations whatever the number
// of tokens, so a token gets the same bits from every kernel of the family.
//
// Registers: SI the weights, DI and DX token 0's activations and dc (the
// token's d_x bits and -8·Σx per block), R9 = 8·nb (dc's row stride; the
// activations' is four times it), R10 = 2·R9, R11 = 3·R9, R12 = 5·R9,
// R13 = 7·R9; BX counts groups, CX blocks, R8 walks out. Z0..Z7 the block's
// nibbles (Zk for activation bytes 4k..4k+3), Z8 the rows' scales, Z9 0x0F
// bytes, Z10+t token t's integer sums (one token: Z10 and Z11, two chains),
// Z18+t its float accumulators.

const (
	sigTile       = "func(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)"
	q4TileBlock   = 288 // bytes of one block of sixteen rows
	tileMaxTokens = 8
	// tileF16Max is the most tokens of an F16 tile kernel (engine/cpu
	// kernTileF16Max).
	tileF16Max = 8
)

func genTilesAVX512(a *asm) {
	for _, q := range []tileType{q4Tile, q8Tile, q5Tile} {
		for n := 1; n <= tileMaxTokens; n++ {
			a.tile(q, n)
		}
		a.tileStreams(q, 2)
		if q.name == "Q8_0" {
			a.tileStreams(q, 4)
		}
	}
	for n := 1; n <= tileMaxTokens; n++ {
		a.tileQ4K(n)
	}
	a.tileStreamsK("Q4_K", q4kTileSB, 2, nil, func(a *asm, r tileRegs) {
		a.VCVTPH2PS(r.at(0), r.d)
		a.VCVTPH2PS(r.at(32), r.dmin)
	}, q4kSub1)
	for n := 1; n <= tileMaxTokens; n++ {
		a.tileQ6K(n)
	}
	a.tileStreamsK("Q6_K", q6kTileSB, 4, func(a *asm) { a.bcastbZ(0x30, Z26) }, func(a *asm, r tileRegs) {
		a.VCVTPH2PS(r.at(0), r.d)
	}, q6kSub1)
	for n := 1; n <= tileF16Max; n++ {
		a.tileF16(n)
	}
	for n := 1; n <= tileMaxTokens; n++ {
		a.tileBF16(n)
	}
	a.toBF16()
}

// tileDC is token t's dc entry of the current block, disp bytes in.
func tileDC(t, disp int) Mem { return tileRow(RDX, t, disp) }

// tileRow is row t of the rows R9 bytes apart from base, disp bytes in.
func tileRow(base Register, t, disp int) Mem {
	switch t {
	case 0:
		return mem(base, disp)
	case 1:
		return memx(base, disp, R9, 1)
	case 2:
		return memx(base, disp, R10, 1)
	case 3:
		return memx(base, disp, R11, 1)
	case 4:
		return memx(base, disp, R9, 4)
	case 5:
		return memx(base, disp, R12, 1)
	case 6:
		return memx(base, disp, R11, 2)
	}
	return memx(base, disp, R13, 1)
}

// tileXQ is token t's activation bytes of the current block, disp bytes
// in: its row is 4·t·R9 bytes from token 0's.
func tileXQ(t, disp int) Mem {
	switch t {
	case 0:
		return mem(RDI, disp)
	case 1:
		return memx(RDI, disp, R9, 4)
	case 2:
		return memx(RDI, disp, R9, 8)
	case 3:
		return memx(RDI, disp, R11, 4)
	case 4:
		return memx(RDI, disp, R10, 8)
	case 5:
		return memx(RDI, disp, R12, 4)
	case 6:
		return memx(RDI, disp, R11, 8)
	}
	return memx(RDI, disp, R13, 4)
}

// tileType is what differs between the tile kernels of two types: the
// bytes of a packed block, how a block's weights come in (weights loads
// the block at(disp) into the registers z(0)..z(7) and its scales into
// scale: Z0..Z7 and Z8 from SI in tile, other bases in tileStreams),
// where a token's integer sum starts, and one VPDPBUSD step: four
// activation bytes k of token t into isum.
type tileType struct {
	name    string
	bsz     int
	setup   func(a *asm) // constants beyond Z9, or nil
	weights func(a *asm, at func(disp int) Mem, z func(k int) VecPhysical, scale VecPhysical)
	start   func(a *asm, t int, isum VecPhysical)
	step    func(a *asm, t, k int, isum VecPhysical)
}

var (
	// Q4_0: the nibbles unsigned, the activations signed and broadcast
	// from memory; the sum starts from the token's -8·Σx (dc).
	q4Tile = tileType{name: "Q4_0", bsz: q4TileBlock,
		weights: q4Weights,
		start:   func(a *asm, t int, isum VecPhysical) { a.VPBROADCASTD(tileDC(t, 4), isum) },
		step: func(a *asm, t, k int, isum VecPhysical) {
			a.vpdpbusdBcst(tileXQ(t, 4*k), tileZ(k), isum)
		},
	}
	// Q8_0: the weights stored offset by 128 (w+128, unsigned; engine/cpu
	// kernPackQ8_0), the activations signed and broadcast from memory; the
	// sum starts from the token's -128·Σx (dc): Σ (w+128)·x - 128·Σx = Σ w·x.
	q8Tile = tileType{name: "Q8_0", bsz: q8TileBlock,
		weights: q8Weights,
		start:   q4Tile.start,
		step:    q4Tile.step,
	}
)

const q8TileBlock = 32 + 16*32 // scales, values

// tileSI addresses the weights at SI; tileSIB those of the second stream,
// R14 bytes past SI.
func tileSI(disp int) Mem  { return mem(RSI, disp) }
func tileSIB(disp int) Mem { return memx(RSI, disp, R14, 1) }

// q4Weights is Q4_0's block: the scales, then the nibbles unpacked.
func q4Weights(a *asm, at func(int) Mem, z func(int) VecPhysical, scale VecPhysical) {
	a.VCVTPH2PS(at(0), scale)
	tileNibbles(a, at, 32, z)
}

// tileNibbles unpacks the 256 bytes of nibbles at(off) into z(0)..z(7):
// z(g) the low nibbles of the g-th 64 bytes, z(g+4) the high ones.
func tileNibbles(a *asm, at func(int) Mem, off int, z func(int) VecPhysical) {
	for g := range 4 {
		a.VMOVDQU64(at(off+64*g), z(g))
	}
	for g := range 4 {
		a.VPSRLW(U8(4), z(g), z(g+4))
	}
	for k := range 8 {
		a.VPANDD(Z9, z(k), z(k))
	}
}

// q8Weights is Q8_0's block: the scales and the offset bytes.
func q8Weights(a *asm, at func(int) Mem, z func(int) VecPhysical, scale VecPhysical) {
	a.VCVTPH2PS(at(0), scale)
	for k := range 8 {
		a.VMOVDQU64(at(32+64*k), z(k))
	}
}

// q5Weights is Q5_0's block: Q4_0's nibbles with the high bits or-ed in
// (Z26 holds 0x10 bytes, Z28 is scratch).
func q5Weights(a *asm, at func(int) Mem, z func(int) VecPhysical, scale VecPhysical) {
	a.VCVTPH2PS(at(0), scale)
	tileNibbles(a, at, 96, z)
	hi := at(32)
	for k := range 8 {
		var bits Op = Z28
		switch {
		case k < 4:
			a.VPSLLW(U8(uint8(4-k)), hi, Z28)
		case k == 4:
			bits = hi
		default:
			a.VPSRLW(U8(uint8(k-4)), hi, Z28)
		}
		a.VPTERNLOGD(U8(0xf8), bits, Z26, z(k)) // z(k) | (bits & 0x10)
	}
}

// tileZA and tileZB are the weight registers of the first and the second
// stream's blocks in the K-quants' two-stream kernels (tileStreams lets
// every stream reuse tileZA's: the core renames them).
func tileZA(k int) VecPhysical { return tileZ(k) }
func tileZB(k int) VecPhysical { return []VecPhysical{Z14, Z15, Z16, Z17, Z20, Z21, Z22, Z23}[k] }

// q5Tile is Q5_0's tile (engine/cpu kernPackQ5_0): Q4_0's nibbles (at 96),
// after the scales the high bits (64 bytes at 32: byte b of a row holds in
// bit k the high bit of value 4k+b), which for Zk shift to bit 4 (Z28) and
// VPTERNLOGD ors in under Z26 (0x10 bytes); the sum starts from −16·Σx.
var q5Tile = tileType{name: "Q5_0", bsz: 32 + 64 + 16*16,
	setup:   func(a *asm) { a.bcastbZ(0x10, Z26) },
	weights: q5Weights,
	start:   q4Tile.start,
	step:    q4Tile.step,
}

// tileZ is the zmm register Zi.
func tileZ(i int) VecPhysical {
	return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
}

// tile is kernTile<type>x<n>AVX512: out[t·ostride + 16g + i] = the dot of
// row i of group g with token t, for the groups in w.
func (a *asm) tile(q tileType, n int) {
	a.text(fmt.Sprintf("kernTile%sx%dAVX512", q.name, n), 0, sigTile)
	isum := func(t int) VecPhysical { return tileZ(10 + t) }
	acc := func(t int) VecPhysical { return tileZ(18 + t) }

	a.tileStart(2)
	if q.setup != nil {
		q.setup(a)
	}

	a.tileGroup(n, false)

	a.Label("block")
	a.tilePrefetch(q.bsz)
	q.weights(a, tileSI, tileZA, Z8)
	for t := range n {
		q.start(a, t, isum(t))
	}
	if n == 1 {
		// Two chains of four, added: integers, so exactly the same sum.
		a.VPXORD(Z11, Z11, Z11)
		for k := range 8 {
			q.step(a, 0, k, tileZ(10+k%2))
		}
		a.VPADDD(Z11, Z10, Z10)
	} else {
		for k := range 8 {
			for t := range n {
				q.step(a, t, k, isum(t))
			}
		}
	}
	for t := range n {
		a.VCVTDQ2PS(isum(t), isum(t))
		a.VMULPS(Z8, isum(t), isum(t))
		a.VFMADD231PS_BCST(tileDC(t, 0), isum(t), acc(t))
	}
	a.ADDQ(U32(uint32(q.bsz)), RSI)
	a.ADDQ(U8(32), RDI)
	a.ADDQ(U8(8), RDX)
	a.DECQ(RCX)
	a.JNZ(lbl("block"))

	a.tileStore(n)
}

// q4kTileSB is the bytes of one 256-value super-block of sixteen packed
// Q4_K rows (engine/cpu kernPackQ4_K).
const q4kTileSB = 64 + 256 + 16*128

// tileQ4K is kernTileQ4_Kx<n>AVX512, engine/cpu kernTileQ4_KGo bit for
// bit: the lanes are the sixteen rows of a group, as in tile. Per
// super-block: Z27 = the rows' d, Z28 their dmin; per 32-value sub-block
// j (chunk j/2's low nibbles for even j, high for odd): Z0..Z7 the
// nibbles (Zk for activation bytes 4k..4k+3), Z8 = A = d·sc_j, Z26 = B =
// dmin·m_j; each token's integer sum Σ q·xq by eight VPDPBUSD (one token:
// two chains), converted, times A, then acc = fma(·, xd, acc) and acc =
// fma(−B, xs, acc) with xd and xs broadcast from the token's dc words.
// The general registers are tile's; CX counts super-blocks.
func (a *asm) tileQ4K(n int) {
	a.text(fmt.Sprintf("kernTileQ4_Kx%dAVX512", n), 0, sigTile)
	isum := func(t int) VecPhysical { return tileZ(10 + t) }
	acc := func(t int) VecPhysical { return tileZ(18 + t) }

	a.tileStart(2)

	a.tileGroup(n, true)

	a.Label("block")
	if n == 1 {
		r := tileRegsA
		a.VCVTPH2PS(r.at(0), r.d)
		a.VCVTPH2PS(r.at(32), r.dmin)
		for j := range 8 {
			q4kSub1(a, r, j)
		}
	} else {
		a.VCVTPH2PS(mem(RSI, 0), Z27)
		a.VCVTPH2PS(mem(RSI, 32), Z28)
		for j := range 8 {
			a.tilePrefetchPart(q4kTileSB, j, 8)
			for k := range 8 {
				m := mem(RSI, 320+512*(j/2)+64*k)
				if j%2 == 0 {
					a.VPANDD(m, Z9, tileZ(k))
				} else {
					a.VPSRLW(U8(4), m, tileZ(k))
					a.VPANDD(Z9, tileZ(k), tileZ(k))
				}
			}
			a.VPMOVZXBD(mem(RSI, 64+16*j), Z8)
			a.VCVTDQ2PS(Z8, Z8)
			a.VMULPS(Z27, Z8, Z8)
			a.VPMOVZXBD(mem(RSI, 192+16*j), Z26)
			a.VCVTDQ2PS(Z26, Z26)
			a.VMULPS(Z28, Z26, Z26)
			for t := range n {
				a.VPXORD(isum(t), isum(t), isum(t))
			}
			for k := range 8 {
				for t := range n {
					a.vpdpbusdBcst(tileXQ(t, 32*j+4*k), tileZ(k), isum(t))
				}
			}
			for t := range n {
				a.VCVTDQ2PS(isum(t), isum(t))
				a.VMULPS(Z8, isum(t), isum(t))
				a.VFMADD231PS_BCST(tileDC(t, 8*j), isum(t), acc(t))
				a.VFNMADD231PS_BCST(tileDC(t, 8*j+4), Z26, acc(t))
			}
		}
	}
	a.ADDQ(U32(q4kTileSB), RSI)
	a.ADDQ(U32(256), RDI)
	a.ADDQ(U8(64), RDX)
	a.DECQ(RCX)
	a.JNZ(lbl("block"))

	a.tileStore(n)
}

// tileStart loads a tile kernel's general registers (see tile; R9 is
// dc's row stride, 4·words·nb for words dc words per block) and Z9.
func (a *asm) tileStart(words int) {
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("groups"), RBX)
	a.MOVQ(a.arg("nb"), R9)
	a.SHLQ(U8(map[int]uint8{2: 3, 4: 4}[words]), R9)
	a.LEAQ(memx(R9, 0, R9, 1), R10)
	a.LEAQ(memx(R9, 0, R9, 2), R11)
	a.LEAQ(memx(R9, 0, R9, 4), R12)
	a.LEAQ(memx(R11, 0, R10, 2), R13)
	a.bcastbZ(0x0f, Z9)
}

// tileStore ends a tile kernel: the label store writes the n tokens'
// accumulators (Z18+t) of the group and goes on to the next; end returns.
func (a *asm) tileStore(n int) {
	a.Label("store")
	a.MOVQ(a.arg("ostride"), RCX)
	a.SHLQ(U8(2), RCX)
	a.MOVQ(R8, RAX)
	for t := range n {
		if t > 0 {
			a.ADDQ(RCX, RAX)
		}
		a.VMOVUPS(tileZ(18+t), mem(RAX, 0))
	}
	a.tileNext()
}

// tileNext moves out on one group and goes on to the next, after a
// tile kernel's store; the label end returns.
func (a *asm) tileNext() {
	a.ADDQ(U8(64), R8)
	a.DECQ(RBX)
	a.JMP(lbl("group"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}

// q6kTileSB is the bytes of one 256-value super-block of sixteen packed
// Q6_K rows (engine/cpu kernPackQ6_K).
const q6kTileSB = 32 + 256 + 16*192

// tileXQ2 is token t's activation bytes where dc has four words per block
// (R9 = 16·nb): its row is 2·t·R9 bytes from token 0's.
func tileXQ2(t, disp int) Mem {
	switch t {
	case 0:
		return mem(RDI, disp)
	case 1:
		return memx(RDI, disp, R9, 2)
	case 2:
		return memx(RDI, disp, R9, 4)
	case 3:
		return memx(RDI, disp, R11, 2)
	case 4:
		return memx(RDI, disp, R9, 8)
	case 5:
		return memx(RDI, disp, R12, 2)
	case 6:
		return memx(RDI, disp, R11, 4)
	}
	return memx(RDI, disp, R13, 2)
}

// tileQ6K is kernTileQ6_Kx<n>AVX512, engine/cpu kernTileQ6_KGo bit for
// bit: the lanes are the sixteen rows of a group, as in tile; dc has four
// words per block (the token's xd bits, −32·Σxq of each 16-value half).
// Per super-block Z27 = the rows' d; per 32-value block b (half b/4, bb =
// b%4): Z0..Z7 the 6-bit values (Zk for activation bytes 4k..4k+3): the
// low nibble (of ql's chunk bb%2, shifted down for bb >= 2) or'ed by
// VPTERNLOGD with the qh bits 2bb, 2bb+1 moved to bits 4, 5 (Z26 0x30
// bytes; Z28 scratch); then per 16-value sub-block, Z8 = A = d·sc, each
// token's sum from −32·Σxq by four VPDPBUSD, converted, times A, and
// acc = fma(·, xd, acc).
func (a *asm) tileQ6K(n int) {
	a.text(fmt.Sprintf("kernTileQ6_Kx%dAVX512", n), 0, sigTile)
	isum := func(t int) VecPhysical { return tileZ(10 + t) }
	acc := func(t int) VecPhysical { return tileZ(18 + t) }
	a.tileStart(4)
	a.bcastbZ(0x30, Z26)

	a.tileGroup(n, true)

	a.Label("block")
	a.VCVTPH2PS(mem(RSI, 0), Z27)
	for b := range 8 {
		r := tileRegsA
		a.tilePrefetchPartAt(r.at, q6kTileSB, b, 8)
		q6kWeights(a, r, b)
		for half := range 2 {
			a.VPMOVSXBD(mem(RSI, 32+16*(2*b+half)), Z8)
			a.VCVTDQ2PS(Z8, Z8)
			a.VMULPS(Z27, Z8, Z8)
			for t := range n {
				a.VPBROADCASTD(tileDC(t, 16*b+4+4*half), isum(t))
			}
			for k := 4 * half; k < 4*half+4; k++ {
				for t := range n {
					a.vpdpbusdBcst(tileXQ2(t, 32*b+4*k), tileZ(k), isum(t))
				}
			}
			for t := range n {
				a.VCVTDQ2PS(isum(t), isum(t))
				a.VMULPS(Z8, isum(t), isum(t))
				a.VFMADD231PS_BCST(tileDC(t, 16*b), isum(t), acc(t))
			}
		}
	}
	a.ADDQ(U32(q6kTileSB), RSI)
	a.ADDQ(U32(256), RDI)
	a.ADDQ(U32(128), RDX)
	a.DECQ(RCX)
	a.JNZ(lbl("block"))
	a.tileStore(n)
}

// tileGroup places a tile kernel's group loop head (to end when no group
// is left): per group DI, DX and CX (the blocks, or with superBlocks the
// 256-value super-blocks) set, the n accumulators Z18+t zeroed, and a jump
// to store when there is nothing to add.
func (a *asm) tileGroup(n int, superBlocks bool) {
	a.Label("group")
	a.jzero(RBX, "end")
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("dc_base"), RDX)
	a.MOVQ(a.arg("nb"), RCX)
	if superBlocks {
		a.SHRQ(U8(3), RCX)
	}
	for t := range n {
		a.VPXORD(tileZ(18+t), tileZ(18+t), tileZ(18+t))
	}
	a.jzero(RCX, "store")
}

// tilePrefetchAhead is how far ahead of SI (bytes) a tile kernel asks for
// its weights with PREFETCHT0. The packed groups lie one after another, so
// the weights are one sequential stream; a decode token does too little
// work per byte for the core to keep enough lines in flight on its own,
// and without the hint the kernels read at 60-75% of the memory's rate
// (BenchmarkMatMul n=1 against BenchmarkMemoryRead; 1024 to 8192 bytes
// measured, 4096 the best of them on one-stream decode, BENCHMARKS.md). A
// line past the end of w is only a hint: a prefetch never faults.
const tilePrefetchAhead = 4096

// tileRegs are the registers of one stream of a one-token kernel: at
// addresses its weights, w(k) holds activation bytes 4k..4k+3's weights,
// d and dmin a super-block's scales, s and m a sub-block's, isum0 and
// isum1 the integer sums (two chains), acc the accumulator.
type tileRegs struct {
	at                func(disp int) Mem
	w                 func(k int) VecPhysical
	d, dmin, s, m     VecPhysical
	isum0, isum1, acc VecPhysical
}

// tileRegsA is the first (or only) stream's registers, tileRegsB the
// second's in a two-stream kernel.
var (
	tileRegsA = tileRegs{at: tileSI, w: tileZA, d: Z27, dmin: Z28, s: Z8, m: Z26, isum0: Z10, isum1: Z11, acc: Z18}
	tileRegsB = tileRegs{at: tileSIB, w: tileZB, d: Z29, dmin: Z30, s: Z24, m: Z25, isum0: Z12, isum1: Z13, acc: Z19}
)

// q4kSub1 is sub-block j of a Q4_K super-block for one token (r.d and
// r.dmin loaded): the same operations as tileQ4K's for n tokens.
func q4kSub1(a *asm, r tileRegs, j int) {
	a.tilePrefetchPartAt(r.at, q4kTileSB, j, 8)
	for k := range 8 {
		m := r.at(320 + 512*(j/2) + 64*k)
		if j%2 == 0 {
			a.VPANDD(m, Z9, r.w(k))
		} else {
			a.VPSRLW(U8(4), m, r.w(k))
			a.VPANDD(Z9, r.w(k), r.w(k))
		}
	}
	a.VPMOVZXBD(r.at(64+16*j), r.s)
	a.VCVTDQ2PS(r.s, r.s)
	a.VMULPS(r.d, r.s, r.s)
	a.VPMOVZXBD(r.at(192+16*j), r.m)
	a.VCVTDQ2PS(r.m, r.m)
	a.VMULPS(r.dmin, r.m, r.m)
	// Two chains of four, added: integers, so exactly the same sum.
	a.VPXORD(r.isum0, r.isum0, r.isum0)
	a.VPXORD(r.isum1, r.isum1, r.isum1)
	for k := range 8 {
		a.vpdpbusdBcst(tileXQ(0, 32*j+4*k), r.w(k), []VecPhysical{r.isum0, r.isum1}[k%2])
	}
	a.VPADDD(r.isum1, r.isum0, r.isum0)
	a.VCVTDQ2PS(r.isum0, r.isum0)
	a.VMULPS(r.s, r.isum0, r.isum0)
	a.VFMADD231PS_BCST(tileDC(0, 8*j), r.isum0, r.acc)
	a.VFNMADD231PS_BCST(tileDC(0, 8*j+4), r.m, r.acc)
}

// q6kWeights loads sub-block b's six-bit weights of a Q6_K super-block
// into r.w (Z26 holds 0x30 bytes, Z28 is scratch).
func q6kWeights(a *asm, r tileRegs, b int) {
	h, bb := b/4, b%4
	for k := range 8 {
		lo := r.at(288 + 1024*h + 512*(bb%2) + 64*k)
		hi := r.at(2336 + 512*h + 64*k)
		z := r.w(k)
		if bb < 2 {
			a.VPANDD(lo, Z9, z)
		} else {
			a.VPSRLW(U8(4), lo, z)
			a.VPANDD(Z9, z, z)
		}
		var bits Op = Z28
		switch bb {
		case 0:
			a.VPSLLW(U8(4), hi, Z28)
		case 1:
			a.VPSLLW(U8(2), hi, Z28)
		case 2:
			bits = hi // bits 4, 5 in place
		case 3:
			a.VPSRLW(U8(2), hi, Z28)
		}
		a.VPTERNLOGD(U8(0xf8), bits, Z26, z) // z | (bits & 0x30)
	}
}

// q6kSub1 is sub-block b of a Q6_K super-block for one token (r.d
// loaded): the same operations as tileQ6K's for n tokens.
func q6kSub1(a *asm, r tileRegs, b int) {
	a.tilePrefetchPartAt(r.at, q6kTileSB, b, 8)
	q6kWeights(a, r, b)
	for half := range 2 {
		a.VPMOVSXBD(r.at(32+16*(2*b+half)), r.s)
		a.VCVTDQ2PS(r.s, r.s)
		a.VMULPS(r.d, r.s, r.s)
		a.VPBROADCASTD(tileDC(0, 16*b+4+4*half), r.isum0)
		for k := 4 * half; k < 4*half+4; k++ {
			a.vpdpbusdBcst(tileXQ2(0, 32*b+4*k), r.w(k), r.isum0)
		}
		a.VCVTDQ2PS(r.isum0, r.isum0)
		a.VMULPS(r.s, r.isum0, r.isum0)
		a.VFMADD231PS_BCST(tileDC(0, 16*b), r.isum0, r.acc)
	}
}

// tileStreamsK is kernTile<name>x1s2AVX512 for a K-quant of sb-byte
// super-blocks (words dc words per 32-value block): as tileStreams, the
// super-blocks of the two streams' groups side by side, sub-block by
// sub-block (head loads a super-block's scales, sub emits sub-block j).
func (a *asm) tileStreamsK(name string, sb, words int, setup func(a *asm), head func(a *asm, r tileRegs), sub func(a *asm, r tileRegs, j int)) {
	a.text(fmt.Sprintf("kernTile%sx1s2AVX512", name), 0, sigTile)
	a.tileStart(words)
	if setup != nil {
		setup(a)
	}
	a.MOVQ(a.arg("groups"), R14)
	a.IMULQ(a.arg("nb"), R14)
	a.IMUL3Q(U32(uint32(sb/8)), R14, R14)

	a.Label("group")
	a.jzero(RBX, "end")
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("dc_base"), RDX)
	a.MOVQ(a.arg("nb"), RCX)
	a.SHRQ(U8(3), RCX)
	a.VPXORD(Z18, Z18, Z18)
	a.VPXORD(Z19, Z19, Z19)
	a.jzero(RCX, "store")

	a.Label("block")
	head(a, tileRegsA)
	head(a, tileRegsB)
	for j := range 8 {
		sub(a, tileRegsA, j)
		sub(a, tileRegsB, j)
	}
	a.ADDQ(U32(uint32(sb)), RSI)
	a.ADDQ(U32(256), RDI)
	a.ADDQ(U32(uint32(8*4*words)), RDX)
	a.DECQ(RCX)
	a.JNZ(lbl("block"))
	a.tileStreamsStore()
}

// tileStreams is kernTile<type>x1s<S>AVX512 (S = 2 or 4), one token over
// S streams of groups read side by side: groups sets of S, group j of set
// i at SI + i·R14 (R14 the bytes of groups groups), written to
// out[16(i·groups + j):]. Each lane runs exactly the operations of the
// one-stream kernel (tile(q, 1)), so the bits are the same. One core reads
// several sequential streams faster than one (a dot product over one
// stream per thread read 68-71 GB/s where two read 82-87 on the AMD VM;
// BENCHMARKS.md, "Two streams per core"), and four still faster than two
// for Q8_0, whose work per byte is the least ("Four streams").
// Registers: the streams' weights share Z0..Z7 (renamed from stream to
// stream); stream i has its scales in Z8, Z24, Z25 or Z27, its sums in
// Z10+2i and Z11+2i and its accumulator in Z18+i; R11 = 3·R14.
func (a *asm) tileStreams(q tileType, S int) {
	a.text(fmt.Sprintf("kernTile%sx1s%dAVX512", q.name, S), 0, sigTile)
	a.tileStart(2)
	if q.setup != nil {
		q.setup(a)
	}
	a.MOVQ(a.arg("groups"), R14)
	a.IMULQ(a.arg("nb"), R14)
	a.IMUL3Q(U32(uint32(q.bsz)), R14, R14)
	a.LEAQ(memx(R14, 0, R14, 2), R11)
	at := []func(int) Mem{
		tileSI, tileSIB,
		func(d int) Mem { return memx(RSI, d, R14, 2) },
		func(d int) Mem { return memx(RSI, d, R11, 1) },
	}[:S]
	scale := []VecPhysical{Z8, Z24, Z25, Z27}

	a.Label("group")
	a.jzero(RBX, "end")
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("dc_base"), RDX)
	a.MOVQ(a.arg("nb"), RCX)
	for st := range S {
		a.VPXORD(tileZ(18+st), tileZ(18+st), tileZ(18+st))
	}
	a.jzero(RCX, "store")

	a.Label("block")
	lines := (q.bsz + 63) / 64
	for i := range lines {
		for _, m := range at {
			a.PREFETCHT0(m(tilePrefetchAhead + 64*i))
		}
	}
	for st, m := range at {
		i0, i1 := tileZ(10+2*st), tileZ(11+2*st)
		q.weights(a, m, tileZA, scale[st])
		q.start(a, 0, i0)
		// Two chains of four, added: integers, so exactly the same sum.
		a.VPXORD(i1, i1, i1)
		for k := range 8 {
			a.vpdpbusdBcst(tileXQ(0, 4*k), tileZ(k), []VecPhysical{i0, i1}[k%2])
		}
		a.VPADDD(i1, i0, i0)
		a.VCVTDQ2PS(i0, i0)
		a.VMULPS(scale[st], i0, i0)
		a.VFMADD231PS_BCST(tileDC(0, 0), i0, tileZ(18+st))
	}
	a.ADDQ(U32(uint32(q.bsz)), RSI)
	a.ADDQ(U8(32), RDI)
	a.ADDQ(U8(8), RDX)
	a.DECQ(RCX)
	a.JNZ(lbl("block"))

	a.Label("store")
	a.MOVQ(a.arg("groups"), RAX)
	a.SHLQ(U8(6), RAX)
	a.LEAQ(memx(RAX, 0, RAX, 2), R12)
	out := []Mem{mem(R8, 0), memx(R8, 0, RAX, 1), memx(R8, 0, RAX, 2), memx(R8, 0, R12, 1)}
	for st := range S {
		a.VMOVUPS(tileZ(18+st), out[st])
	}
	a.tileNext()
}

// tileStreamsStore ends a two-stream kernel: the label store writes the
// pair's accumulators (Z18 to out at R8, Z19 groups·64 bytes further) and
// goes on to the next pair; end returns.
func (a *asm) tileStreamsStore() {
	a.Label("store")
	a.VMOVUPS(Z18, mem(R8, 0))
	a.MOVQ(a.arg("groups"), RAX)
	a.SHLQ(U8(6), RAX)
	a.VMOVUPS(Z19, memx(R8, 0, RAX, 1))
	a.tileNext()
}

// tilePrefetch hints the lines of the bsz bytes tilePrefetchAhead past SI,
// one PREFETCHT0 per 64 bytes.
func (a *asm) tilePrefetch(bsz int) { a.tilePrefetchPart(bsz, 0, 1) }

// tilePrefetchPart is part p of parts of tilePrefetch(bsz): a kernel whose block is a super-block of several kilobytes
// spreads its hints over the sub-blocks, so that its misses go out at the
// pace it reads them rather than forty at once (more than the core has
// fill buffers for).
func (a *asm) tilePrefetchPart(bsz, p, parts int) { a.tilePrefetchPartAt(tileSI, bsz, p, parts) }

// tilePrefetchPartAt is tilePrefetchPart for the weights at(0).
func (a *asm) tilePrefetchPartAt(at func(int) Mem, bsz, p, parts int) {
	lines := (bsz + 63) / 64
	for i := p * lines / parts; i < (p+1)*lines/parts; i++ {
		a.PREFETCHT0(at(tilePrefetchAhead + 64*i))
	}
}
