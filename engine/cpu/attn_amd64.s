//go:build amd64 && !purego

#include "textflag.h"

// Attention kernels (attn.go, attnSet) in AVX2 and AVX-512. Each level has
// an F32 and an F16 variant of the key dots and the value sums, built from
// one macro whose loads differ: VCVTPH2PS is exact, so both give the same
// bits on the same values. Scores are computed four keys at a time, one
// accumulator per key, reduced together (HSUM4Z's order); a group short of
// four keys repeats its first key and stores only its own results, so a
// key's score never depends on its neighbours. Value sums keep a stripe of
// the output in registers and add the keys into it in order.
//
// The exponential is expNeg's algorithm, operation for operation (separate
// multiplies and adds, truncating conversion), so that each value has
// expNeg's bits; only the sum is added in a different order.

// attnConst: the float32 constants of expNeg, the exponent bias, and
// attnMask: eight all-ones lanes then eight zero lanes (AVX2 tail masks).
DATA attnConst<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA attnConst<>+4(SB)/4, $0x3f000000  // 1/2
DATA attnConst<>+8(SB)/4, $0x3f317200  // ln2hi
DATA attnConst<>+12(SB)/4, $0x35bfbe8e // ln2lo
DATA attnConst<>+16(SB)/4, $0x3f800000 // 1
DATA attnConst<>+20(SB)/4, $0x3e2aaaab // 1/6
DATA attnConst<>+24(SB)/4, $0x3d2aaaab // 1/24
DATA attnConst<>+28(SB)/4, $0x3c088889 // 1/120
DATA attnConst<>+32(SB)/4, $0x3ab60b61 // 1/720
DATA attnConst<>+36(SB)/4, $0xc2ae999a // -87.3
DATA attnConst<>+40(SB)/4, $0x0000007f // 127
DATA attnConst<>+44(SB)/4, $0
GLOBL attnConst<>(SB), RODATA|NOPTR, $48

DATA attnMask<>+0(SB)/8, $-1
DATA attnMask<>+8(SB)/8, $-1
DATA attnMask<>+16(SB)/8, $-1
DATA attnMask<>+24(SB)/8, $-1
DATA attnMask<>+32(SB)/8, $0
DATA attnMask<>+40(SB)/8, $0
DATA attnMask<>+48(SB)/8, $0
DATA attnMask<>+56(SB)/8, $0
GLOBL attnMask<>(SB), RODATA|NOPTR, $64

// KEYPTRS points R8..R11 at the next four keys (stride R12) of the BX >= 1
// left, repeating the first where fewer than four are left.
#define KEYPTRS \
	MOVQ R8, R9; \
	MOVQ R8, R10; \
	MOVQ R8, R11; \
	CMPQ BX, $2; \
	JB   ptrs; \
	LEAQ (R8)(R12*1), R9; \
	CMPQ BX, $3; \
	JB   ptrs; \
	LEAQ (R9)(R12*1), R10; \
	CMPQ BX, $4; \
	JB   ptrs; \
	LEAQ (R10)(R12*1), R11; \
ptrs:

// HSUM4Y leaves in X0 the horizontal sums of Y0..Y3 (clobbered), one per
// lane, as HSUM4Z adds them.
#define HSUM4Y \
	VHADDPS      Y1, Y0, Y0; \
	VHADDPS      Y3, Y2, Y2; \
	VHADDPS      Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X5; \
	VADDPS       X5, X0, X0

// STORE4 stores the four scores in X0 at DI, or the BX < 4 that are left,
// and moves on to the next group of keys (or returns).
#define STORE4 \
	CMPQ BX, $4; \
	JB   part; \
	VMOVUPS X0, (DI); \
	ADDQ    $16, DI; \
	SUBQ    $4, BX; \
	LEAQ    (R11)(R12*1), R8; \
	JMP     group; \
part:; \
	VMOVSS X0, (DI); \
	CMPQ   BX, $2; \
	JB     done; \
	VEXTRACTPS $1, X0, 4(DI); \
	CMPQ   BX, $3; \
	JB     done; \
	VEXTRACTPS $2, X0, 8(DI); \
done:; \
	VZEROUPPER; \
	RET

// AVX2 macros.

