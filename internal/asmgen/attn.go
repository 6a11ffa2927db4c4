package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The attention kernels of engine/cpu/attn_amd64.s (attn.go, attnSet) in
// AVX2 and AVX-512, and SwiGLU in AVX-512. Each level has an F32 and an F16
// variant of the key dots and the value sums, built from one generator
// whose loads differ: VCVTPH2PS is exact, so both give the same bits on the
// same values. Scores are computed four keys at a time, one accumulator per
// key, reduced together (hsum4's order); a group short of four keys repeats
// its first key and stores only its own results, so a key's score never
// depends on its neighbours. Value sums keep a stripe of the output in
// registers and add the keys into it in order.
//
// The exponential is expNeg's algorithm, operation for operation (separate
// multiplies and adds, truncating conversion), so that each value has
// expNeg's bits; only the sum is added in a different order.

// attnConst holds the float32 constants of expNeg and the exponent bias,
// at these offsets.
var attnConst = static("attnConst", 0)

const (
	cLog2e  = 0  // log2(e)
	cHalf   = 4  // 1/2
	cLn2Hi  = 8  // ln2hi
	cLn2Lo  = 12 // ln2lo
	cOne    = 16 // 1
	c6      = 20 // 1/6
	c24     = 24 // 1/24
	c120    = 28 // 1/120
	c720    = 32 // 1/720
	cMinArg = 36 // -87.3
	cBias   = 40 // 127
)

// attnW is a vector width of the attention kernels: AVX2's ymm registers
// or AVX-512's zmm registers, lanes floats each.
type attnW struct {
	z     bool
	lanes int
	name  string
}

var (
	attnY = attnW{false, 8, "AVX2"}
	attnZ = attnW{true, 16, "AVX512"}
)

// v is vector register i of width w.
func (w attnW) v(i int) VecPhysical {
	if w.z {
		return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8}[i]
	}
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8}[i]
}

func genAttn(a *asm) {
	a.data32("attnConst", 0x3fb8aa3b, 0x3f000000, 0x3f317200, 0x35bfbe8e, 0x3f800000,
		0x3e2aaaab, 0x3d2aaaab, 0x3c088889, 0x3ab60b61, 0xc2ae999a, 0x0000007f, 0)
	// attnMask: eight all-ones lanes then eight zero lanes (AVX2 tail
	// masks).
	const ones = 0xffffffffffffffff
	a.data("attnMask", ones, ones, ones, ones, 0, 0, 0, 0)

	for _, w := range []attnW{attnY, attnZ} {
		a.attnDots(w, f32Fmt, "func(s, q, k []float32, scale float32)")
		a.attnDots(w, f16Fmt, "func(s, q []float32, k []byte, scale float32)")
		a.attnAcc(w, f32Fmt, "func(acc, p, v []float32, c float32)")
		a.attnAcc(w, f16Fmt, "func(acc, p []float32, v []byte, c float32)")
		a.attnExpSum(w)
		a.attnMaxW(w)
	}
	a.swiglu()
	genKVQuant(a)
}

// keyPtrs points R8..R11 at the next four keys (stride R12) of the BX >= 1
// left, repeating the first where fewer than four are left.
func (a *asm) keyPtrs() {
	a.MOVQ(R8, R9)
	a.MOVQ(R8, R10)
	a.MOVQ(R8, R11)
	for i, r := range []Register{R9, R10, R11} {
		a.CMPQ(RBX, U8(i+2))
		a.JB(lbl("ptrs"))
		a.LEAQ(memx([]Register{R8, R9, R10}[i], 0, R12, 1), r)
	}
	a.Label("ptrs")
}

// attnArgs loads the arguments of an attention kernel func(o, i
// []float32, kv []T, c float32) whose parameters are named o, i, kv and c:
// DI and SI the bases of o and i, their lengths into ol and il, R8 the
// base of kv (keys or values: rows of DX values of f), c into every lane
// of cv, and R12 the bytes of a row of kv.
func (a *asm) attnArgs(f floatFmt, o string, ol Register, i string, il Register, kv, c string, cv VecPhysical) {
	a.MOVQ(a.arg(o+"_base"), RDI)
	a.MOVQ(a.arg(o+"_len"), ol)
	a.MOVQ(a.arg(i+"_base"), RSI)
	a.MOVQ(a.arg(i+"_len"), il)
	a.MOVQ(a.arg(kv+"_base"), R8)
	a.VBROADCASTSS(a.arg(c), cv)
	a.MOVQ(RDX, R12)
	a.SHLQ(U8(f.es/2), R12)
}

