package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Signatures shared by the AVX2 and AVX-512 matrix kernels.
const (
	sigDotQ    = "func(w []byte, xq []int8, xd, xs []float32) float32"
	sigDotQx4  = "func(res *[4]float32, w []byte, xq []int8, xd, xs []float32)"
	sigDotQx8  = "func(res *[8]float32, w []byte, xq []int8, xd, xs []float32)"
	sigDotF32  = "func(w, x []float32) float32"
	sigDotF    = "func(w []byte, x []float32) float32"
	sigDotFx4  = "func(res *[4]float32, w []byte, x []float32, stride int)"
	sigDotRows = "func(out []float32, w []byte, rb int, xq []int8, xd, xs []float32, xc []int32)"
)

// static is off bytes into the file's static table name (name<>+off(SB)).
func static(name string, off int) Mem {
	return NewDataAddr(NewStaticSymbol(name), off)
}

// row is the address of token t's row, disp(base) for token 0: the
// multi-token kernels keep the row stride in s1 and three times it in s3,
// so that tokens 1..3 are (base)(s1*1), (base)(s1*2) and (base)(s3*1).
func row(base Register, disp, t int, s1, s3 Register) Mem {
	switch t {
	case 0:
		return mem(base, disp)
	case 1:
		return memx(base, disp, s1, 1)
	case 2:
		return memx(base, disp, s1, 2)
	}
	return memx(base, disp, s3, 1)
}

// xqRow, xdRow and xsRow are token t's activation bytes, block scales and
// block sums (the layout of xnSetup; tokens 4..7 are those of an
// eight-token kernel).
func xqRow(disp, t int) Mem {
	if t >= 4 {
		return row(R13, disp, t-4, R9, R10)
	}
	return row(RDI, disp, t, R9, R10)
}

func xdRow(disp, t int) Mem {
	if t >= 4 {
		return row(R8, disp, t-4, R11, R12)
	}
	return row(RDX, disp, t, R11, R12)
}

func xsRow(t int) Mem { return row(R8, 0, t, R11, R12) }

// x1Setup loads the arguments of a one-token quantized kernel: SI the
// weights, DI the activations, DX their block scales and CX the number of
// blocks.
func (a *asm) x1Setup() {
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("xd_base"), RDX)
	a.MOVQ(a.arg("xd_len"), RCX)
}

// kLoop starts the loop over the CX 256-value blocks of a K-quant kernel
// (none: to done).
func (a *asm) kLoop() {
	a.jzero(RCX, "done")
	a.Label("loop")
}

// kNext ends kLoop's loop: it steps the pointers past a block (bsz bytes
// of weights, 256 activations, their eight scales and, with xs, their
// eight sums), loops while CX blocks are left and places done.
func (a *asm) kNext(bsz int, xs bool) {
	a.ADDQ(U32(uint32(bsz)), RSI)
	a.ADDQ(U32(256), RDI)
	a.ADDQ(U8(32), RDX)
	if xs {
		a.ADDQ(U8(32), R8)
	}
	a.DECQ(RCX)
	a.JNZ(lbl("loop"))
	a.Label("done")
}

// q6kScales sets every lane of the ymm or zmm register d to the f16 scale
// d of the Q6_K block at SI and s (two ymm registers or one zmm register)
// to the sixteen sub-block scales sc·d. Uses AX.
func (a *asm) q6kScales(d VecPhysical, s ...VecPhysical) {
	a.MOVWLZX(mem(RSI, 208), EAX)
	a.VMOVD(EAX, d.AsX())
	a.VCVTPH2PS(d.AsX(), d.AsX())
	a.VBROADCASTSS(d.AsX(), d)
	for i, v := range s {
		a.VPMOVSXBD(mem(RSI, 192+8*i), v)
	}
	for _, v := range s {
		a.VCVTDQ2PS(v, v)
	}
	for _, v := range s {
		a.VMULPS(d, v, v)
	}
}

