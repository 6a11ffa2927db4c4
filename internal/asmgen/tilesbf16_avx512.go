package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tileBF16 is kernTileBF16x<n>AVX512(out []float32, ostride int, w []byte,
// groups, cols int, x []uint16), engine/cpu kernTileBF16Go bit for bit:
// weights rounded to bfloat16 and packed by column pairs in groups of
// sixteen rows (engine/cpu kernPackBF16: per pair of columns the rows'
// two values, 64 bytes), the sixteen lanes the rows, and each token's
// values rounded to bfloat16 (x, cols values per token). Per four columns
// and group, the two pairs' weights, then per token one VDPBF16PS each
// with the token's pair broadcast: the first pair into one accumulator,
// the second into another, summed at the end, so that each lane adds its
// columns in the same two chains whatever the number of tokens. With up
// to three tokens the kernel takes tileBF16Groups(n) = four groups at
// once, as the F16 ones do, for chains enough to cover VDPBF16PS's
// latency (from four tokens on, two groups measured no faster: their
// broadcasts come from memory, one per VDPBF16PS).
//
// The frame and registers are tileFloat's.
func (a *asm) tileBF16(n int) {
	a.tileFloat(fmt.Sprintf("kernTileBF16x%dAVX512", n), "[]uint16", 1, n, tileBF16Groups(n),
		func(G int, x func(t, disp int) Mem, w func(g, disp int) Mem, acc func(g, t, p int) VecPhysical) {
			ws := make([]VecPhysical, G)
			for g := range ws {
				ws[g] = tileZ(32 - G + g)
			}
			for p := range 2 {
				for g, z := range ws {
					a.VMOVDQU64(w(g, 64*p), z)
				}
				for g, z := range ws {
					for t := range n {
						a.vdpbf16psBcst(x(t, 4*p), z, acc(g, t, p))
					}
				}
			}
		})
}

// tileBF16Groups is how many groups of sixteen rows the BF16 kernel of n
// tokens takes at once (engine/cpu kernTileBF16Groups).
func tileBF16Groups(n int) int {
	if n <= 3 {
		return 4
	}
	return 1
}

// vdpbf16psBcst emits VDPBF16PS m32bcst, mid, dst (AVX512_BF16: per lane,
// dst += mid's odd bfloat16 times m's high half, then += mid's even one
// times m's low half, m's 32 bits broadcast to the sixteen lanes), mid
// and dst zmm registers. Neither Go's assembler nor avo v0.5.0 knows the
// instruction, so it is written as its EVEX encoding (EVEX.512.F3.0F38.W0
// 52 /r with EVEX.b set), BYTE by BYTE after a comment that spells it.
func (a *asm) vdpbf16psBcst(m Mem, mid, dst VecPhysical) {
	a.Comment(fmt.Sprintf("VDPBF16PS.BCST %s, %s, %s", m.Asm(), mid.Asm(), dst.Asm()))
	for _, b := range evexBcst(0x52, m, int(mid.PhysicalIndex()), int(dst.PhysicalIndex())) {
		a.Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}})
	}
}