// attnDots is dotsF32/dotsF16 of width w: keys of f's values (f.es bytes
// each); the query is at (SI)(R13*qs). V0..V3 accumulate four keys'
// chunks of lanes values. The AVX2 kernel adds the hd%8 tail values into
// X10, one lane per key, after the reduction; the AVX-512 kernel takes
// the hd%16 tail values under the mask K1.
func (a *asm) attnDots(w attnW, f floatFmt, sig string) {
	a.text("attnDots"+f.name+w.name, 0, sig)
	qs := uint8(4 / f.es)
	q := func() Mem { return memx(RSI, 0, R13, qs) }
	key := func(r Register) Mem { return memx(r, 0, R13, 1) }
	keys := []Register{R8, R9, R10, R11}
	a.attnArgs(f, "s", RBX, "q", RDX, "k", "scale", X15)
	if w.z {
		a.MOVQ(RDX, RCX)
		a.ANDQ(U8(15), RCX)
		a.tailMask(K1)
		a.SHRQ(U8(4), RDX)
	} else {
		a.SHRQ(U8(3), RDX)
	}

	a.Label("group")
	a.jzero(RBX, "done")
	a.keyPtrs()
	if w.z {
		a.zeroD(Z0, Z1, Z2, Z3)
	} else {
		a.zero(Y0, Y1, Y2, Y3, X10)
	}
	a.XORQ(R13, R13)
	a.MOVQ(RDX, RCX)

	// fma adds the four keys' values (in V5..V8) times the query's (in
	// V4) into V0..V3.
	fma := func() {
		for i := range 4 {
			a.VFMADD231PS(w.v(5+i), w.v(4), w.v(i))
		}
	}
	a.whileNZ("chunk", RCX, "tail", func() {
		a.VMOVUPS(q(), w.v(4))
		for i, r := range keys {
			f.load(a, key(r), w.v(5+i))
		}
		fma()
		a.ADDQ(U8(w.lanes*f.es), R13)
	})

	a.Label("tail")
	if w.z {
		a.KORTESTW(K1, K1)
		a.JZ(lbl("reduce"))
		a.VMOVUPS_Z(q(), K1, Z4)
		for i, r := range keys {
			f.masked(a, key(r), w.v(5+i))
		}
		fma()
	} else {
		a.MOVQ(a.arg("q_len"), RCX)
		a.ANDQ(U8(7), RCX)
		a.JZ(lbl("reduce"))
		a.Label("tloop")
		// Value R13 of the four keys into the lanes of X11.
		if f.es == 4 {
			a.VMOVSS(key(R8), X11)
			for i, r := range keys[1:] {
				a.VINSERTPS(U8(0x10*(i+1)), key(r), X11, X11)
			}
		} else {
			for i, r := range keys {
				a.VPINSRW(U8(i), key(r), X11, X11)
			}
			a.VCVTPH2PS(X11, X11)
		}
		a.VBROADCASTSS(q(), X12)
		a.VFMADD231PS(X12, X11, X10)
		a.ADDQ(U8(f.es), R13)
		a.DECQ(RCX)
		a.JNZ(lbl("tloop"))
	}

	a.Label("reduce")
	if w.z {
		for i := range 4 {
			a.foldz(w.v(i), Y5)
		}
	}
	a.hsum4v(Y0, Y1, Y2, Y3, X5)
	if !w.z {
		a.VADDPS(X10, X0, X0)
	}
	a.VMULPS(X15, X0, X0)

	// Store the four scores in X0 at DI, or the BX < 4 that are left, and
	// move on to the next group of keys (or return).
	a.CMPQ(RBX, U8(4))
	a.JB(lbl("part"))
	a.VMOVUPS(X0, mem(RDI, 0))
	a.ADDQ(U8(16), RDI)
	a.SUBQ(U8(4), RBX)
	a.LEAQ(memx(R11, 0, R12, 1), R8)
	a.JMP(lbl("group"))

	a.Label("part")
	a.VMOVSS(X0, mem(RDI, 0))
	for i := 1; i < 3; i++ {
		a.CMPQ(RBX, U8(i+1))
		a.JB(lbl("done"))
		a.VEXTRACTPS(U8(i), X0, mem(RDI, 4*i))
	}

	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}

