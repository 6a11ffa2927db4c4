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
// Constant registers: Z31 zero, Z14 0x0F bytes, Z13 8s, Z12 16s.

// VPERMPS orders: each of four floats four times (Q6_K sub-block scales
// over the lanes of two blocks), and each of eight floats twice (activation
// scales over Q6_K sub-blocks).
DATA kernQ6Quad<>+0(SB)/8, $0x0000000000000000
DATA kernQ6Quad<>+8(SB)/8, $0x0000000000000000
DATA kernQ6Quad<>+16(SB)/8, $0x0000000100000001
DATA kernQ6Quad<>+24(SB)/8, $0x0000000100000001
DATA kernQ6Quad<>+32(SB)/8, $0x0000000200000002
DATA kernQ6Quad<>+40(SB)/8, $0x0000000200000002
DATA kernQ6Quad<>+48(SB)/8, $0x0000000300000003
DATA kernQ6Quad<>+56(SB)/8, $0x0000000300000003
GLOBL kernQ6Quad<>(SB), RODATA|NOPTR, $64
DATA kernQ6Pair<>+0(SB)/8, $0x0000000000000000
DATA kernQ6Pair<>+8(SB)/8, $0x0000000100000001
DATA kernQ6Pair<>+16(SB)/8, $0x0000000200000002
DATA kernQ6Pair<>+24(SB)/8, $0x0000000300000003
DATA kernQ6Pair<>+32(SB)/8, $0x0000000400000004
DATA kernQ6Pair<>+40(SB)/8, $0x0000000500000005
DATA kernQ6Pair<>+48(SB)/8, $0x0000000600000006
DATA kernQ6Pair<>+56(SB)/8, $0x0000000700000007
GLOBL kernQ6Pair<>(SB), RODATA|NOPTR, $64

// kernNibShift is VPSRLVW's per-word counts that turn two Q4_0 blocks,
// each broadcast to two 128-bit lanes, into [lo0 hi0 lo1 hi1]: 0 in lanes
// 0 and 2, 4 in lanes 1 and 3.
DATA kernNibShift<>+0(SB)/8, $0
DATA kernNibShift<>+8(SB)/8, $0
DATA kernNibShift<>+16(SB)/8, $0x0004000400040004
DATA kernNibShift<>+24(SB)/8, $0x0004000400040004
DATA kernNibShift<>+32(SB)/8, $0
DATA kernNibShift<>+40(SB)/8, $0
DATA kernNibShift<>+48(SB)/8, $0x0004000400040004
DATA kernNibShift<>+56(SB)/8, $0x0004000400040004
GLOBL kernNibShift<>(SB), RODATA|NOPTR, $64

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

// HSUMPS512 leaves the sum of the eight floats of y (clobbered) in the low
// lane of x, adding in HSUM4Z's order (see HSUMPS in kernel_amd64.s).
#define HSUMPS512(y, x, t) \
	VHADDPS      y, y, y; \
	VHADDPS      y, y, y; \
	VEXTRACTF128 $1, y, t; \
	VADDPS       t, x, x

// FOLDZ adds the upper half of the zmm register z (whose ymm half is y)
// into y; t is a scratch ymm.
#define FOLDZ(z, y, t) \
	VEXTRACTF64X4 $1, z, t; \
	VADDPS        t, y, y

// SETUP512 sets the constant registers, Z24 kernNibShift, and the half
// masks K2 (lanes 0..7) and K3 (lanes 8..15; as a word mask of a ymm
// register, its upper eight words).
#define SETUP512 \
	VPXORD Z31, Z31, Z31; \
	MOVL   $0x0f, AX; \
	VPBROADCASTB AX, Z14; \
	MOVL   $0x08, AX; \
	VPBROADCASTB AX, Z13; \
	MOVL   $0x10, AX; \
	VPBROADCASTB AX, Z12; \
	MOVL   $0x00ff, AX; \
	KMOVW  AX, K2; \
	MOVL   $0xff00, AX; \
	KMOVW  AX, K3; \
	VMOVDQU64 kernNibShift<>(SB), Z24

// DWPAIR sets Z4 to the f16 weight scale at o0(SI) in lanes 0..7 and the
// one at o1(SI) in lanes 8..15.
#define DWPAIR(o0, o1) \
	VPBROADCASTW o0(SI), Y4; \
	VPBROADCASTW o1(SI), K3, Y4; \
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
// lanes [lo0 hi0 lo1 hi1] of nibbles match the activations' order. Each
// block's 16 bytes are broadcast to two lanes (block b+1's merged under
// K3) and lanes 1 and 3 shifted by a nibble (Z24): loads and one shift
// instead of three shuffles, which this core runs on fewer ports.
#define PAIRQ4 \
	VBROADCASTI32X4 2(SI), Z2; \
	VBROADCASTI32X4 20(SI), K3, Z2; \
	VPSRLVW      Z24, Z2, Z2; \
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

