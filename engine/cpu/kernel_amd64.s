//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (with FMA and F16C) kernels; see kernel_amd64.go for the Go
// declarations and kernel_go.go for the portable kernels they must agree
// with. Quantized dots use the sign trick for signed x signed bytes:
// |w| (unsigned) times x·sign(w) (signed) in VPMADDUBSW, whose pair sums
// stay below 2·128·127 < 2^15, then VPMADDWD by ones to int32 lanes, which
// are converted to float32 and scaled per block by d_w·d_x.

// Byte j of a Q5_0 block's 32 high bits: broadcast qh, take byte j/8 ...
DATA kernQ5Shuf<>+0(SB)/8, $0x0000000000000000
DATA kernQ5Shuf<>+8(SB)/8, $0x0101010101010101
DATA kernQ5Shuf<>+16(SB)/8, $0x0202020202020202
DATA kernQ5Shuf<>+24(SB)/8, $0x0303030303030303
GLOBL kernQ5Shuf<>(SB), RODATA|NOPTR, $32

// ... set every bit but bit j%8, and compare with all ones.
DATA kernQ5Bits<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA kernQ5Bits<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA kernQ5Bits<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA kernQ5Bits<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL kernQ5Bits<>(SB), RODATA|NOPTR, $32

// Byte constants for operands that the four-token kernels, short of
// registers, take from memory.
DATA kernBytes30<>+0(SB)/8, $0x3030303030303030
DATA kernBytes30<>+8(SB)/8, $0x3030303030303030
DATA kernBytes30<>+16(SB)/8, $0x3030303030303030
DATA kernBytes30<>+24(SB)/8, $0x3030303030303030
GLOBL kernBytes30<>(SB), RODATA|NOPTR, $32
DATA kernBytesF0<>+0(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA kernBytesF0<>+8(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA kernBytesF0<>+16(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA kernBytesF0<>+24(SB)/8, $0xf0f0f0f0f0f0f0f0
GLOBL kernBytesF0<>(SB), RODATA|NOPTR, $32
DATA kernBytesFF<>+0(SB)/8, $0xffffffffffffffff
DATA kernBytesFF<>+8(SB)/8, $0xffffffffffffffff
DATA kernBytesFF<>+16(SB)/8, $0xffffffffffffffff
DATA kernBytesFF<>+24(SB)/8, $0xffffffffffffffff
GLOBL kernBytesFF<>(SB), RODATA|NOPTR, $32

// VPERMD order that undoes the lane interleaving of VPACKSSDW+VPACKSSWB.
DATA kernPackPerm<>+0(SB)/8, $0x0000000400000000
DATA kernPackPerm<>+8(SB)/8, $0x0000000500000001
DATA kernPackPerm<>+16(SB)/8, $0x0000000600000002
DATA kernPackPerm<>+24(SB)/8, $0x0000000700000003
GLOBL kernPackPerm<>(SB), RODATA|NOPTR, $32

// VPERMPS orders that repeat each of four floats twice: the activation
// scale of each 32-value block for its two 16-value Q6_K sub-blocks.
DATA kernQ6Dup0<>+0(SB)/8, $0x0000000000000000
DATA kernQ6Dup0<>+8(SB)/8, $0x0000000100000001
DATA kernQ6Dup0<>+16(SB)/8, $0x0000000200000002
DATA kernQ6Dup0<>+24(SB)/8, $0x0000000300000003
GLOBL kernQ6Dup0<>(SB), RODATA|NOPTR, $32
DATA kernQ6Dup1<>+0(SB)/8, $0x0000000400000004
DATA kernQ6Dup1<>+8(SB)/8, $0x0000000500000005
DATA kernQ6Dup1<>+16(SB)/8, $0x0000000600000006
DATA kernQ6Dup1<>+24(SB)/8, $0x0000000700000007
GLOBL kernQ6Dup1<>(SB), RODATA|NOPTR, $32

// The four-token kernels read each weight block once and dot it with the
// same block of four activation rows: xq holds four rows of cols values,
// xd and xs four rows of cols/32 floats. The row strides are kept in
// R9 (xq, bytes), R10 (3·R9), R11 (xd and xs, bytes) and R12 (3·R11).

// X4SETUP loads the four-row pointers and strides, and CX = blocks per row.
#define X4SETUP \
	MOVQ w_base+8(FP), SI; \
	MOVQ xq_base+32(FP), DI; \
	MOVQ xq_len+40(FP), R9; \
	SHRQ $2, R9; \
	LEAQ (R9)(R9*2), R10; \
	MOVQ xd_base+56(FP), DX; \
	MOVQ xd_len+64(FP), CX; \
	SHRQ $2, CX; \
	MOVQ CX, R11; \
	SHLQ $2, R11; \
	LEAQ (R11)(R11*2), R12; \
	MOVQ xs_base+80(FP), R8

// HSUM4 stores the horizontal sums of a, b, c and d (clobbered) at res
// (ax is a's lower half). Uses X13 and AX.
#define HSUM4(a, ax, b, c, d) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF128 $1, a, X13; \
	VADDPS X13, ax, ax; \
	MOVQ res+0(FP), AX; \
	VMOVUPS ax, (AX)

// Weight loaders for FX4: W8xx converts 8 values at off(SI) into the ymm
// register y; W1xx converts the one value at (SI) into the xmm register x.
#define W8F32(off, y) VMOVUPS off*2(SI), y
#define W1F32(x) VMOVSS (SI), x
#define W8F16(off, y) VCVTPH2PS off(SI), y
#define W1F16(x) \
	MOVWLZX   (SI), AX; \
	VMOVD     AX, x; \
	VCVTPH2PS x, x
#define W8BF16(off, y) \
	VPMOVZXWD off(SI), y; \
	VPSLLD    $16, y, y
#define W1BF16(x) \
	MOVWLZX (SI), AX; \
	SHLL    $16, AX; \
	VMOVD   AX, x

// FX4 is the body of func(res *[4]float32, w []byte, x []float32, stride
// int): w holds the values of one weight row as es-byte elements (es = 2,
// or 4 with W8F32, whose offsets are doubled; sh = log2 es), x four rows
// stride floats apart. Accumulators Y8..Y11 and Y4..Y7.
#define FX4(w8, w1, es, sh) \
	MOVQ w_base+8(FP), SI; \
	MOVQ w_len+16(FP), CX; \
	SHRQ $sh, CX; \
	MOVQ x_base+32(FP), DI; \
	MOVQ stride+56(FP), R9; \
	SHLQ $2, R9; \
	LEAQ (R9)(R9*2), R10; \
	ZERO4; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
loop16:; \
	CMPQ CX, $16; \
	JB   loop8; \
	w8(0, Y0); \
	w8(16, Y1); \
	VFMADD231PS (DI), Y0, Y8; \
	VFMADD231PS (DI)(R9*1), Y0, Y9; \
	VFMADD231PS (DI)(R9*2), Y0, Y10; \
	VFMADD231PS (DI)(R10*1), Y0, Y11; \
	VFMADD231PS 32(DI), Y1, Y4; \
	VFMADD231PS 32(DI)(R9*1), Y1, Y5; \
	VFMADD231PS 32(DI)(R9*2), Y1, Y6; \
	VFMADD231PS 32(DI)(R10*1), Y1, Y7; \
	ADDQ $(16*es), SI; \
	ADDQ $64, DI; \
	SUBQ $16, CX; \
	JMP  loop16; \
loop8:; \
	VADDPS Y4, Y8, Y8; \
	VADDPS Y5, Y9, Y9; \
	VADDPS Y6, Y10, Y10; \
	VADDPS Y7, Y11, Y11; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	CMPQ CX, $8; \
	JB   tail; \
	w8(0, Y0); \
	VFMADD231PS (DI), Y0, Y8; \
	VFMADD231PS (DI)(R9*1), Y0, Y9; \
	VFMADD231PS (DI)(R9*2), Y0, Y10; \
	VFMADD231PS (DI)(R10*1), Y0, Y11; \
	ADDQ $(8*es), SI; \
	ADDQ $32, DI; \
	SUBQ $8, CX; \
tail:; \
	TESTQ CX, CX; \
	JZ   done; \
	w1(X0); \
	VMOVSS (DI), X1; \
	VFMADD231SS X1, X0, X4; \
	VMOVSS (DI)(R9*1), X1; \
	VFMADD231SS X1, X0, X5; \
	VMOVSS (DI)(R9*2), X1; \
	VFMADD231SS X1, X0, X6; \
	VMOVSS (DI)(R10*1), X1; \
	VFMADD231SS X1, X0, X7; \
	ADDQ $es, SI; \
	ADDQ $4, DI; \
	DECQ CX; \
	JMP  tail; \
done:; \
	VADDPS Y4, Y8, Y8; \
	VADDPS Y5, Y9, Y9; \
	VADDPS Y6, Y10, Y10; \
	VADDPS Y7, Y11, Y11; \
	HSUM4(Y8, X8, Y9, Y10, Y11); \
	VZEROUPPER; \
	RET

// FX1 is FX4 for one token: func(w, x) float32 with w as es-byte values
// (w_len >> sh of them), adding in exactly FX4's order.
#define FX1(w8, w1, es, sh) \
	MOVQ w_base+0(FP), SI; \
	MOVQ w_len+8(FP), CX; \
	SHRQ $sh, CX; \
	MOVQ x_base+24(FP), DI; \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y4, Y4, Y4; \
loop16:; \
	CMPQ CX, $16; \
	JB   loop8; \
	w8(0, Y0); \
	w8(16, Y1); \
	VFMADD231PS (DI), Y0, Y8; \
	VFMADD231PS 32(DI), Y1, Y4; \
	ADDQ $(16*es), SI; \
	ADDQ $64, DI; \
	SUBQ $16, CX; \
	JMP  loop16; \
loop8:; \
	VADDPS Y4, Y8, Y8; \
	VXORPS Y4, Y4, Y4; \
	CMPQ CX, $8; \
	JB   tail; \
	w8(0, Y0); \
	VFMADD231PS (DI), Y0, Y8; \
	ADDQ $(8*es), SI; \
	ADDQ $32, DI; \
	SUBQ $8, CX; \
tail:; \
	TESTQ CX, CX; \
	JZ   done; \
	w1(X0); \
	VMOVSS (DI), X1; \
	VFMADD231SS X1, X0, X4; \
	ADDQ $es, SI; \
	ADDQ $4, DI; \
	DECQ CX; \
	JMP  tail; \
done:; \
	VADDPS Y4, Y8, Y8; \
	HSUMPS(Y8, X8, X0); \
	VMOVSS X8, ret+48(FP); \
	VZEROUPPER; \
	RET

// HSUMPS leaves the sum of the eight floats of y (clobbered) in the low
// lane of x (y's lower half); t is a scratch xmm register. It adds in the
// order HSUM4 does, ((y0+y1)+(y2+y3))+((y4+y5)+(y6+y7)), so that one-token
// and four-token kernels agree to the bit.
#define HSUMPS(y, x, t) \
	VHADDPS      y, y, y; \
	VHADDPS      y, y, y; \
	VEXTRACTF128 $1, y, t; \
	VADDPS       t, x, x

// BCASTB broadcasts the byte constant c to every byte of y (x: y's lower half).
#define BCASTB(c, x, y) \
	MOVL         c, AX; \
	VMOVD        AX, x; \
	VPBROADCASTB x, y

// ONES16 sets every int16 of y to 1.
#define ONES16(y) \
	VPCMPEQW y, y, y; \
	VPSRLW   $15, y, y

// func kernCPUID(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·kernCPUID(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func kernQuantizeAVX2(xq []int8, xd, xs []float32, x []float32)
TEXT ·kernQuantizeAVX2(SB), NOSPLIT, $0-96
	MOVQ xq_base+0(FP), DI
	MOVQ xd_base+24(FP), DX
	MOVQ xd_len+32(FP), CX
	MOVQ xs_base+48(FP), R8
	MOVQ x_base+72(FP), SI
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // |x| mask
	MOVL $0x42fe0000, AX  // 127
	VMOVD AX, X14
	MOVL $0x0da24260, AX  // kernMinAmax, 1e-30
	VMOVD AX, X13
	VMOVDQU kernPackPerm<>(SB), Y12
	TESTQ CX, CX
	JZ   qdone

qloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS  Y15, Y0, Y4
	VANDPS  Y15, Y1, Y5
	VMAXPS  Y5, Y4, Y4
	VANDPS  Y15, Y2, Y5
	VANDPS  Y15, Y3, Y6
	VMAXPS  Y6, Y5, Y5
	VMAXPS  Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS  X5, X4, X4
	VPERMILPS $0x4E, X4, X5
	VMAXPS  X5, X4, X4
	VPERMILPS $0xB1, X4, X5
	VMAXPS  X5, X4, X4     // amax in every lane
	VDIVSS  X14, X4, X6    // d = amax/127
	VDIVSS  X4, X14, X7    // id = 127/amax ...
	VCMPSS  $0x0D, X13, X4, X8
	VANDPS  X8, X7, X7     // ... or 0 unless amax >= kernMinAmax
	VBROADCASTSS X7, Y7
	VMULPS  Y7, Y0, Y0
	VMULPS  Y7, Y1, Y1
	VMULPS  Y7, Y2, Y2
	VMULPS  Y7, Y3, Y3
	VCVTPS2DQ Y0, Y0       // round half to even
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPADDD  Y1, Y0, Y8
	VPADDD  Y3, Y2, Y9
	VPADDD  Y9, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDD  X9, X8, X8
	VPSHUFD $0x4E, X8, X9
	VPADDD  X9, X8, X8
	VPSHUFD $0xB1, X8, X9
	VPADDD  X9, X8, X8
	VCVTDQ2PS X8, X8
	VMULSS  X6, X8, X8     // xs = d·Σq
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD  Y0, Y12, Y0
	VMOVDQU Y0, (DI)
	VMOVSS  X6, (DX)
	VMOVSS  X8, (R8)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R8
	DECQ CX
	JNZ  qloop

qdone:
	VZEROUPPER
	RET

// The one-token float dots: FX1 with the loaders of kernel_amd64.s's FX4.

// func kernDotF32AVX2(w, x []float32) float32
TEXT ·kernDotF32AVX2(SB), NOSPLIT, $0-52
	FX1(W8F32, W1F32, 4, 0)

// func kernDotF16AVX2(w []byte, x []float32) float32
TEXT ·kernDotF16AVX2(SB), NOSPLIT, $0-52
	FX1(W8F16, W1F16, 2, 1)

// func kernDotBF16AVX2(w []byte, x []float32) float32
TEXT ·kernDotBF16AVX2(SB), NOSPLIT, $0-52
	FX1(W8BF16, W1BF16, 2, 1)

// func kernF16ToF32AVX2(dst []float32, w []byte)
TEXT ·kernF16ToF32AVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ w_base+24(FP), SI

cf16loop8:
	CMPQ CX, $8
	JB   cf16tail
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  cf16loop8

cf16tail:
	TESTQ CX, CX
	JZ   cf16done
	MOVWLZX (SI), AX
	VMOVD AX, X0
	VCVTPH2PS X0, X0
	VMOVSS X0, (DI)
	ADDQ $2, SI
	ADDQ $4, DI
	DECQ CX
	JMP  cf16tail

cf16done:
	VZEROUPPER
	RET

// func kernBF16ToF32AVX2(dst []float32, w []byte)
TEXT ·kernBF16ToF32AVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ w_base+24(FP), SI

cbf16loop8:
	CMPQ CX, $8
	JB   cbf16tail
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  cbf16loop8

cbf16tail:
	TESTQ CX, CX
	JZ   cbf16done
	MOVWLZX (SI), AX
	SHLL $16, AX
	MOVL AX, (DI)
	ADDQ $2, SI
	ADDQ $4, DI
	DECQ CX
	JMP  cbf16tail

cbf16done:
	VZEROUPPER
	RET

// DOTSIGNED adds to acc the int8 dot product of w (signed bytes, clobbered)
// and the activation block at x, scaled by the float in every lane of s.
// Uses Y15 (int16 ones) and t.
#define DOTSIGNED(w, x, s, t, acc) \
	VMOVDQU    x, t; \
	VPSIGNB    w, t, t; \
	VPABSB     w, w; \
	VPMADDUBSW t, w, w; \
	VPMADDWD   Y15, w, w; \
	VCVTDQ2PS  w, w; \
	VFMADD231PS s, w, acc

// BLOCKSCALE sets every lane of y (x: its lower half) to the f16 weight
// scale at w times the float activation scale at d.
#define BLOCKSCALE(w, d, x, y) \
	VCVTPH2PS    w, x; \
	VMULSS       d, x, x; \
	VBROADCASTSS x, y

// func kernDotQ8_0AVX2(w []byte, xq []int8, xd, xs []float32) float32
TEXT ·kernDotQ8_0AVX2(SB), NOSPLIT, $0-100
	MOVQ w_base+0(FP), SI
	MOVQ xq_base+24(FP), DI
	MOVQ xd_base+48(FP), DX
	MOVQ xd_len+56(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	ONES16(Y15)

q8loop2:
	CMPQ CX, $2
	JB   q8tail
	BLOCKSCALE((SI), (DX), X2, Y2)
	BLOCKSCALE(34(SI), 4(DX), X3, Y3)
	VMOVDQU 2(SI), Y4
	VMOVDQU 36(SI), Y5
	DOTSIGNED(Y4, (DI), Y2, Y6, Y0)
	DOTSIGNED(Y5, 32(DI), Y3, Y7, Y1)
	ADDQ $68, SI
	ADDQ $64, DI
	ADDQ $8, DX
	SUBQ $2, CX
	JMP  q8loop2

q8tail:
	TESTQ CX, CX
	JZ   q8done
	BLOCKSCALE((SI), (DX), X2, Y2)
	VMOVDQU 2(SI), Y4
	DOTSIGNED(Y4, (DI), Y2, Y6, Y0)

q8done:
	VADDPS Y1, Y0, Y0
	HSUMPS(Y0, X0, X1)
	VMOVSS X0, ret+96(FP)
	VZEROUPPER
	RET

// Q4_0VALS sets w to the 32 values q-8 of the Q4_0 block at off(SI): low
// nibbles then high nibbles. Uses Y14 (0x0F bytes) and Y13 (8s).
#define Q4_0VALS(off, w, wx, t) \
	VMOVDQU    off+2(SI), wx; \
	VPSRLW     $4, wx, t; \
	VINSERTI128 $1, t, w, w; \
	VPAND      Y14, w, w; \
	VPSUBB     Y13, w, w

// func kernDotQ4_0AVX2(w []byte, xq []int8, xd, xs []float32) float32
TEXT ·kernDotQ4_0AVX2(SB), NOSPLIT, $0-100
	MOVQ w_base+0(FP), SI
	MOVQ xq_base+24(FP), DI
	MOVQ xd_base+48(FP), DX
	MOVQ xd_len+56(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	BCASTB($0x08, X13, Y13)

q4loop2:
	CMPQ CX, $2
	JB   q4tail
	BLOCKSCALE((SI), (DX), X2, Y2)
	BLOCKSCALE(18(SI), 4(DX), X3, Y3)
	Q4_0VALS(0, Y4, X4, X8)
	Q4_0VALS(18, Y5, X5, X9)
	DOTSIGNED(Y4, (DI), Y2, Y6, Y0)
	DOTSIGNED(Y5, 32(DI), Y3, Y7, Y1)
	ADDQ $36, SI
	ADDQ $64, DI
	ADDQ $8, DX
	SUBQ $2, CX
	JMP  q4loop2

q4tail:
	TESTQ CX, CX
	JZ   q4done
	BLOCKSCALE((SI), (DX), X2, Y2)
	Q4_0VALS(0, Y4, X4, X8)
	DOTSIGNED(Y4, (DI), Y2, Y6, Y0)

q4done:
	VADDPS Y1, Y0, Y0
	HSUMPS(Y0, X0, X1)
	VMOVSS X0, ret+96(FP)
	VZEROUPPER
	RET

// Q5_0VALS sets w to the 32 signed values of the Q5_0 block at off(SI):
// (nibble | fifth bit<<4) - 16, computed as nibble | 0xF0 where the fifth
// bit is clear. Uses Y14 (0x0F), Y13 (kernQ5Shuf), Y12 (kernQ5Bits), Y11
// (all ones), Y10 (0xF0).
#define Q5_0VALS(off, w, wx, t, h) \
	VPBROADCASTD off+2(SI), h; \
	VPSHUFB    Y13, h, h; \
	VPOR       Y12, h, h; \
	VPCMPEQB   Y11, h, h; \
	VPANDN     Y10, h, h; \
	VMOVDQU    off+6(SI), wx; \
	VPSRLW     $4, wx, t; \
	VINSERTI128 $1, t, w, w; \
	VPAND      Y14, w, w; \
	VPOR       h, w, w

// func kernDotQ5_0AVX2(w []byte, xq []int8, xd, xs []float32) float32
TEXT ·kernDotQ5_0AVX2(SB), NOSPLIT, $0-100
	MOVQ w_base+0(FP), SI
	MOVQ xq_base+24(FP), DI
	MOVQ xd_base+48(FP), DX
	MOVQ xd_len+56(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	VMOVDQU kernQ5Shuf<>(SB), Y13
	VMOVDQU kernQ5Bits<>(SB), Y12
	VPCMPEQB Y11, Y11, Y11
	BCASTB($0xf0, X10, Y10)

q5loop2:
	CMPQ CX, $2
	JB   q5tail
	BLOCKSCALE((SI), (DX), X2, Y2)
	BLOCKSCALE(22(SI), 4(DX), X3, Y3)
	Q5_0VALS(0, Y4, X4, X8, Y9)
	DOTSIGNED(Y4, (DI), Y2, Y6, Y0)
	Q5_0VALS(22, Y5, X5, X8, Y9)
	DOTSIGNED(Y5, 32(DI), Y3, Y7, Y1)
	ADDQ $44, SI
	ADDQ $64, DI
	ADDQ $8, DX
	SUBQ $2, CX
	JMP  q5loop2

q5tail:
	TESTQ CX, CX
	JZ   q5done
	BLOCKSCALE((SI), (DX), X2, Y2)
	Q5_0VALS(0, Y4, X4, X8, Y9)
	DOTSIGNED(Y4, (DI), Y2, Y6, Y0)

q5done:
	VADDPS Y1, Y0, Y0
	HSUMPS(Y0, X0, X1)
	VMOVSS X0, ret+96(FP)
	VZEROUPPER
	RET

// Q4KSCALES unpacks the 6-bit scales of the Q4_K block at SI into the low
// eight bytes of sx and its mins into mx (llama.cpp's kmask1..3 shuffle).
// Uses AX and BX.
#define Q4KSCALES(sx, mx) \
	MOVL    4(SI), AX; \
	ANDL    $0x3f3f3f3f, AX; \
	VMOVD   AX, sx; \
	MOVL    4(SI), AX; \
	SHRL    $6, AX; \
	ANDL    $0x03030303, AX; \
	SHLL    $4, AX; \
	MOVL    12(SI), BX; \
	ANDL    $0x0f0f0f0f, BX; \
	ORL     BX, AX; \
	VPINSRD $1, AX, sx, sx; \
	MOVL    8(SI), AX; \
	ANDL    $0x3f3f3f3f, AX; \
	VMOVD   AX, mx; \
	MOVL    8(SI), AX; \
	SHRL    $6, AX; \
	ANDL    $0x03030303, AX; \
	SHLL    $4, AX; \
	MOVL    12(SI), BX; \
	SHRL    $4, BX; \
	ANDL    $0x0f0f0f0f, BX; \
	ORL     BX, AX; \
	VPINSRD $1, AX, mx, mx

// Q4KHEAD decodes the header of the Q4_K block at SI: Y2 = sc_j·d and
// Y4 = m_j·dmin for its eight sub-blocks. Uses X5, Y3, AX, BX.
#define Q4KHEAD \
	VCVTPH2PS    (SI), X5; \
	Q4KSCALES(X2, X4); \
	VPMOVZXBD    X2, Y2; \
	VCVTDQ2PS    Y2, Y2; \
	VBROADCASTSS X5, Y3; \
	VMULPS       Y3, Y2, Y2; \
	VPMOVZXBD    X4, Y4; \
	VCVTDQ2PS    Y4, Y4; \
	VMOVSHDUP    X5, X5; \
	VBROADCASTSS X5, Y3; \
	VMULPS       Y3, Y4, Y4

// Q4KCHUNK dots 64-value chunk c of the Q4_K block at SI (32 bytes: low
// nibbles are sub-block 2c, high nibbles 2c+1) with two activation blocks,
// scaled by the per-block scales stored at 8c(SP). Uses Y15 (ones), Y14
// (0x0F).
#define Q4KCHUNK(c) \
	VMOVDQU    16+32*c(SI), Y8; \
	VPSRLW     $4, Y8, Y9; \
	VPAND      Y14, Y8, Y8; \
	VPAND      Y14, Y9, Y9; \
	VPMADDUBSW 64*c(DI), Y8, Y8; \
	VPMADDUBSW 64*c+32(DI), Y9, Y9; \
	VPMADDWD   Y15, Y8, Y8; \
	VPMADDWD   Y15, Y9, Y9; \
	VCVTDQ2PS  Y8, Y8; \
	VCVTDQ2PS  Y9, Y9; \
	VBROADCASTSS 8*c(SP), Y10; \
	VBROADCASTSS 8*c+4(SP), Y11; \
	VFMADD231PS Y10, Y8, Y0; \
	VFMADD231PS Y11, Y9, Y1

// func kernDotQ4_KAVX2(w []byte, xq []int8, xd, xs []float32) float32
//
// Per 256-value block: the eight 6-bit scales and mins are unpacked as
// llama.cpp does (kmask1..3); (d·sc_j)·xd_j go to the stack for the nibble
// dots (low nibbles into Y0, high into Y1), and (dmin·m_j)·xs_j is taken
// off Y0 first, exactly as the four-token kernel does.
TEXT ·kernDotQ4_KAVX2(SB), NOSPLIT, $32-100
	MOVQ w_base+0(FP), SI
	MOVQ xq_base+24(FP), DI
	MOVQ xd_base+48(FP), DX
	MOVQ xd_len+56(FP), CX
	SHRQ $3, CX
	MOVQ xs_base+72(FP), R8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	TESTQ CX, CX
	JZ   q4kdone

q4kloop:
	Q4KHEAD
	VMULPS  (DX), Y2, Y3
	VMOVUPS Y3, 0(SP)   // (d·sc_j)·xd_j
	VFNMADD231PS (R8), Y4, Y0 // -= (dmin·m_j)·xs_j
	Q4KCHUNK(0)
	Q4KCHUNK(1)
	Q4KCHUNK(2)
	Q4KCHUNK(3)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $32, DX
	ADDQ $32, R8
	DECQ CX
	JNZ  q4kloop

q4kdone:
	VADDPS Y1, Y0, Y0
	HSUMPS(Y0, X0, X1)
	VMOVSS X0, ret+96(FP)
	VZEROUPPER
	RET

// Q6KDOT dots the 32 6-bit values q (0..63, clobbered) with the activation
// block at xo(DI), subtracting 32·Σx, and adds to acc scaled by the two
// sub-block scales at so(SP) (first 16 values) and so+4(SP) (last 16).
// Uses Y15 (ones), Y12 (32s), Y7-Y9.
#define Q6KDOT(q, xo, so, acc) \
	VMOVDQU    xo(DI), Y7; \
	VPMADDUBSW Y7, q, q; \
	VPMADDUBSW Y7, Y12, Y8; \
	VPSUBW     Y8, q, q; \
	VPMADDWD   Y15, q, q; \
	VCVTDQ2PS  q, q; \
	VBROADCASTSS so(SP), X8; \
	VBROADCASTSS so+4(SP), Y9; \
	VBLENDPS   $0x0F, Y8, Y9, Y9; \
	VFMADD231PS Y9, q, acc

// Q6KHALF dots 128-value half h of the Q6_K block at SI: ql[64h:64h+64],
// qh[32h:32h+32], blocks 4h..4h+3. Uses Y14 (0x0F), Y13 (0x30), Y2-Y6.
#define Q6KHALF(h) \
	VMOVDQU 64*h(SI), Y2; \
	VMOVDQU 64*h+32(SI), Y3; \
	VMOVDQU 128+32*h(SI), Y4; \
	VPAND   Y14, Y2, Y5; \
	VPSLLW  $4, Y4, Y6; \
	VPAND   Y13, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6KDOT(Y5, 128*h, 32*h, Y0); \
	VPAND   Y14, Y3, Y5; \
	VPSLLW  $2, Y4, Y6; \
	VPAND   Y13, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6KDOT(Y5, 128*h+32, 32*h+8, Y1); \
	VPSRLW  $4, Y2, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPAND   Y13, Y4, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6KDOT(Y5, 128*h+64, 32*h+16, Y0); \
	VPSRLW  $4, Y3, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPSRLW  $2, Y4, Y6; \
	VPAND   Y13, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6KDOT(Y5, 128*h+96, 32*h+24, Y1)

// func kernDotQ6_KAVX2(w []byte, xq []int8, xd, xs []float32) float32
//
// Per 256-value block the sixteen (sc·d)·xd products (one per 16 values)
// are kept on the stack; blocks 0 and 2 of each half go into Y0, 1 and 3
// into Y1, as in the four-token kernel.
TEXT ·kernDotQ6_KAVX2(SB), NOSPLIT, $64-100
	MOVQ w_base+0(FP), SI
	MOVQ xq_base+24(FP), DI
	MOVQ xd_base+48(FP), DX
	MOVQ xd_len+56(FP), CX
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	BCASTB($0x30, X13, Y13)
	BCASTB($0x20, X12, Y12)
	VMOVDQU kernQ6Dup0<>(SB), Y11
	VMOVDQU kernQ6Dup1<>(SB), Y10
	TESTQ CX, CX
	JZ   q6kdone

q6kloop:
	MOVWLZX 208(SI), AX
	VMOVD AX, X2
	VCVTPH2PS X2, X2
	VBROADCASTSS X2, Y2    // d
	VPMOVSXBD 192(SI), Y3  // scales 0..7
	VPMOVSXBD 200(SI), Y4  // scales 8..15
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VMULPS Y2, Y3, Y3      // sc·d
	VMULPS Y2, Y4, Y4
	VPERMPS (DX), Y11, Y6  // xd, one per sub-block
	VPERMPS (DX), Y10, Y7
	VMULPS Y6, Y3, Y3      // (sc·d)·xd
	VMULPS Y7, Y4, Y4
	VMOVUPS Y3, 0(SP)
	VMOVUPS Y4, 32(SP)
	Q6KHALF(0)
	Q6KHALF(1)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  q6kloop

q6kdone:
	VADDPS Y1, Y0, Y0
	HSUMPS(Y0, X0, X1)
	VMOVSS X0, ret+96(FP)
	VZEROUPPER
	RET

// DOT4T adds to acc the dot product of one token's activation block at x
// with the signed weight values in Y2 (|w| in Y3), scaled by the weight
// scale in Y1 times the activation scale at d: the same operations as
// DOTSIGNED and BLOCKSCALE. Uses Y15 (ones), Y4, Y5.
#define DOT4T(x, d, acc) \
	VMOVDQU    x, Y4; \
	VPSIGNB    Y2, Y4, Y4; \
	VPMADDUBSW Y4, Y3, Y4; \
	VPMADDWD   Y15, Y4, Y4; \
	VCVTDQ2PS  Y4, Y4; \
	VBROADCASTSS d, Y5; \
	VMULPS     Y1, Y5, Y5; \
	VFMADD231PS Y5, Y4, acc

// DOT4 runs DOT4T for the four tokens, into a0..a3.
#define DOT4(a0, a1, a2, a3) \
	VPABSB Y2, Y3; \
	DOT4T((DI), (DX), a0); \
	DOT4T((DI)(R9*1), (DX)(R11*1), a1); \
	DOT4T((DI)(R9*2), (DX)(R11*2), a2); \
	DOT4T((DI)(R10*1), (DX)(R12*1), a3)

#define ZERO4 \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11

// NEXT1 steps the four-token pointers past one block of bsz bytes.
#define NEXT1(bsz) \
	ADDQ $bsz, SI; \
	ADDQ $32, DI; \
	ADDQ $4, DX

// QX4 is the loop of the four-token Q8_0, Q4_0 and Q5_0 kernels: vals
// loads one block's signed values into Y2 and its scale into Y1. As in the
// one-token kernels, even blocks go into Y8..Y11 and odd blocks into
// o0..o3, which are added to them at the end.
#define QX4(vals, bsz, o0, o1, o2, o3) \
loop2:; \
	CMPQ CX, $2; \
	JB   tail; \
	vals; \
	DOT4(Y8, Y9, Y10, Y11); \
	NEXT1(bsz); \
	vals; \
	DOT4(o0, o1, o2, o3); \
	NEXT1(bsz); \
	SUBQ $2, CX; \
	JMP  loop2; \
tail:; \
	TESTQ CX, CX; \
	JZ   done; \
	vals; \
	DOT4(Y8, Y9, Y10, Y11); \
done:; \
	VADDPS o0, Y8, Y8; \
	VADDPS o1, Y9, Y9; \
	VADDPS o2, Y10, Y10; \
	VADDPS o3, Y11, Y11; \
	HSUM4(Y8, X8, Y9, Y10, Y11); \
	VZEROUPPER; \
	RET

#define VALSQ8 \
	VCVTPH2PS    (SI), X1; \
	VBROADCASTSS X1, Y1; \
	VMOVDQU      2(SI), Y2

#define VALSQ4 \
	VCVTPH2PS    (SI), X1; \
	VBROADCASTSS X1, Y1; \
	Q4_0VALS(0, Y2, X2, X4)

// VALSQ5 is Q5_0VALS with its constants from memory. Uses Y4, Y5.
#define VALSQ5 \
	VCVTPH2PS    (SI), X1; \
	VBROADCASTSS X1, Y1; \
	VPBROADCASTD 2(SI), Y5; \
	VPSHUFB      kernQ5Shuf<>(SB), Y5, Y5; \
	VPOR         kernQ5Bits<>(SB), Y5, Y5; \
	VPCMPEQB     kernBytesFF<>(SB), Y5, Y5; \
	VPANDN       kernBytesF0<>(SB), Y5, Y5; \
	VMOVDQU      6(SI), X2; \
	VPSRLW       $4, X2, X4; \
	VINSERTI128  $1, X4, Y2, Y2; \
	VPAND        Y14, Y2, Y2; \
	VPOR         Y5, Y2, Y2

// func kernDotQ8_0x4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ8_0x4AVX2(SB), NOSPLIT, $0-104
	X4SETUP
	ZERO4
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	ONES16(Y15)
	QX4(VALSQ8, 34, Y6, Y7, Y12, Y13)

// func kernDotQ4_0x4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ4_0x4AVX2(SB), NOSPLIT, $0-104
	X4SETUP
	ZERO4
	VXORPS Y0, Y0, Y0
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y12, Y12, Y12
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	BCASTB($0x08, X13, Y13)
	QX4(VALSQ4, 18, Y0, Y6, Y7, Y12)

// func kernDotQ5_0x4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ5_0x4AVX2(SB), NOSPLIT, $0-104
	X4SETUP
	ZERO4
	VXORPS Y0, Y0, Y0
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y12, Y12, Y12
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	QX4(VALSQ5, 22, Y0, Y6, Y7, Y12)

// Q4KX4T dots chunk c's nibbles (low in Y12, high in Y13) with one token's
// two activation blocks at x and x+32, scaled by the floats at s(SP) and
// s+4(SP), into lo and hi: Q4KCHUNK's operations. Uses Y15 (ones), Y0..Y3.
#define Q4KX4T(x, s, lo, hi) \
	VPMADDUBSW x, Y12, Y0; \
	VPMADDUBSW 32+x, Y13, Y1; \
	VPMADDWD   Y15, Y0, Y0; \
	VPMADDWD   Y15, Y1, Y1; \
	VCVTDQ2PS  Y0, Y0; \
	VCVTDQ2PS  Y1, Y1; \
	VBROADCASTSS s(SP), Y2; \
	VBROADCASTSS s+4(SP), Y3; \
	VFMADD231PS Y2, Y0, lo; \
	VFMADD231PS Y3, Y1, hi

#define Q4KX4CHUNK(c) \
	VMOVDQU 16+32*c(SI), Y12; \
	VPSRLW  $4, Y12, Y13; \
	VPAND   Y14, Y12, Y12; \
	VPAND   Y14, Y13, Y13; \
	Q4KX4T(64*c(DI), 8*c, Y8, Y4); \
	Q4KX4T(64*c(DI)(R9*1), 32+8*c, Y9, Y5); \
	Q4KX4T(64*c(DI)(R9*2), 64+8*c, Y10, Y6); \
	Q4KX4T(64*c(DI)(R10*1), 96+8*c, Y11, Y7)

// func kernDotQ4_Kx4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
//
// kernDotQ4_KAVX2 for four tokens: each token's (d·sc_j)·xd_j at 32t(SP),
// low nibbles and min terms into Y8+t, high nibbles into Y4+t.
TEXT ·kernDotQ4_Kx4AVX2(SB), NOSPLIT, $128-104
	X4SETUP
	SHRQ $3, CX
	ZERO4
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	TESTQ CX, CX
	JZ   q4kx4done

q4kx4loop:
	VCVTPH2PS    (SI), X1
	Q4KSCALES(X2, X0)
	VPMOVZXBD    X2, Y2
	VCVTDQ2PS    Y2, Y2
	VBROADCASTSS X1, Y3
	VMULPS       Y3, Y2, Y2 // sc_j·d
	VMULPS       (DX), Y2, Y3
	VMOVUPS      Y3, 0(SP)
	VMULPS       (DX)(R11*1), Y2, Y3
	VMOVUPS      Y3, 32(SP)
	VMULPS       (DX)(R11*2), Y2, Y3
	VMOVUPS      Y3, 64(SP)
	VMULPS       (DX)(R12*1), Y2, Y3
	VMOVUPS      Y3, 96(SP)
	VPMOVZXBD    X0, Y0
	VCVTDQ2PS    Y0, Y0
	VMOVSHDUP    X1, X1
	VBROADCASTSS X1, Y3
	VMULPS       Y3, Y0, Y0 // m_j·dmin
	VFNMADD231PS (R8), Y0, Y8
	VFNMADD231PS (R8)(R11*1), Y0, Y9
	VFNMADD231PS (R8)(R11*2), Y0, Y10
	VFNMADD231PS (R8)(R12*1), Y0, Y11
	Q4KX4CHUNK(0)
	Q4KX4CHUNK(1)
	Q4KX4CHUNK(2)
	Q4KX4CHUNK(3)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $32, DX
	ADDQ $32, R8
	DECQ CX
	JNZ  q4kx4loop

q4kx4done:
	VADDPS Y4, Y8, Y8
	VADDPS Y5, Y9, Y9
	VADDPS Y6, Y10, Y10
	VADDPS Y7, Y11, Y11
	HSUM4(Y8, X8, Y9, Y10, Y11)
	VZEROUPPER
	RET

// Q6KX4T dots the 32 6-bit values in Y4 with one token's activation block
// at x, scaled by the sub-block scales at s(SP) and s+4(SP), into acc:
// Q6KDOT's operations. Uses Y15 (ones), Y12 (32s), Y0..Y2.
#define Q6KX4T(x, s, acc) \
	VMOVDQU    x, Y0; \
	VPMADDUBSW Y0, Y4, Y1; \
	VPMADDUBSW Y0, Y12, Y0; \
	VPSUBW     Y0, Y1, Y1; \
	VPMADDWD   Y15, Y1, Y1; \
	VCVTDQ2PS  Y1, Y1; \
	VBROADCASTSS s(SP), X0; \
	VBROADCASTSS s+4(SP), Y2; \
	VBLENDPS   $0x0F, Y0, Y2, Y2; \
	VFMADD231PS Y2, Y1, acc

// Q6KX4B dots block k of half h, whose values are in Y4, with the four
// tokens into a0..a3.
#define Q6KX4B(h, k, a0, a1, a2, a3) \
	Q6KX4T(128*h+32*k(DI), 32*h+8*k, a0); \
	Q6KX4T(128*h+32*k(DI)(R9*1), 64+32*h+8*k, a1); \
	Q6KX4T(128*h+32*k(DI)(R9*2), 128+32*h+8*k, a2); \
	Q6KX4T(128*h+32*k(DI)(R10*1), 192+32*h+8*k, a3)

// Q6KX4HALF dots half h: blocks 0 and 2 into Y8..Y11, 1 and 3 into Y5,
// Y6, Y7, Y13 (Q6KHALF's split). Uses Y14 (0x0F), Y0.
#define Q6KX4HALF(h) \
	VPAND   64*h(SI), Y14, Y4; \
	VPSLLW  $4, 128+32*h(SI), Y0; \
	VPAND   kernBytes30<>(SB), Y0, Y0; \
	VPOR    Y0, Y4, Y4; \
	Q6KX4B(h, 0, Y8, Y9, Y10, Y11); \
	VPAND   64*h+32(SI), Y14, Y4; \
	VPSLLW  $2, 128+32*h(SI), Y0; \
	VPAND   kernBytes30<>(SB), Y0, Y0; \
	VPOR    Y0, Y4, Y4; \
	Q6KX4B(h, 1, Y5, Y6, Y7, Y13); \
	VPSRLW  $4, 64*h(SI), Y4; \
	VPAND   Y14, Y4, Y4; \
	VMOVDQU 128+32*h(SI), Y0; \
	VPAND   kernBytes30<>(SB), Y0, Y0; \
	VPOR    Y0, Y4, Y4; \
	Q6KX4B(h, 2, Y8, Y9, Y10, Y11); \
	VPSRLW  $4, 64*h+32(SI), Y4; \
	VPAND   Y14, Y4, Y4; \
	VPSRLW  $2, 128+32*h(SI), Y0; \
	VPAND   kernBytes30<>(SB), Y0, Y0; \
	VPOR    Y0, Y4, Y4; \
	Q6KX4B(h, 3, Y5, Y6, Y7, Y13)

// Q6KX4SCALES stores one token's sixteen (sc·d)·xd at s(SP), from sc·d in
// Y2 (sub-blocks 0..7) and Y3 (8..15) and the activation scales at d.
// Uses Y0, Y1.
#define Q6KX4SCALES(d, s) \
	VMOVDQU kernQ6Dup0<>(SB), Y0; \
	VPERMPS d, Y0, Y1; \
	VMULPS  Y1, Y2, Y1; \
	VMOVUPS Y1, s(SP); \
	VMOVDQU kernQ6Dup1<>(SB), Y0; \
	VPERMPS d, Y0, Y1; \
	VMULPS  Y1, Y3, Y1; \
	VMOVUPS Y1, 32+s(SP)

// func kernDotQ6_Kx4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ6_Kx4AVX2(SB), NOSPLIT, $256-104
	X4SETUP
	SHRQ $3, CX
	ZERO4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y13, Y13, Y13
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	BCASTB($0x20, X12, Y12)
	TESTQ CX, CX
	JZ   q6kx4done

q6kx4loop:
	MOVWLZX 208(SI), AX
	VMOVD AX, X1
	VCVTPH2PS X1, X1
	VBROADCASTSS X1, Y1    // d
	VPMOVSXBD 192(SI), Y2
	VPMOVSXBD 200(SI), Y3
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VMULPS Y1, Y2, Y2      // sc·d
	VMULPS Y1, Y3, Y3
	Q6KX4SCALES((DX), 0)
	Q6KX4SCALES((DX)(R11*1), 64)
	Q6KX4SCALES((DX)(R11*2), 128)
	Q6KX4SCALES((DX)(R12*1), 192)
	Q6KX4HALF(0)
	Q6KX4HALF(1)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  q6kx4loop

q6kx4done:
	VADDPS Y5, Y8, Y8
	VADDPS Y6, Y9, Y9
	VADDPS Y7, Y10, Y10
	VADDPS Y13, Y11, Y11
	HSUM4(Y8, X8, Y9, Y10, Y11)
	VZEROUPPER
	RET

// func kernDotF32x4AVX2(res *[4]float32, w []byte, x []float32, stride int)
//
// Dots a weight row with four rows of x, stride floats apart, reading the
// row once; so do the F16 and BF16 versions, converting as they go.
TEXT ·kernDotF32x4AVX2(SB), NOSPLIT, $0-64
	FX4(W8F32, W1F32, 4, 2)

// func kernDotF16x4AVX2(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotF16x4AVX2(SB), NOSPLIT, $0-64
	FX4(W8F16, W1F16, 2, 1)

// func kernDotBF16x4AVX2(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotBF16x4AVX2(SB), NOSPLIT, $0-64
	FX4(W8BF16, W1BF16, 2, 1)