// attnAcc is accF32/accF16 of width w: stripes of 4·lanes outputs in
// V0..V3, then of lanes in V0, then the rest (AVX2: single outputs in X0;
// AVX-512: a masked stripe), each scaled by c and then summing the keys'
// values (f) in order.
func (a *asm) attnAcc(w attnW, f floatFmt, sig string) {
	a.text("attnAcc"+f.name+w.name, 0, sig)
	c := Y14
	if w.z {
		c = Z30
	}
	vb := w.lanes * 4 // bytes of a vector of outputs
	a.attnArgs(f, "acc", RDX, "p", RBX, "v", "c", c)
	a.MOVQ(RDX, RCX)
	a.SHRQ(U8(map[int]int{8: 5, 16: 6}[w.lanes]), RCX)

	// keysLoop adds, for each of the BX keys (values at R9, R12 bytes
	// apart), its weight p[AX] broadcast by bcast times its values (loaded
	// by load at the byte offsets off) into acc, then jumps to next.
	keysLoop := func(key, next string, bcast func(), load func(off int, v VecPhysical), acc []VecPhysical, fma func(v, acc VecPhysical)) {
		a.MOVQ(R8, R9)
		a.XORQ(RAX, RAX)
		a.Label(key)
		a.CMPQ(RAX, RBX)
		a.JAE(lbl(next))
		bcast()
		for i := range acc {
			load(i*w.lanes*f.es, w.v(5+i))
		}
		for i, v := range acc {
			fma(w.v(5+i), v)
		}
		a.ADDQ(R12, R9)
		a.INCQ(RAX)
		a.JMP(lbl(key))
	}
	bcast := func() { a.VBROADCASTSS(memx(RSI, 0, RAX, 4), w.v(4)) }
	load := func(off int, v VecPhysical) { f.load(a, mem(R9, off), v) }
	fma := func(v, acc VecPhysical) { a.VFMADD231PS(v, w.v(4), acc) }

	// stripe is the loop over stripes of n vectors (CX of them): loop,
	// key and store label it, next is the code after it.
	stripe := func(n int, loop, key, store, next string) {
		acc := []VecPhysical{w.v(0), w.v(1), w.v(2), w.v(3)}[:n]
		a.whileNZ(loop, RCX, next, func() {
			for i, v := range acc {
				a.VMULPS(mem(RDI, i*vb), c, v)
			}
			keysLoop(key, store, bcast, load, acc, fma)
			a.Label(store)
			for i, v := range acc {
				a.VMOVUPS(v, mem(RDI, i*vb))
			}
			a.ADDQ(U32(uint32(n*vb)), RDI)
			a.ADDQ(U32(uint32(n*w.lanes*f.es)), R8)
		})
	}
	stripe(4, "quad", "qkey", "qstore", "single")
	a.Label("single")
	a.MOVQ(RDX, RCX)
	a.SHRQ(U8(map[int]int{8: 3, 16: 4}[w.lanes]), RCX)
	a.ANDQ(U8(3), RCX)
	stripe(1, "sloop", "skey", "sstore", "tail")

	a.Label("tail")
	a.MOVQ(RDX, RCX)
	a.ANDQ(U8(w.lanes-1), RCX)
	a.JZ(lbl("done"))
	if w.z {
		a.tailMask(K1)
		a.VMOVUPS_Z(mem(RDI, 0), K1, Z0)
		a.VMULPS(Z30, Z0, Z0)
		keysLoop("tkey", "tstore", bcast, func(off int, v VecPhysical) { f.masked(a, mem(R9, 0), v) }, []VecPhysical{Z0}, fma)
		a.Label("tstore")
		a.VMOVUPS(Z0, K1, mem(RDI, 0))
	} else {
		a.Label("tel")
		a.VMOVSS(mem(RDI, 0), X0)
		a.VMULSS(X14, X0, X0)
		one := func(int, VecPhysical) { // the value at (R9) into X5
			if f.es == 4 {
				a.VMOVSS(mem(R9, 0), X5)
			} else {
				a.VPINSRW(U8(0), mem(R9, 0), X5, X5)
				a.VCVTPH2PS(X5, X5)
			}
		}
		keysLoop("tkey", "tstore", func() { a.VMOVSS(memx(RSI, 0, RAX, 4), X4) }, one, []VecPhysical{X0},
			func(_, acc VecPhysical) { a.VFMADD231SS(X5, X4, acc) })
		a.Label("tstore")
		a.VMOVSS(X0, mem(RDI, 0))
		a.ADDQ(U8(4), RDI)
		a.ADDQ(U8(f.es), R8)
		a.DECQ(RCX)
		a.JNZ(lbl("tel"))
	}

	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}

