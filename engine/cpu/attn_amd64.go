//go:build amd64 && !purego

package cpu

// The attention kernels of attn_amd64.s, with the arguments of attnSet's
// functions.

//go:noescape
func attnDotsF32AVX2(s, q, k []float32, scale float32)

//go:noescape
func attnDotsF16AVX2(s, q []float32, k []byte, scale float32)

//go:noescape
func attnExpSumAVX2(s []float32, m float32) float32

//go:noescape
func attnMaxAVX2(s []float32) float32

//go:noescape
func attnAccF32AVX2(acc, p, v []float32, c float32)

//go:noescape
func attnAccF16AVX2(acc, p []float32, v []byte, c float32)

//go:noescape
func attnDotsF32AVX512(s, q, k []float32, scale float32)

//go:noescape
func attnDotsF16AVX512(s, q []float32, k []byte, scale float32)

//go:noescape
func attnExpSumAVX512(s []float32, m float32) float32

//go:noescape
func attnMaxAVX512(s []float32) float32

//go:noescape
func attnAccF32AVX512(acc, p, v []float32, c float32)

//go:noescape
func attnAccF16AVX512(acc, p []float32, v []byte, c float32)

//go:noescape
func swigluAVX512(gate, up []float32)

//go:noescape
func dequantQ8_0AVX2(dst []float32, src []byte)

//go:noescape
func dequantQ4_0AVX2(dst []float32, src []byte)

//go:noescape
func dequantQ8_0AVX512(dst []float32, src []byte)

//go:noescape
func dequantQ4_0AVX512(dst []float32, src []byte)

func init() {
	if kernBest >= kernLevelAVX2 {
		attnSets[kernLevelAVX2] = &attnSet{
			dotsF32: attnDotsF32AVX2,
			dotsF16: attnDotsF16AVX2,
			expSum:  attnExpSumAVX2,
			max:     attnMaxAVX2,
			accF32:  attnAccF32AVX2,
			accF16:  attnAccF16AVX2,
			swiglu:  swigluGo,

			dequantQ8_0: dequantQ8_0AVX2,
			dequantQ4_0: dequantQ4_0AVX2,
		}
	}
	if kernBest >= kernLevelAVX512 {
		attnSets[kernLevelAVX512] = &attnSet{
			dotsF32: attnDotsF32AVX512,
			dotsF16: attnDotsF16AVX512,
			expSum:  attnExpSumAVX512,
			max:     attnMaxAVX512,
			accF32:  attnAccF32AVX512,
			accF16:  attnAccF16AVX512,
			swiglu:  swigluAVX512,

			dequantQ8_0: dequantQ8_0AVX512,
			dequantQ4_0: dequantQ4_0AVX512,
		}
	}
}
