package main

import (
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX-512 kernels of Q2_K, Q3_K, Q5_K, IQ4_XS and IQ4_NL (kquants_avx2.go's
// dotQ2K ... with z set): the same decoding into the stack, then two
// 32-value blocks per zmm register, blocks 2i and 2i+1 in Z16+i (kqWZ), and
// a shuffle tree (kqTreeZ) for the block sums.

func genKQuantsAVX512(a *asm) {
	a.kqTables()
	// kqTreeZ's VPERMD order: block 2i is dword i of the sums, block 2i+1
	// dword 8+i.
	a.data32("kernKqPerm", 0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0)
	for _, n := range []int{1, 4} {
		a.dotQ2K(n, true)
		a.dotQ3K(n, true)
		a.dotQ5K(n, true)
		a.dotIQ4XS(n, true)
		a.dotIQ4NL(n, true)
	}
}

// kqSetupZ sets the AVX-512 kernels' constants: Z30 kernKqPerm, Z31 zero.
func (a *asm) kqSetupZ() {
	a.VMOVDQU64(static("kernKqPerm", 0), Z30)
	a.VPXORD(Z31, Z31, Z31)
}

var (
	// kqWZ holds the weight bytes of blocks 2i and 2i+1 in Z16+i (the
	// unsigned operand of the dots), kqSignZ IQ4_XS's signed values.
	kqWZ    = []VecPhysical{Z16, Z17, Z18, Z19}
	kqSignZ = []VecPhysical{Z20, Z21, Z22, Z23}
)

// kqTreeZ sums the eight int32 lanes of each block that vec(i, y) computes
// into y, blocks 2i (lanes 0..7) and 2i+1 (lanes 8..15) for i = 0..3 into
// Z0..Z3, into lane b of Y0. Uses Z0..Z5 and Z30 (kernKqPerm).
func (a *asm) kqTreeZ(vec func(i int, y VecPhysical)) {
	for i, y := range []VecPhysical{Z0, Z1, Z2, Z3} {
		vec(i, y)
	}
	// Per 128-bit lane: pairwise sums of Z0 and Z1 interleaved, then of
	// Z2 and Z3; then each register's four dwords summed, dword i of
	// 128-bit lane k for Zi.
	a.VPUNPCKLDQ(Z1, Z0, Z4)
	a.VPUNPCKHDQ(Z1, Z0, Z5)
	a.VPADDD(Z5, Z4, Z0)
	a.VPUNPCKLDQ(Z3, Z2, Z4)
	a.VPUNPCKHDQ(Z3, Z2, Z5)
	a.VPADDD(Z5, Z4, Z1)
	a.VPUNPCKLQDQ(Z1, Z0, Z4)
	a.VPUNPCKHQDQ(Z1, Z0, Z5)
	a.VPADDD(Z5, Z4, Z0)
	// Lanes 0 and 1 of Zi are block 2i, lanes 2 and 3 block 2i+1.
	a.VSHUFI32X4(U8(0xb1), Z0, Z0, Z4)
	a.VPADDD(Z4, Z0, Z0)
	a.VPERMD(Z0, Z30, Z0)
}