// Key loaders: 8 values of key b at offset R13 into y; tail loaders: value
// R13 of the four keys into the lanes of X11.
#define KF32Y(b, y) VMOVUPS (b)(R13*1), y
#define KF16Y(b, y) VCVTPH2PS (b)(R13*1), y
#define TF32Y \
	VMOVSS    (R8)(R13*1), X11; \
	VINSERTPS $0x10, (R9)(R13*1), X11, X11; \
	VINSERTPS $0x20, (R10)(R13*1), X11, X11; \
	VINSERTPS $0x30, (R11)(R13*1), X11, X11
#define TF16Y \
	VPINSRW   $0, (R8)(R13*1), X11, X11; \
	VPINSRW   $1, (R9)(R13*1), X11, X11; \
	VPINSRW   $2, (R10)(R13*1), X11, X11; \
	VPINSRW   $3, (R11)(R13*1), X11, X11; \
	VCVTPH2PS X11, X11

// DOTS256 is dotsF32/dotsF16: keys of es bytes a value (sh its log2); the
// query is at (SI)(R13*qs). Y0..Y3 accumulate four keys' 8-value chunks;
// the hd%8 tail values accumulate in X10 one lane per key, added after
// the reduction.
#define DOTS256(ld, tl, qs, es, sh) \
	MOVQ s_base+0(FP), DI; \
	MOVQ s_len+8(FP), BX; \
	MOVQ q_base+24(FP), SI; \
	MOVQ q_len+32(FP), DX; \
	MOVQ k_base+48(FP), R8; \
	VBROADCASTSS scale+72(FP), X15; \
	MOVQ DX, R12; \
	SHLQ $sh, R12; \
	SHRQ $3, DX; \
group:; \
	TESTQ BX, BX; \
	JZ    done; \
	KEYPTRS; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS X10, X10, X10; \
	XORQ   R13, R13; \
	MOVQ   DX, CX; \
chunk:; \
	TESTQ CX, CX; \
	JZ    tail; \
	VMOVUPS (SI)(R13*qs), Y4; \
	ld(R8, Y5); \
	ld(R9, Y6); \
	ld(R10, Y7); \
	ld(R11, Y8); \
	VFMADD231PS Y5, Y4, Y0; \
	VFMADD231PS Y6, Y4, Y1; \
	VFMADD231PS Y7, Y4, Y2; \
	VFMADD231PS Y8, Y4, Y3; \
	ADDQ $(8*es), R13; \
	DECQ CX; \
	JMP  chunk; \
tail:; \
	MOVQ q_len+32(FP), CX; \
	ANDQ $7, CX; \
	JZ   reduce; \
tloop:; \
	tl; \
	VBROADCASTSS (SI)(R13*qs), X12; \
	VFMADD231PS  X12, X11, X10; \
	ADDQ $es, R13; \
	DECQ CX; \
	JNZ  tloop; \
reduce:; \
	HSUM4Y; \
	VADDPS X10, X0, X0; \
	VMULPS X15, X0, X0; \
	STORE4

// Value loaders: 8 values at off(R9) into y; one value at (R9) into x.
#define VF32Y(off, y) VMOVUPS off(R9), y
#define VF16Y(off, y) VCVTPH2PS off(R9), y
#define VF32S(x) VMOVSS (R9), x
#define VF16S(x) \
	VPINSRW   $0, (R9), x, x; \
	VCVTPH2PS x, x

// ACC256 is accF32/accF16: stripes of 32 outputs in Y0..Y3, then of 8 in
// Y0, then single outputs in X0, each scaled by c and then summing the
// keys in order. o1..o3 are the byte offsets of 8, 16 and 24 values.
#define ACC256(ld, lds, es, sh, o1, o2, o3) \
	MOVQ acc_base+0(FP), DI; \
	MOVQ acc_len+8(FP), DX; \
	MOVQ p_base+24(FP), SI; \
	MOVQ p_len+32(FP), BX; \
	MOVQ v_base+48(FP), R8; \
	VBROADCASTSS c+72(FP), Y14; \
	MOVQ DX, R12; \
	SHLQ $sh, R12; \
	MOVQ DX, CX; \
	SHRQ $5, CX; \
quad:; \
	TESTQ CX, CX; \
	JZ    single; \
	VMULPS (DI), Y14, Y0; \
	VMULPS 32(DI), Y14, Y1; \
	VMULPS 64(DI), Y14, Y2; \
	VMULPS 96(DI), Y14, Y3; \
	MOVQ R8, R9; \
	XORQ AX, AX; \