// PAIRQ5 loads blocks b, b+1 of Q5_0 at SI as signed values: nibbles as
// PAIRQ4, minus 16 where the fifth bit (qh, one bit per value) is clear.
#define PAIRQ5 \
	VMOVDQU      6(SI), X2; \
	VINSERTI128  $1, 28(SI), Y2, Y2; \
	VPSRLW       $4, Y2, Y3; \
	VINSERTI64X4 $1, Y3, Z2, Z2; \
	VSHUFI64X2   $0xD8, Z2, Z2, Z2; \
	VPANDD       Z14, Z2, Z2; \
	MOVL         2(SI), AX; \
	MOVL         24(SI), BX; \
	SHLQ         $32, BX; \
	ORQ          BX, AX; \
	NOTQ         AX; \
	KMOVQ        AX, K4; \
	VPSUBB       Z12, Z2, K4, Z2; \
	SIGNW; \
	DWPAIR(0, 22)

#define ONEQ5 \
	VMOVDQU     6(SI), X2; \
	VPSRLW      $4, X2, X3; \
	VINSERTI128 $1, X3, Y2, Y2; \
	VPAND       Y14, Y2, Y2; \
	MOVL        2(SI), AX; \
	NOTL        AX; \
	KMOVD       AX, K4; \
	VPSUBB      Y12, Y2, K4, Y2; \
	ONEW

// Q4KSCALES512 is Q4KSCALES (kernel_amd64.s).
#define Q4KSCALES512(sx, mx) \
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

// Q4KHEAD decodes a Q4_K block's header at SI: Y6 = d·sc_j and Y7 =
// dmin·m_j for its eight sub-blocks. Uses Y3..Y5, AX, BX.
#define Q4KHEAD \
	VCVTPH2PS    (SI), X3; \
	VBROADCASTSS X3, Y4; \
	VMOVSHDUP    X3, X5; \
	VBROADCASTSS X5, Y5; \
	Q4KSCALES512(X6, X7); \
	VPMOVZXBD    X6, Y6; \
	VCVTDQ2PS    Y6, Y6; \
	VMULPS       Y4, Y6, Y6; \
	VPMOVZXBD    X7, Y7; \
	VCVTDQ2PS    Y7, Y7; \
	VMULPS       Y5, Y7, Y7

// Q4KNIB sets Z8 to chunk c's nibbles: sub-block 2c (low) then 2c+1 (high),
// unsigned 0..15, in the activations' order.
#define Q4KNIB(c) \
	VMOVDQU      16+32*c(SI), Y8; \
	VPSRLW       $4, Y8, Y9; \
	VINSERTI64X4 $1, Y9, Z8, Z8; \
	VPANDD       Z14, Z8, Z8

// Q4KTOK adds one token's dot with the nibbles in Z8 (its 64 activation
// bytes at x, the two sub-blocks' scales at s(SP) and s+4(SP)) to acc.
// No sign trick: the nibbles are the unsigned operand. Uses Z9.
#define Q4KTOK(x, s, acc) \
	VPXORD    Z9, Z9, Z9; \
	VPDPBUSD  x, Z8, Z9; \
	VCVTDQ2PS Z9, Z9; \
	VFMADD231PS.BCST s(SP), Z9, K2, acc; \
	VFMADD231PS.BCST s+4(SP), Z9, K3, acc

// Q6KSETUP sets Q6_K's constants: Z12 0x30s, Z11 0x20s, Z15 the VPERMPS
// order kernQ6Pair, and Z10, Z28, Z29, Z30 the orders kernQ6Quad+4q that
// pick the scales of the q-th pair of blocks.
#define Q6KSETUP \
	MOVL      $0x30, AX; \
	VPBROADCASTB AX, Z12; \
	MOVL      $0x20, AX; \
	VPBROADCASTB AX, Z11; \
	VMOVDQU64 kernQ6Pair<>(SB), Z15; \
	VMOVDQU64 kernQ6Quad<>(SB), Z10; \
	MOVL      $4, AX; \
	VPBROADCASTD AX, Z9; \
	VPADDD    Z9, Z10, Z28; \
	VPADDD    Z9, Z28, Z29; \
	VPADDD    Z9, Z29, Z30

// Q6KHEAD sets Z3 to d·sc for the sixteen sub-blocks of the Q6_K block at
// SI. Uses Z2, AX.
#define Q6KHEAD \
	MOVWLZX      208(SI), AX; \
	VMOVD        AX, X2; \
	VCVTPH2PS    X2, X2; \
	VBROADCASTSS X2, Z2; \
	VPMOVSXBD    192(SI), Z3; \
	VCVTDQ2PS    Z3, Z3; \
	VMULPS       Z2, Z3, Z3

// Q6KSC sets z to one token's sixteen d·sc·xd (its eight activation
// scales at d, each for two sub-blocks).
#define Q6KSC(d, z) \
	VMOVUPS d, Y4; \
	VPERMPS Z4, Z15, z; \
	VMULPS  Z3, z, z

