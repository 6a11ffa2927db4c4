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

// HSUMPS leaves the sum of the eight floats of y in the low lane of x (y's
// lower half); t is a scratch xmm register.
#define HSUMPS(y, x, t) \
	VEXTRACTF128 $1, y, t; \
	VADDPS       t, x, x; \
	VPERMILPS    $0x4E, x, t; \
	VADDPS       t, x, x; \
	VPERMILPS    $0xB1, x, t; \
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

// func kernDotF32AVX2(w, x []float32) float32
TEXT ·kernDotF32AVX2(SB), NOSPLIT, $0-52
	MOVQ w_base+0(FP), SI
	MOVQ w_len+8(FP), CX
	MOVQ x_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32loop32:
	CMPQ CX, $32
	JB   f32loop8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  f32loop32

f32loop8:
	CMPQ CX, $8
	JB   f32sum
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  f32loop8

f32sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS(Y0, X0, X1)

f32tail:
	TESTQ CX, CX
	JZ   f32done
	VMOVSS (SI), X4
	VFMADD231SS (DI), X4, X0
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP  f32tail

f32done:
	VMOVSS X0, ret+48(FP)
	VZEROUPPER
	RET

// func kernDotF16AVX2(w []byte, x []float32) float32
TEXT ·kernDotF16AVX2(SB), NOSPLIT, $0-52
	MOVQ w_base+0(FP), SI
	MOVQ w_len+8(FP), CX
	SHRQ $1, CX
	MOVQ x_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f16loop32:
	CMPQ CX, $32
	JB   f16loop8
	VCVTPH2PS (SI), Y4
	VCVTPH2PS 16(SI), Y5
	VCVTPH2PS 32(SI), Y6
	VCVTPH2PS 48(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  f16loop32

f16loop8:
	CMPQ CX, $8
	JB   f16sum
	VCVTPH2PS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  f16loop8

f16sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS(Y0, X0, X1)

f16tail:
	TESTQ CX, CX
	JZ   f16done
	MOVWLZX (SI), AX
	VMOVD AX, X4
	VCVTPH2PS X4, X4
	VFMADD231SS (DI), X4, X0
	ADDQ $2, SI
	ADDQ $4, DI
	DECQ CX
	JMP  f16tail

f16done:
	VMOVSS X0, ret+48(FP)
	VZEROUPPER
	RET

// func kernDotBF16AVX2(w []byte, x []float32) float32
TEXT ·kernDotBF16AVX2(SB), NOSPLIT, $0-52
	MOVQ w_base+0(FP), SI
	MOVQ w_len+8(FP), CX
	SHRQ $1, CX
	MOVQ x_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bf16loop32:
	CMPQ CX, $32
	JB   bf16loop8
	VPMOVZXWD (SI), Y4
	VPMOVZXWD 16(SI), Y5
	VPMOVZXWD 32(SI), Y6
	VPMOVZXWD 48(SI), Y7
	VPSLLD $16, Y4, Y4
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	VPSLLD $16, Y7, Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  bf16loop32

bf16loop8:
	CMPQ CX, $8
	JB   bf16sum
	VPMOVZXWD (SI), Y4
	VPSLLD $16, Y4, Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  bf16loop8

bf16sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS(Y0, X0, X1)

bf16tail:
	TESTQ CX, CX
	JZ   bf16done
	MOVWLZX (SI), AX
	SHLL $16, AX
	VMOVD AX, X4
	VFMADD231SS (DI), X4, X0
	ADDQ $2, SI
	ADDQ $4, DI
	DECQ CX
	JMP  bf16tail

bf16done:
	VMOVSS X0, ret+48(FP)
	VZEROUPPER
	RET

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
// llama.cpp does (kmask1..3), the scales times d and the activation scales
// are kept on the stack for the nibble dots, and the min term
// dmin·Σ m_j·xs_j is accumulated separately in Y2.
TEXT ·kernDotQ4_KAVX2(SB), NOSPLIT, $32-100
	MOVQ w_base+0(FP), SI
	MOVQ xq_base+24(FP), DI
	MOVQ xd_base+48(FP), DX
	MOVQ xd_len+56(FP), CX
	SHRQ $3, CX
	MOVQ xs_base+72(FP), R8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	ONES16(Y15)
	BCASTB($0x0f, X14, Y14)
	TESTQ CX, CX
	JZ   q4kdone

q4kloop:
	VCVTPH2PS (SI), X3 // d, dmin
	VBROADCASTSS X3, Y4
	VMOVSHDUP X3, X5
	VBROADCASTSS X5, Y5
	MOVL 4(SI), AX      // utmp[0]
	MOVL 8(SI), BX      // utmp[1]
	MOVL 12(SI), R9     // utmp[2]
	MOVL R9, R10        // mins 4..7: (u2>>4)&0x0f0f0f0f | ((u1>>6)&0x03030303)<<4
	SHRL $4, R10
	ANDL $0x0f0f0f0f, R10
	MOVL BX, R11
	SHRL $6, R11
	ANDL $0x03030303, R11
	SHLL $4, R11
	ORL  R11, R10
	MOVL BX, R11        // mins 0..3: u1 & 0x3f3f3f3f
	ANDL $0x3f3f3f3f, R11
	ANDL $0x0f0f0f0f, R9 // scales 4..7: u2&0x0f0f0f0f | ((u0>>6)&0x03030303)<<4
	MOVL AX, R12
	SHRL $6, R12
	ANDL $0x03030303, R12
	SHLL $4, R12
	ORL  R12, R9
	ANDL $0x3f3f3f3f, AX // scales 0..3
	VMOVD AX, X6
	VPINSRD $1, R9, X6, X6
	VPMOVZXBD X6, Y6
	VCVTDQ2PS Y6, Y6
	VMULPS (DX), Y6, Y6
	VMULPS Y4, Y6, Y6
	VMOVUPS Y6, 0(SP)   // d·sc_j·xd_j
	VMOVD R11, X7
	VPINSRD $1, R10, X7, X7
	VPMOVZXBD X7, Y7
	VCVTDQ2PS Y7, Y7
	VMULPS (R8), Y7, Y7
	VFMADD231PS Y5, Y7, Y2 // += dmin·m_j·xs_j
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
	HSUMPS(Y2, X2, X3)
	VSUBSS X2, X0, X0
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
// Per 256-value block the sixteen d·sc·xd products (one per 16 values) are
// kept on the stack.
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
	VMULPS (DX), Y2, Y5    // d·xd for the 8 blocks
	VPERMPS Y5, Y11, Y6
	VPERMPS Y5, Y10, Y7
	VMULPS Y6, Y3, Y3
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
