package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model/gguf"
)

// kernQ8KTypes are the types with Q8_K kernels.
var kernQ8KTypes = []gguf.TensorType{gguf.TypeQ4_K, gguf.TypeQ6_K}

// kernQ8KGoSet returns the portable kernels with the portable Q8_K
// kernels for Q4_K and Q6_K: MatMul on the Q8_K path on every CPU.
func kernQ8KGoSet() *kernSet {
	ks := *kernSetFor(kernLevelGo)
	ks.q8k = map[gguf.TensorType]*kernQ8K{}
	for _, typ := range kernQ8KTypes {
		ks.q8k[typ] = &kernQ8K{one: kernQ8KGo(typ, 1), tile: kernQ8KGo(typ, kernQ8KTile)}
	}
	return &ks
}

// kernQ8KSets returns the kernel sets that take typ through Q8_K
// kernels, by name: the portable ones, and each level that has them.
func kernQ8KSets(typ gguf.TensorType) map[string]*kernSet {
	sets := map[string]*kernSet{"go-q8k": kernQ8KGoSet()}
	for _, l := range kernLevels() {
		if ks := kernSetFor(l); ks.q8k[typ] != nil {
			sets[l.String()] = ks
		}
	}
	return sets
}

// TestQuantizeQ8K checks the quantizer against the format's definition in
// float64 arithmetic: quants, sums of 16, scale, padding, and all-zero
// super-blocks for tiny and zero inputs.
func TestQuantizeQ8K(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	const nsb = 40
	x := kernRandActivations(rng, 1, nsb*kernQ8KValues)
	for i := range x[:256] { // a block at exactly ±127.5 steps: ties
		x[i] = float32(i%255-127) / 2
	}
	dst := make([]byte, nsb*kernQ8KBlock)
	for i := range dst {
		dst[i] = 0xa5 // the padding must be written
	}
	kernQuantizeQ8K(dst, x)
	for s := range nsb {
		v, blk := x[256*s:256*(s+1)], dst[kernQ8KBlock*s:kernQ8KBlock*(s+1)]
		var amax float32
		for _, f := range v {
			amax = max(amax, float32(math.Abs(float64(f))))
		}
		var id float32
		if amax >= kernMinAmax {
			id = 127 / amax
		}
		require.Equal(t, amax/127, kernQ8KD(blk), "block %d scale", s)
		for g := range 16 {
			var sum int32
			for j := 16 * g; j < 16*g+16; j++ {
				want := int32(math.RoundToEven(float64(v[j] * id)))
				require.Equal(t, want, kernQ8KQuant(blk, j), "block %d value %d (%v)", s, j, v[j])
				sum += want
			}
			require.Equal(t, sum, kernQ8KBSum(blk, g), "block %d sum %d", s, g)
		}
		require.Equal(t, make([]byte, kernQ8KBlock-kernQ8KScale-4), blk[kernQ8KScale+4:], "block %d padding", s)
	}
}

// kernFixtureLike returns n rows of cols activations shaped like a
// transformer's normalized hidden states: unit Gaussian channels, a few of
// which (the same in every row) are 20 times larger, and rows whose overall
// scale varies tenfold.
func kernFixtureLike(rng *rand.Rand, n, cols int) []float32 {
	x := kernRandFloats(rng, n*cols, 1)
	outliers := []int{3, cols / 3, cols/2 + 7, cols - 5}
	for t := range n {
		row := x[t*cols : (t+1)*cols]
		scale := float32(math.Pow(10, rng.Float64()-0.5))
		for i := range row {
			row[i] *= scale
		}
		for _, c := range outliers {
			row[c] *= 20
		}
	}
	return x
}

// kernRefProducts returns the float64 products of n tokens x with the
// dequantized rows deq (rows x cols).
func kernRefProducts(deq, x []float32, rows, cols, n int) []float64 {
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
	return want
}

// kernFixtureWeight returns the named tensor of the Q4_K_M fixture as a
// Weight with its dequantized values, or skips.
func kernFixtureWeight(t *testing.T, name string) (Weight, []float32) {
	t.Helper()
	path := filepath.Join(fixtures.Dir(t), "llama-spm-d256-q4_k_m.gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("fixture %s not found", path)
	}
	f, err := gguf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	info, ok := f.Tensor(name)
	require.True(t, ok, "tensor %s", name)
	cols, rows := int(info.Dims[0]), int(info.Dims[1])
	w, err := NewWeight(info.Type, rows, cols, f.TensorData(info))
	require.NoError(t, err)
	deq := make([]float32, rows*cols)
	require.NoError(t, gguf.Dequantize(info.Type, w.Data, deq))
	return w, deq
}