// Q6KPAIR01 and Q6KPAIR23 set Z8 to |q-32| and K1 to the signs of q-32 for
// blocks 0,1 and 2,3 of half h of the Q6_K block at SI. PAIR01 leaves the
// low bits in Z4 and the high bits in Y5 for PAIR23. Uses Z6, Z7.
#define Q6KPAIR01(h) \
	VMOVDQU64    64*h(SI), Z4; \
	VMOVDQU      128+32*h(SI), Y5; \
	VPSLLW       $4, Y5, Y6; \
	VPSLLW       $2, Y5, Y7; \
	VINSERTI64X4 $1, Y7, Z6, Z6; \
	VPANDD       Z14, Z4, Z8; \
	VPANDD       Z12, Z6, Z6; \
	VPORD        Z6, Z8, Z8; \
	VPSUBB       Z11, Z8, Z8; \
	VPMOVB2M     Z8, K1; \
	VPABSB       Z8, Z8

#define Q6KPAIR23 \
	VPSRLW       $4, Z4, Z8; \
	VPANDD       Z14, Z8, Z8; \
	VPSRLW       $2, Y5, Y7; \
	VINSERTI64X4 $1, Y7, Z5, Z6; \
	VPANDD       Z12, Z6, Z6; \
	VPORD        Z6, Z8, Z8; \
	VPSUBB       Z11, Z8, Z8; \
	VPMOVB2M     Z8, K1; \
	VPABSB       Z8, Z8

// Q6KTOK adds one token's dot with a pair of blocks (Z8, K1; activations at
// x) to acc, scaled per 16 values by the four scales that the order q picks
// from sc. Uses Z6, Z7, Z9.
#define Q6KTOK(x, sc, q, acc) \
	VMOVDQU64   x, Z6; \
	VPSUBB      Z6, Z31, K1, Z6; \
	VPXORD      Z7, Z7, Z7; \
	VPDPBUSD    Z6, Z8, Z7; \
	VCVTDQ2PS   Z7, Z7; \
	VPERMPS     sc, q, Z9; \
	VFMADD231PS Z9, Z7, acc

// KSETUP1 and KSETUP4 load a K-quant kernel's arguments (one token; four
// tokens, as X4SETUP512), with CX = 256-value blocks and R8 = xs.
#define KSETUP1 \
	MOVQ w_base+0(FP), SI; \
	MOVQ xq_base+24(FP), DI; \
	MOVQ xd_base+48(FP), DX; \
	MOVQ xd_len+56(FP), CX; \
	SHRQ $3, CX; \
	MOVQ xs_base+72(FP), R8; \
	SETUP512

#define KSETUP4 \
	X4SETUP512; \
	SHRQ $3, CX; \
	MOVQ xs_base+80(FP), R8; \
	SETUP512; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23

// KEND1 returns the sum of Z0 and Z1 (less Y2, when min is set), in
// KEND4's order.
#define KEND1(min) \
	VADDPS Z1, Z0, Z0; \
	FOLDZ(Z0, Y0, Y1); \
	min; \
	HSUMPS512(Y0, X0, X1); \
	VMOVSS X0, ret+96(FP); \
	VZEROUPPER; \
	RET

#define SUBMIN1 \
	VSUBPS Y2, Y0, Y0

#define NOMIN

// KEND4 stores the sums of each token's Z16+t and Z20+t (less Y24+t,
// when min is set) at res.
#define KEND4(min) \
	VADDPS Z20, Z16, Z8; \
	VADDPS Z21, Z17, Z9; \
	VADDPS Z22, Z18, Z10; \
	VADDPS Z23, Z19, Z11; \
	FOLDZ(Z8, Y8, Y0); \
	FOLDZ(Z9, Y9, Y0); \
	FOLDZ(Z10, Y10, Y0); \
	FOLDZ(Z11, Y11, Y0); \
	min; \
	HSUM4Z(Y8, X8, Y9, Y10, Y11); \
	VZEROUPPER; \
	RET

#define SUBMIN4 \
	VSUBPS Y24, Y8, Y8; \
	VSUBPS Y25, Y9, Y9; \
	VSUBPS Y26, Y10, Y10; \
	VSUBPS Y27, Y11, Y11

// DOT1 is the body of a one-token kernel over blocks of bsz bytes: block
// pairs, then a last odd block; the sum is returned. It adds in exactly
// DOT4's order, so that a token gets the same bits from either.
#define DOT1(pair, one, bsz) \
	MOVQ w_base+0(FP), SI; \
	MOVQ xq_base+24(FP), DI; \
	MOVQ xd_base+48(FP), DX; \
	MOVQ xd_len+56(FP), CX; \
	SETUP512; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
loop2:; \
	CMPQ CX, $2; \
	JB   tail; \
	pair; \
	TOKPAIR((DI), 0, (DX), Z0, Z1); \
	ADDQ $(2*bsz), SI; \
	ADDQ $64, DI; \
	ADDQ $8, DX; \
	SUBQ $2, CX; \
	JMP  loop2; \
tail:; \
	VADDPS Z1, Z0, Z0; \
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