// expRegs are the operands of attnExp: x the argument and result, m the
// value it is taken from, lim -87.3, k the lanes above it (a vector
// register; with AVX-512 the mask register kmask, which also zeroes the
// others), n, nf, t, p scratch; the constants log2e, half, ln2Hi,
// ln2Lo, one, bias (registers) and the polynomial's coefficients 1/720,
// 1/120, 1/24, 1/6 (registers, or nil: broadcast from attnConst).
type expRegs struct {
	x, m, lim, k, n, nf, t, p      VecPhysical
	log2e, half, ln2Hi, ln2Lo, one VecPhysical
	bias                           VecPhysical
	c720, c120, c24, c6            VecPhysical
	kmask                          Register
}

var (
	// expY: the AVX2 registers: m in Y15, constants in Y8..Y14 (those of
	// the polynomial from memory), scratch Y1..Y5.
	expY = expRegs{x: Y0, m: Y15, lim: Y14, k: Y5, n: Y1, nf: Y2, t: Y3, p: Y4,
		log2e: Y13, half: Y12, ln2Hi: Y11, ln2Lo: Y10, one: Y9, bias: Y8}
	// expZ: the AVX-512 registers: m in Z30, the constants of expConstZ,
	// the valid lanes in K2.
	expZ = expRegs{x: Z0, m: Z30, lim: Z26, n: Z1, nf: Z3, t: Z4, p: Z5,
		log2e: Z16, half: Z17, ln2Hi: Z18, ln2Lo: Z19, one: Z20, bias: Z25,
		c720: Z24, c120: Z23, c24: Z22, c6: Z21, kmask: K2}
)

// attnExp sets r.x to e^(x-m), expNeg's steps lane by lane, 0 where the
// difference is not above -87.3.
func (a *asm) attnExp(r expRegs) {
	var k Op = r.k
	if r.kmask != nil {
		k = r.kmask
	}
	a.VSUBPS(r.m, r.x, r.x)
	a.VCMPPS(U8(0x1e), r.lim, r.x, k)
	a.VMULPS(r.log2e, r.x, r.n)
	a.VSUBPS(r.half, r.n, r.n)
	a.VCVTTPS2DQ(r.n, r.n)
	a.VCVTDQ2PS(r.n, r.nf)
	a.VMULPS(r.ln2Hi, r.nf, r.t)
	a.VSUBPS(r.t, r.x, r.x)
	a.VMULPS(r.ln2Lo, r.nf, r.t)
	a.VSUBPS(r.t, r.x, r.x)
	// p = ((((x/720 + 1/120)·x + 1/24)·x + 1/6)·x + 1/2)·x + 1)·x + 1
	if r.c720 != nil {
		a.VMULPS(r.c720, r.x, r.p)
	} else {
		a.VBROADCASTSS(attnConst.Offset(c720), r.p)
		a.VMULPS(r.x, r.p, r.p)
	}
	coef := []struct {
		reg VecPhysical
		off int
	}{{r.c120, c120}, {r.c24, c24}, {r.c6, c6}, {r.half, -1}, {r.one, -1}, {r.one, -1}}
	for i, c := range coef {
		v := c.reg
		if v == nil {
			a.VBROADCASTSS(attnConst.Offset(c.off), r.t)
			v = r.t
		}
		a.VADDPS(v, r.p, r.p)
		if i < len(coef)-1 {
			a.VMULPS(r.x, r.p, r.p)
		}
	}
	a.VPADDD(r.bias, r.n, r.n)
	a.VPSLLD(U8(23), r.n, r.n)
	if r.kmask != nil {
		a.VMULPS_Z(r.n, r.p, r.kmask, r.x)
	} else {
		a.VMULPS(r.n, r.p, r.x)
		a.VANDPS(r.k, r.x, r.x)
	}
}

