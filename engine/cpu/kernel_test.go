package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

var kernTestTypes = []gguf.TensorType{
	gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16,
	gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K,
	gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ5_K, gguf.TypeIQ4_NL, gguf.TypeIQ4_XS,
}

// kernModelTypes are the types whose SIMD kernels compute the models of
// their portable kernels (kernel_kquant_go.go) and so must agree with them
// bit for bit.
var kernModelTypes = []gguf.TensorType{gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ5_K, gguf.TypeIQ4_NL, gguf.TypeIQ4_XS}

// kernTolerance is the largest relative error ‖out−ref‖/‖ref‖ (over all
// n x rows outputs) that one MatMul may have against a float64 product with
// the dequantized weights; kernAggTolerance bounds the same error pooled
// over every shape and token count. The float types accumulate in float32.
// The quantized types also round the activations to int8 per 32 values: for
// Gaussian data an error of about max|x|/127/√12 ≈ 0.5% of a value's scale,
// hence of the output's. With as few as three outputs that ratio has a long
// tail, so a single case may reach twice the pooled bound.
func kernTolerance(t gguf.TensorType) float64 {
	switch t {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		return 1e-5
	}
	return 2e-2
}

func kernAggTolerance(t gguf.TensorType) float64 {
	switch t {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		return 1e-6
	}
	return 1e-2
}

// kernLevels returns the kernel levels this build and CPU have, portable Go
// first.
func kernLevels() []kernLevel {
	var ls []kernLevel
	for l := kernLevelGo; l <= kernBest; l++ {
		if kernSets[l] != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

func kernRandFloats(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

// kernRandWeight quantizes a Gaussian rows x cols matrix to typ and returns
// it with its dequantized values.
func kernRandWeight(t testing.TB, rng *rand.Rand, typ gguf.TensorType, rows, cols int) (Weight, []float32) {
	t.Helper()
	data, err := gguf.Quantize(typ, kernRandFloats(rng, rows*cols, 0.05))
	require.NoError(t, err)
	w, err := NewWeight(typ, rows, cols, data)
	require.NoError(t, err)
	deq := make([]float32, rows*cols)
	require.NoError(t, gguf.Dequantize(typ, data, deq))
	return w, deq
}

// kernShapes returns (rows, cols) pairs for typ: odd row counts, and column
// counts of several blocks (odd ones where the block size is 1).
func kernShapes(typ gguf.TensorType) [][2]int {
	switch typ.BlockSize() {
	case 1:
		return [][2]int{{1, 1}, {7, 37}, {33, 250}, {65, 1031}}
	case 32:
		return [][2]int{{3, 32}, {7, 96}, {33, 544}, {65, 1056}}
	}
	return [][2]int{{3, 256}, {7, 512}, {33, 768}, {65, 1280}}
}

// kernErrSums returns Σ(got−want)² and Σwant².
func kernErrSums(got []float32, want []float64) (num, den float64) {
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return num, den
}

func TestMatMulAgreesWithFloat64Reference(t *testing.T) {
	pool := NewPool(3)
	defer pool.Close()
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		for _, typ := range kernTestTypes {
			// The same draws for a type at every level.
			rng := rand.New(rand.NewPCG(1, uint64(typ)))
			var aggNum, aggDen float64
			for _, shape := range kernShapes(typ) {
				rows, cols := shape[0], shape[1]
				w, deq := kernRandWeight(t, rng, typ, rows, cols)
				for _, n := range []int{1, 3, 17} {
					x := kernRandFloats(rng, n*cols, 1)
					want := make([]float64, n*rows)
					for tok := range n {
						for r := range rows {
							var s float64
							for c := range cols {
								s += float64(deq[r*cols+c]) * float64(x[tok*cols+c])
							}
							want[tok*rows+r] = s
						}
					}
					for _, p := range []*Pool{nil, pool} {
						name := fmt.Sprintf("kern=%s/type=%s/rows=%d/cols=%d/n=%d/threads=%d", level, typ, rows, cols, n, p.Threads())
						t.Run(name, func(t *testing.T) {
							out := make([]float32, n*rows+1)
							out[n*rows] = 42 // past the end: untouched
							kernMatMul(p, ks, out, w, x, n)
							num, den := kernErrSums(out, want)
							require.Less(t, math.Sqrt(num/den), kernTolerance(typ))
							require.Equal(t, float32(42), out[n*rows])
							aggNum, aggDen = aggNum+num, aggDen+den
						})
					}
				}
			}
			agg := math.Sqrt(aggNum / aggDen)
			t.Logf("kern=%s type=%s: pooled relative error %.2g", level, typ, agg)
			require.Less(t, agg, kernAggTolerance(typ), "kern=%s type=%s", level, typ)
		}
	}
}

// TestMatMulTiled shrinks the row tiles to a few rows each and checks that
// the result is the same.
func TestMatMulTiled(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := NewPool(2)
	defer pool.Close()
	for _, typ := range kernTestTypes {
		rows, cols, n := 37, 512, 13
		w, _ := kernRandWeight(t, rng, typ, rows, cols)
		x := kernRandFloats(rng, n*cols, 1)
		want := make([]float32, n*rows)
		MatMul(pool, want, w, x, n)
		got := make([]float32, n*rows)
		func() {
			defer func(old int) { kernTileBytes = old }(kernTileBytes)
			kernTileBytes = 3 * cols // a few rows, a few tokens
			MatMul(pool, got, w, x, n)
		}()
		require.Equal(t, want, got, "type %s", typ)
	}
}

// TestMatMulBatchInvariant checks that a token's outputs have the same bits
// whatever else is in the batch: how many tokens, and where it sits among
// them. Then batching, chunked prefill and recomputation never change what
// a sequence generates.
func TestMatMulBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	pool := NewPool(3)
	defer pool.Close()
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		for _, typ := range kernTestTypes {
			shape := kernShapes(typ)[2]
			rows, cols := shape[0], shape[1]
			w, _ := kernRandWeight(t, rng, typ, rows, cols)
			const toks = 21 // eight, four and one at a time
			x := kernRandFloats(rng, toks*cols, 1)
			alone := make([]float32, toks*rows)
			for tok := range toks {
				kernMatMul(nil, ks, alone[tok*rows:], w, x[tok*cols:], 1)
			}
			for n := 2; n <= toks; n++ {
				for off := range 2 { // the same tokens at other positions
					if off+n > toks {
						continue
					}
					out := make([]float32, n*rows)
					kernMatMul(pool, ks, out, w, x[off*cols:], n)
					require.Equal(t, alone[off*rows:(off+n)*rows], out, "kern=%s type=%s n=%d from %d", level, typ, n, off)
				}
			}
		}
	}
}