// FX1Z is FX4Z for one token, func(w, x) float32, adding in its order.
#define FX1Z(w16, t16, es, sh) \
	MOVQ w_base+0(FP), SI; \
	MOVQ w_len+8(FP), CX; \
	SHRQ $sh, CX; \
	MOVQ x_base+24(FP), DI; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z20, Z20, Z20; \
loop32:; \
	CMPQ CX, $32; \
	JB   loop16; \
	w16(0, Z0); \
	w16(32, Z1); \
	VFMADD231PS (DI), Z0, Z16; \
	VFMADD231PS 64(DI), Z1, Z20; \
	ADDQ $(32*es), SI; \
	ADDQ $128, DI; \
	SUBQ $32, CX; \
	JMP  loop32; \
loop16:; \
	CMPQ CX, $16; \
	JB   tail; \
	w16(0, Z0); \
	VFMADD231PS (DI), Z0, Z16; \
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
sum:; \
	VADDPS Z20, Z16, Z8; \
	FOLDZ(Z8, Y8, Y0); \
	HSUMPS512(Y8, X8, X0); \
	VMOVSS X8, ret+48(FP); \
	VZEROUPPER; \
	RET

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

// The rows kernels dot one token with each of len(out) weight rows, rb
// bytes apart, in one call: DOT1's arithmetic row after row, without a Go
// call per row (which costs as much as the dot of a short row). R8 walks
// out, R9 counts the rows left, R10 is the row, R11 rb, R13 walks xc.
//
// For Q4_0 they take the nibbles as VPDPBUSD's unsigned operand and the
// activations, unchanged, as its signed one: Σ(q-8)·x = Σq·x - 8·Σx, where
// xc holds -8·Σx over each lane's four activation bytes. A lane's integer
// is the sign trick's exactly, so a row gets DOT1's bits, with four vector
// operations fewer per pair of blocks.

// ROWSTOK and ROWSONE are the signed kernels' per-pair and last-block
// steps (TOKPAIR, TOKONE); ROWSTOKU and ROWSONEU the unsigned Q4_0 ones.
#define ROWSTOK TOKPAIR((DI), 0, (DX), Z0, Z1)
#define ROWSONE TOKONE((DI), (DX), Y0)

#define ROWSTOKU \
	VMOVDQU64   (R13), Z7; \
	VPDPBUSD    (DI), Z3, Z7; \
	VCVTDQ2PS   Z7, Z7; \
	VMULPS      Z4, Z7, Z7; \
	VFMADD231PS.BCST (DX), Z7, K2, Z0; \
	VFMADD231PS.BCST 4(DX), Z7, K3, Z1

#define ROWSONEU \
	VMOVDQU     (R13), Y7; \
	VPDPBUSD    (DI), Y3, Y7; \
	VCVTDQ2PS   Y7, Y7; \
	VMULPS      Y4, Y7, Y7; \
	VFMADD231PS.BCST (DX), Y7, Y0

// PAIRQ4U and ONEQ4U load Q4_0 blocks as PAIRQ4 and ONEQ4 do, leaving the
// unsigned nibbles in Z3 (Y3) and the scales in Z4 (Y4).
#define PAIRQ4U \
	VBROADCASTI32X4 2(SI), Z2; \
	VBROADCASTI32X4 20(SI), K3, Z2; \
	VPSRLVW      Z24, Z2, Z2; \
	VPANDD       Z14, Z2, Z3; \
	DWPAIR(0, 18)

#define ONEQ4U \
	VMOVDQU      2(SI), X2; \
	VPSRLW       $4, X2, X3; \
	VINSERTI128  $1, X3, Y2, Y2; \
	VPAND        Y14, Y2, Y3; \
	VPBROADCASTW (SI), X4; \
	VCVTPH2PS    X4, Y4

// DOTROWS is the body of a rows kernel over blocks of bsz bytes.
#define DOTROWS(pair, tok, one, tokone, bsz) \
	MOVQ out_base+0(FP), R8; \
	MOVQ out_len+8(FP), R9; \
	MOVQ w_base+24(FP), R10; \
	MOVQ rb+48(FP), R11; \
	SETUP512; \
row:; \
	TESTQ R9, R9; \
	JZ    end; \
	MOVQ  R10, SI; \
	MOVQ  xq_base+56(FP), DI; \
	MOVQ  xd_base+80(FP), DX; \
	MOVQ  xd_len+88(FP), CX; \
	MOVQ  xc_base+128(FP), R13; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
loop2:; \
	CMPQ CX, $2; \
	JB   tail; \
	pair; \
	tok; \
	ADDQ $(2*bsz), SI; \
	ADDQ $64, DI; \
	ADDQ $64, R13; \
	ADDQ $8, DX; \
	SUBQ $2, CX; \
	JMP  loop2; \
tail:; \
	VADDPS Z1, Z0, Z0; \
	FOLDZ(Z0, Y0, Y1); \
	TESTQ CX, CX; \
	JZ   done; \
	one; \
	tokone; \
done:; \
	HSUMPS512(Y0, X0, X1); \
	VMOVSS X0, (R8); \
	ADDQ  $4, R8; \
	ADDQ  R11, R10; \
	DECQ  R9; \
	JMP   row; \