// expConstZ loads expZ's constants into Z16..Z26.
func (a *asm) expConstZ() {
	for i, z := range []VecPhysical{Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24} {
		a.VBROADCASTSS(attnConst.Offset(4*i), z)
	}
	a.VPBROADCASTD(attnConst.Offset(cBias), Z25)
	a.VBROADCASTSS(attnConst.Offset(cMinArg), Z26)
}

// attnExpSum is expSum of width w: s[i] = e^(s[i]-m), returning their sum.
func (a *asm) attnExpSum(w attnW) {
	a.text("attnExpSum"+w.name, 0, "func(s []float32, m float32) float32")
	r, acc := expY, Y7
	if w.z {
		r, acc = expZ, Z2
	}
	a.MOVQ(a.arg("s_base"), RDI)
	a.MOVQ(a.arg("s_len"), RBX)
	a.VBROADCASTSS(a.arg("m"), r.m)
	if w.z {
		a.expConstZ()
		a.zeroD(Z2)
	} else {
		for _, c := range []struct {
			off int
			y   VecPhysical
		}{{cMinArg, Y14}, {cLog2e, Y13}, {cHalf, Y12}, {cLn2Hi, Y11}, {cLn2Lo, Y10}, {cOne, Y9}} {
			a.VBROADCASTSS(attnConst.Offset(c.off), c.y)
		}
		a.VPBROADCASTD(attnConst.Offset(cBias), Y8)
		a.zero(Y7)
	}

	a.whileN(fmt.Sprintf("loop%d", w.lanes), RBX, w.lanes, "tail", func() {
		a.VMOVUPS(mem(RDI, 0), r.x)
		a.attnExp(r)
		a.VMOVUPS(r.x, mem(RDI, 0))
		a.VADDPS(r.x, acc, acc)
		a.ADDQ(U8(4*w.lanes), RDI)
	})

	a.Label("tail")
	a.jzero(RBX, "sum")
	if w.z {
		a.MOVQ(RBX, RCX)
		a.tailMask(K1)
		a.VMOVUPS_Z(mem(RDI, 0), K1, Z0)
		a.attnExp(r)
		a.VMOVAPS_Z(Z0, K1, Z0)
		a.VMOVUPS(Z0, K1, mem(RDI, 0))
	} else {
		// The mask of the BX lanes left: attnMask+32-4·BX.
		a.LEAQ(attnMask(32), RAX)
		a.SHLQ(U8(2), RBX)
		a.SUBQ(RBX, RAX)
		a.VMOVUPS(mem(RAX, 0), Y6)
		a.VMASKMOVPS(mem(RDI, 0), Y6, Y0)
		a.attnExp(r)
		a.VANDPS(Y6, Y0, Y0)
		a.VMASKMOVPS(Y0, Y6, mem(RDI, 0))
	}
	a.VADDPS(r.x, acc, acc)

	a.Label("sum")
	if w.z {
		a.foldz(Z2, Y0)
	}
	y := acc
	if w.z {
		y = Y2
	}
	a.VEXTRACTF128(U8(1), y, X0)
	a.VADDPS(X0, y.AsX(), y.AsX())
	a.VHADDPS(y.AsX(), y.AsX(), y.AsX())
	a.VHADDPS(y.AsX(), y.AsX(), y.AsX())
	a.VMOVSS(y.AsX(), a.ret(""))
	a.VZEROUPPER()
	a.RET()
}