// x4Setup loads the arguments of a four-token quantized kernel: SI the
// weights; DI four rows of activations, R9 their stride and R10 three times
// it; DX four rows of block scales, CX blocks per row, R11 the scales'
// stride (bytes) and R12 three times it; and, with xs, R8 the block sums.
func (a *asm) x4Setup(xs bool) { a.xnSetup(4, xs) }

// xnSetup is x4Setup for n (4 or 8) tokens: with 8, tokens 4..7 are four
// rows further on, their activations at R13 and their scales at R8.
func (a *asm) xnSetup(n int, xs bool) {
	sh := U8(2)
	if n == 8 {
		sh = 3
	}
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("xq_base"), RDI)
	a.MOVQ(a.arg("xq_len"), R9)
	a.SHRQ(sh, R9)
	a.LEAQ(memx(R9, 0, R9, 2), R10)
	if n == 8 {
		a.LEAQ(memx(RDI, 0, R9, 4), R13)
	}
	a.MOVQ(a.arg("xd_base"), RDX)
	a.MOVQ(a.arg("xd_len"), RCX)
	a.SHRQ(sh, RCX)
	a.MOVQ(RCX, R11)
	a.SHLQ(U8(2), R11)
	a.LEAQ(memx(R11, 0, R11, 2), R12)
	if n == 8 {
		a.LEAQ(memx(RDX, 0, R11, 4), R8)
	}
	if xs {
		a.MOVQ(a.arg("xs_base"), R8)
	}
}

// Loops: a count register cnt counts what is left to do, and exit is the
// label of the code after the loop, which the caller places.

// whileN is the loop label: while cnt >= n (unsigned), body and cnt -= n
// (ifN); then it goes on at exit.
func (a *asm) whileN(label string, cnt Register, n int, exit string, body func()) {
	a.Label(label)
	a.ifN(cnt, n, exit, body)
	a.JMP(lbl(label))
}

// ifN is body and cnt -= n if cnt >= n (unsigned), else a jump to exit.
func (a *asm) ifN(cnt Register, n int, exit string, body func()) {
	a.CMPQ(cnt, U8(n))
	a.JB(lbl(exit))
	body()
	a.SUBQ(U8(n), cnt)
}

// whileNZ is the loop label: while cnt != 0, body and cnt--; then it goes
// on at exit.
func (a *asm) whileNZ(label string, cnt Register, exit string, body func()) {
	a.Label(label)
	a.jzero(cnt, exit)
	body()
	a.DECQ(cnt)
	a.JMP(lbl(label))
}

// jzero jumps to label if cnt is 0.
func (a *asm) jzero(cnt Register, label string) {
	a.TESTQ(cnt, cnt)
	a.JZ(lbl(label))
}

// tailMask sets the mask register k to the low CX lanes (CX < 16). Uses AX.
func (a *asm) tailMask(k Register) {
	a.MOVL(U32(1), EAX)
	a.SHLL(CL, EAX)
	a.DECL(EAX)
	a.KMOVW(EAX, k)
}

// zero clears the vector registers v with VXORPS (VEX).
func (a *asm) zero(v ...VecPhysical) {
	for _, r := range v {
		a.VXORPS(r, r, r)
	}
}

// zeroD clears the vector registers v with VPXORD (EVEX).
func (a *asm) zeroD(v ...VecPhysical) {
	for _, r := range v {
		a.VPXORD(r, r, r)
	}
}

// hsum4v leaves in the low xmm half of y0 the horizontal sums of the ymm
// registers y0..y3 (clobbered), one per lane; t is a scratch xmm register.
func (a *asm) hsum4v(y0, y1, y2, y3 VecPhysical, t Register) {
	a.VHADDPS(y1, y0, y0)
	a.VHADDPS(y3, y2, y2)
	a.VHADDPS(y2, y0, y0)
	a.VEXTRACTF128(U8(1), y0, t)
	a.VADDPS(t, y0.AsX(), y0.AsX())
}

