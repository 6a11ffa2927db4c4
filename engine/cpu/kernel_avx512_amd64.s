//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 kernels (F, BW, VL and VNNI): the AVX2 algorithms with twice the
// width. Quantized dots take two weight blocks per zmm register and use
// VPDPBUSD (unsigned x signed bytes summed into int32) with the sign trick:
// |w| times x negated where w < 0 (K1). The int32 lanes of the two blocks
// (0..7 and 8..15) are converted to float32, scaled by the weight scales
// (Z4) and accumulated with each block's activation scale, broadcast from
// memory into its half of the lanes (masks K2 and K3).
//
// Constant registers: Z31 zero, Z14 0x0F bytes, Z13 8s.

// X4SETUP512 is X4SETUP (kernel_amd64.s) for this file's frame layout.
#define X4SETUP512 \
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
	LEAQ (R11)(R11*2), R12

// HSUM4Z stores the horizontal sums of the ymm registers a, b, c, d
// (clobbered) at res (ax is a's lower half).
#define HSUM4Z(a, ax, b, c, d) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF128 $1, a, X13; \
	VADDPS X13, ax, ax; \
	MOVQ res+0(FP), AX; \
	VMOVUPS ax, (AX)

#define HSUMPS512(y, x, t) \
	VEXTRACTF128 $1, y, t; \
	VADDPS       t, x, x; \
	VPERMILPS    $0x4E, x, t; \
	VADDPS       t, x, x; \
	VPERMILPS    $0xB1, x, t; \
	VADDPS       t, x, x

// FOLDZ adds the upper half of the zmm register z (whose ymm half is y)
// into y; t is a scratch ymm.
#define FOLDZ(z, y, t) \
	VEXTRACTF64X4 $1, z, t; \
	VADDPS        t, y, y

// SETUP512 sets the constant registers and the half masks K2 (lanes 0..7)
// and K3 (lanes 8..15).
#define SETUP512 \
	VPXORD Z31, Z31, Z31; \
	MOVL   $0x0f, AX; \
	VPBROADCASTB AX, Z14; \
	MOVL   $0x08, AX; \
	VPBROADCASTB AX, Z13; \
	MOVL   $0x00ff, AX; \
	KMOVW  AX, K2; \
	MOVL   $0xff00, AX; \
	KMOVW  AX, K3

// DWPAIR sets Z4 to the f16 weight scale at o0(SI) in lanes 0..7 and the
// one at o1(SI) in lanes 8..15.
#define DWPAIR(o0, o1) \
	VPBROADCASTW o0(SI), X4; \
	VPBROADCASTW o1(SI), X5; \
	VINSERTI128  $1, X5, Y4, Y4; \
	VCVTPH2PS    Y4, Z4

// SIGNW sets K1 to the signs of the weight bytes in Z2 and Z3 to their
// magnitudes.
#define SIGNW \
	VPMOVB2M Z2, K1; \
	VPABSB   Z2, Z3

// PAIRQ8 loads blocks b, b+1 of Q8_0 at SI.
#define PAIRQ8 \
	VMOVDQU      2(SI), Y2; \
	VINSERTI64X4 $1, 36(SI), Z2, Z2; \
	SIGNW; \
	DWPAIR(0, 34)

// PAIRQ4 loads blocks b, b+1 of Q4_0 at SI as values q-8: the 128-bit
// lanes [lo0 hi0 lo1 hi1] of nibbles match the activations' order.
#define PAIRQ4 \
	VMOVDQU      2(SI), X2; \
	VINSERTI128  $1, 20(SI), Y2, Y2; \
	VPSRLW       $4, Y2, Y3; \
	VINSERTI64X4 $1, Y3, Z2, Z2; \
	VSHUFI64X2   $0xD8, Z2, Z2, Z2; \
	VPANDD       Z14, Z2, Z2; \
	VPSUBB       Z13, Z2, Z2; \
	SIGNW; \
	DWPAIR(0, 18)

// TOKPAIR adds one token's two blocks (activations at x, scales at
// do db, an offset and a base) into accA (block b's lanes) and accB
// (block b+1's). Uses Z6, Z7.
#define TOKPAIR(x, do, db, accA, accB) \
	VMOVDQU64   x, Z6; \
	VPSUBB      Z6, Z31, K1, Z6; \
	VPXORD      Z7, Z7, Z7; \
	VPDPBUSD    Z6, Z3, Z7; \
	VCVTDQ2PS   Z7, Z7; \
	VMULPS      Z4, Z7, Z7; \
	VFMADD231PS.BCST do db, Z7, K2, accA; \
	VFMADD231PS.BCST 4+do db, Z7, K3, accB

