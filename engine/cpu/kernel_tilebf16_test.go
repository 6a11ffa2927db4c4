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

// TestBF16Round checks kernBF16 on the cases that matter (ties to even,
// carries into the exponent, overflow to infinity, subnormals, NaN) and
// against float64 rounding on random values.
func TestBF16Round(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // a tie, to the even 1
		{0x3f818000, 0x3f82}, // a tie, to the even 0x3f82
		{0x3f808001, 0x3f81}, // above the tie
		{0x3fffffff, 0x4000}, // the carry into the exponent
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x00000001, 0x0000}, // subnormal: zero
		{0x807fffff, 0x8000}, // negative subnormal: -0
		{0x00800000, 0x0080}, // the smallest normal
		{0x7fc00001, 0x7fc0}, // quiet NaN
		{0x7f800001, 0x7fc0}, // signalling NaN: quiet
		{0x80000000, 0x8000},
	} {
		require.Equal(t, c.want, kernBF16(math.Float32frombits(c.in)), "%#08x", c.in)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		f := math.Float32frombits(rng.Uint32()&^0x7f800000 | uint32(1+rng.IntN(253))<<23)
		got := float64(kernBF16ToF32(kernBF16(f)))
		// The two bfloat16 neighbours of f; the nearer one, ties to even.
		lo := math.Float32frombits(math.Float32bits(f) &^ 0xffff)
		hi := math.Float32frombits(math.Float32bits(lo) + 0x10000)
		want := float64(lo)
		dl, dh := math.Abs(float64(f)-float64(lo)), math.Abs(float64(hi)-float64(f))
		if dh < dl || dh == dl && math.Float32bits(lo)&0x10000 != 0 {
			want = float64(hi)
		}
		require.Equal(t, want, got, "%#08x", math.Float32bits(f))
	}
}

// kernBF16Weight returns the bfloat16 of element c of an F16 or BF16 row.
func kernBF16Weight(typ gguf.TensorType, row []byte, c int) uint16 {
	h := binary.LittleEndian.Uint16(row[2*c:])
	if typ == gguf.TypeBF16 {
		return kernBF16Flush(h)
	}
	return kernBF16(gguf.HalfToFloat32(h))
}

// kernRandBF16Weight returns a random F16 or BF16 matrix packed for the
// BF16 tile kernels, and its values rounded to bfloat16 (what the kernels
// multiply).
func kernRandBF16Weight(t testing.TB, rng *rand.Rand, typ gguf.TensorType, rows, cols int) (Weight, []float32) {
	t.Helper()
	data, err := gguf.Quantize(typ, kernRandFloats(rng, rows*cols, 0.05))
	require.NoError(t, err)
	w, err := newWeight(typ, rows, cols, data, packBF16)
	require.NoError(t, err)
	require.True(t, w.bf16)
	vals := make([]float32, rows*cols)
	for r := range rows {
		for c := range cols {
			vals[r*cols+c] = kernBF16ToF32(kernBF16Weight(typ, data[r*2*cols:], c))
		}
	}
	return w, vals
}

// kernBF16Levels returns the levels whose kernel sets have BF16 tile
// kernels in assembly.
func kernBF16Levels() []kernLevel {
	var ls []kernLevel
	for _, l := range kernLevels() {
		if kernSetFor(l).tileBF16 != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestTileBF16 checks the packed layout against the rows rounded to
// bfloat16 (missing rows zero) and each level's BF16 tile kernels against
// kernTileBF16Go bit for bit, for 1..8 tokens and three groups, the last
// short of rows, then eleven groups (the kernels of up to three tokens
// take four at once, then the ones left over), with activations spread over
// many binades so that the order of the additions shows in the bits.
func TestTileBF16(t *testing.T) {
	levels := kernBF16Levels() // none without AVX512_BF16: the layouts are still checked
	for _, typ := range []gguf.TensorType{gguf.TypeF16, gguf.TypeBF16} {
		for _, rows := range []int{41, 169} {
			rng := rand.New(rand.NewPCG(11, 12))
			const cols = 200
			w, vals := kernRandBF16Weight(t, rng, typ, rows, cols)
			groups := kernTileGroups(rows)
			require.Len(t, w.tiles, groups*32*cols)
			for g := range groups {
				for i := range kernTileRows {
					for c := range cols {
						got := kernBF16ToF32(binary.LittleEndian.Uint16(w.tiles[g*32*cols+64*(c/2)+4*i+2*(c%2):]))
						want := float32(0)
						if r := g*kernTileRows + i; r < rows {
							want = vals[r*cols+c]
						}
						require.Equal(t, want, got, "type %s group %d row %d column %d", typ, g, i, c)
					}
				}
			}
			for _, level := range levels {
				kern := kernSetFor(level).tileBF16
				for T := 1; T <= kernTileMax; T++ {
					x := make([]uint16, T*cols)
					for i := range x {
						x[i] = kernBF16(float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20))))
					}
					stride := groups*kernTileRows + 3
					got, want := make([]float32, T*stride), make([]float32, T*stride)
					kernTileFloatCall(kern[T], T, got, stride, w.tiles, groups, cols, x)
					kernTileBF16Go(T)(want, stride, w.tiles, groups, cols, x)
					require.Equal(t, want, got, "kern=%s type=%s rows=%d tokens=%d", level, typ, rows, T)
					for i := range T {
						require.NotZero(t, got[i*stride+rows-1], "tokens=%d token %d", T, i)
					}
				}
			}
		}
	}
	if len(levels) == 0 {
		t.Skipf("packed layouts checked; no BF16 tile kernels to check on this CPU (best level %s, no AVX512_BF16)", kernBest)
	}
}