// kernQ8KErrorBound is the accuracy contract of the Q8_K path, by kind of
// activations: the largest relative error ‖out−ref‖/‖ref‖ of one MatMul
// (n tokens x rows outputs) against float64 products of the dequantized
// weights with the float activations. Rounding to int8 on the grid of the
// largest of 256 values (instead of 32) costs about 1.3x the per-32
// format's error on Gaussian activations (0.67-0.73% against 0.50-0.56%),
// and 2-2.8x where a few channels are 20 times the others (2.4-2.9%
// against 0.97-1.2%): their grid step then covers the whole super-block.
var kernQ8KErrorBound = map[string]float64{"gaussian": 1e-2, "fixture-like": 4e-2}

// TestQ8KAccuracy states the Q8_K format's accuracy contract and measures
// it beside the per-32 format's, on random Gaussian weights and on the
// Q4_K_M fixture's Q4_K and Q6_K tensors (written by llama-quantize), with
// Gaussian and fixture-like (outlier channel) activations.
func TestQ8KAccuracy(t *testing.T) {
	old, q8k := kernSetFor(kernLevelGo), kernQ8KGoSet()
	type source struct {
		name string
		load func(t *testing.T, rng *rand.Rand) (Weight, []float32)
	}
	sources := []source{
		{"random-q4_k", func(t *testing.T, rng *rand.Rand) (Weight, []float32) {
			return kernRandWeight(t, rng, gguf.TypeQ4_K, 96, 1536)
		}},
		{"random-q6_k", func(t *testing.T, rng *rand.Rand) (Weight, []float32) {
			return kernRandWeight(t, rng, gguf.TypeQ6_K, 96, 1536)
		}},
		{"fixture-q4_k-ffn_down", func(t *testing.T, _ *rand.Rand) (Weight, []float32) {
			return kernFixtureWeight(t, "blk.0.ffn_down.weight")
		}},
		{"fixture-q4_k-attn_q", func(t *testing.T, _ *rand.Rand) (Weight, []float32) {
			return kernFixtureWeight(t, "blk.1.attn_q.weight")
		}},
		{"fixture-q6_k-output", func(t *testing.T, _ *rand.Rand) (Weight, []float32) {
			w, deq := kernFixtureWeight(t, "output.weight")
			rows := min(w.Rows, 512) // a slice of the vocabulary is enough
			rb := len(w.Data) / w.Rows
			w.Rows, w.Data = rows, w.Data[:rows*rb]
			return w, deq[:rows*w.Cols]
		}},
	}
	inputs := map[string]func(rng *rand.Rand, n, cols int) []float32{
		"gaussian":     func(rng *rand.Rand, n, cols int) []float32 { return kernRandFloats(rng, n*cols, 1) },
		"fixture-like": kernFixtureLike,
	}
	for _, src := range sources {
		for iname, input := range inputs {
			t.Run(src.name+"/"+iname, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(91, 92))
				w, deq := src.load(t, rng)
				require.Contains(t, kernQ8KTypes, w.Type)
				const n = 9
				x := input(rng, n, w.Cols)
				want := kernRefProducts(deq, x, w.Rows, w.Cols, n)
				errOf := func(ks *kernSet) float64 {
					out := make([]float32, n*w.Rows)
					kernMatMul(nil, ks, out, w, x, n)
					num, den := kernErrSums(out, want)
					return math.Sqrt(num / den)
				}
				e32, e256 := errOf(old), errOf(q8k)
				t.Logf("%s %s %dx%d: relative error per-32 format %.3g, Q8_K %.3g (%.2fx)", src.name, iname, w.Rows, w.Cols, e32, e256, e256/e32)
				require.Less(t, e256, kernQ8KErrorBound[iname])
			})
		}
	}
}

// TestQ8KBatchInvariant is TestTileBatchInvariant for the Q8_K path: every
// token of batches of 1 to 19 tokens, at each of four offsets (so that it
// falls at each place of a group of four), gets the bits it gets alone, at
// every level with Q8_K kernels and with the portable ones, for row counts
// of one tile and of several (kernTileBytes shrunk), with a pool.
func TestQ8KBatchInvariant(t *testing.T) {
	for _, typ := range kernQ8KTypes {
		for name, ks := range kernQ8KSets(typ) {
			for _, shape := range [][2]int{{7, 256}, {37, 768}} {
				t.Run(fmt.Sprintf("kern=%s/type=%s/%dx%d", name, typ, shape[0], shape[1]), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(shape[0]), uint64(typ)))
					pool := NewPool(3)
					defer pool.Close()
					rows, cols := shape[0], shape[1]
					w, _ := kernRandWeight(t, rng, typ, rows, cols)
					const toks = 24
					x := kernRandActivations(rng, toks, cols)
					alone := make([]float32, toks*rows)
					for tok := range toks {
						kernMatMul(nil, ks, alone[tok*rows:], w, x[tok*cols:], 1)
					}
					defer func(old int) { kernTileBytes = old }(kernTileBytes)
					for _, tb := range []int{256 << 10, 3 * len(w.Data) / rows} {
						kernTileBytes = tb
						for n := 1; n <= 19; n++ {
							for off := range 4 {
								out := make([]float32, n*rows+1)
								out[n*rows] = 42
								kernMatMul(pool, ks, out, w, x[off*cols:], n)
								require.Equal(t, alone[off*rows:(off+n)*rows], out[:n*rows], "n=%d from %d, tile %d bytes", n, off, tb)
								require.Equal(t, float32(42), out[n*rows], "wrote past the outputs")
							}
						}
					}
				})
			}
		}
	}
}