// evexBcst encodes the 512-bit EVEX instruction of map 0F38, prefix F3 and
// W0 with opcode op: reg the destination zmm, vvvv the first source zmm,
// r/m the memory operand m with a 32-bit broadcast (its displacement
// compressed by 4 where it can be). m needs a base register; the address
// is always written with a SIB byte.
func evexBcst(op byte, m Mem, src, dst int) []byte {
	base, ok := m.Base.(Physical)
	if !ok || base.Kind() != KindGP || m.Symbol.Name != "" {
		panic(fmt.Sprintf("asmgen: EVEX operand %s: want a general register base", m.Asm()))
	}
	b := int(base.PhysicalIndex())
	x := 4 // SIB index 100 with EVEX.X clear: no index
	ss := byte(0)
	if m.Index != nil {
		idx, ok := m.Index.(Physical)
		if !ok || idx.Kind() != KindGP || idx.PhysicalIndex() == 4 {
			panic(fmt.Sprintf("asmgen: EVEX operand %s: bad index", m.Asm()))
		}
		x = int(idx.PhysicalIndex())
		switch m.Scale {
		case 1:
		case 2:
			ss = 1
		case 4:
			ss = 2
		case 8:
			ss = 3
		default:
			panic(fmt.Sprintf("asmgen: EVEX operand %s: bad scale", m.Asm()))
		}
	}
	inv := func(v, bit int) byte { return byte((v>>bit)&1) ^ 1 }
	p0 := inv(dst, 3)<<7 | inv(x, 3)<<6 | inv(b, 3)<<5 | inv(dst, 4)<<4 | 0b10 // map 0F38
	p1 := byte(0)<<7 | byte(^src&15)<<3 | 1<<2 | 0b10                          // W0, vvvv, F3
	p2 := byte(0b10)<<5 | 1<<4 | inv(src, 4)<<3                                // 512 bits, broadcast, V'
	var mod byte
	var disp []byte
	if d := m.Disp; d%4 == 0 && d/4 >= -128 && d/4 <= 127 {
		mod, disp = 1, []byte{byte(int8(d / 4))}
	} else {
		mod = 2
		disp = []byte{byte(d), byte(d >> 8), byte(d >> 16), byte(d >> 24)}
	}
	modrm := mod<<6 | byte(dst&7)<<3 | 0b100
	sib := ss<<6 | byte(x&7)<<3 | byte(b&7)
	return append([]byte{0x62, p0, p1, p2, op, modrm, sib}, disp...)
}

// toBF16 is kernToBF16AVX512(dst []uint16, src []float32), engine/cpu
// kernBF16 bit for bit on the first len(src)/16·16 values, in integer
// operations (not VCVTNEPS2BF16, whose subnormal and NaN handling would
// have to match kernBF16's on every CPU): per value b, (b + 0x7fff +
// (b>>16 & 1)) >> 16, then NaNs (|b| > 0x7f800000) quietened and zeros
// and subnormals (no exponent bits) made a zero of their sign, under
// masks. dst holds at least as many values.
//
// Registers: SI src, DI dst, CX blocks of sixteen; Z16..Z21 the constants.
func (a *asm) toBF16() {
	a.text("kernToBF16AVX512", 0, "func(dst []uint16, src []float32)")
	a.MOVQ(a.arg("src_base"), RSI)
	a.MOVQ(a.arg("dst_base"), RDI)
	a.MOVQ(a.arg("src_len"), RCX)
	a.SHRQ(U8(4), RCX)
	consts := []struct {
		v uint32
		z VecPhysical
	}{{1, Z16}, {0x7fff, Z17}, {0x7fffffff, Z18}, {0x7f800000, Z19}, {0x40, Z20}, {0x8000, Z21}}
	for _, c := range consts {
		a.MOVL(U32(c.v), EAX)
		a.VPBROADCASTD(EAX, c.z)
	}
	a.jzero(RCX, "done")
	a.Label("loop")
	a.VMOVDQU32(mem(RSI, 0), Z0)
	a.VPSRLD(U8(16), Z0, Z1)      // the high half: b >> 16
	a.VPANDD(Z16, Z1, Z2)         // its lowest bit
	a.VPADDD(Z17, Z0, Z3)         // b + 0x7fff
	a.VPADDD(Z2, Z3, Z3)          // + the bit: ties to even
	a.VPSRLD(U8(16), Z3, Z3)      // rounded
	a.VPANDD(Z18, Z0, Z4)         // |b|
	a.VPCMPUD(U8(6), Z19, Z4, K1) // |b| > 0x7f800000: NaN
	a.VPORD(Z20, Z1, K1, Z3)      // NaN: the high half, quiet
	a.VPTESTNMD(Z19, Z0, K2)      // no exponent bits: zero or subnormal
	a.VPANDD(Z21, Z1, K2, Z3)     // a zero of b's sign
	a.VPMOVDW(Z3, mem(RDI, 0))
	a.ADDQ(U8(64), RSI)
	a.ADDQ(U8(32), RDI)
	a.DECQ(RCX)
	a.JNZ(lbl("loop"))
	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}