qkey:; \
	CMPQ AX, BX; \
	JAE  qstore; \
	VBROADCASTSS (SI)(AX*4), Y4; \
	ld(0, Y5); \
	ld(o1, Y6); \
	ld(o2, Y7); \
	ld(o3, Y8); \
	VFMADD231PS Y5, Y4, Y0; \
	VFMADD231PS Y6, Y4, Y1; \
	VFMADD231PS Y7, Y4, Y2; \
	VFMADD231PS Y8, Y4, Y3; \
	ADDQ R12, R9; \
	INCQ AX; \
	JMP  qkey; \
qstore:; \
	VMOVUPS Y0, (DI); \
	VMOVUPS Y1, 32(DI); \
	VMOVUPS Y2, 64(DI); \
	VMOVUPS Y3, 96(DI); \
	ADDQ $128, DI; \
	ADDQ $(32*es), R8; \
	DECQ CX; \
	JMP  quad; \
single:; \
	MOVQ DX, CX; \
	SHRQ $3, CX; \
	ANDQ $3, CX; \
sloop:; \
	TESTQ CX, CX; \
	JZ    tail; \
	VMULPS (DI), Y14, Y0; \
	MOVQ R8, R9; \
	XORQ AX, AX; \
skey:; \
	CMPQ AX, BX; \
	JAE  sstore; \
	VBROADCASTSS (SI)(AX*4), Y4; \
	ld(0, Y5); \
	VFMADD231PS Y5, Y4, Y0; \
	ADDQ R12, R9; \
	INCQ AX; \
	JMP  skey; \
sstore:; \
	VMOVUPS Y0, (DI); \
	ADDQ $32, DI; \
	ADDQ $(8*es), R8; \
	DECQ CX; \
	JMP  sloop; \
tail:; \
	MOVQ DX, CX; \
	ANDQ $7, CX; \
	JZ   done; \
tel:; \
	VMOVSS (DI), X0; \
	VMULSS X14, X0, X0; \
	MOVQ R8, R9; \
	XORQ AX, AX; \
tkey:; \
	CMPQ AX, BX; \
	JAE  tstore; \
	VMOVSS (SI)(AX*4), X4; \
	lds(X5); \
	VFMADD231SS X5, X4, X0; \
	ADDQ R12, R9; \
	INCQ AX; \
	JMP  tkey; \
tstore:; \
	VMOVSS X0, (DI); \
	ADDQ $4, DI; \
	ADDQ $es, R8; \
	DECQ CX; \
	JNZ  tel; \
done:; \
	VZEROUPPER; \
	RET

// EXPY sets Y0 to e^(Y0-Y15), expNeg's steps lane by lane, 0 where the
// difference is not above -87.3. Constants: Y14 -87.3, Y13 log2(e), Y12
// 1/2, Y11 ln2hi, Y10 ln2lo, Y9 1, Y8 127; Y1..Y5 scratch.
#define EXPY \
	VSUBPS       Y15, Y0, Y0; \
	VCMPPS       $0x1e, Y14, Y0, Y5; \
	VMULPS       Y13, Y0, Y1; \
	VSUBPS       Y12, Y1, Y1; \
	VCVTTPS2DQ   Y1, Y1; \
	VCVTDQ2PS    Y1, Y2; \
	VMULPS       Y11, Y2, Y3; \
	VSUBPS       Y3, Y0, Y0; \
	VMULPS       Y10, Y2, Y3; \
	VSUBPS       Y3, Y0, Y0; \
	VBROADCASTSS attnConst<>+32(SB), Y4; \
	VMULPS       Y0, Y4, Y4; \
	VBROADCASTSS attnConst<>+28(SB), Y3; \
	VADDPS       Y3, Y4, Y4; \
	VMULPS       Y0, Y4, Y4; \
	VBROADCASTSS attnConst<>+24(SB), Y3; \
	VADDPS       Y3, Y4, Y4; \
	VMULPS       Y0, Y4, Y4; \
	VBROADCASTSS attnConst<>+20(SB), Y3; \
	VADDPS       Y3, Y4, Y4; \
	VMULPS       Y0, Y4, Y4; \
	VADDPS       Y12, Y4, Y4; \
	VMULPS       Y0, Y4, Y4; \
	VADDPS       Y9, Y4, Y4; \
	VMULPS       Y0, Y4, Y4; \
	VADDPS       Y9, Y4, Y4; \
	VPADDD       Y8, Y1, Y1; \
	VPSLLD       $23, Y1, Y1; \
	VMULPS       Y1, Y4, Y0; \
	VANDPS       Y5, Y0, Y0

