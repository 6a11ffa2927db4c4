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
)

func genTilesAVX512(a *asm) {
	for _, q := range []tileType{q4Tile, q8Tile} {
		for n := 1; n <= tileMaxTokens; n++ {
			a.tile(q, n)
		}
	}
}

// tileDC is token t's dc entry of the current block, disp bytes in.
func tileDC(t, disp int) Mem {
	switch t {
	case 0:
		return mem(RDX, disp)
	case 1:
		return memx(RDX, disp, R9, 1)
	case 2:
		return memx(RDX, disp, R10, 1)
	case 3:
		return memx(RDX, disp, R11, 1)
	case 4:
		return memx(RDX, disp, R9, 4)
	case 5:
		return memx(RDX, disp, R12, 1)
	case 6:
		return memx(RDX, disp, R11, 2)
	}
	return memx(RDX, disp, R13, 1)
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
// bytes of a packed block, how a block's weights come into Z0..Z7 (and its
// scales into Z8), where a token's integer sum starts, and one VPDPBUSD
// step: four activation bytes k of token t into isum.
type tileType struct {
	name    string
	bsz     int
	weights func(a *asm)
	start   func(a *asm, t int, isum VecPhysical)
	step    func(a *asm, t, k int, isum VecPhysical)
}

var (
	// Q4_0: the nibbles unsigned, the activations signed and broadcast
	// from memory; the sum starts from the token's -8·Σx (dc).
	q4Tile = tileType{name: "Q4_0", bsz: q4TileBlock,
		weights: func(a *asm) {
			a.VCVTPH2PS(mem(RSI, 0), Z8)
			for g := range 4 {
				a.VMOVDQU64(mem(RSI, 32+64*g), tileZ(g))
			}
			for g := range 4 {
				a.VPSRLW(U8(4), tileZ(g), tileZ(g+4))
			}
			for k := range 8 {
				a.VPANDD(Z9, tileZ(k), tileZ(k))
			}
		},
		start: func(a *asm, t int, isum VecPhysical) { a.VPBROADCASTD(tileDC(t, 4), isum) },
		step: func(a *asm, t, k int, isum VecPhysical) {
			a.vpdpbusdBcst(tileXQ(t, 4*k), tileZ(k), isum)
		},
	}
	// Q8_0: the weights stored offset by 128 (w+128, unsigned; engine/cpu
	// kernPackQ8_0), the activations signed and broadcast from memory; the
	// sum starts from the token's -128·Σx (dc): Σ (w+128)·x - 128·Σx = Σ w·x.
	q8Tile = tileType{name: "Q8_0", bsz: q8TileBlock,
		weights: func(a *asm) {
			a.VCVTPH2PS(mem(RSI, 0), Z8)
			for k := range 8 {
				a.VMOVDQU64(mem(RSI, 32+64*k), tileZ(k))
			}
		},
		start: q4Tile.start,
		step:  q4Tile.step,
	}
)

const q8TileBlock = 32 + 16*32 // scales, values

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

	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("out_base"), R8)
	a.MOVQ(a.arg("groups"), RBX)
	a.MOVQ(a.arg("nb"), R9)
	a.SHLQ(U8(3), R9)
	a.LEAQ(memx(R9, 0, R9, 1), R10)
	a.LEAQ(memx(R9, 0, R9, 2), R11)
	a.LEAQ(memx(R9, 0, R9, 4), R12)
	a.LEAQ(memx(R11, 0, R10, 2), R13)
	a.bcastbZ(0x0f, Z9)

	a.Label("group")
	a.jzero(RBX, "end")
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("dc_base"), RDX)
	a.MOVQ(a.arg("nb"), RCX)
	for t := range n {
		a.VPXORD(acc(t), acc(t), acc(t))
	}
	a.jzero(RCX, "store")

	a.Label("block")
	q.weights(a)
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

	a.Label("store")
	a.MOVQ(a.arg("ostride"), RCX)
	a.SHLQ(U8(2), RCX)
	a.MOVQ(R8, RAX)
	for t := range n {
		if t > 0 {
			a.ADDQ(RCX, RAX)
		}
		a.VMOVUPS(acc(t), mem(RAX, 0))
	}
	a.ADDQ(U8(64), R8)
	a.DECQ(RBX)
	a.JMP(lbl("group"))

	a.Label("end")
	a.VZEROUPPER()
	a.RET()
}