end:; \
	VZEROUPPER; \
	RET

// FX2X4F16 is FX4Z for F16 and two weight rows at once (row A at SI, row B
// at BX): each activation load serves both rows, which halves what the
// four tokens' rows cost from L2 when they outgrow L1. Every (row, token)
// adds in FX4Z's order (even 16-value chunks into Z16.., odd ones and the
// tail into Z20..; row B's into Z24.. and Z28..), so each gets its x4 bits.
#define FX2X4F16 \
	MOVQ w_base+8(FP), SI; \
	MOVQ w_len+16(FP), CX; \
	SHRQ $1, CX; \
	LEAQ (SI)(CX*1), BX; \
	SHRQ $1, CX; \
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
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; \
	VPXORD Z29, Z29, Z29; \
	VPXORD Z30, Z30, Z30; \
	VPXORD Z31, Z31, Z31; \
loop32:; \
	CMPQ CX, $32; \
	JB   loop16; \
	VCVTPH2PS (SI), Z0; \
	VCVTPH2PS 32(SI), Z1; \
	VCVTPH2PS (BX), Z2; \
	VCVTPH2PS 32(BX), Z3; \
	VMOVUPS     (DI), Z4; \
	VFMADD231PS Z4, Z0, Z16; \
	VFMADD231PS Z4, Z2, Z24; \
	VMOVUPS     (DI)(R9*1), Z5; \
	VFMADD231PS Z5, Z0, Z17; \
	VFMADD231PS Z5, Z2, Z25; \
	VMOVUPS     (DI)(R9*2), Z4; \
	VFMADD231PS Z4, Z0, Z18; \
	VFMADD231PS Z4, Z2, Z26; \
	VMOVUPS     (DI)(R10*1), Z5; \
	VFMADD231PS Z5, Z0, Z19; \
	VFMADD231PS Z5, Z2, Z27; \
	VMOVUPS     64(DI), Z4; \
	VFMADD231PS Z4, Z1, Z20; \
	VFMADD231PS Z4, Z3, Z28; \
	VMOVUPS     64(DI)(R9*1), Z5; \
	VFMADD231PS Z5, Z1, Z21; \
	VFMADD231PS Z5, Z3, Z29; \
	VMOVUPS     64(DI)(R9*2), Z4; \
	VFMADD231PS Z4, Z1, Z22; \
	VFMADD231PS Z4, Z3, Z30; \
	VMOVUPS     64(DI)(R10*1), Z5; \
	VFMADD231PS Z5, Z1, Z23; \
	VFMADD231PS Z5, Z3, Z31; \
	ADDQ $64, SI; \
	ADDQ $64, BX; \
	ADDQ $128, DI; \
	SUBQ $32, CX; \
	JMP  loop32; \
loop16:; \
	CMPQ CX, $16; \
	JB   tail; \
	VCVTPH2PS (SI), Z0; \
	VCVTPH2PS (BX), Z2; \
	VMOVUPS     (DI), Z4; \
	VFMADD231PS Z4, Z0, Z16; \
	VFMADD231PS Z4, Z2, Z24; \
	VMOVUPS     (DI)(R9*1), Z5; \
	VFMADD231PS Z5, Z0, Z17; \
	VFMADD231PS Z5, Z2, Z25; \
	VMOVUPS     (DI)(R9*2), Z4; \
	VFMADD231PS Z4, Z0, Z18; \
	VFMADD231PS Z4, Z2, Z26; \
	VMOVUPS     (DI)(R10*1), Z5; \
	VFMADD231PS Z5, Z0, Z19; \
	VFMADD231PS Z5, Z2, Z27; \
	ADDQ $32, SI; \
	ADDQ $32, BX; \
	ADDQ $64, DI; \
	SUBQ $16, CX; \
tail:; \
	TESTQ CX, CX; \
	JZ   sum; \
	TAILMASK; \
	VMOVDQU16.Z (SI), K1, Y0; \
	VCVTPH2PS   Y0, Z0; \
	VMOVDQU16.Z (BX), K1, Y2; \
	VCVTPH2PS   Y2, Z2; \
	VMOVUPS.Z   (DI), K1, Z4; \
	VFMADD231PS Z4, Z0, Z20; \
	VFMADD231PS Z4, Z2, Z28; \
	VMOVUPS.Z   (DI)(R9*1), K1, Z5; \
	VFMADD231PS Z5, Z0, Z21; \
	VFMADD231PS Z5, Z2, Z29; \
	VMOVUPS.Z   (DI)(R9*2), K1, Z4; \
	VFMADD231PS Z4, Z0, Z22; \
	VFMADD231PS Z4, Z2, Z30; \
	VMOVUPS.Z   (DI)(R10*1), K1, Z5; \
	VFMADD231PS Z5, Z0, Z23; \
	VFMADD231PS Z5, Z2, Z31; \