// TOKONE adds one token's single block (activations at x, scale at d) with
// the signed weights in Y2 (K1, Y3 as SIGNW) and weight scale in Y4 into
// the ymm register acc. Uses Y6, Y7.
#define TOKONE(x, d, acc) \
	VMOVDQU     x, Y6; \
	VPSUBB      Y6, Y31, K1, Y6; \
	VPXORD      Y7, Y7, Y7; \
	VPDPBUSD    Y6, Y3, Y7; \
	VCVTDQ2PS   Y7, Y7; \
	VMULPS      Y4, Y7, Y7; \
	VFMADD231PS.BCST d, Y7, acc

// ONEW sets up one block's weights for TOKONE: the signed values in Y2
// (already loaded), K1, Y3, and the f16 scale at (SI) in Y4.
#define ONEW \
	VPMOVB2M     Y2, K1; \
	VPABSB       Y2, Y3; \
	VPBROADCASTW (SI), X4; \
	VCVTPH2PS    X4, Y4

// ONEQ8 and ONEQ4 load the single block at SI.
#define ONEQ8 \
	VMOVDQU 2(SI), Y2; \
	ONEW

#define ONEQ4 \
	VMOVDQU     2(SI), X2; \
	VPSRLW      $4, X2, X3; \
	VINSERTI128 $1, X3, Y2, Y2; \
	VPAND       Y14, Y2, Y2; \
	VPSUBB      Y13, Y2, Y2; \
	ONEW

// DOT1 is the body of a one-token kernel over blocks of bsz bytes: block
// pairs, then a last odd block; the sum is returned.
#define DOT1(pair, one, bsz) \
	MOVQ w_base+0(FP), SI; \
	MOVQ xq_base+24(FP), DI; \
	MOVQ xd_base+48(FP), DX; \
	MOVQ xd_len+56(FP), CX; \
	SETUP512; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
loop4:; \
	CMPQ CX, $4; \
	JB   loop2; \
	pair; \
	TOKPAIR((DI), 0, (DX), Z0, Z1); \
	ADDQ $(2*bsz), SI; \
	pair; \
	TOKPAIR(64(DI), 8, (DX), Z8, Z9); \
	ADDQ $(2*bsz), SI; \
	ADDQ $128, DI; \
	ADDQ $16, DX; \
	SUBQ $4, CX; \
	JMP  loop4; \
loop2:; \
	CMPQ CX, $2; \
	JB   tail; \
	pair; \
	TOKPAIR((DI), 0, (DX), Z0, Z1); \
	ADDQ $(2*bsz), SI; \
	ADDQ $64, DI; \
	ADDQ $8, DX; \
	SUBQ $2, CX; \
tail:; \
	VADDPS Z1, Z0, Z0; \
	VADDPS Z9, Z8, Z8; \
	VADDPS Z8, Z0, Z0; \
	FOLDZ(Z0, Y0, Y1); \
	TESTQ CX, CX; \
	JZ   done; \
	one; \
	TOKONE((DI), (DX), Y0); \
done:; \
	HSUMPS512(Y0, X0, X1); \
	VMOVSS X0, ret+96(FP); \
	VZEROUPPER; \
	RET

// DOT4 is the body of a four-token kernel over blocks of bsz bytes; the
// accumulators are Z16..Z23 (two per token), the sums go to res.
#define DOT4(pair, one, bsz) \
	X4SETUP512; \
	SETUP512; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
loop2:; \
	CMPQ CX, $2; \
	JB   tail; \
	pair; \
	TOKPAIR((DI), 0, (DX), Z16, Z17); \
	TOKPAIR((DI)(R9*1), 0, (DX)(R11*1), Z18, Z19); \
	TOKPAIR((DI)(R9*2), 0, (DX)(R11*2), Z20, Z21); \
	TOKPAIR((DI)(R10*1), 0, (DX)(R12*1), Z22, Z23); \
	ADDQ $(2*bsz), SI; \
	ADDQ $64, DI; \
	ADDQ $8, DX; \
	SUBQ $2, CX; \
	JMP  loop2; \
