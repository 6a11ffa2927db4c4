package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The dequantizers of a quantized KV cache (engine/cpu/kvquant.go,
// attnSet.dequantQ8_0 and dequantQ4_0) in AVX2 and AVX-512: each block's
// f16 scale is converted once (VCVTPH2PS, exact) and broadcast, its codes
// widened to int32 (minus 8 for Q4_0), converted to float32 (exact) and
// multiplied by the scale: one rounding, as the Go code's d·q, so every
// level gives the same bits. They take len(dst)/32 whole blocks.

func genKVQuant(a *asm) {
	for _, w := range []attnW{attnY, attnZ} {
		a.dequantQ8_0(w)
		a.dequantQ4_0(w)
	}
}

// dequantArgs loads dst's base into DI, its blocks (len/32) into BX and
// src's base into SI.
func (a *asm) dequantArgs() {
	a.MOVQ(a.arg("dst_base"), RDI)
	a.MOVQ(a.arg("dst_len"), RBX)
	a.SHRQ(U8(5), RBX)
	a.MOVQ(a.arg("src_base"), RSI)
}

// kvScale broadcasts the f16 scale at (SI) to every lane of w's V0.
func (a *asm) kvScale(w attnW) {
	a.MOVWLZX(mem(RSI, 0), EAX)
	a.VMOVD(EAX, X0)
	a.VCVTPH2PS(X0, X0)
	a.VBROADCASTSS(X0, w.v(0))
}

// dequantQ8_0 is dequantQ8_0 of width w: per block, lanes codes at a time
// sign-extended from bytes.
func (a *asm) dequantQ8_0(w attnW) {
	a.text("dequantQ8_0"+w.name, 0, "func(dst []float32, src []byte)")
	a.dequantArgs()
	a.whileNZ("block", RBX, "done", func() {
		a.kvScale(w)
		for i := 0; i < 32/w.lanes; i++ {
			a.VPMOVSXBD(mem(RSI, 2+i*w.lanes), w.v(1))
			a.VCVTDQ2PS(w.v(1), w.v(1))
			a.VMULPS(w.v(0), w.v(1), w.v(1))
			a.VMOVUPS(w.v(1), mem(RDI, 4*i*w.lanes))
		}
		a.ADDQ(U8(34), RSI)
		a.ADDQ(U8(128), RDI)
	})
	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}

// dequantQ4_0 is dequantQ4_0 of width w: per block, lanes bytes at a time
// zero-extended; their low nibbles are values i.., their high nibbles
// values 16+i.., each minus 8. V7 holds 15 and V8 holds 8 in every lane.
func (a *asm) dequantQ4_0(w attnW) {
	a.text("dequantQ4_0"+w.name, 0, "func(dst []float32, src []byte)")
	a.dequantArgs()
	for _, c := range []struct {
		v VecPhysical
		n uint32
	}{{w.v(7), 15}, {w.v(8), 8}} {
		a.MOVL(U32(c.n), EAX)
		a.VMOVD(EAX, X1)
		a.VPBROADCASTD(X1, c.v)
	}
	a.whileNZ("block", RBX, "done", func() {
		a.kvScale(w)
		for i := 0; i < 16/w.lanes; i++ {
			a.VPMOVZXBD(mem(RSI, 2+i*w.lanes), w.v(1))
			if w.z {
				a.VPANDD(w.v(7), w.v(1), w.v(2))
			} else {
				a.VPAND(w.v(7), w.v(1), w.v(2))
			}
			a.VPSRLD(U8(4), w.v(1), w.v(3))
			for j, v := range []VecPhysical{w.v(2), w.v(3)} {
				a.VPSUBD(w.v(8), v, v)
				a.VCVTDQ2PS(v, v)
				a.VMULPS(w.v(0), v, v)
				a.VMOVUPS(v, mem(RDI, 4*(16*j+i*w.lanes)))
			}
		}
		a.ADDQ(U8(18), RSI)
		a.ADDQ(U8(128), RDI)
	})
	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}