sum:; \
	VADDPS Z20, Z16, Z8; \
	VADDPS Z21, Z17, Z9; \
	VADDPS Z22, Z18, Z10; \
	VADDPS Z23, Z19, Z11; \
	FOLDZ(Z8, Y8, Y0); \
	FOLDZ(Z9, Y9, Y0); \
	FOLDZ(Z10, Y10, Y0); \
	FOLDZ(Z11, Y11, Y0); \
	HSUM4AT(Y8, X8, Y9, Y10, Y11, 0); \
	VADDPS Z28, Z24, Z8; \
	VADDPS Z29, Z25, Z9; \
	VADDPS Z30, Z26, Z10; \
	VADDPS Z31, Z27, Z11; \
	FOLDZ(Z8, Y8, Y0); \
	FOLDZ(Z9, Y9, Y0); \
	FOLDZ(Z10, Y10, Y0); \
	FOLDZ(Z11, Y11, Y0); \
	HSUM4AT(Y8, X8, Y9, Y10, Y11, 16); \
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
	FX1Z(W16F32Z, T16F32Z, 4, 0)

// func kernDotF16AVX512(w []byte, x []float32) float32
TEXT ·kernDotF16AVX512(SB), NOSPLIT, $0-52
	FX1Z(W16F16Z, T16F16Z, 2, 1)

// func kernDotBF16AVX512(w []byte, x []float32) float32
TEXT ·kernDotBF16AVX512(SB), NOSPLIT, $0-52
	FX1Z(W16BF16Z, T16BF16Z, 2, 1)

// func kernDotF32x4AVX512(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotF32x4AVX512(SB), NOSPLIT, $0-64
	FX4Z(W16F32Z, T16F32Z, 4, 2)

// func kernDotF16x4AVX512(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotF16x4AVX512(SB), NOSPLIT, $0-64
	FX4Z(W16F16Z, T16F16Z, 2, 1)

// func kernDotBF16x4AVX512(res *[4]float32, w []byte, x []float32, stride int)
TEXT ·kernDotBF16x4AVX512(SB), NOSPLIT, $0-64
	FX4Z(W16BF16Z, T16BF16Z, 2, 1)

// func kernDotQ5_0AVX512(w []byte, xq []int8, xd, xs []float32) float32
TEXT ·kernDotQ5_0AVX512(SB), NOSPLIT, $0-100
	DOT1(PAIRQ5, ONEQ5, 22)

// func kernDotQ5_0x4AVX512(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ5_0x4AVX512(SB), NOSPLIT, $0-104
	DOT4(PAIRQ5, ONEQ5, 22)

// func kernDotQ4_KAVX512(w []byte, xq []int8, xd, xs []float32) float32
//
// Per 256-value block, d·sc_j·xd_j go to the stack for the nibble dots and
// dmin·m_j·xs_j accumulate in Y2, as in kernDotQ4_KAVX2.
TEXT ·kernDotQ4_KAVX512(SB), NOSPLIT, $32-100
	KSETUP1
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VXORPS Y2, Y2, Y2
	TESTQ CX, CX
	JZ   done

loop:
	Q4KHEAD
	VMULPS  (DX), Y6, Y8
	VMOVUPS Y8, 0(SP)
	VFMADD231PS (R8), Y7, Y2
	Q4KNIB(0)
	Q4KTOK(0(DI), 0, Z0)
	Q4KNIB(1)
	Q4KTOK(64(DI), 8, Z1)
	Q4KNIB(2)
	Q4KTOK(128(DI), 16, Z0)
	Q4KNIB(3)
	Q4KTOK(192(DI), 24, Z1)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $32, DX
	ADDQ $32, R8
	DECQ CX
	JNZ  loop

done:
	KEND1(SUBMIN1)

// Q4KX4CHUNKZ dots chunk c with the four tokens, into Z16+t (even c) or
// Z20+t (odd c): a0..a3.
#define Q4KX4CHUNKZ(c, a0, a1, a2, a3) \
	Q4KNIB(c); \
	Q4KTOK(64*c(DI), 8*c, a0); \
	Q4KTOK(64*c(DI)(R9*1), 32+8*c, a1); \
	Q4KTOK(64*c(DI)(R9*2), 64+8*c, a2); \
	Q4KTOK(64*c(DI)(R10*1), 96+8*c, a3)

// func kernDotQ4_Kx4AVX512(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ4_Kx4AVX512(SB), NOSPLIT, $128-104
	KSETUP4
	VXORPS Y24, Y24, Y24
	VXORPS Y25, Y25, Y25
	VXORPS Y26, Y26, Y26
	VXORPS Y27, Y27, Y27
	TESTQ CX, CX
	JZ   done