// TestQ8KKernelsMatchGo checks every level's Q8_K kernels, one token and
// the tile of kernQ8KTile, against the portable kernels bit for bit, on
// random blocks of every bit pattern (extreme quants and scales), block
// counts of the 1.5B shape's rows (6 and 35) and others, with rows passed
// apart (rb past the row's blocks) and an output stride, writing nothing
// else.
func TestQ8KKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	for _, typ := range kernQ8KTypes {
		for _, l := range kernLevels() {
			k := kernSetFor(l).q8k[typ]
			if k == nil {
				continue
			}
			for _, nsb := range []int{1, 2, 6, 35} {
				t.Run(fmt.Sprintf("kern=%s/type=%s/blocks=%d", l, typ, nsb), func(t *testing.T) {
					const rows, pad, ostride = 13, 8, 17
					bs := typ.BlockBytes()
					rb := nsb*bs + pad
					w := make([]byte, rows*rb)
					for r := range rows {
						copy(w[r*rb:], kernRandBlocks(rng, typ, nsb))
					}
					const toks = kernQ8KTile
					x := make([]byte, toks*nsb*kernQ8KBlock)
					kernQuantizeQ8K(x, kernRandActivations(rng, toks, nsb*kernQ8KValues))
					for _, fam := range []struct {
						name   string
						got    kernQ8KFunc
						tokens int
					}{{"one", k.one, 1}, {"tile", k.tile, kernQ8KTile}} {
						if fam.got == nil {
							continue
						}
						want := make([]float32, (fam.tokens-1)*ostride+rows+1)
						got := make([]float32, len(want))
						for i := range got {
							want[i], got[i] = 42, 42
						}
						xs := x[:fam.tokens*nsb*kernQ8KBlock]
						kernQ8KGo(typ, fam.tokens)(want, ostride, w, rows, rb, xs, nsb)
						fam.got(got, ostride, w, rows, rb, xs, nsb)
						for i := range want {
							require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s: out[%d] = %v, want %v", fam.name, i, got[i], want[i])
						}
					}
				})
			}
		}
	}
}

// TestFMA32 checks kernFMA32 against a·b+c computed exactly (big.Float)
// and rounded once to float32: random operands of many magnitudes, and
// sums whose float64 rounding lands exactly halfway between two float32s
// while the exact sum does not (where rounding twice goes wrong).
func TestFMA32(t *testing.T) {
	exact := func(a, b, c float32) float32 {
		z := new(big.Float).SetPrec(400).SetFloat64(float64(a))
		z.Mul(z, new(big.Float).SetFloat64(float64(b)))
		z.Add(z, new(big.Float).SetFloat64(float64(c)))
		f, _ := z.Float32()
		return f
	}
	// a·b = 2^6 - 2^-40 exactly (a = 1+2^-23, b = 64·(1-2^-23)), c an odd
	// float32 with a spacing of 2^7 at 2^30: in float64 c ± a·b rounds to
	// the midpoint c ± 2^6, which ties to the even neighbour, c ± 2^7;
	// the exact sum is on c's side.
	a := math.Nextafter32(1, 2)
	b := 64 * math.Nextafter32(math.Nextafter32(1, 0), 0)
	c := float32(1<<30 + 1<<7)
	cases := [][3]float32{{a, b, c}, {-a, b, -c}, {a, -b, c}, {-a, -b, -c}}
	for _, k := range cases {
		require.Equal(t, k[2], kernFMA32(k[0], k[1], k[2]), "fma(%v, %v, %v)", k[0], k[1], k[2])
	}
	rng := rand.New(rand.NewPCG(77, 78))
	for range 200000 {
		r := func() float32 {
			return float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
		}
		cases = append(cases, [3]float32{r(), r(), r()})
	}
	for _, k := range cases {
		want := exact(k[0], k[1], k[2])
		require.Equal(t, math.Float32bits(want), math.Float32bits(kernFMA32(k[0], k[1], k[2])), "fma(%v, %v, %v)", k[0], k[1], k[2])
	}
}
