//go:build amd64 && !purego

package sample

import "golang.org/x/sys/cpu"

// useAVX512 says whether the AVX-512 kernels (simd_amd64.s) run: they need
// AVX-512 F only, and x/sys/cpu checks that the OS saves the ZMM registers.
var useAVX512 = cpu.X86.HasAVX512F

// argmaxLanes is the number of logits argmaxAVX512 takes per iteration:
// four registers of 16.
const argmaxLanes = 64

// argmaxAVX512 sets, for each lane j of its four registers, vals[j] to the
// largest of x[i] over the i with i%64 == j (-Inf if none is above -Inf,
// NaN counting as -Inf) and ids[j] to the first such i. len(x) is a
// positive multiple of 64.
//
//go:noescape
func argmaxAVX512(x []float32, vals *[argmaxLanes]float32, ids *[argmaxLanes]int32)

// firstAboveAVX512 returns the index of the first of x above floor (an
// ordered comparison: false for NaN), or len(x) if none is. len(x) is a
// positive multiple of 16.
//
//go:noescape
func firstAboveAVX512(x []float32, floor float32) int

// expBlocksAVX512 is expBlocksGo with AVX-512, bit for bit: the same
// float32 operations in the same order (no fused multiply-adds), and each
// block summed in the lanes of laneSums, folded in its order.
//
//go:noescape
func expBlocksAVX512(dst, src []float32, m, invT float32, sums []float64)

// argmax is argmaxGo, with AVX-512 where the CPU has it: per-lane maxima
// and their first indices over the longest prefix of whole iterations, the
// lowest index among the lanes that hold the maximum, then the rest in Go.
func argmax(logits []float32) int {
	n := len(logits) &^ (argmaxLanes - 1)
	if !useAVX512 || n == 0 {
		return argmaxGo(logits)
	}
	var vals [argmaxLanes]float32
	var ids [argmaxLanes]int32
	argmaxAVX512(logits[:n], &vals, &ids)
	best, m := -1, negInf
	for j, v := range vals {
		if v > m || (v == m && v > negInf && int(ids[j]) < best) {
			best, m = int(ids[j]), v
		}
	}
	for i, l := range logits[n:] {
		if l > m {
			best, m = n+i, l
		}
	}
	return best
}

// firstAbove is firstAboveGo, with AVX-512 where the CPU has it: 16
// comparisons at a time over the longest prefix of whole registers, then
// the rest in Go.
func firstAbove(x []float32, floor float32) int {
	i := 0
	if n := len(x) &^ (numLanes - 1); useAVX512 && n > 0 {
		if i = firstAboveAVX512(x[:n], floor); i < n {
			return i
		}
	}
	return i + firstAboveGo(x[i:], floor)
}

// expBlocks is expBlocksGo, with AVX-512 where the CPU has it.
func expBlocks(dst, src []float32, m, invT float32, sums []float64) {
	if useAVX512 {
		expBlocksAVX512(dst, src, m, invT, sums)
		return
	}
	expBlocksGo(dst, src, m, invT, sums)
}