loop:
	Q4KHEAD
	VMULPS  (DX), Y6, Y8
	VMOVUPS Y8, 0(SP)
	VMULPS  (DX)(R11*1), Y6, Y8
	VMOVUPS Y8, 32(SP)
	VMULPS  (DX)(R11*2), Y6, Y8
	VMOVUPS Y8, 64(SP)
	VMULPS  (DX)(R12*1), Y6, Y8
	VMOVUPS Y8, 96(SP)
	VFMADD231PS (R8), Y7, Y24
	VFMADD231PS (R8)(R11*1), Y7, Y25
	VFMADD231PS (R8)(R11*2), Y7, Y26
	VFMADD231PS (R8)(R12*1), Y7, Y27
	Q4KX4CHUNKZ(0, Z16, Z17, Z18, Z19)
	Q4KX4CHUNKZ(1, Z20, Z21, Z22, Z23)
	Q4KX4CHUNKZ(2, Z16, Z17, Z18, Z19)
	Q4KX4CHUNKZ(3, Z20, Z21, Z22, Z23)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $32, DX
	ADDQ $32, R8
	DECQ CX
	JNZ  loop

done:
	KEND4(SUBMIN4)

// func kernDotQ6_KAVX512(w []byte, xq []int8, xd, xs []float32) float32
//
// The sixteen d·sc·xd of each 256-value block are kept in Z24.
TEXT ·kernDotQ6_KAVX512(SB), NOSPLIT, $0-100
	KSETUP1
	Q6KSETUP
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	TESTQ CX, CX
	JZ   done

loop:
	Q6KHEAD
	Q6KSC((DX), Z24)
	Q6KPAIR01(0)
	Q6KTOK(0(DI), Z24, Z10, Z0)
	Q6KPAIR23
	Q6KTOK(64(DI), Z24, Z28, Z1)
	Q6KPAIR01(1)
	Q6KTOK(128(DI), Z24, Z29, Z0)
	Q6KPAIR23
	Q6KTOK(192(DI), Z24, Z30, Z1)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  loop

done:
	KEND1(NOMIN)

// Q6KX4TOKS runs Q6KTOK for the four tokens (scales in Z24..Z27) on the
// pair of blocks at activation offset xo, with scale order q, into
// a0..a3.
#define Q6KX4TOKS(xo, q, a0, a1, a2, a3) \
	Q6KTOK(xo(DI), Z24, q, a0); \
	Q6KTOK(xo(DI)(R9*1), Z25, q, a1); \
	Q6KTOK(xo(DI)(R9*2), Z26, q, a2); \
	Q6KTOK(xo(DI)(R10*1), Z27, q, a3)

// func kernDotQ6_Kx4AVX512(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ6_Kx4AVX512(SB), NOSPLIT, $0-104
	KSETUP4
	Q6KSETUP
	TESTQ CX, CX
	JZ   done

loop:
	Q6KHEAD
	Q6KSC((DX), Z24)
	Q6KSC((DX)(R11*1), Z25)
	Q6KSC((DX)(R11*2), Z26)
	Q6KSC((DX)(R12*1), Z27)
	Q6KPAIR01(0)
	Q6KX4TOKS(0, Z10, Z16, Z17, Z18, Z19)
	Q6KPAIR23
	Q6KX4TOKS(64, Z28, Z20, Z21, Z22, Z23)
	Q6KPAIR01(1)
	Q6KX4TOKS(128, Z29, Z16, Z17, Z18, Z19)
	Q6KPAIR23
	Q6KX4TOKS(192, Z30, Z20, Z21, Z22, Z23)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  loop

done:
	KEND4(NOMIN)

// The eight-token kernels. X8SETUP512 loads the rows of tokens 0..3 as
// X4SETUP512 does (xq at DI, strides R9 and R10 = 3·R9; scales at DX,
// strides R11 and R12), and those of tokens 4..7 four rows further on:
// xq at R13, scales at R8.
#define X8SETUP512 \
	MOVQ w_base+8(FP), SI; \
	MOVQ xq_base+32(FP), DI; \
	MOVQ xq_len+40(FP), R9; \
	SHRQ $3, R9; \
	LEAQ (R9)(R9*2), R10; \
	LEAQ (DI)(R9*4), R13; \
	MOVQ xd_base+56(FP), DX; \
	MOVQ xd_len+64(FP), CX; \
	SHRQ $3, CX; \
	MOVQ CX, R11; \
	SHLQ $2, R11; \
	LEAQ (R11)(R11*2), R12; \
	LEAQ (DX)(R11*4), R8

// TOKPAIRM is TOKPAIR with one accumulator: block b's terms go to its lanes
// 0..7 and block b+1's to lanes 8..15, the lanes TOKPAIR's accA and accB
// use (the other lanes of each stay zero). So acc holds exactly what
// VADDPS accB, accA gives there, and a token gets the same bits.
#define TOKPAIRM(x, do, db, acc) \
	VMOVDQU64   x, Z6; \
	VPSUBB      Z6, Z31, K1, Z6; \
	VPXORD      Z7, Z7, Z7; \
	VPDPBUSD    Z6, Z3, Z7; \
	VCVTDQ2PS   Z7, Z7; \
	VMULPS      Z4, Z7, Z7; \
	VFMADD231PS.BCST do db, Z7, K2, acc; \
	VFMADD231PS.BCST 4+do db, Z7, K3, acc