func TestMatMulPanicsOnShortBuffers(t *testing.T) {
	w, err := NewWeight(gguf.TypeF32, 2, 3, make([]byte, 24))
	require.NoError(t, err)
	assert.Panics(t, func() { MatMul(nil, make([]float32, 4), w, make([]float32, 5), 2) })
	assert.Panics(t, func() { MatMul(nil, make([]float32, 3), w, make([]float32, 6), 2) })
	assert.Panics(t, func() {
		MatMul(nil, make([]float32, 4), Weight{Type: gguf.TypeF32, Rows: 2, Cols: 3}, make([]float32, 6), 2)
	})
	assert.NotPanics(t, func() { MatMul(nil, nil, w, nil, 0) })
}

func TestWeightRowMatchesDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range kernTestTypes {
		shape := kernShapes(typ)[1]
		w, deq := kernRandWeight(t, rng, typ, shape[0], shape[1])
		dst := make([]float32, w.Cols)
		for r := range w.Rows {
			w.Row(dst, r)
			require.Equal(t, deq[r*w.Cols:(r+1)*w.Cols], dst, "type %s row %d", typ, r)
		}
		assert.Panics(t, func() { w.Row(dst, w.Rows) })
		assert.Panics(t, func() { w.Row(dst[:w.Cols-1], 0) })
	}
}

