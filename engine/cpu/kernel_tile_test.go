package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

// kernTileLevels returns the levels whose kernels have a tile family for
// typ (F16's included).
func kernTileLevels(typ gguf.TensorType) []kernLevel {
	var ls []kernLevel
	for _, l := range kernLevels() {
		if ks := kernSetFor(l); ks.tile[typ] != nil || typ == gguf.TypeF16 && ks.tileF16 != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestTileBatchInvariant checks the tile family's batch invariance: every
// token of batches of 1 to 40 tokens, at every position (the batch starts
// at each of eight offsets, so that a token falls at each place of a step
// of eight), gets the bits it gets alone (the decode path), with the
// packed copy of the weights and with the tiles packed as MatMul goes
// (small tiles, so a row range spans several), for row counts that are
// and are not whole groups of sixteen.
func TestTileBatchInvariant(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K, gguf.TypeF16} {
		levels := kernTileLevels(typ)
		if len(levels) == 0 {
			t.Skipf("no tile kernels for %s on this CPU (best level %s)", typ, kernBest)
		}
		for _, level := range levels {
			ks := kernSetFor(level)
			shapes := [][2]int{{16, 64}, {37, 96}, {80, 544}}
			if typ.BlockSize() == kernQKK {
				shapes = [][2]int{{16, 256}, {37, 512}, {80, 768}}
			}
			for _, shape := range shapes {
				t.Run(fmt.Sprintf("kern=%s/type=%s/%dx%d", level, typ, shape[0], shape[1]), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(shape[0]), uint64(shape[1])))
					pool := NewPool(3)
					defer pool.Close()
					rows, cols := shape[0], shape[1]
					w, _ := kernRandWeight(t, rng, typ, rows, cols)
					require.NotNil(t, w.tiles, "NewWeight packs for the tile kernels")
					unpacked := w
					unpacked.tiles = nil
					const toks = 48
					x := kernRandFloats(rng, toks*cols, 1)
					alone := make([]float32, toks*rows)
					for tok := range toks {
						kernMatMul(nil, ks, alone[tok*rows:], w, x[tok*cols:], 1)
					}
					// Packing as MatMul goes gives the same bits, alone too.
					again := make([]float32, rows)
					kernMatMul(nil, ks, again, unpacked, x[5*cols:], 1)
					require.Equal(t, alone[5*rows:6*rows], again)

					defer func(old int) { kernTileBytes = old }(kernTileBytes)
					for n := 1; n <= 40; n++ {
						for off := range 8 {
							for _, wt := range []Weight{w, unpacked} {
								kernTileBytes = 256 << 10
								if wt.tiles == nil {
									kernTileBytes = 2 * cols // two groups' worth
								}
								out := make([]float32, n*rows+1)
								out[n*rows] = 42
								kernMatMul(pool, ks, out, wt, x[off*cols:], n)
								require.Equal(t, alone[off*rows:(off+n)*rows], out[:n*rows], "n=%d from %d, packed %v", n, off, wt.tiles != nil)
								require.Equal(t, float32(42), out[n*rows], "wrote past the outputs")
							}
						}
					}
				})
			}
		}
	}
}

// TestTilePackQ4_0 checks the packed layout against the rows it comes from,
// value by value: row i of group g, block b, value j.
func TestTilePackQ4_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 21, 96
	w, deq := kernRandWeight(t, rng, gguf.TypeQ4_0, rows, cols)
	nb := cols / kernQK
	groups := kernTileGroups(rows)
	buf := make([]byte, groups*nb*kernQ4TileBlock)
	kernPackQ4_0(buf, w, 0, groups)
	for g := range groups {
		for b := range nb {
			blk := buf[(g*nb+b)*kernQ4TileBlock:]
			for i := range kernTileRows {
				r := g*kernTileRows + i
				d := gguf.HalfToFloat32(binary.LittleEndian.Uint16(blk[2*i:]))
				for j := range kernQK {
					k := j % 16 / 4 // the 64 bytes that hold value j
					q := blk[32+64*k+4*i+j%4]
					if j >= 16 {
						q >>= 4
					}
					got := d * float32(int(q&15)-8)
					want := float32(0)
					if r < rows {
						want = deq[r*cols+b*kernQK+j]
					}
					require.Equal(t, want, got, "group %d row %d block %d value %d", g, i, b, j)
				}
			}
		}
	}
}