// hsum4 stores the horizontal sums of the ymm registers y0..y3 (clobbered)
// at off(res), as hsum4v adds them. Uses X13 and AX.
func (a *asm) hsum4(y0, y1, y2, y3 VecPhysical, off int) {
	a.hsum4v(y0, y1, y2, y3, X13)
	a.MOVQ(a.arg("res"), RAX)
	a.VMOVUPS(y0.AsX(), mem(RAX, off))
}

// hsumps leaves the sum of the eight floats of the ymm register y
// (clobbered) in the low lane of its xmm half; t is a scratch xmm
// register. It adds in hsum4's order, ((y0+y1)+(y2+y3))+((y4+y5)+(y6+y7)),
// so that one-token and four-token kernels agree to the bit.
func (a *asm) hsumps(y VecPhysical, t Register) {
	a.VHADDPS(y, y, y)
	a.VHADDPS(y, y, y)
	a.VEXTRACTF128(U8(1), y, t)
	a.VADDPS(t, y.AsX(), y.AsX())
}

// retSums ends a dot kernel of one or four tokens: it returns the sum of
// the eight floats of y[0] (hsumps, with the scratch xmm register t), or
// stores those of y[0..3] at res (hsum4; t is unused).
func (a *asm) retSums(y []VecPhysical, t Register) {
	if len(y) == 4 {
		a.hsum4(y[0], y[1], y[2], y[3], 0)
	} else {
		a.hsumps(y[0], t)
		a.VMOVSS(y[0].AsX(), a.ret(""))
	}
	a.VZEROUPPER()
	a.RET()
}

// q4kScales unpacks the 6-bit scales of the Q4_K block at SI into the low
// eight bytes of the xmm register sx and its mins into mx (llama.cpp's
// kmask1..3 shuffle). Uses AX and BX.
func (a *asm) q4kScales(sx, mx Register) {
	for i, x := range []Register{sx, mx} {
		lo, hi := 4+4*i, 12
		a.MOVL(mem(RSI, lo), EAX)
		a.ANDL(U32(0x3f3f3f3f), EAX)
		a.VMOVD(EAX, x)
		a.MOVL(mem(RSI, lo), EAX)
		a.SHRL(U8(6), EAX)
		a.ANDL(U32(0x03030303), EAX)
		a.SHLL(U8(4), EAX)
		a.MOVL(mem(RSI, hi), EBX)
		if i == 1 {
			a.SHRL(U8(4), EBX)
		}
		a.ANDL(U32(0x0f0f0f0f), EBX)
		a.ORL(EBX, EAX)
		a.VPINSRD(U8(1), EAX, x, x)
	}
}

// floatFmt is a float weight format's loads: es bytes a value; load
// converts the values at m that fill the ymm or zmm register v (8 or 16);
// masked converts the K1 lanes of the 16 at m into the zmm register z,
// zeroing the others (the AVX-512 tails); one converts the value at (SI)
// into the xmm register x (the AVX2 kernels' tails).
type floatFmt struct {
	name, sig1 string
	es         int
	load       func(a *asm, m Mem, v VecPhysical)
	masked     func(a *asm, m Mem, z VecPhysical)
	one        func(a *asm, x VecPhysical)
}

// floatText starts the float dot of n (1 or 4) tokens with a row of f at
// the given level: kernDotF16AVX2, kernDotF16x4AVX2...
func (a *asm) floatText(n int, f floatFmt, level string) {
	if n == 1 {
		a.text("kernDot"+f.name+level, 0, f.sig1)
	} else {
		a.text("kernDot"+f.name+"x4"+level, 0, sigDotFx4)
	}
}

// fxArgs loads the arguments of the float dot of n tokens with a row of f:
// SI the row, CX its number of values, DI the activations and, for four
// tokens, their stride (strideArg).
func (a *asm) fxArgs(n int, f floatFmt) {
	a.MOVQ(a.arg("w_base"), RSI)
	a.MOVQ(a.arg("w_len"), RCX)
	a.SHRQ(f.countShift(n), RCX)
	a.MOVQ(a.arg("x_base"), RDI)
	if n == 4 {
		a.strideArg()
	}
}