func TestNewWeightRejectsWrongSizes(t *testing.T) {
	cases := map[string]struct {
		typ        gguf.TensorType
		rows, cols int
		bytes      int
	}{
		"short":           {gguf.TypeQ4_0, 3, 64, 3*36 - 1},
		"long":            {gguf.TypeQ4_0, 3, 64, 3*36 + 1},
		"partial block":   {gguf.TypeQ8_0, 2, 48, 2 * 51},
		"partial k-block": {gguf.TypeQ4_K, 1, 128, 72},
		"unsupported":     {gguf.TensorType(3), 1, 32, 20},
		"negative rows":   {gguf.TypeF32, -1, 4, 0},
		"negative cols":   {gguf.TypeF32, 1, -4, 0},
		"overflow":        {gguf.TypeF32, math.MaxInt / 2, 4, 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewWeight(c.typ, c.rows, c.cols, make([]byte, c.bytes))
			assert.Error(t, err)
		})
	}
	w, err := NewWeight(gguf.TypeQ6_K, 2, 512, make([]byte, 2*2*210))
	require.NoError(t, err)
	w.tiles = nil // the repacked copy, where the CPU has Q6_K tile kernels
	assert.Equal(t, Weight{Type: gguf.TypeQ6_K, Rows: 2, Cols: 512, Data: make([]byte, 840)}, w)
}

// kernRandBlocks returns nb random blocks of typ: random bytes (so every
// quant value occurs, extremes included) with the f16 scales replaced by
// moderate random values.
func kernRandBlocks(rng *rand.Rand, typ gguf.TensorType, nb int) []byte {
	bs := typ.BlockBytes()
	data := make([]byte, nb*bs)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	half := func() uint16 { return gguf.Float32ToHalf(float32(rng.NormFloat64() * 0.01)) }
	le := binary.LittleEndian
	for b := range nb {
		blk := data[b*bs : (b+1)*bs]
		switch typ {
		case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0:
			le.PutUint16(blk, half())
		case gguf.TypeQ4_K:
			le.PutUint16(blk, half())
			le.PutUint16(blk[2:], half())
		case gguf.TypeQ6_K:
			le.PutUint16(blk[208:], half())
		case gguf.TypeQ2_K:
			le.PutUint16(blk[80:], half())
			le.PutUint16(blk[82:], half())
		case gguf.TypeQ3_K:
			le.PutUint16(blk[108:], half())
		case gguf.TypeQ5_K:
			le.PutUint16(blk, half())
			le.PutUint16(blk[2:], half())
		case gguf.TypeIQ4_NL, gguf.TypeIQ4_XS:
			le.PutUint16(blk, half())
		}
	}
	return data
}

// kernRandActivations returns n rows of cols activations with a zero block,
// a block below kernMinAmax and a block with a large outlier mixed in.
func kernRandActivations(rng *rand.Rand, n, cols int) []float32 {
	x := kernRandFloats(rng, n*cols, 1)
	for b := 0; b < n*cols/kernQK; b++ {
		blk := x[b*kernQK : (b+1)*kernQK]
		switch rng.IntN(8) {
		case 0:
			clear(blk)
		case 1:
			for i := range blk {
				blk[i] *= 1e-32
			}
		case 2:
			blk[rng.IntN(kernQK)] = 1e4
		}
	}
	return x
}

// kernQuantized quantizes n rows of activations with the portable kernel.
func kernQuantized(x []float32, n, cols int) ([]int8, []float32, []float32) {
	nb := cols / kernQK
	xq, xd, xs := make([]int8, n*cols), make([]float32, n*nb), make([]float32, n*nb)
	for t := range n {
		kernQuantizeGo(xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb], x[t*cols:(t+1)*cols])
	}
	return xq, xd, xs
}

// kernExactDot returns the float64 dot product of a dequantized weight row
// with quantized activations, and the sum of the terms' magnitudes, the
// scale of a float32 kernel's rounding error.
func kernExactDot(deq []float32, xq []int8, xd []float32) (dot, mag float64) {
	for i, w := range deq {
		v := float64(w) * float64(xd[i/kernQK]) * float64(xq[i])
		dot += v
		mag += math.Abs(v)
	}
	return dot, mag
}