// AVX-512 macros.

// Key loaders: 16 values of key b at offset R13 into z (y its lower half),
// and the K1 lanes of them, zeroing the others.
#define KF32Z(b, z, y) VMOVUPS (b)(R13*1), z
#define KF16Z(b, z, y) VCVTPH2PS (b)(R13*1), z
#define TF32Z(b, z, y) VMOVUPS.Z (b)(R13*1), K1, z
#define TF16Z(b, z, y) \
	VMOVDQU16.Z (b)(R13*1), K1, y; \
	VCVTPH2PS   y, z

// DOTS512 is DOTS256 in zmm registers with a masked tail of hd%16 values.
#define DOTS512(ld, ldt, qs, es, sh) \
	MOVQ s_base+0(FP), DI; \
	MOVQ s_len+8(FP), BX; \
	MOVQ q_base+24(FP), SI; \
	MOVQ q_len+32(FP), DX; \
	MOVQ k_base+48(FP), R8; \
	VBROADCASTSS scale+72(FP), X15; \
	MOVQ DX, R12; \
	SHLQ $sh, R12; \
	MOVQ DX, CX; \
	ANDQ $15, CX; \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1; \
	SHRQ $4, DX; \
group:; \
	TESTQ BX, BX; \
	JZ    done; \
	KEYPTRS; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	XORQ   R13, R13; \
	MOVQ   DX, CX; \
chunk:; \
	TESTQ CX, CX; \
	JZ    tail; \
	VMOVUPS (SI)(R13*qs), Z4; \
	ld(R8, Z5, Y5); \
	ld(R9, Z6, Y6); \
	ld(R10, Z7, Y7); \
	ld(R11, Z8, Y8); \
	VFMADD231PS Z5, Z4, Z0; \
	VFMADD231PS Z6, Z4, Z1; \
	VFMADD231PS Z7, Z4, Z2; \
	VFMADD231PS Z8, Z4, Z3; \
	ADDQ $(16*es), R13; \
	DECQ CX; \
	JMP  chunk; \
tail:; \
	KORTESTW K1, K1; \
	JZ       reduce; \
	VMOVUPS.Z (SI)(R13*qs), K1, Z4; \
	ldt(R8, Z5, Y5); \
	ldt(R9, Z6, Y6); \
	ldt(R10, Z7, Y7); \
	ldt(R11, Z8, Y8); \
	VFMADD231PS Z5, Z4, Z0; \
	VFMADD231PS Z6, Z4, Z1; \
	VFMADD231PS Z7, Z4, Z2; \
	VFMADD231PS Z8, Z4, Z3; \
reduce:; \
	VEXTRACTF64X4 $1, Z0, Y5; \
	VADDPS        Y5, Y0, Y0; \
	VEXTRACTF64X4 $1, Z1, Y5; \
	VADDPS        Y5, Y1, Y1; \
	VEXTRACTF64X4 $1, Z2, Y5; \
	VADDPS        Y5, Y2, Y2; \
	VEXTRACTF64X4 $1, Z3, Y5; \
	VADDPS        Y5, Y3, Y3; \
	HSUM4Y; \
	VMULPS X15, X0, X0; \
	STORE4

// Value loaders: 16 values at off(R9) into z; the K1 lanes at (R9).
#define VF32Z(off, z, y) VMOVUPS off(R9), z
#define VF16Z(off, z, y) VCVTPH2PS off(R9), z
#define VTF32Z(z, y) VMOVUPS.Z (R9), K1, z
#define VTF16Z(z, y) \
	VMOVDQU16.Z (R9), K1, y; \
	VCVTPH2PS   y, z