// strideArg sets R9 to the argument stride (floats) in bytes and R10 to
// three times it: x4's rows of activations.
func (a *asm) strideArg() {
	a.MOVQ(a.arg("stride"), R9)
	a.SHLQ(U8(2), R9)
	a.LEAQ(memx(R9, 0, R9, 2), R10)
}

// fxSteps is the float dot's loop over the 2·lanes values (lanes: 8 in
// ymm, 16 in zmm registers) at SI while CX has as many, the first lanes
// (in v0) into acc and the others (v1) into hi; then, after mid, one step
// of lanes values into acc if CX has as many; then it goes on at tail.
func (a *asm) fxSteps(f floatFmt, lanes int, v0, v1 VecPhysical, acc, hi []VecPhysical, mid func()) {
	vb := 4 * lanes // bytes of lanes activations
	two, one := fmt.Sprintf("loop%d", 2*lanes), fmt.Sprintf("loop%d", lanes)
	a.whileN(two, RCX, 2*lanes, one, func() {
		f.wide(a, 0, v0)
		f.wide(a, 2*lanes, v1)
		for t, v := range acc {
			a.VFMADD231PS(xqRow(0, t), v0, v)
		}
		for t, v := range hi {
			a.VFMADD231PS(xqRow(vb, t), v1, v)
		}
		a.ADDQ(U8(2*lanes*f.es), RSI)
		a.ADDQ(U8(2*vb), RDI)
	})

	a.Label(one)
	mid()
	a.ifN(RCX, lanes, "tail", func() {
		f.wide(a, 0, v0)
		for t, v := range acc {
			a.VFMADD231PS(xqRow(0, t), v0, v)
		}
		a.ADDQ(U8(lanes*f.es), RSI)
		a.ADDQ(U8(vb), RDI)
	})
}

// countShift is the right shift that turns w_len into the number of
// values of the row w of an n-token float dot: 0 where w is a []float32
// (the one-token F32 dots), log2(es) where it is a []byte.
func (f floatFmt) countShift(n int) U8 {
	switch {
	case n == 1 && f.es == 4:
		return 0
	case f.es == 4:
		return 2
	}
	return 1
}

// wide loads the values off·es/2 bytes past SI into v: off counts 2-byte
// units, doubled for F32.
func (f floatFmt) wide(a *asm, off int, v VecPhysical) {
	f.load(a, mem(RSI, off*f.es/2), v)
}

var (
	f32Fmt = floatFmt{"F32", sigDotF32, 4,
		func(a *asm, m Mem, v VecPhysical) { a.VMOVUPS(m, v) },
		func(a *asm, m Mem, z VecPhysical) { a.VMOVUPS_Z(m, K1, z) },
		func(a *asm, x VecPhysical) { a.VMOVSS(mem(RSI, 0), x) },
	}
	f16Fmt = floatFmt{"F16", sigDotF, 2,
		func(a *asm, m Mem, v VecPhysical) { a.VCVTPH2PS(m, v) },
		func(a *asm, m Mem, z VecPhysical) {
			a.VMOVDQU16_Z(m, K1, z.AsY())
			a.VCVTPH2PS(z.AsY(), z)
		},
		func(a *asm, x VecPhysical) {
			a.MOVWLZX(mem(RSI, 0), EAX)
			a.VMOVD(EAX, x)
			a.VCVTPH2PS(x, x)
		},
	}
	bf16Fmt = floatFmt{"BF16", sigDotF, 2,
		func(a *asm, m Mem, v VecPhysical) {
			a.VPMOVZXWD(m, v)
			a.VPSLLD(U8(16), v, v)
		},
		func(a *asm, m Mem, z VecPhysical) {
			a.VMOVDQU16_Z(m, K1, z.AsY())
			a.VPMOVZXWD(z.AsY(), z)
			a.VPSLLD(U8(16), z, z)
		},
		func(a *asm, x VecPhysical) {
			a.MOVWLZX(mem(RSI, 0), EAX)
			a.SHLL(U8(16), EAX)
			a.VMOVD(EAX, x)
		},
	}
	floatFmts = []floatFmt{f32Fmt, f16Fmt, bf16Fmt}
)