// TestQuantKernelsAgree checks every level's block-dot kernels, one token,
// four and eight at a time, against the exact dot product of the same
// quantized values, on random blocks of every bit pattern and odd block
// counts.
func TestQuantKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		for _, typ := range kernTestTypes[3:] {
			counts := []int{1, 2, 3, 5, 7, 13, 31, 64}
			if typ.BlockSize() == 256 {
				counts = []int{1, 2, 3, 5}
			}
			for _, nb := range counts {
				t.Run(fmt.Sprintf("kern=%s/type=%s/blocks=%d", level, typ, nb), func(t *testing.T) {
					cols := nb * typ.BlockSize()
					w := kernRandBlocks(rng, typ, nb)
					deq := make([]float32, cols)
					require.NoError(t, gguf.Dequantize(typ, w, deq))
					x := kernRandActivations(rng, 8, cols)
					xq, xd, xs := kernQuantized(x, 8, cols)
					nq := cols / kernQK
					var res [4]float32
					if dot4 := ks.dotQ4[typ]; dot4 != nil {
						dot4(&res, w, xq[:4*cols], xd[:4*nq], xs[:4*nq])
					}
					var res8 [8]float32
					if dot8 := ks.dotQ8[typ]; dot8 != nil {
						dot8(&res8, w, xq, xd, xs)
					}
					for tok := range 8 {
						q, d, s := xq[tok*cols:(tok+1)*cols], xd[tok*nq:(tok+1)*nq], xs[tok*nq:(tok+1)*nq]
						want, mag := kernExactDot(deq, q, d)
						got := ks.dotQ[typ](w, q, d, s)
						require.InDelta(t, want, got, 1e-5*mag+1e-30, "token %d", tok)
						// Batch invariance: the same bits.
						if ks.dotQ4[typ] != nil && tok < 4 {
							require.Equal(t, math.Float32bits(got), math.Float32bits(res[tok]), "token %d of 4", tok)
						}
						if ks.dotQ8[typ] != nil {
							require.Equal(t, math.Float32bits(got), math.Float32bits(res8[tok]), "token %d of 8", tok)
						}
					}
				})
			}
		}
	}
}

// TestModelKernelsMatchGo checks that every level's kernels of
// kernModelTypes give exactly the portable kernel's bits, one token and
// four at a time, on random blocks of every bit pattern.
func TestModelKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	ref := kernSetFor(kernLevelGo)
	for _, level := range kernLevels()[1:] {
		ks := kernSetFor(level)
		for _, typ := range kernModelTypes {
			counts := []int{1, 2, 3, 8, 9}
			if typ.BlockSize() == 32 { // groups of eight and the blocks after them
				counts = append(counts, 16, 23)
			}
			for _, nb := range counts {
				t.Run(fmt.Sprintf("kern=%s/type=%s/blocks=%d", level, typ, nb), func(t *testing.T) {
					cols := nb * typ.BlockSize()
					w := kernRandBlocks(rng, typ, nb)
					x := kernRandActivations(rng, 8, cols)
					xq, xd, xs := kernQuantized(x, 8, cols)
					nq := cols / kernQK
					var res [4]float32
					dot4 := ks.dotQ4[typ]
					if dot4 != nil {
						dot4(&res, w, xq[:4*cols], xd[:4*nq], xs[:4*nq])
					}
					for tok := range 8 {
						q, d, s := xq[tok*cols:(tok+1)*cols], xd[tok*nq:(tok+1)*nq], xs[tok*nq:(tok+1)*nq]
						want := ref.dotQ[typ](w, q, d, s)
						require.Equal(t, math.Float32bits(want), math.Float32bits(ks.dotQ[typ](w, q, d, s)), "token %d", tok)
						if dot4 != nil && tok < 4 {
							require.Equal(t, math.Float32bits(want), math.Float32bits(res[tok]), "token %d of 4", tok)
						}
					}
				})
			}
		}
	}
}

