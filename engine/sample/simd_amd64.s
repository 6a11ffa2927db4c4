//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 (F) kernels of the vocabulary-wide passes; simd_amd64.go
// documents their contracts. Each computes exactly what its Go namesake
// does: the same IEEE float32 operations in the same order, no fused
// multiply-adds, so the results are the same bits.

// argmaxIota holds the int32s 0 to 15, the indices of the first 16 lanes.
DATA argmaxIota<>+0(SB)/8, $0x0000000100000000
DATA argmaxIota<>+8(SB)/8, $0x0000000300000002
DATA argmaxIota<>+16(SB)/8, $0x0000000500000004
DATA argmaxIota<>+24(SB)/8, $0x0000000700000006
DATA argmaxIota<>+32(SB)/8, $0x0000000900000008
DATA argmaxIota<>+40(SB)/8, $0x0000000b0000000a
DATA argmaxIota<>+48(SB)/8, $0x0000000d0000000c
DATA argmaxIota<>+56(SB)/8, $0x0000000f0000000e
GLOBL argmaxIota<>(SB), RODATA|NOPTR, $64

// func argmaxAVX512(x []float32, vals *[64]float32, ids *[64]int32)
//
// Z0-Z3 hold the lanes' maxima (-Inf at first), Z4-Z7 their indices, Z8-Z11
// the indices of the current 64 logits and Z12 64s. A lane takes a logit
// only if it is greater (GT_OQ: false for NaN), so it keeps the first index
// of its maximum.
TEXT ·argmaxAVX512(SB), NOSPLIT, $0-40
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ vals+24(FP), DI
	MOVQ ids+32(FP), DX
	MOVL $0xff800000, AX
	VPBROADCASTD AX, Z0
	VMOVAPS Z0, Z1
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VMOVDQU32 argmaxIota<>+0(SB), Z8
	MOVL $16, AX
	VPBROADCASTD AX, Z12
	VPADDD Z12, Z8, Z9
	VPADDD Z12, Z9, Z10
	VPADDD Z12, Z10, Z11
	MOVL $64, AX
	VPBROADCASTD AX, Z12

argmaxLoop:
	VMOVUPS   (SI), Z13
	VMOVUPS   64(SI), Z14
	VMOVUPS   128(SI), Z15
	VMOVUPS   192(SI), Z16
	VCMPPS    $0x1e, Z0, Z13, K1
	VCMPPS    $0x1e, Z1, Z14, K2
	VCMPPS    $0x1e, Z2, Z15, K3
	VCMPPS    $0x1e, Z3, Z16, K4
	VMOVAPS   Z13, K1, Z0
	VMOVAPS   Z14, K2, Z1
	VMOVAPS   Z15, K3, Z2
	VMOVAPS   Z16, K4, Z3
	VMOVDQA32 Z8, K1, Z4
	VMOVDQA32 Z9, K2, Z5
	VMOVDQA32 Z10, K3, Z6
	VMOVDQA32 Z11, K4, Z7
	VPADDD    Z12, Z8, Z8
	VPADDD    Z12, Z9, Z9
	VPADDD    Z12, Z10, Z10
	VPADDD    Z12, Z11, Z11
	ADDQ      $256, SI
	SUBQ      $64, CX
	JNZ       argmaxLoop

	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	VMOVUPS   Z2, 128(DI)
	VMOVUPS   Z3, 192(DI)
	VMOVDQU32 Z4, (DX)
	VMOVDQU32 Z5, 64(DX)
	VMOVDQU32 Z6, 128(DX)
	VMOVDQU32 Z7, 192(DX)
	VZEROUPPER
	RET

// func firstAboveAVX512(x []float32, floor float32) int
//
// floor < x (LT_OQ) is x > floor with the memory operand second.
TEXT ·firstAboveAVX512(SB), NOSPLIT, $0-40
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VBROADCASTSS floor+24(FP), Z0
	XORQ         AX, AX

aboveLoop:
	VCMPPS   $0x11, (SI)(AX*4), Z0, K1
	KORTESTW K1, K1
	JNZ      aboveFound
	ADDQ     $16, AX
	CMPQ     AX, CX
	JLT      aboveLoop
	JMP      aboveDone

aboveFound:
	KMOVW K1, DX
	BSFL  DX, DX
	ADDQ  DX, AX

aboveDone:
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET

