//go:build amd64 && !purego

package cpu

import "github.com/llmd/llmd/model/gguf"

// The AVX2 kernels (kernel_amd64.s). Slices are exactly sized as in kernSet:
// a weight row and one token's activations, whose block count is len(xd).

//go:noescape
func kernQuantizeAVX2(xq []int8, xd, xs []float32, x []float32)

//go:noescape
func kernDotF32AVX2(w, x []float32) float32

//go:noescape
func kernDotF16AVX2(w []byte, x []float32) float32

//go:noescape
func kernDotBF16AVX2(w []byte, x []float32) float32

//go:noescape
func kernF16ToF32AVX2(dst []float32, w []byte)

//go:noescape
func kernF32ToF16AVX2(dst []byte, src []float32)

//go:noescape
func kernBF16ToF32AVX2(dst []float32, w []byte)

//go:noescape
func kernDotQ8_0AVX2(w []byte, xq []int8, xd, xs []float32) float32

//go:noescape
func kernDotQ4_0AVX2(w []byte, xq []int8, xd, xs []float32) float32

//go:noescape
func kernDotQ5_0AVX2(w []byte, xq []int8, xd, xs []float32) float32

//go:noescape
func kernDotQ4_KAVX2(w []byte, xq []int8, xd, xs []float32) float32

//go:noescape
func kernDotQ6_KAVX2(w []byte, xq []int8, xd, xs []float32) float32

// The four-token kernels: xq, xd and xs hold four rows.

//go:noescape
func kernDotQ8_0x4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)

//go:noescape
func kernDotQ4_0x4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)

//go:noescape
func kernDotQ5_0x4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)

//go:noescape
func kernDotQ4_Kx4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)

//go:noescape
func kernDotQ6_Kx4AVX2(res *[4]float32, w []byte, xq []int8, xd, xs []float32)

// The four-token float kernels: w is a row of F32, F16 or BF16 values, x
// four rows of activations stride values apart.

//go:noescape
func kernDotF32x4AVX2(res *[4]float32, w []byte, x []float32, stride int)

//go:noescape
func kernDotF16x4AVX2(res *[4]float32, w []byte, x []float32, stride int)

//go:noescape
func kernDotBF16x4AVX2(res *[4]float32, w []byte, x []float32, stride int)

func init() {
	if kernBest < kernLevelAVX2 {
		return
	}
	kernRegister(kernLevelAVX2, &kernSet{
		quantize: kernQuantizeAVX2,
		dotQ: map[gguf.TensorType]func(w []byte, xq []int8, xd, xs []float32) float32{
			gguf.TypeQ4_0: kernDotQ4_0AVX2,
			gguf.TypeQ5_0: kernDotQ5_0AVX2,
			gguf.TypeQ8_0: kernDotQ8_0AVX2,
			gguf.TypeQ4_K: kernDotQ4_KAVX2,
			gguf.TypeQ6_K: kernDotQ6_KAVX2,

			gguf.TypeQ2_K:   kernDotQ2_KAVX2,
			gguf.TypeQ3_K:   kernDotQ3_KAVX2,
			gguf.TypeQ5_K:   kernDotQ5_KAVX2,
			gguf.TypeIQ4_NL: kernDotIQ4_NLAVX2,
			gguf.TypeIQ4_XS: kernDotIQ4_XSAVX2,
		},
		dotQ4: map[gguf.TensorType]func(res *[4]float32, w []byte, xq []int8, xd, xs []float32){
			gguf.TypeQ4_0: kernDotQ4_0x4AVX2,
			gguf.TypeQ5_0: kernDotQ5_0x4AVX2,
			gguf.TypeQ8_0: kernDotQ8_0x4AVX2,
			gguf.TypeQ4_K: kernDotQ4_Kx4AVX2,
			gguf.TypeQ6_K: kernDotQ6_Kx4AVX2,

			gguf.TypeQ2_K:   kernDotQ2_Kx4AVX2,
			gguf.TypeQ3_K:   kernDotQ3_Kx4AVX2,
			gguf.TypeQ5_K:   kernDotQ5_Kx4AVX2,
			gguf.TypeIQ4_NL: kernDotIQ4_NLx4AVX2,
			gguf.TypeIQ4_XS: kernDotIQ4_XSx4AVX2,
		},
		dotF32:    kernDotF32AVX2,
		dotF16:    kernDotF16AVX2,
		dotBF16:   kernDotBF16AVX2,
		f16ToF32:  kernF16ToF32AVX2,
		f32ToF16:  kernF32ToF16AVX2,
		bf16ToF32: kernBF16ToF32AVX2,
		dotFloat4: map[gguf.TensorType]func(res *[4]float32, w []byte, x []float32, stride int){
			gguf.TypeF32:  kernDotF32x4AVX2,
			gguf.TypeF16:  kernDotF16x4AVX2,
			gguf.TypeBF16: kernDotBF16x4AVX2,
		},
	})
}