// TestMatMulBF16 checks MatMul over weights packed for the BF16 tile
// kernels: batch-invariant (every token of batches of 1 to 20 gets the
// bits it gets alone, with threads), and within bfloat16's rounding of
// float64 products of the F16 weights with the activations.
func TestMatMulBF16(t *testing.T) {
	levels := append([]kernLevel{kernLevelGo}, kernBF16Levels()...)
	for _, level := range levels {
		ks := kernSetFor(level)
		for _, shape := range [][2]int{{16, 64}, {37, 96}, {80, 544}} {
			t.Run(fmt.Sprintf("kern=%s/%dx%d", level, shape[0], shape[1]), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(shape[0]), uint64(shape[1])))
				pool := NewPool(3)
				defer pool.Close()
				rows, cols := shape[0], shape[1]
				data, err := gguf.Quantize(gguf.TypeF16, kernRandFloats(rng, rows*cols, 0.05))
				require.NoError(t, err)
				w, err := newWeight(gguf.TypeF16, rows, cols, data, packBF16)
				require.NoError(t, err)
				deq := make([]float32, rows*cols)
				require.NoError(t, gguf.Dequantize(gguf.TypeF16, data, deq))
				const toks = 20
				x := kernRandFloats(rng, toks*cols, 1)
				alone := make([]float32, toks*rows)
				for tok := range toks {
					kernMatMul(nil, ks, alone[tok*rows:], w, x[tok*cols:], 1)
				}
				for n := 1; n <= toks; n += 3 {
					got := make([]float32, n*rows)
					kernMatMul(pool, ks, got, w, x, n)
					require.Equal(t, alone[:n*rows], got, "tokens=%d", n)
				}
				want := make([]float64, toks*rows)
				for tok := range toks {
					for r := range rows {
						for c := range cols {
							want[tok*rows+r] += float64(deq[r*cols+c]) * float64(x[tok*cols+c])
						}
					}
				}
				num, den := kernErrSums(alone, want)
				rel := math.Sqrt(num / den)
				t.Logf("relative error against float64 products of the F16 weights: %.2g", rel)
				require.Less(t, rel, 5e-3, "relative error of bfloat16 products")
				require.Greater(t, rel, 1e-5, "the products are rounded to bfloat16, not exact")
			})
		}
	}
}

// TestToBF16 checks each level's toBF16 against kernBF16 on every length
// up to 40 (the assembly's sixteen at a time and the tails) and on the
// values that take its masked paths: NaNs, infinities, subnormals, zeros,
// ties and carries.
func TestToBF16(t *testing.T) {
	special := []uint32{0x7fc00001, 0xff800001, 0x7f800000, 0xff800000, 0x00000001, 0x807fffff, 0x00000000, 0x80000000,
		0x00800000, 0x3f808000, 0x3f818000, 0x3fffffff, 0x7f7fffff, 0xffffffff, 0x7fffffff}
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 40)
	for i := range src {
		if i < len(special) {
			src[i] = math.Float32frombits(special[i])
		} else {
			src[i] = math.Float32frombits(rng.Uint32())
		}
	}
	for _, l := range kernLevels() {
		ks := kernSetFor(l)
		for n := range len(src) + 1 {
			for _, s := range [][]float32{src[:n], src[len(src)-n:]} {
				got := make([]uint16, n+1)
				got[n] = 0xabcd
				ks.toBF16(got, s)
				for i, v := range s {
					require.Equal(t, kernBF16(v), got[i], "kern=%s n=%d value %#08x", l, n, math.Float32bits(v))
				}
				require.Equal(t, uint16(0xabcd), got[n], "kern=%s n=%d: wrote past the values", l, n)
			}
		}
	}
}