// TestRowsKernelsAgree checks that the rows kernels give each row exactly
// the bits of the one-token dot, for every block count's pairs and last
// odd block, rows that start anywhere in the data, and zero rows.
func TestRowsKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		for _, typ := range kernTestTypes[3:] {
			rowsDot := ks.dotQRows[typ]
			if rowsDot == nil {
				continue
			}
			for _, nb := range []int{1, 2, 3, 9, 24, 31} {
				t.Run(fmt.Sprintf("kern=%s/type=%s/blocks=%d", level, typ, nb), func(t *testing.T) {
					const rows = 7
					cols := nb * typ.BlockSize()
					var w []byte
					for range rows {
						w = append(w, kernRandBlocks(rng, typ, nb)...)
					}
					rb := len(w) / rows
					x := kernRandActivations(rng, 1, cols)
					xq, xd, xs := kernQuantized(x, 1, cols)
					var xc []int32
					if ks.rowsSums[typ] {
						xc = make([]int32, cols/4)
						kernLaneSums(xc, xq)
					}
					for _, span := range [][2]int{{0, rows}, {2, 5}, {6, 7}, {3, 3}} {
						out := make([]float32, span[1]-span[0]+1)
						out[len(out)-1] = 42 // past the rows: must stay
						rowsDot(out[:span[1]-span[0]], w[span[0]*rb:span[1]*rb], rb, xq, xd, xs, xc)
						for r := span[0]; r < span[1]; r++ {
							want := ks.dotQ[typ](w[r*rb:(r+1)*rb], xq, xd, xs)
							require.Equal(t, math.Float32bits(want), math.Float32bits(out[r-span[0]]), "row %d of %v", r, span)
						}
						require.Equal(t, float32(42), out[len(out)-1], "wrote past the rows")
					}
				})
			}
		}
	}
}

func TestQuantizeKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, level := range kernLevels()[1:] {
		ks := kernSetFor(level)
		for _, nb := range []int{1, 2, 3, 7, 33} {
			x := kernRandActivations(rng, 1, nb*kernQK)
			wq, wd, ws := kernQuantized(x, 1, nb*kernQK)
			xq, xd, xs := make([]int8, nb*kernQK), make([]float32, nb), make([]float32, nb)
			ks.quantize(xq, xd, xs, x)
			require.Equal(t, wq, xq, "kern=%s blocks=%d", level, nb)
			require.Equal(t, wd, xd, "kern=%s blocks=%d", level, nb)
			require.Equal(t, ws, xs, "kern=%s blocks=%d", level, nb)
		}
	}
}

func TestFloatKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	lengths := []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 129, 1000, 4099}
	for _, level := range kernLevels()[1:] {
		ks := kernSetFor(level)
		for _, n := range lengths {
			w, x := kernRandFloats(rng, n, 1), kernRandFloats(rng, n, 1)
			var want, mag float64
			for i := range n {
				want += float64(w[i]) * float64(x[i])
				mag += math.Abs(float64(w[i]) * float64(x[i]))
			}
			tol := 1e-6*mag + 1e-30
			require.InDelta(t, want, ks.dotF32(w, x), tol, "kern=%s dotF32 n=%d", level, n)
			h, bf, f := make([]byte, 2*n), make([]byte, 2*n), make([]byte, 4*n)
			for i, v := range w {
				binary.LittleEndian.PutUint16(h[2*i:], gguf.Float32ToHalf(v))
				binary.LittleEndian.PutUint16(bf[2*i:], uint16(math.Float32bits(v)>>16))
				binary.LittleEndian.PutUint32(f[4*i:], math.Float32bits(v))
			}
			for _, c := range []struct {
				name      string
				data      []byte
				conv, ref func(dst []float32, w []byte)
				dot       func(w []byte, x []float32) float32
				typ       gguf.TensorType
			}{
				{"f16", h, ks.f16ToF32, kernF16ToF32Go, ks.dotF16, gguf.TypeF16},
				{"bf16", bf, ks.bf16ToF32, kernBF16ToF32Go, ks.dotBF16, gguf.TypeBF16},
				{"f32", f, kernF32ToF32, kernF32ToF32, func(w []byte, x []float32) float32 { return ks.dotF32(kernFloats(w), x) }, gguf.TypeF32},
			} {
				got, ref := make([]float32, n+1), make([]float32, n+1)
				got[n], ref[n] = 42, 42
				c.conv(got[:n], c.data)
				c.ref(ref[:n], c.data)
				require.Equal(t, ref, got, "kern=%s %s conversion n=%d", level, c.name, n)
				var want, mag float64
				for i := range n {
					want += float64(ref[i]) * float64(x[i])
					mag += math.Abs(float64(ref[i]) * float64(x[i]))
				}
				require.InDelta(t, want, c.dot(c.data, x), 1e-6*mag+1e-30, "kern=%s %s dot n=%d", level, c.name, n)

				dot4 := ks.dotFloat4[c.typ]
				if dot4 == nil {
					continue
				}
				stride := n + 3
				x4 := kernRandFloats(rng, 3*stride+n, 1)
				var res [4]float32
				dot4(&res, c.data, x4, stride)
				for tok := range 4 { // batch invariance: the one-token dot's bits
					require.Equal(t, c.dot(c.data, x4[tok*stride:tok*stride+n]), res[tok], "kern=%s %s 4-token dot n=%d token %d", level, c.name, n, tok)
				}
				if dot24 := ks.dotFloat2x4[c.typ]; dot24 != nil {
					// A second row: the reversed first.
					two := append([]byte(nil), c.data...)
					es := len(c.data) / max(n, 1)
					for i := range n {
						two = append(two, c.data[(n-1-i)*es:(n-i)*es]...)
					}
					var res8 [8]float32
					dot24(&res8, two, x4, stride)
					var res2 [4]float32
					dot4(&res2, two[len(c.data):], x4, stride)
					require.Equal(t, res[:], res8[:4], "kern=%s %s 2x4 dot n=%d, row 0", level, c.name, n)
					require.Equal(t, res2[:], res8[4:], "kern=%s %s 2x4 dot n=%d, row 1", level, c.name, n)
				}
			}
		}
	}
}