// ACC512 is ACC256 in zmm registers: stripes of 64 and 16 outputs, then a
// masked stripe of the vd%16 left. o1..o3: byte offsets of 16, 32, 48
// values.
#define ACC512(ld, ldt, es, sh, o1, o2, o3) \
	MOVQ acc_base+0(FP), DI; \
	MOVQ acc_len+8(FP), DX; \
	MOVQ p_base+24(FP), SI; \
	MOVQ p_len+32(FP), BX; \
	MOVQ v_base+48(FP), R8; \
	VBROADCASTSS c+72(FP), Z30; \
	MOVQ DX, R12; \
	SHLQ $sh, R12; \
	MOVQ DX, CX; \
	SHRQ $6, CX; \
quad:; \
	TESTQ CX, CX; \
	JZ    single; \
	VMULPS (DI), Z30, Z0; \
	VMULPS 64(DI), Z30, Z1; \
	VMULPS 128(DI), Z30, Z2; \
	VMULPS 192(DI), Z30, Z3; \
	MOVQ R8, R9; \
	XORQ AX, AX; \
qkey:; \
	CMPQ AX, BX; \
	JAE  qstore; \
	VBROADCASTSS (SI)(AX*4), Z4; \
	ld(0, Z5, Y5); \
	ld(o1, Z6, Y6); \
	ld(o2, Z7, Y7); \
	ld(o3, Z8, Y8); \
	VFMADD231PS Z5, Z4, Z0; \
	VFMADD231PS Z6, Z4, Z1; \
	VFMADD231PS Z7, Z4, Z2; \
	VFMADD231PS Z8, Z4, Z3; \
	ADDQ R12, R9; \
	INCQ AX; \
	JMP  qkey; \
qstore:; \
	VMOVUPS Z0, (DI); \
	VMOVUPS Z1, 64(DI); \
	VMOVUPS Z2, 128(DI); \
	VMOVUPS Z3, 192(DI); \
	ADDQ $256, DI; \
	ADDQ $(64*es), R8; \
	DECQ CX; \
	JMP  quad; \
single:; \
	MOVQ DX, CX; \
	SHRQ $4, CX; \
	ANDQ $3, CX; \
sloop:; \
	TESTQ CX, CX; \
	JZ    tail; \
	VMULPS (DI), Z30, Z0; \
	MOVQ R8, R9; \
	XORQ AX, AX; \
skey:; \
	CMPQ AX, BX; \
	JAE  sstore; \
	VBROADCASTSS (SI)(AX*4), Z4; \
	ld(0, Z5, Y5); \
	VFMADD231PS Z5, Z4, Z0; \
	ADDQ R12, R9; \
	INCQ AX; \
	JMP  skey; \
sstore:; \
	VMOVUPS Z0, (DI); \
	ADDQ $64, DI; \
	ADDQ $(16*es), R8; \
	DECQ CX; \
	JMP  sloop; \
tail:; \
	MOVQ DX, CX; \
	ANDQ $15, CX; \
	JZ   done; \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1; \
	VMOVUPS.Z (DI), K1, Z0; \
	VMULPS Z30, Z0, Z0; \
	MOVQ R8, R9; \
	XORQ AX, AX; \
tkey:; \
	CMPQ AX, BX; \
	JAE  tstore; \
	VBROADCASTSS (SI)(AX*4), Z4; \
	ldt(Z5, Y5); \
	VFMADD231PS Z5, Z4, Z0; \
	ADDQ R12, R9; \
	INCQ AX; \
	JMP  tkey; \
tstore:; \
	VMOVUPS Z0, K1, (DI); \
done:; \
	VZEROUPPER; \
	RET

// EXPZ is EXPY in zmm registers, with the valid lanes in K2. Constants:
// Z30 m, Z16 log2(e), Z17 1/2, Z18 ln2hi, Z19 ln2lo, Z20 1, Z21 1/6, Z22
// 1/24, Z23 1/120, Z24 1/720, Z25 127, Z26 -87.3.
#define EXPZ \
	VSUBPS     Z30, Z0, Z0; \
	VCMPPS     $0x1e, Z26, Z0, K2; \
	VMULPS     Z16, Z0, Z1; \
	VSUBPS     Z17, Z1, Z1; \
	VCVTTPS2DQ Z1, Z1; \
	VCVTDQ2PS  Z1, Z3; \
	VMULPS     Z18, Z3, Z4; \
	VSUBPS     Z4, Z0, Z0; \
	VMULPS     Z19, Z3, Z4; \
	VSUBPS     Z4, Z0, Z0; \
	VMULPS     Z24, Z0, Z5; \
	VADDPS     Z23, Z5, Z5; \
	VMULPS     Z0, Z5, Z5; \
	VADDPS     Z22, Z5, Z5; \
	VMULPS     Z0, Z5, Z5; \
	VADDPS     Z21, Z5, Z5; \
	VMULPS     Z0, Z5, Z5; \
	VADDPS     Z17, Z5, Z5; \
	VMULPS     Z0, Z5, Z5; \
	VADDPS     Z20, Z5, Z5; \
	VMULPS     Z0, Z5, Z5; \
	VADDPS     Z20, Z5, Z5; \
	VPADDD     Z25, Z1, Z1; \
	VPSLLD     $23, Z1, Z1; \
	VMULPS.Z   Z1, Z5, K2, Z0

