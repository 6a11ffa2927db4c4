//go:build !amd64 || purego

package sample

// argmax is argmaxGo: this build has no SIMD kernels.
func argmax(logits []float32) int { return argmaxGo(logits) }

// expBlocks is expBlocksGo: this build has no SIMD kernels.
func expBlocks(dst, src []float32, m, invT float32, sums []float64) {
	expBlocksGo(dst, src, m, invT, sums)
}

// firstAbove is firstAboveGo: this build has no SIMD kernels.
func firstAbove(x []float32, floor float32) int { return firstAboveGo(x, floor) }