// kernF32ToF32 is the identity conversion of float32 bytes.
func kernF32ToF32(dst []float32, w []byte) { copy(dst, kernFloats(w)) }

// TestHalfConversionCoversEveryValue converts every half bit pattern.
func TestHalfConversionCoversEveryValue(t *testing.T) {
	data := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(data[2*i:], uint16(i))
	}
	want := make([]float32, 1<<16)
	kernF16ToF32Go(want, data)
	for i, v := range want {
		require.Equal(t, math.Float32bits(gguf.HalfToFloat32(uint16(i))), math.Float32bits(v), "half %#04x", i)
	}
	for _, level := range kernLevels()[1:] {
		got := make([]float32, 1<<16)
		kernSetFor(level).f16ToF32(got, data)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("kern=%s half %#04x: got %v, want %v", level, i, got[i], want[i])
			}
		}
	}
}

// TestHalfRounding checks every level's float32 to half conversion (what an
// F16 KV cache stores) against gguf.Float32ToHalf, bit for bit: on each
// half value, the float32s either side of each halfway point between
// neighbouring halves and the halfway points themselves (ties to even),
// values that overflow, half subnormals, float32 subnormals, infinities,
// NaNs and random bit patterns, at lengths with every tail of eight.
func TestHalfRounding(t *testing.T) {
	var src []float32
	for h := range 1 << 15 {
		v := gguf.HalfToFloat32(uint16(h))
		next := gguf.HalfToFloat32(uint16(h + 1))
		src = append(src, v, -v)
		if h+1 < 0x7c00 {
			mid := float32((float64(v) + float64(next)) / 2)
			b := math.Float32bits(mid)
			for _, m := range []uint32{b - 1, b, b + 1} {
				src = append(src, math.Float32frombits(m), -math.Float32frombits(m))
			}
		}
	}
	rng := rand.New(rand.NewPCG(61, 62))
	for range 1 << 16 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	src = append(src, 65504, 65519.99, 65520, 1e10, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(1), math.Float32frombits(0x807fffff), 5.960464e-08, 2.980232e-08, 2.9802326e-08,
		math.Float32frombits(0x7fc00000), math.Float32frombits(0xffbfe001))
	want := make([]byte, 2*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint16(want[2*i:], gguf.Float32ToHalf(v))
	}
	for _, level := range kernLevels() {
		ks := kernSetFor(level)
		got := make([]byte, len(want)+2)
		ks.f32ToF16(got, src)
		for i, v := range src {
			require.Equal(t, binary.LittleEndian.Uint16(want[2*i:]), binary.LittleEndian.Uint16(got[2*i:]),
				"kern=%s value %d (%#08x)", level, i, math.Float32bits(v))
		}
		require.Equal(t, []byte{0, 0}, got[len(want):], "kern=%s writes past the values", level)
		for n := range 18 {
			part := make([]byte, 2*n+2)
			ks.f32ToF16(part, src[100:100+n])
			require.Equal(t, want[200:200+2*n], part[:2*n], "kern=%s n=%d", level, n)
			require.Equal(t, []byte{0, 0}, part[2*n:], "kern=%s n=%d writes past the values", level, n)
		}
	}
}
