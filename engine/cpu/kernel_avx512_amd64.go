//go:build amd64 && !purego

package cpu

import (
	xcpu "golang.org/x/sys/cpu"

	"github.com/llmd/llmd/model/gguf"
)

// The AVX-512 kernels (kernel_avx512_amd64.s), with the same arguments as
// their AVX2 namesakes. The conversions and the activation quantization
// are AVX2's: both levels share the activation layout. Q4_0, Q5_0, Q8_0,
// Q4_K, Q6_K and F16 go through the tile kernels (kernel_tile.go,
// kernel_tilef16.go) for every number of tokens; a type's one-token,
// four-token and eight-token dots are those kernels run on one row, so
// that they add in the same order and MatMul is batch-invariant. The
// other K-quants and the IQ4 types have per-32 kernels (kernel_kquant_amd64.go).

//go:noescape
func kernDotF32AVX512(w, x []float32) float32

//go:noescape
func kernDotF16AVX512(w []byte, x []float32) float32

//go:noescape
func kernDotBF16AVX512(w []byte, x []float32) float32

//go:noescape
func kernDotF32x4AVX512(res *[4]float32, w []byte, x []float32, stride int)

// kernDotF16x2x4AVX512 is kernDotF16x4AVX512 for the two rows that w
// holds (half its bytes each): res[0:4] row 0's, res[4:8] row 1's.
//
//go:noescape
func kernDotF16x2x4AVX512(res *[8]float32, w []byte, x []float32, stride int)

//go:noescape
func kernDotF16x4AVX512(res *[4]float32, w []byte, x []float32, stride int)

//go:noescape
func kernDotBF16x4AVX512(res *[4]float32, w []byte, x []float32, stride int)

// The Q4_0 tile kernels (kernTileFunc), for 1..8 tokens.

//go:noescape
func kernTileQ4_0x1s2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x1s2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x1s2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx1s2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx1s2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x1s4AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x1AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x3AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x4AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x5AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x6AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x7AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_0x8AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

// The Q8_0 tile kernels.

//go:noescape
func kernTileQ8_0x1AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x3AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x4AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x5AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x6AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x7AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ8_0x8AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

// The Q5_0, Q4_K and Q6_K tile kernels (kernTileQ5_0Go, kernTileQ4_KGo
// and kernTileQ6_KGo are their models).
//
//go:noescape
func kernTileQ5_0x1AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x3AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x4AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x5AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x6AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x7AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ5_0x8AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx1AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx3AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx4AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx5AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx6AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx7AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ4_Kx8AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx1AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx2AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx3AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx4AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx5AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx6AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx7AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

//go:noescape
func kernTileQ6_Kx8AVX512(out []float32, ostride int, w []byte, groups, nb int, xq []int8, dc []int32)

// The F16 tile kernels (kernTileF16Go is their model).

//go:noescape
func kernTileF16x1AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x2AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x3AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x4AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x5AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x6AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x7AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

//go:noescape
func kernTileF16x8AVX512(out []float32, ostride int, w []byte, groups, cols int, x []float32)

// The BF16 tile kernels (kernTileBF16Go is their model), for CPUs with
// AVX512_BF16.

//go:noescape
func kernTileBF16x1AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x2AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x3AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x4AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x5AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x6AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x7AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

//go:noescape
func kernTileBF16x8AVX512(out []float32, ostride int, w []byte, groups, cols int, x []uint16)

// kernToBF16AVX512 is kernToBF16Go on the first len(src)/16·16 values.
//
//go:noescape
func kernToBF16AVX512(dst []uint16, src []float32)

// kernToBF16Z is kernToBF16Go: sixteen values at a time in assembly, the
// rest in Go.
func kernToBF16Z(dst []uint16, src []float32) {
	n := len(src) &^ 15
	dst = dst[:len(src)]
	kernToBF16AVX512(dst, src)
	kernToBF16Go(dst[n:], src[n:])
}

