package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The Q8_K-style activation format of the K-quant kernels that take it
// (kernSet.q8k), and MatMul's path through them.
//
// A token's activations are quantized per 256-value super-block (a K-quant
// weight block) into one block of kernQ8KBlock bytes:
//
//	[0, 256)    int8 quants q = round_half_even(x·(127/m)) (float32), m = max|x|
//	[256, 288)  int16 sums of each 16 quants (bsums), for the weights' offsets
//	[288, 292)  float32 scale d = m/127 (x ≈ d·q)
//	[292, 320)  zero padding: every block's quants start a cache line
//
// A super-block whose m is below kernMinAmax is all zeros (d = 0), as the
// per-32 format does it. With one scale per 256 values instead of eight,
// each weight row is dotted in integers across the whole super-block (the
// sub-block scales multiplied in integers) and converted to float once per
// 256 values. The price is precision, a super-block's values being rounded
// on the grid of its largest one: MatMul's relative error against float
// products with the dequantized weights is about 1.3x the per-32 format's
// on Gaussian activations and 2-2.8x where a few channels are outliers
// (TestQ8KAccuracy states the contract and measures both). llama.cpp
// quantizes the activations of its K-quant matmuls the same way (Q8_K).
const (
	kernQ8KValues = 256
	kernQ8KBlock  = 320
	kernQ8KSums   = 256 // offset of the bsums
	kernQ8KScale  = 288 // offset of d
)

// kernQ8KFunc is a family of Q8_K kernels of one weight type: it dots each
// of T tokens (T fixed by the kernel: 1 or kernQ8KTile) with each of rows
// weight rows, rb bytes apart in w, into out[t·ostride + r]. x holds the T
// tokens' activations, nsb blocks each, one token after the other.
type kernQ8KFunc func(out []float32, ostride int, w []byte, rows, rb int, x []byte, nsb int)

// kernQ8KTile is the number of tokens of a kernQ8K's multi-token kernel.
const kernQ8KTile = 4

// kernQ8K is how a level computes a weight type on Q8_K activations: one
// token at a time, and (where tile is set) kernQ8KTile tokens that read
// each weight row once. Every token gets from tile exactly the bits one
// gives it, so that MatMul is batch-invariant.
type kernQ8K struct {
	one, tile kernQ8KFunc
	// quantize is the level's kernQuantizeQ8K (the same bytes), nil for
	// the portable one.
	quantize func(dst []byte, x []float32)
}

// kernQuantizeQ8K quantizes len(x)/256 super-blocks of x into dst (as many
// kernQ8KBlock blocks): see the format above. The rounding is the float32
// one of round-half-even, done by adding and subtracting 1.5·2^23 (exact
// for |v| <= 127.5).
func kernQuantizeQ8K(dst []byte, x []float32) {
	const magic = 12582912 // 1.5·2^23
	le := binary.LittleEndian
	for s := range len(x) / kernQ8KValues {
		v := x[kernQ8KValues*s : kernQ8KValues*(s+1)]
		blk := dst[kernQ8KBlock*s : kernQ8KBlock*(s+1)]
		var amax float32
		for _, f := range v {
			amax = max(amax, math.Float32frombits(math.Float32bits(f)&0x7fffffff))
		}
		var id float32
		if amax >= kernMinAmax {
			id = 127 / amax
		}
		for g := range 16 {
			var sum int32
			for j := 16 * g; j < 16*g+16; j++ {
				y := float32(v[j] * id)
				r := int32(float32(float32(y+magic) - magic))
				blk[j] = byte(int8(r))
				sum += r
			}
			le.PutUint16(blk[kernQ8KSums+2*g:], uint16(int16(sum)))
		}
		le.PutUint32(blk[kernQ8KScale:], math.Float32bits(amax/127))
		clear(blk[kernQ8KScale+4:])
	}
}

// kernQ8KQuant, kernQ8KBSum and kernQ8KD return a Q8_K block's quant i,
// its sum of quants 16g .. 16g+15 and its scale.
func kernQ8KQuant(blk []byte, i int) int32 { return int32(int8(blk[i])) }

func kernQ8KBSum(blk []byte, g int) int32 {
	return int32(int16(binary.LittleEndian.Uint16(blk[kernQ8KSums+2*g:])))
}

func kernQ8KD(blk []byte) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(blk[kernQ8KScale:]))
}

// kernMatMulQ8K is MatMul for a type with Q8_K kernels k.
func kernMatMulQ8K(p *Pool, k *kernQ8K, out []float32, w Weight, rb int, x []float32, n int) {
	cols, rows := w.Cols, w.Rows
	nsb := cols / kernQ8KValues
	tb := nsb * kernQ8KBlock // one token's bytes
	sc := kernScratchPool.Get().(*kernScratch)
	defer kernScratchPool.Put(sc)
	if cap(sc.xk) < n*tb {
		sc.xk = alignedMake[byte](n * tb)
	}
	xk := sc.xk[:n*tb]
	q := k.quantize
	if q == nil {
		q = kernQuantizeQ8K
	}
	quantize := func(t0, t1 int) {
		for t := t0; t < t1; t++ {
			q(xk[t*tb:(t+1)*tb], x[t*cols:(t+1)*cols])
		}
	}
	if n*cols >= 1<<15 {
		p.Run(n, quantize)
	} else {
		quantize(0, n)
	}

	// Within a tile of rows (which stays in cache), kernQ8KTile tokens at
	// a time, then one at a time, sweep the rows: the weights come from
	// memory for the first group and from L2 after that.
	rowTile := max(1, kernTileBytes/max(rb, 1))
	p.Run(rows, func(r0, r1 int) {
		for rt := r0; rt < r1; rt += rowTile {
			re := min(r1, rt+rowTile)
			wt := w.Data[rt*rb : re*rb]
			t := 0
			if k.tile != nil {
				for ; t+kernQ8KTile <= n; t += kernQ8KTile {
					k.tile(out[t*rows+rt:], rows, wt, re-rt, rb, xk[t*tb:(t+kernQ8KTile)*tb], nsb)
				}
			}
			for ; t < n; t++ {
				k.one(out[t*rows+rt:], rows, wt, re-rt, rb, xk[t*tb:(t+1)*tb], nsb)
			}
		}
	})
}

// kernQ8KCheck panics unless the arguments of a kernQ8KFunc of tokens
// tokens are consistent: the assembly kernels trust them.
func kernQ8KCheck(out []float32, ostride int, w []byte, rows, rb int, x []byte, nsb, tokens, blockBytes int) {
	if rows <= 0 {
		return
	}
	if rb < nsb*blockBytes || len(w) < (rows-1)*rb+nsb*blockBytes || len(x) < tokens*nsb*kernQ8KBlock ||
		ostride < rows || len(out) < (tokens-1)*ostride+rows {
		panic(fmt.Sprintf("cpu: q8k kernel of %d tokens: %d rows of %d bytes (%d blocks) in %d, x %d, out %d stride %d",
			tokens, rows, rb, nsb, len(w), len(x), len(out), ostride))
	}
}