tail:; \
	VADDPS Z17, Z16, Z8; \
	VADDPS Z19, Z18, Z9; \
	VADDPS Z21, Z20, Z10; \
	VADDPS Z23, Z22, Z11; \
	FOLDZ(Z8, Y8, Y0); \
	FOLDZ(Z9, Y9, Y0); \
	FOLDZ(Z10, Y10, Y0); \
	FOLDZ(Z11, Y11, Y0); \
	TESTQ CX, CX; \
	JZ   done; \
	one; \
	TOKONE((DI), (DX), Y8); \
	TOKONE((DI)(R9*1), (DX)(R11*1), Y9); \
	TOKONE((DI)(R9*2), (DX)(R11*2), Y10); \
	TOKONE((DI)(R10*1), (DX)(R12*1), Y11); \
done:; \
	HSUM4Z(Y8, X8, Y9, Y10, Y11); \
	VZEROUPPER; \
	RET

// TAILMASK sets K1 to the low CX lanes (CX < 16). Uses AX, CX.
#define TAILMASK \
	MOVL  $1, AX; \
	SHLL  CX, AX; \
	DECL  AX; \
	KMOVW AX, K1

// Weight loaders for FX4Z: W16xx converts 16 values at off(SI) (off in
// units of 2-byte values, doubled for F32) into the zmm register z; T16xx
// converts the K1 lanes at (SI), zeroing the others.
#define W16F32Z(off, z) VMOVUPS off*2(SI), z
#define T16F32Z(z) VMOVUPS.Z (SI), K1, z
#define W16F16Z(off, z) VCVTPH2PS off(SI), z
#define T16F16Z(z) \
	VMOVDQU16.Z (SI), K1, Y0; \
	VCVTPH2PS   Y0, z
#define W16BF16Z(off, z) \
	VPMOVZXWD off(SI), z; \
	VPSLLD    $16, z, z
#define T16BF16Z(z) \
	VMOVDQU16.Z (SI), K1, Y0; \
	VPMOVZXWD   Y0, z; \
	VPSLLD      $16, z, z

// FX4Z is FX4 (kernel_amd64.s) in zmm registers, with a masked tail.
// Accumulators Z16..Z23.
#define FX4Z(w16, t16, es, sh) \
	MOVQ w_base+8(FP), SI; \
	MOVQ w_len+16(FP), CX; \
	SHRQ $sh, CX; \
	MOVQ x_base+32(FP), DI; \
	MOVQ stride+56(FP), R9; \
	SHLQ $2, R9; \
	LEAQ (R9)(R9*2), R10; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
loop32:; \
	CMPQ CX, $32; \
	JB   loop16; \
	w16(0, Z0); \
	w16(32, Z1); \
	VFMADD231PS (DI), Z0, Z16; \
	VFMADD231PS (DI)(R9*1), Z0, Z17; \
	VFMADD231PS (DI)(R9*2), Z0, Z18; \
	VFMADD231PS (DI)(R10*1), Z0, Z19; \
	VFMADD231PS 64(DI), Z1, Z20; \
	VFMADD231PS 64(DI)(R9*1), Z1, Z21; \
	VFMADD231PS 64(DI)(R9*2), Z1, Z22; \
	VFMADD231PS 64(DI)(R10*1), Z1, Z23; \
	ADDQ $(32*es), SI; \
	ADDQ $128, DI; \
	SUBQ $32, CX; \
	JMP  loop32; \
loop16:; \
	CMPQ CX, $16; \
	JB   tail; \
	w16(0, Z0); \
	VFMADD231PS (DI), Z0, Z16; \
	VFMADD231PS (DI)(R9*1), Z0, Z17; \
	VFMADD231PS (DI)(R9*2), Z0, Z18; \
	VFMADD231PS (DI)(R10*1), Z0, Z19; \
	ADDQ $(16*es), SI; \
	ADDQ $64, DI; \
	SUBQ $16, CX; \
tail:; \
	TESTQ CX, CX; \
	JZ   sum; \
	TAILMASK; \
	t16(Z0); \
	VMOVUPS.Z (DI), K1, Z1; \
	VFMADD231PS Z1, Z0, Z20; \
	VMOVUPS.Z (DI)(R9*1), K1, Z1; \
	VFMADD231PS Z1, Z0, Z21; \
	VMOVUPS.Z (DI)(R9*2), K1, Z1; \
	VFMADD231PS Z1, Z0, Z22; \
	VMOVUPS.Z (DI)(R10*1), K1, Z1; \
	VFMADD231PS Z1, Z0, Z23; \