func init() {
	if kernBest < kernLevelAVX512 {
		return
	}
	var tileBF16 *[kernTileMax + 1]kernTileBF16Func
	if xcpu.X86.HasAVX512BF16 {
		tileBF16 = &[kernTileMax + 1]kernTileBF16Func{nil,
			kernTileBF16x1AVX512, kernTileBF16x2AVX512, kernTileBF16x3AVX512, kernTileBF16x4AVX512,
			kernTileBF16x5AVX512, kernTileBF16x6AVX512, kernTileBF16x7AVX512, kernTileBF16x8AVX512}
	}
	q4 := &kernTile{
		blockBytes: kernQ4TileBlock,
		pack:       kernPackQ4_0,
		dc:         kernDCQ4_0,
		kern: [kernTileMax + 1]kernTileFunc{nil,
			kernTileQ4_0x1AVX512, kernTileQ4_0x2AVX512, kernTileQ4_0x3AVX512, kernTileQ4_0x4AVX512,
			kernTileQ4_0x5AVX512, kernTileQ4_0x6AVX512, kernTileQ4_0x7AVX512, kernTileQ4_0x8AVX512},
		streams: kernTileQ4_0x1s2AVX512,
	}
	q4Dot, q4Dot4, q4Dot8 := kernTileDots(gguf.TypeQ4_0, q4)
	q8 := &kernTile{
		blockBytes: kernQ8TileBlock,
		pack:       kernPackQ8_0,
		dc:         kernDCQ8_0,
		kern: [kernTileMax + 1]kernTileFunc{nil,
			kernTileQ8_0x1AVX512, kernTileQ8_0x2AVX512, kernTileQ8_0x3AVX512, kernTileQ8_0x4AVX512,
			kernTileQ8_0x5AVX512, kernTileQ8_0x6AVX512, kernTileQ8_0x7AVX512, kernTileQ8_0x8AVX512},
		streams: kernTileQ8_0x1s2AVX512, streams4: kernTileQ8_0x1s4AVX512,
	}
	q8Dot, q8Dot4, q8Dot8 := kernTileDots(gguf.TypeQ8_0, q8)
	q4k := &kernTile{
		blockBytes: kernQ4KTileBlock,
		pack:       kernPackQ4_K,
		dc:         kernDCQ4_K,
		kern: [kernTileMax + 1]kernTileFunc{nil,
			kernTileQ4_Kx1AVX512, kernTileQ4_Kx2AVX512, kernTileQ4_Kx3AVX512, kernTileQ4_Kx4AVX512,
			kernTileQ4_Kx5AVX512, kernTileQ4_Kx6AVX512, kernTileQ4_Kx7AVX512, kernTileQ4_Kx8AVX512},
		streams: kernTileQ4_Kx1s2AVX512,
	}
	q4kDot, q4kDot4, q4kDot8 := kernTileDots(gguf.TypeQ4_K, q4k)
	q5 := &kernTile{
		blockBytes: kernQ5TileBlock,
		pack:       kernPackQ5_0,
		dc:         kernDCQ5_0,
		kern: [kernTileMax + 1]kernTileFunc{nil,
			kernTileQ5_0x1AVX512, kernTileQ5_0x2AVX512, kernTileQ5_0x3AVX512, kernTileQ5_0x4AVX512,
			kernTileQ5_0x5AVX512, kernTileQ5_0x6AVX512, kernTileQ5_0x7AVX512, kernTileQ5_0x8AVX512},
		streams: kernTileQ5_0x1s2AVX512,
	}
	q5Dot, q5Dot4, q5Dot8 := kernTileDots(gguf.TypeQ5_0, q5)
	q6k := &kernTile{
		blockBytes: kernQ6KTileBlock,
		pack:       kernPackQ6_K,
		dc:         kernDCQ6_K,
		dcWords:    4,
		kern: [kernTileMax + 1]kernTileFunc{nil,
			kernTileQ6_Kx1AVX512, kernTileQ6_Kx2AVX512, kernTileQ6_Kx3AVX512, kernTileQ6_Kx4AVX512,
			kernTileQ6_Kx5AVX512, kernTileQ6_Kx6AVX512, kernTileQ6_Kx7AVX512, kernTileQ6_Kx8AVX512},
		streams: kernTileQ6_Kx1s2AVX512,
	}
	q6kDot, q6kDot4, q6kDot8 := kernTileDots(gguf.TypeQ6_K, q6k)
	kernRegister(kernLevelAVX512, &kernSet{
		tile: map[gguf.TensorType]*kernTile{gguf.TypeQ4_0: q4, gguf.TypeQ8_0: q8, gguf.TypeQ4_K: q4k, gguf.TypeQ6_K: q6k,
			gguf.TypeQ5_0: q5},
		dotQ: map[gguf.TensorType]func(w []byte, xq []int8, xd, xs []float32) float32{
			gguf.TypeQ4_0: q4Dot,
			gguf.TypeQ5_0: q5Dot,
			gguf.TypeQ8_0: q8Dot,
			gguf.TypeQ4_K: q4kDot,
			gguf.TypeQ6_K: q6kDot,

			gguf.TypeQ2_K:   kernDotQ2_KAVX512,
			gguf.TypeQ3_K:   kernDotQ3_KAVX512,
			gguf.TypeQ5_K:   kernDotQ5_KAVX512,
			gguf.TypeIQ4_XS: kernDotIQ4_XSAVX512,
			gguf.TypeIQ4_NL: kernDotIQ4_NLAVX512,
		},
		dotQ4: map[gguf.TensorType]func(res *[4]float32, w []byte, xq []int8, xd, xs []float32){
			gguf.TypeQ4_0: q4Dot4,
			gguf.TypeQ5_0: q5Dot4,
			gguf.TypeQ8_0: q8Dot4,
			gguf.TypeQ4_K: q4kDot4,
			gguf.TypeQ6_K: q6kDot4,

			gguf.TypeQ2_K:   kernDotQ2_Kx4AVX512,
			gguf.TypeQ3_K:   kernDotQ3_Kx4AVX512,
			gguf.TypeQ5_K:   kernDotQ5_Kx4AVX512,
			gguf.TypeIQ4_XS: kernDotIQ4_XSx4AVX512,
			gguf.TypeIQ4_NL: kernDotIQ4_NLx4AVX512,
		},
		dotQ8: map[gguf.TensorType]func(res *[8]float32, w []byte, xq []int8, xd, xs []float32){
			gguf.TypeQ4_0: q4Dot8,
			gguf.TypeQ5_0: q5Dot8,
			gguf.TypeQ8_0: q8Dot8,
			gguf.TypeQ4_K: q4kDot8,
			gguf.TypeQ6_K: q6kDot8,
		},
		dotFloat2x4: map[gguf.TensorType]func(res *[8]float32, w []byte, x []float32, stride int){
			gguf.TypeF16: kernDotF16x2x4AVX512,
		},
		dotF32: kernDotF32AVX512,
		dotF16: kernDotF16AVX512,
		tileF16: &[kernTileF16Max + 1]kernTileF16Func{nil,
			kernTileF16x1AVX512, kernTileF16x2AVX512, kernTileF16x3AVX512, kernTileF16x4AVX512,
			kernTileF16x5AVX512, kernTileF16x6AVX512, kernTileF16x7AVX512, kernTileF16x8AVX512},
		tileBF16: tileBF16,
		toBF16:   kernToBF16Z,
		dotBF16:  kernDotBF16AVX512,
		dotFloat4: map[gguf.TensorType]func(res *[4]float32, w []byte, x []float32, stride int){
			gguf.TypeF32:  kernDotF32x4AVX512,
			gguf.TypeF16:  kernDotF16x4AVX512,
			gguf.TypeBF16: kernDotBF16x4AVX512,
		},
	})
}