// EXPCONSTZ loads EXPZ's constants into Z16..Z26.
#define EXPCONSTZ \
	VBROADCASTSS attnConst<>+0(SB), Z16; \
	VBROADCASTSS attnConst<>+4(SB), Z17; \
	VBROADCASTSS attnConst<>+8(SB), Z18; \
	VBROADCASTSS attnConst<>+12(SB), Z19; \
	VBROADCASTSS attnConst<>+16(SB), Z20; \
	VBROADCASTSS attnConst<>+20(SB), Z21; \
	VBROADCASTSS attnConst<>+24(SB), Z22; \
	VBROADCASTSS attnConst<>+28(SB), Z23; \
	VBROADCASTSS attnConst<>+32(SB), Z24; \
	VPBROADCASTD attnConst<>+40(SB), Z25; \
	VBROADCASTSS attnConst<>+36(SB), Z26

// SWIGLUZ sets Z0 to swigluGo of the gates in Z6 and the ups in Z9; EXPZ's
// constants, Z27 0x7fffffff, Z31 zero. Uses Z1, Z3..Z5, Z7, Z8, Z30, K2, K3.
#define SWIGLUZ \
	VANDPS    Z27, Z6, Z30; \
	VPXORD    Z0, Z0, Z0; \
	EXPZ; \
	VADDPS    Z20, Z0, Z7; \
	VCMPPS    $0x0d, Z31, Z6, K3; \
	VBLENDMPS Z20, Z0, K3, Z8; \
	VDIVPS    Z7, Z8, Z8; \
	VMULPS    Z8, Z6, Z8; \
	VMULPS    Z9, Z8, Z0

// ---- AVX2 ----

// func attnDotsF32AVX2(s, q, k []float32, scale float32)
TEXT ·attnDotsF32AVX2(SB), NOSPLIT, $0-76
	DOTS256(KF32Y, TF32Y, 1, 4, 2)

// func attnDotsF16AVX2(s, q []float32, k []byte, scale float32)
TEXT ·attnDotsF16AVX2(SB), NOSPLIT, $0-76
	DOTS256(KF16Y, TF16Y, 2, 2, 1)

// func attnAccF32AVX2(acc, p, v []float32, c float32)
TEXT ·attnAccF32AVX2(SB), NOSPLIT, $0-76
	ACC256(VF32Y, VF32S, 4, 2, 32, 64, 96)

// func attnAccF16AVX2(acc, p []float32, v []byte, c float32)
TEXT ·attnAccF16AVX2(SB), NOSPLIT, $0-76
	ACC256(VF16Y, VF16S, 2, 1, 16, 32, 48)

// func attnExpSumAVX2(s []float32, m float32) float32
TEXT ·attnExpSumAVX2(SB), NOSPLIT, $0-36
	MOVQ s_base+0(FP), DI
	MOVQ s_len+8(FP), BX
	VBROADCASTSS m+24(FP), Y15
	VBROADCASTSS attnConst<>+36(SB), Y14
	VBROADCASTSS attnConst<>+0(SB), Y13
	VBROADCASTSS attnConst<>+4(SB), Y12
	VBROADCASTSS attnConst<>+8(SB), Y11
	VBROADCASTSS attnConst<>+12(SB), Y10
	VBROADCASTSS attnConst<>+16(SB), Y9
	VPBROADCASTD attnConst<>+40(SB), Y8
	VXORPS Y7, Y7, Y7

loop8:
	CMPQ BX, $8
	JB   tail
	VMOVUPS (DI), Y0
	EXPY
	VMOVUPS Y0, (DI)
	VADDPS  Y0, Y7, Y7
	ADDQ    $32, DI
	SUBQ    $8, BX
	JMP     loop8