sum:; \
	VADDPS Z20, Z16, Z8; \
	VADDPS Z21, Z17, Z9; \
	VADDPS Z22, Z18, Z10; \
	VADDPS Z23, Z19, Z11; \
	FOLDZ(Z8, Y8, Y0); \
	FOLDZ(Z9, Y9, Y0); \
	FOLDZ(Z10, Y10, Y0); \
	FOLDZ(Z11, Y11, Y0); \
	HSUM4Z(Y8, X8, Y9, Y10, Y11); \
	VZEROUPPER; \
	RET

// func kernDotQ8_0AVX512(w []byte, xq []int8, xd, xs []float32) float32
TEXT ·kernDotQ8_0AVX512(SB), NOSPLIT, $0-100
	DOT1(PAIRQ8, ONEQ8, 34)

// func kernDotQ4_0AVX512(w []byte, xq []int8, xd, xs []float32) float32
TEXT ·kernDotQ4_0AVX512(SB), NOSPLIT, $0-100
	DOT1(PAIRQ4, ONEQ4, 18)

// func kernDotQ8_0x4AVX512(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ8_0x4AVX512(SB), NOSPLIT, $0-104
	DOT4(PAIRQ8, ONEQ8, 34)

// func kernDotQ4_0x4AVX512(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ4_0x4AVX512(SB), NOSPLIT, $0-104
	DOT4(PAIRQ4, ONEQ4, 18)

// func kernDotF32AVX512(w, x []float32) float32
TEXT ·kernDotF32AVX512(SB), NOSPLIT, $0-52
	MOVQ w_base+0(FP), SI
	MOVQ w_len+8(FP), CX
	MOVQ x_base+24(FP), DI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

f32loop64:
	CMPQ CX, $64
	JB   f32loop16
	VMOVUPS (SI), Z4
	VMOVUPS 64(SI), Z5
	VMOVUPS 128(SI), Z6
	VMOVUPS 192(SI), Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $64, CX
	JMP  f32loop64

f32loop16:
	CMPQ CX, $16
	JB   f32tail
	VMOVUPS (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  f32loop16

f32tail:
	TESTQ CX, CX
	JZ   f32sum
	TAILMASK
	VMOVUPS.Z (SI), K1, Z4
	VMOVUPS.Z (DI), K1, Z5
	VFMADD231PS Z5, Z4, Z1

f32sum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	FOLDZ(Z0, Y0, Y1)
	HSUMPS512(Y0, X0, X1)
	VMOVSS X0, ret+48(FP)
	VZEROUPPER
	RET

// func kernDotF16AVX512(w []byte, x []float32) float32
TEXT ·kernDotF16AVX512(SB), NOSPLIT, $0-52
	MOVQ w_base+0(FP), SI
	MOVQ w_len+8(FP), CX
	SHRQ $1, CX
	MOVQ x_base+24(FP), DI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

f16loop64:
	CMPQ CX, $64
	JB   f16loop16
	VCVTPH2PS (SI), Z4
	VCVTPH2PS 32(SI), Z5
	VCVTPH2PS 64(SI), Z6
	VCVTPH2PS 96(SI), Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ $128, SI
	ADDQ $256, DI
	SUBQ $64, CX
	JMP  f16loop64

f16loop16:
	CMPQ CX, $16
	JB   f16tail
	VCVTPH2PS (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  f16loop16

f16tail:
	TESTQ CX, CX
	JZ   f16sum
	TAILMASK
	VMOVDQU16.Z (SI), K1, Y4
	VCVTPH2PS Y4, Z4
	VMOVUPS.Z (DI), K1, Z5
	VFMADD231PS Z5, Z4, Z1

f16sum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	FOLDZ(Z0, Y0, Y1)
	HSUMPS512(Y0, X0, X1)
	VMOVSS X0, ret+48(FP)
	VZEROUPPER
	RET

// func kernDotF32x4AVX512(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotF32x4AVX512(SB), NOSPLIT, $0-64
	FX4Z(W16F32Z, T16F32Z, 4, 2)

// func kernDotF16x4AVX512(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotF16x4AVX512(SB), NOSPLIT, $0-64
	FX4Z(W16F16Z, T16F16Z, 2, 1)

// func kernDotBF16x4AVX512(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotBF16x4AVX512(SB), NOSPLIT, $0-64
	FX4Z(W16BF16Z, T16BF16Z, 2, 1)