// TestTileDCQ4_0 checks that the per-block words hold the scale's bits and
// -8 (Q4_0) or -128 (Q8_0) times the exact sum of the block's quantized
// activations.
func TestTileDCQ4_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const cols = 32 * 40
	x := kernRandActivations(rng, 1, cols)
	x[0] = 0 // and a block of zeros
	for i := range kernQK {
		x[kernQK+i] = 0
	}
	nb := cols / kernQK
	for _, level := range kernLevels() { // each level's quantizer
		xq, xd, xs := make([]int8, cols), make([]float32, nb), make([]float32, nb)
		kernSetFor(level).quantize(xq, xd, xs, x)
		dc4, dc8 := make([]int32, 2*nb), make([]int32, 2*nb)
		kernDCQ4_0(dc4, xq, xd, xs)
		kernDCQ8_0(dc8, xq, xd, xs)
		for b := range nb {
			var sum int32
			for _, v := range xq[b*kernQK : (b+1)*kernQK] {
				sum += int32(v)
			}
			for _, dc := range [][]int32{dc4, dc8} {
				require.Equal(t, int32(math.Float32bits(xd[b])), dc[2*b], "kern=%s block %d", level, b)
			}
			require.Equal(t, -8*sum, dc4[2*b+1], "kern=%s block %d", level, b)
			require.Equal(t, -128*sum, dc8[2*b+1], "kern=%s block %d", level, b)
		}
	}
}

