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
// typ.
func kernTileLevels(typ gguf.TensorType) []kernLevel {
	var ls []kernLevel
	for _, l := range kernLevels() {
		if kernSetFor(l).tile[typ] != nil {
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
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0} {
		levels := kernTileLevels(typ)
		if len(levels) == 0 {
			t.Skipf("no tile kernels for %s on this CPU (best level %s)", typ, kernBest)
		}
		for _, level := range levels {
			ks := kernSetFor(level)
			for _, shape := range [][2]int{{16, 64}, {37, 96}, {80, 544}} {
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
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0} {
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
				dc := make([]int32, 2*T*nb)
				for t := range T {
					tl.dc(dc[2*t*nb:2*(t+1)*nb], xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb])
				}
				out := make([]float32, T*groups*kernTileRows)
				for b.Loop() {
					kernTileCall(tl.kern[T], tl, T, out, groups*kernTileRows, w.tiles, groups, nb, xq, dc)
				}
				b.ReportMetric(float64(b.N)*float64(T*groups*kernTileRows*cols)/b.Elapsed().Seconds()/1e9, "GMAC/s")
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
	for _, typ := range []gguf.TensorType{gguf.TypeQ4_0, gguf.TypeQ8_0} {
		b.Run(fmt.Sprintf("type=%s", typ), func(b *testing.B) {
			if kernSetFor(kernBest).tile[typ] == nil {
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