// FOLDZTO sets the ymm register y to the sum of the halves of z, as FOLDZ
// does (lower half plus upper half).
#define FOLDZTO(z, zy, y) \
	VEXTRACTF64X4 $1, z, y; \
	VADDPS        y, zy, y

// HSUM4AT is HSUM4Z storing at res+off.
#define HSUM4AT(a, ax, b, c, d, off) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF128 $1, a, X13; \
	VADDPS X13, ax, ax; \
	MOVQ res+0(FP), AX; \
	VMOVUPS ax, off(AX)

// DOT8 is the body of an eight-token kernel over blocks of bsz bytes: DOT4
// for eight tokens, with one accumulator per token (Z16..Z23), folded into
// Y8..Y11 (tokens 0..3) and Y0, Y1, Y5, Y15 (tokens 4..7) for the last odd
// block and the horizontal sums, which need VEX registers.
#define DOT8(pair, one, bsz) \
	X8SETUP512; \
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
	TOKPAIRM((DI), 0, (DX), Z16); \
	TOKPAIRM((DI)(R9*1), 0, (DX)(R11*1), Z17); \
	TOKPAIRM((DI)(R9*2), 0, (DX)(R11*2), Z18); \
	TOKPAIRM((DI)(R10*1), 0, (DX)(R12*1), Z19); \
	TOKPAIRM((R13), 0, (R8), Z20); \
	TOKPAIRM((R13)(R9*1), 0, (R8)(R11*1), Z21); \
	TOKPAIRM((R13)(R9*2), 0, (R8)(R11*2), Z22); \
	TOKPAIRM((R13)(R10*1), 0, (R8)(R12*1), Z23); \
	ADDQ $(2*bsz), SI; \
	ADDQ $64, DI; \
	ADDQ $64, R13; \
	ADDQ $8, DX; \
	ADDQ $8, R8; \
	SUBQ $2, CX; \
	JMP  loop2; \
tail:; \
	FOLDZTO(Z16, Y16, Y8); \
	FOLDZTO(Z17, Y17, Y9); \
	FOLDZTO(Z18, Y18, Y10); \
	FOLDZTO(Z19, Y19, Y11); \
	FOLDZTO(Z20, Y20, Y0); \
	FOLDZTO(Z21, Y21, Y1); \
	FOLDZTO(Z22, Y22, Y5); \
	FOLDZTO(Z23, Y23, Y15); \
	TESTQ CX, CX; \
	JZ   done; \
	one; \
	TOKONE((DI), (DX), Y8); \
	TOKONE((DI)(R9*1), (DX)(R11*1), Y9); \
	TOKONE((DI)(R9*2), (DX)(R11*2), Y10); \
	TOKONE((DI)(R10*1), (DX)(R12*1), Y11); \
	TOKONE((R13), (R8), Y0); \
	TOKONE((R13)(R9*1), (R8)(R11*1), Y1); \
	TOKONE((R13)(R9*2), (R8)(R11*2), Y5); \
	TOKONE((R13)(R10*1), (R8)(R12*1), Y15); \
done:; \
	HSUM4AT(Y8, X8, Y9, Y10, Y11, 0); \
	HSUM4AT(Y0, X0, Y1, Y5, Y15, 16); \
	VZEROUPPER; \
	RET

// func kernDotQ8_0x8AVX512(res *[8]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ8_0x8AVX512(SB), NOSPLIT, $0-104
	DOT8(PAIRQ8, ONEQ8, 34)

// func kernDotQ4_0x8AVX512(res *[8]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ4_0x8AVX512(SB), NOSPLIT, $0-104
	DOT8(PAIRQ4, ONEQ4, 18)

// func kernDotQ5_0x8AVX512(res *[8]float32, w []byte, xq []int8, xd, xs []float32)
TEXT ·kernDotQ5_0x8AVX512(SB), NOSPLIT, $0-104
	DOT8(PAIRQ5, ONEQ5, 22)


// func kernDotQ8_0RowsAVX512(out []float32, w []byte, rb int, xq []int8, xd, xs []float32, xc []int32)
TEXT ·kernDotQ8_0RowsAVX512(SB), NOSPLIT, $0-152
	DOTROWS(PAIRQ8, ROWSTOK, ONEQ8, ROWSONE, 34)

// func kernDotQ4_0RowsAVX512(out []float32, w []byte, rb int, xq []int8, xd, xs []float32, xc []int32)
TEXT ·kernDotQ4_0RowsAVX512(SB), NOSPLIT, $0-152
	DOTROWS(PAIRQ4U, ROWSTOKU, ONEQ4U, ROWSONEU, 18)

// func kernDotQ5_0RowsAVX512(out []float32, w []byte, rb int, xq []int8, xd, xs []float32, xc []int32)
TEXT ·kernDotQ5_0RowsAVX512(SB), NOSPLIT, $0-152
	DOTROWS(PAIRQ5, ROWSTOK, ONEQ5, ROWSONE, 22)

// func kernDotF16x2x4AVX512(res *[8]float32, w []byte, x []float32, stride int)
TEXT ·kernDotF16x2x4AVX512(SB), NOSPLIT, $0-64
	FX2X4F16