// BenchmarkTileKernel runs the tile kernels alone on weights that stay in
// L2 (four groups of sixteen rows): their compute rate, in multiply-adds.
func BenchmarkTileKernel(b *testing.B) {
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		tl := kernSetFor(kernBest).tile[typ]
		if tl == nil {
			b.Skipf("no tile kernels for %s on this CPU", typ)
		}
		const groups, cols = 4, 4864
		nb := cols / kernQK
		w, _ := kernRandWeight(b, rand.New(rand.NewPCG(1, 2)), typ, groups*kernTileRows, cols)
		for T := 1; T <= kernTileMax; T++ {
			b.Run(fmt.Sprintf("type=%s/tokens=%d", typ, T), func(b *testing.B) {
				x := kernRandFloats(rand.New(rand.NewPCG(3, 4)), T*cols, 1)
				xq, xd, xs := kernQuantized(x, T, cols)
				dc := tl.dcOf(xq, xd, xs, T, cols)
				out := make([]float32, T*groups*kernTileRows)
				for b.Loop() {
					kernTileCall(tl.kern[T], tl, T, out, groups*kernTileRows, w.tiles, groups, nb, xq, dc)
				}
				b.ReportMetric(float64(b.N)*float64(T*groups*kernTileRows*cols)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
		if tl.streams != nil {
			b.Run(fmt.Sprintf("type=%s/tokens=1/streams", typ), func(b *testing.B) {
				x := kernRandFloats(rand.New(rand.NewPCG(3, 4)), cols, 1)
				xq, xd, xs := kernQuantized(x, 1, cols)
				dc := tl.dcOf(xq, xd, xs, 1, cols)
				out := make([]float32, groups*kernTileRows)
				for b.Loop() {
					kernTileCallStreams(tl, out, w.tiles, groups, nb, xq, dc)
				}
				b.ReportMetric(float64(b.N)*float64(groups*kernTileRows*cols)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// TestTilePackQ8_0 checks the packed Q8_0 layout against the rows it comes
// from: scales and every value (stored offset by 128).
func TestTilePackQ8_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 19, 96
	w, deq := kernRandWeight(t, rng, gguf.TypeQ8_0, rows, cols)
	nb := cols / kernQK
	groups := kernTileGroups(rows)
	buf := make([]byte, groups*nb*kernQ8TileBlock)
	for i := range buf {
		buf[i] = 0xa5 // the missing rows must come out zero
	}
	kernPackQ8_0(buf, w, 0, groups)
	for g := range groups {
		for b := range nb {
			blk := buf[(g*nb+b)*kernQ8TileBlock:]
			for i := range kernTileRows {
				r := g*kernTileRows + i
				d := gguf.HalfToFloat32(binary.LittleEndian.Uint16(blk[2*i:]))
				for j := range kernQK {
					q := int8(blk[32+64*(j/4)+4*i+j%4] ^ 0x80)
					want := float32(0)
					if r < rows {
						want = deq[r*cols+b*kernQK+j]
					}
					require.Equal(t, want, d*float32(q), "group %d row %d block %d value %d", g, i, b, j)
				}
			}
		}
	}
}

// BenchmarkTilePack measures the repacking NewWeight does at load: MB/s of
// the file's bytes.
func BenchmarkTilePack(b *testing.B) {
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeF16} {
		b.Run(fmt.Sprintf("type=%s", typ), func(b *testing.B) {
			if ks := kernSetFor(kernBest); ks.tile[typ] == nil && (typ != gguf.TypeF16 || ks.tileF16 == nil) {
				b.Skipf("no tile kernels for %s on this CPU", typ)
			}
			w, _ := kernRandWeight(b, rand.New(rand.NewPCG(1, 2)), typ, 4864, 896)
			b.SetBytes(int64(len(w.Data)))
			for b.Loop() {
				kernTilePack(w)
			}
		})
	}
}

// TestTilePackQ4_K checks the packed Q4_K layout against the rows it comes
// from, value by value: d·sc·q − dmin·m from the packed bytes equals the
// dequantized value (missing rows: zero).
func TestTilePackQ4_K(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 21, 512
	w, deq := kernRandWeight(t, rng, gguf.TypeQ4_K, rows, cols)
	nsb := cols / kernQKK
	groups := kernTileGroups(rows)
	buf := make([]byte, groups*nsb*kernQ4KTileSB)
	for i := range buf {
		buf[i] = 0xa5 // the missing rows must come out zero
	}
	kernPackQ4_K(buf, w, 0, groups)
	require.Equal(t, len(buf), len(kernTilePack(w)), "NewWeight's copy has the same size")
	for g := range groups {
		for s := range nsb {
			o := buf[(g*nsb+s)*kernQ4KTileSB:]
			for i := range kernTileRows {
				r := g*kernTileRows + i
				d := gguf.HalfToFloat32(binary.LittleEndian.Uint16(o[2*i:]))
				dmin := gguf.HalfToFloat32(binary.LittleEndian.Uint16(o[32+2*i:]))
				for j := range kernQKK {
					sub := j / kernQK
					q := o[320+512*(sub/2)+64*(j%kernQK/4)+4*i+j%4]
					if sub%2 == 1 {
						q >>= 4
					}
					got := d*float32(o[64+16*sub+i])*float32(q&15) - dmin*float32(o[192+16*sub+i])
					want := float32(0)
					if r < rows {
						want = deq[r*cols+s*kernQKK+j]
					}
					require.InDelta(t, want, got, 1e-6, "group %d row %d super-block %d value %d", g, i, s, j)
				}
			}
		}
	}
}

// TestTileKQuantsMatchGo checks each level's Q5_0, Q4_K and Q6_K tile
// kernels against kernTileQ5_0Go, kernTileQ4_KGo and kernTileQ6_KGo bit for
// bit, for 1..8 tokens, three groups (the last short of rows) and 24
// blocks (three super-blocks), on
// quantized weights and on random blocks of every bit pattern (extreme
// quants and scales), with activations that include a block of zeros.
func TestTileKQuantsMatchGo(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		levels := kernTileLevels(typ)
		if len(levels) == 0 {
			t.Skipf("no %s tile kernels on this CPU (best level %s)", typ, kernBest)
		}
		model := map[gguf.TensorType]func(int) kernTileFunc{
			gguf.TypeQ5_0: kernTileQ5_0Go, gguf.TypeQ4_K: kernTileQ4_KGo, gguf.TypeQ6_K: kernTileQ6_KGo}[typ]
		rng := rand.New(rand.NewPCG(9, 10))
		const rows, cols = 41, 768
		nb := cols / kernQK
		quantized, _ := kernRandWeight(t, rng, typ, rows, cols)
		random, err := NewWeight(typ, rows, cols, kernRandBlocks(rng, typ, rows*cols/typ.BlockSize()))
		require.NoError(t, err)
		groups := kernTileGroups(rows)
		for _, level := range levels {
			tl := kernSetFor(level).tile[typ]
			for name, w := range map[string]Weight{"quantized": quantized, "random": random} {
				for T := 1; T <= kernTileMax; T++ {
					x := kernRandActivations(rng, T, cols)
					for i := range kernQK {
						x[kernQK+i] = 0
					}
					xq, xd, xs := kernQuantized(x, T, cols)
					dc := tl.dcOf(xq, xd, xs, T, cols)
					stride := groups*kernTileRows + 3
					got, want := make([]float32, T*stride), make([]float32, T*stride)
					kernTileCall(tl.kern[T], tl, T, got, stride, w.tiles, groups, nb, xq, dc)
					model(T)(want, stride, w.tiles, groups, nb, xq, dc)
					require.Equal(t, want, got, "kern=%s type=%s weights=%s tokens=%d", level, typ, name, T)
					require.NotZero(t, got[0])
				}
			}
		}
	}
}

// TestTileF16 checks the packed F16 layout against the rows (missing rows
// zero) and each level's F16 tile kernels against kernTileF16Go bit for
// bit, for 1..8 tokens and three groups, the last short of rows, then
// eleven groups (the few-token kernels take two or four groups at once,
// then the ones left over).
func TestTileF16(t *testing.T) {
	levels := kernTileLevels(gguf.TypeF16)
	if len(levels) == 0 {
		t.Skipf("no F16 tile kernels on this CPU (best level %s)", kernBest)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, rows := range []int{41, 169} {
		const cols = 200
		w, deq := kernRandWeight(t, rng, gguf.TypeF16, rows, cols)
		groups := kernTileGroups(rows)
		require.Len(t, w.tiles, groups*32*cols)
		for g := range groups {
			for i := range kernTileRows {
				for c := range cols {
					got := gguf.HalfToFloat32(binary.LittleEndian.Uint16(w.tiles[g*32*cols+32*c+2*i:]))
					want := float32(0)
					if r := g*kernTileRows + i; r < rows {
						want = deq[r*cols+c]
					}
					require.Equal(t, want, got, "group %d row %d column %d", g, i, c)
				}
			}
		}
		for _, level := range levels {
			kern := kernSetFor(level).tileF16
			for T := 1; T <= kernTileF16Max; T++ {
				x := kernRandActivations(rng, T, cols)
				stride := groups*kernTileRows + 3
				got, want := make([]float32, T*stride), make([]float32, T*stride)
				kernTileFloatCall(kern[T], T, got, stride, w.tiles, groups, cols, x)
				kernTileF16Go(T)(want, stride, w.tiles, groups, cols, x)
				require.Equal(t, want, got, "kern=%s rows=%d tokens=%d", level, rows, T)
				for i := range T {
					require.NotZero(t, got[i*stride+rows-1], "tokens=%d token %d", T, i)
				}
			}
		}
	}
}

// BenchmarkTileFloatKernel runs the F16 and BF16 tile kernels alone on
// weights that stay in L2 (four groups of sixteen rows): their compute
// rate, in multiply-adds, against the core's two 16-lane FMAs per cycle.
func BenchmarkTileFloatKernel(b *testing.B) {
	ks := kernSetFor(kernBest)
	for _, cols := range []int{896, 4864} {
		const groups = 4
		w, _ := kernRandWeight(b, rand.New(rand.NewPCG(1, 2)), gguf.TypeF16, groups*kernTileRows, cols)
		packed := alignedMake[byte](groups * 32 * cols)
		x := kernRandFloats(rand.New(rand.NewPCG(3, 4)), kernTileF16Max*cols, 1)
		run := func(b *testing.B, T int, call func(out []float32)) {
			out := make([]float32, T*groups*kernTileRows)
			for b.Loop() {
				call(out)
			}
			b.ReportMetric(float64(b.N)*float64(T*groups*kernTileRows*cols)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		}
		if kern := ks.tileF16; kern != nil {
			kernPackF16(packed, w, 0, groups)
			for T := 1; T <= kernTileF16Max; T++ {
				b.Run(fmt.Sprintf("type=F16/cols=%d/tokens=%d", cols, T), func(b *testing.B) {
					run(b, T, func(out []float32) {
						kernTileFloatCall(kern[T], T, out, groups*kernTileRows, packed, groups, cols, x)
					})
				})
			}
		}
		if kern := ks.tileBF16; kern != nil {
			kernPackBF16(packed, w, 0, groups)
			xb := make([]uint16, kernTileMax*cols)
			for i := range xb {
				xb[i] = kernBF16(x[i%len(x)])
			}
			for T := 1; T <= kernTileMax; T++ {
				b.Run(fmt.Sprintf("type=BF16/cols=%d/tokens=%d", cols, T), func(b *testing.B) {
					run(b, T, func(out []float32) {
						kernTileFloatCall(kern[T], T, out, groups*kernTileRows, packed, groups, cols, xb)
					})
				})
			}
		}
	}
}

// TestTileStreams checks that the two- and four-stream one-token kernels
// give every row the bits of the one-stream kernel, for numbers of groups
// that are and are not multiples of the streams (those left over go two
// at a time or alone).
func TestTileStreams(t *testing.T) {
	tested := 0
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		for _, level := range kernTileLevels(typ) {
			tl := kernSetFor(level).tile[typ]
			if tl.streams == nil {
				continue
			}
			tested++
			cols := 96
			if typ.BlockSize() == kernQKK {
				cols = 512
			}
			nb := cols / kernQK
			rng := rand.New(rand.NewPCG(uint64(typ), 7))
			for groups := 1; groups <= 7; groups++ {
				w, _ := kernRandWeight(t, rng, typ, groups*kernTileRows, cols)
				x := kernRandFloats(rng, cols, 1)
				xq, xd, xs := make([]int8, cols), make([]float32, nb), make([]float32, nb)
				kernSetFor(level).quantize(xq, xd, xs, x)
				dc := tl.dcOf(xq, xd, xs, 1, cols)
				want := make([]float32, groups*kernTileRows)
				kernTileCall(tl.kern[1], tl, 1, want, 0, w.tiles, groups, nb, xq, dc)
				got := make([]float32, groups*kernTileRows+1)
				got[len(got)-1] = 42
				kernTileCallStreams(tl, got, w.tiles, groups, nb, xq, dc)
				require.Equal(t, want, got[:len(want)], "kern=%s type=%s groups=%d", level, typ, groups)
				require.Equal(t, float32(42), got[len(want)], "wrote past the outputs")
			}
		}
	}
	if tested == 0 {
		t.Skipf("no several-stream tile kernels on this CPU (best level %s)", kernBest)
	}
}