// EXP16 is one iteration of expBlocksGo's inner loop over the 16 logits
// at SI, in the lanes of K7: it stores their weights at DI and adds them,
// as float64, to the lane sums Z8 (lanes 0-7) and Z9 (lanes 8-15). The
// constants: Z16 m, Z17 invT, Z18 log2e64, Z19 roundMagic (whose bits are
// roundMagicBits), Z20 ln2Hi64, Z21 ln2Lo64, Z22 0.5, Z23 1, Z24 -87,
// Z26-Z29 exp2Table and Z30 32s. The table is read with two two-register
// permutes (index bits 0-4), bit 5 choosing between them; a weight is 0
// where !(x >= -87) (GE_OQ: false for NaN) and in the lanes outside K7.
#define EXP16 \
	VMOVUPS.Z     (SI), K7, Z0; \
	VSUBPS        Z16, Z0, Z0; \
	VMULPS        Z17, Z0, Z0; \
	VCMPPS        $0x1d, Z24, Z0, K7, K1; \
	VMULPS        Z18, Z0, Z1; \
	VADDPS        Z19, Z1, Z1; \
	VPSUBD        Z19, Z1, Z2; \
	VSUBPS        Z19, Z1, Z1; \
	VMULPS        Z20, Z1, Z3; \
	VSUBPS        Z3, Z0, Z3; \
	VMULPS        Z21, Z1, Z1; \
	VSUBPS        Z1, Z3, Z3; \
	VMULPS        Z22, Z3, Z4; \
	VADDPS        Z23, Z4, Z4; \
	VMULPS        Z3, Z4, Z4; \
	VADDPS        Z23, Z4, Z4; \
	VMOVDQA32     Z2, Z5; \
	VPERMI2PS     Z27, Z26, Z5; \
	VMOVDQA32     Z2, Z6; \
	VPERMI2PS     Z29, Z28, Z6; \
	VPTESTMD      Z30, Z2, K2; \
	VMOVAPS       Z6, K2, Z5; \
	VPSRAD        $6, Z2, Z2; \
	VPSLLD        $23, Z2, Z2; \
	VPADDD        Z2, Z5, Z5; \
	VMULPS.Z      Z4, Z5, K1, Z5; \
	VMOVUPS       Z5, K7, (DI); \
	VCVTPS2PD     Y5, Z6; \
	VEXTRACTF64X4 $1, Z5, Y7; \
	VCVTPS2PD     Y7, Z7; \
	VADDPD        Z6, Z8, Z8; \
	VADDPD        Z7, Z9, Z9

// func expBlocksAVX512(dst, src []float32, m, invT float32, sums []float64)
//
// R9 counts the logits left, CX those left in the block (256 is
// blockLen); only the last block can end with fewer than 16, taken under a
// partial mask K7.
TEXT ·expBlocksAVX512(SB), NOSPLIT, $0-80
	MOVQ         dst_base+0(FP), DI
	MOVQ         src_base+24(FP), SI
	MOVQ         src_len+32(FP), R9
	MOVQ         sums_base+56(FP), R8
	VBROADCASTSS m+48(FP), Z16
	VBROADCASTSS invT+52(FP), Z17
	VBROADCASTSS ·expConsts+0(SB), Z18
	VBROADCASTSS ·expConsts+4(SB), Z19
	VBROADCASTSS ·expConsts+8(SB), Z20
	VBROADCASTSS ·expConsts+12(SB), Z21
	VBROADCASTSS ·expConsts+16(SB), Z22
	VBROADCASTSS ·expConsts+20(SB), Z23
	VBROADCASTSS ·expConsts+24(SB), Z24
	VMOVDQU32    ·exp2Table+0(SB), Z26
	VMOVDQU32    ·exp2Table+64(SB), Z27
	VMOVDQU32    ·exp2Table+128(SB), Z28
	VMOVDQU32    ·exp2Table+192(SB), Z29
	MOVL         $32, AX
	VPBROADCASTD AX, Z30
	TESTQ        R9, R9
	JZ           expDone

expBlock:
	MOVQ    $256, CX
	CMPQ    R9, CX
	CMOVQLT R9, CX
	SUBQ    CX, R9
	VPXORQ  Z8, Z8, Z8
	VPXORQ  Z9, Z9, Z9
	KXNORW  K7, K7, K7

expChunk:
	CMPQ CX, $16
	JLT  expTail
	EXP16
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  expChunk

expTail:
	TESTQ CX, CX
	JZ    expSum
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K7
	EXP16

expSum:
	// laneSum's order: lane j+8 into j, then j+4, j+2 and j+1.
	VADDPD        Z9, Z8, Z8
	VEXTRACTF64X4 $1, Z8, Y9
	VADDPD        Y9, Y8, Y8
	VEXTRACTF128  $1, Y8, X9
	VADDPD        X9, X8, X8
	VPERMILPD     $1, X8, X9
	VADDSD        X9, X8, X8
	VMOVSD        X8, (R8)
	ADDQ          $8, R8
	TESTQ         R9, R9
	JNZ           expBlock

expDone:
	VZEROUPPER
	RET