tail:
	TESTQ BX, BX
	JZ    sum
	LEAQ  attnMask<>+32(SB), AX
	SHLQ  $2, BX
	SUBQ  BX, AX
	VMOVUPS (AX), Y6
	VMASKMOVPS (DI), Y6, Y0
	EXPY
	VANDPS     Y6, Y0, Y0
	VMASKMOVPS Y0, Y6, (DI)
	VADDPS     Y0, Y7, Y7

sum:
	VEXTRACTF128 $1, Y7, X0
	VADDPS       X0, X7, X7
	VHADDPS      X7, X7, X7
	VHADDPS      X7, X7, X7
	VMOVSS       X7, ret+32(FP)
	VZEROUPPER
	RET

// ---- AVX-512 ----

// func attnDotsF32AVX512(s, q, k []float32, scale float32)
TEXT ·attnDotsF32AVX512(SB), NOSPLIT, $0-76
	DOTS512(KF32Z, TF32Z, 1, 4, 2)

// func attnDotsF16AVX512(s, q []float32, k []byte, scale float32)
TEXT ·attnDotsF16AVX512(SB), NOSPLIT, $0-76
	DOTS512(KF16Z, TF16Z, 2, 2, 1)

// func attnAccF32AVX512(acc, p, v []float32, c float32)
TEXT ·attnAccF32AVX512(SB), NOSPLIT, $0-76
	ACC512(VF32Z, VTF32Z, 4, 2, 64, 128, 192)

// func attnAccF16AVX512(acc, p []float32, v []byte, c float32)
TEXT ·attnAccF16AVX512(SB), NOSPLIT, $0-76
	ACC512(VF16Z, VTF16Z, 2, 1, 32, 64, 96)

// func attnExpSumAVX512(s []float32, m float32) float32
TEXT ·attnExpSumAVX512(SB), NOSPLIT, $0-36
	MOVQ s_base+0(FP), DI
	MOVQ s_len+8(FP), BX
	VBROADCASTSS m+24(FP), Z30
	EXPCONSTZ
	VPXORD Z2, Z2, Z2

loop16:
	CMPQ BX, $16
	JB   tail
	VMOVUPS (DI), Z0
	EXPZ
	VMOVUPS Z0, (DI)
	VADDPS  Z0, Z2, Z2
	ADDQ    $64, DI
	SUBQ    $16, BX
	JMP     loop16

tail:
	TESTQ BX, BX
	JZ    sum
	MOVQ  BX, CX
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z0
	EXPZ
	VMOVAPS.Z Z0, K1, Z0
	VMOVUPS   Z0, K1, (DI)
	VADDPS    Z0, Z2, Z2

sum:
	VEXTRACTF64X4 $1, Z2, Y0
	VADDPS        Y0, Y2, Y2
	VEXTRACTF128  $1, Y2, X0
	VADDPS        X0, X2, X2
	VHADDPS       X2, X2, X2
	VHADDPS       X2, X2, X2
	VMOVSS        X2, ret+32(FP)
	VZEROUPPER
	RET

// func swigluAVX512(gate, up []float32)
//
// swigluGo sixteen values at a time: e = e^-|g| (EXPZ with Z0 = 0 and
// Z30 = |g|), sigmoid(g) = 1/(1+e) where g >= 0 (K3) and e/(1+e) elsewhere
// (NaN included, as swigluGo), then (g·sigmoid(g))·up.
TEXT ·swigluAVX512(SB), NOSPLIT, $0-48
	MOVQ gate_base+0(FP), DI
	MOVQ gate_len+8(FP), BX
	MOVQ up_base+24(FP), SI
	EXPCONSTZ
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z27
	VPXORD Z31, Z31, Z31
	MOVL $0xffff, AX
	KMOVW AX, K1

loop16:
	CMPQ BX, $16
	JB   tail
	VMOVUPS (DI), Z6
	VMOVUPS (SI), Z9
	SWIGLUZ
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	SUBQ    $16, BX
	JMP     loop16

tail:
	TESTQ BX, BX
	JZ    done
	MOVQ  BX, CX
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z6
	VMOVUPS.Z (SI), K1, Z9
	SWIGLUZ
	VMOVUPS   Z0, K1, (DI)

done:
	VZEROUPPER
	RET