func attnMask(off int) Mem { return static("attnMask", off) }

// swiglu is swigluAVX512, swigluGo sixteen values at a time: e = e^-|g|
// (attnExp with Z0 = 0 and Z30 = |g|), sigmoid(g) = 1/(1+e) where g >= 0
// (K3) and e/(1+e) elsewhere (NaN included, as swigluGo), then
// (g·sigmoid(g))·up. The gates are in Z6, the ups in Z9; Z27 holds
// 0x7fffffff, Z31 zero.
func (a *asm) swiglu() {
	a.text("swigluAVX512", 0, "func(gate, up []float32)")
	a.MOVQ(a.arg("gate_base"), RDI)
	a.MOVQ(a.arg("gate_len"), RBX)
	a.MOVQ(a.arg("up_base"), RSI)
	a.expConstZ()
	a.MOVL(U32(0x7fffffff), EAX)
	a.VPBROADCASTD(EAX, Z27)
	a.VPXORD(Z31, Z31, Z31)
	a.MOVL(U32(0xffff), EAX)
	a.KMOVW(EAX, K1)
	body := func() {
		a.VANDPS(Z27, Z6, Z30)
		a.VPXORD(Z0, Z0, Z0)
		a.attnExp(expZ)
		a.VADDPS(Z20, Z0, Z7)
		a.VCMPPS(U8(0x0d), Z31, Z6, K3)
		a.VBLENDMPS(Z20, Z0, K3, Z8)
		a.VDIVPS(Z7, Z8, Z8)
		a.VMULPS(Z8, Z6, Z8)
		a.VMULPS(Z9, Z8, Z0)
	}

	a.whileN("loop16", RBX, 16, "tail", func() {
		a.VMOVUPS(mem(RDI, 0), Z6)
		a.VMOVUPS(mem(RSI, 0), Z9)
		body()
		a.VMOVUPS(Z0, mem(RDI, 0))
		a.ADDQ(U8(64), RDI)
		a.ADDQ(U8(64), RSI)
	})

	a.Label("tail")
	a.jzero(RBX, "done")
	a.MOVQ(RBX, RCX)
	a.tailMask(K1)
	a.VMOVUPS_Z(mem(RDI, 0), K1, Z6)
	a.VMOVUPS_Z(mem(RSI, 0), K1, Z9)
	body()
	a.VMOVUPS(Z0, K1, mem(RDI, 0))

	a.Label("done")
	a.VZEROUPPER()
	a.RET()
}

// attnMaxW is attnMax of width w: the largest of s, -Inf for none. The
// vector maxima take w.lanes values at a time into X0/Y0/Z0, folded to one
// lane; the values past the last whole vector go one by one.
func (a *asm) attnMaxW(w attnW) {
	a.text("attnMax"+w.name, 0, "func(s []float32) float32")
	m := w.v(0)
	a.MOVQ(a.arg("s_base"), RDI)
	a.MOVQ(a.arg("s_len"), RBX)
	a.MOVL(U32(0xff800000), EAX) // -Inf
	a.VMOVD(EAX, X1)
	a.VBROADCASTSS(X1, m)
	a.whileN("loop", RBX, w.lanes, "fold", func() {
		a.VMAXPS(mem(RDI, 0), m, m)
		a.ADDQ(U8(4*w.lanes), RDI)
	})
	a.Label("fold")
	if w.z {
		a.VEXTRACTF32X8(U8(1), Z0, Y1)
		a.VMAXPS(Y1, Y0, Y0)
	}
	a.VEXTRACTF128(U8(1), Y0, X1)
	a.VMAXPS(X1, X0, X0)
	a.VMOVHLPS(X0, X0, X1)
	a.VMAXPS(X1, X0, X0)
	a.VMOVSHDUP(X0, X1)
	a.VMAXSS(X1, X0, X0)
	a.whileNZ("scalar", RBX, "done", func() {
		a.VMAXSS(mem(RDI, 0), X0, X0)
		a.ADDQ(U8(4), RDI)
	})
	a.Label("done")
	a.VMOVSS(X0, a.ret(""))
	a.VZEROUPPER()
	a.RET()
}
