package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// kvGGUFType is the GGUF tensor type with typ's layout.
func kvGGUFType(typ kvType) gguf.TensorType {
	return map[kvType]gguf.TensorType{kvF32: gguf.TypeF32, kvF16: gguf.TypeF16, kvQ8_0: gguf.TypeQ8_0, kvQ4_0: gguf.TypeQ4_0}[typ]
}

// kvTestRows are rows of 32 to 128 values: Gaussian ones at several
// scales, all zeros, one large outlier, and ties of magnitude.
func kvTestRows(rng *rand.Rand) [][]float32 {
	rows := [][]float32{make([]float32, 32), make([]float32, 64)}
	for _, scale := range []float64{1e-3, 1, 40} {
		for _, n := range []int{32, 64, 96, 128} {
			rows = append(rows, kernRandFloats(rng, n, scale))
		}
	}
	out := kernRandFloats(rng, 64, 1)
	out[5] = 300
	tie := kernRandFloats(rng, 32, 0.1)
	tie[3], tie[9] = 2, -2
	return append(rows, out, tie)
}

// TestKVQuantizersMatchGGUF checks that the cache's quantizers write the
// bytes of the gguf package's (ggml's reference) Q8_0 and Q4_0 quantizers,
// that the portable dequantizers give gguf.Dequantize's values, and that
// every level's dequantizers give the portable ones' bits.
func TestKVQuantizersMatchGGUF(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	quant := map[kvType]func(dst []byte, src []float32){kvQ8_0: quantRowQ8_0, kvQ4_0: quantRowQ4_0}
	for _, typ := range []kvType{kvQ8_0, kvQ4_0} {
		for i, x := range kvTestRows(rng) {
			name := fmt.Sprintf("kv=%s row=%d", typ, i)
			want, err := gguf.Quantize(kvGGUFType(typ), x)
			require.NoError(t, err, name)
			got := make([]byte, typ.rowBytes(len(x))+1)
			got[len(got)-1] = 42
			quant[typ](got[:len(got)-1], x)
			require.Equal(t, want, got[:len(got)-1], name)
			require.Equal(t, byte(42), got[len(got)-1], "%s: wrote past the row", name)

			wantF := make([]float32, len(x))
			require.NoError(t, gguf.Dequantize(kvGGUFType(typ), want, wantF), name)
			for _, level := range kernLevels() {
				as := attnSetFor(level)
				deq := map[kvType]func([]float32, []byte){kvQ8_0: as.dequantQ8_0, kvQ4_0: as.dequantQ4_0}[typ]
				gotF := make([]float32, len(x)+1)
				gotF[len(x)] = 42
				deq(gotF[:len(x)], want)
				require.Equal(t, wantF, gotF[:len(x)], "%s kern=%s", name, level)
				require.Equal(t, float32(42), gotF[len(x)], "%s kern=%s: wrote past the row", name, level)
			}
			// The quantization error is what the type promises: half a
			// step of the block's scale (Q4_0's top code is clamped, so
			// a full step at the far end).
			for b := 0; b < len(x)/32; b++ {
				var amax float64
				for _, v := range x[32*b : 32*b+32] {
					amax = max(amax, math.Abs(float64(v)))
				}
				step := amax / 127
				if typ == kvQ4_0 {
					step = amax / 8
				}
				for j := 32 * b; j < 32*b+32; j++ {
					require.InDelta(t, x[j], wantF[j], step*1.01+1e-30, "%s value %d", name, j)
				}
			}
		}
	}
}

// kvAttnCase is one layer of cache holding seqs sequences of ctx random
// keys and values, written through the cache (and so converted to its
// type), with n queries per sequence at the end of its context; k and v
// keep the float32 values written, per sequence [pos][kvHead·dim].
type kvAttnCase struct {
	e    *Executor
	seqs []engine.SeqInput
	k, v [][][]float32
}

func newKVAttnCase(t testing.TB, spec model.Spec, typ kvType, seqs, ctx, n int, seed uint64) *kvAttnCase {
	const bs = 16
	rng := rand.New(rand.NewPCG(seed, 43))
	nb := (ctx + bs - 1) / bs
	e := &Executor{spec: spec, pool: NewPool(2), attnScale: float32(1 / math.Sqrt(float64(spec.HeadDim)))}
	t.Cleanup(e.pool.Close)
	e.info.BlockSize = bs
	// Blocks in reverse order with gaps, so a layout that assumed
	// contiguous sequences would read the wrong keys.
	blocksTotal := 2*seqs*nb + 1
	e.dev = newKVCache(typ, 1, blocksTotal, bs, spec.KVHeads, spec.HeadDim, spec.ValueDim)
	for range e.pool.Threads() {
		e.scratch = append(e.scratch, newScratch(&e.spec, bs, spec.HeadDim))
	}
	c := &kvAttnCase{e: e, seqs: make([]engine.SeqInput, seqs)}
	for i := range seqs {
		blocks := make([]int32, nb)
		for b := range blocks {
			blocks[b] = int32(blocksTotal - 1 - 2*(i*nb+b))
		}
		var ks, vs [][]float32
		for p := range ctx {
			k := kernRandFloats(rng, spec.KVHeads*spec.HeadDim, 1)
			v := kernRandFloats(rng, spec.KVHeads*spec.ValueDim, 1)
			e.dev.write(kernSetFor(kernUse), 0, int(blocks[p/bs]), p%bs, k, v)
			ks, vs = append(ks, k), append(vs, v)
		}
		c.k, c.v = append(c.k, ks), append(c.v, vs)
		c.seqs[i] = engine.SeqInput{SeqID: uint64(i), Tokens: make([]int32, n), Pos: ctx - n, Context: ctx, Blocks: blocks, Sample: true}
	}
	bf := &e.buf
	bf.seqStart = make([]int, seqs)
	for i := range seqs {
		bf.seqStart[i] = i * n
	}
	// Queries of scale 3 make the softmax peaked enough that a key's
	// error shows in the output.
	bf.q = kernRandFloats(rng, seqs*n*spec.Heads*spec.HeadDim, 3)
	bf.att = make([]float32, seqs*n*spec.Heads*spec.ValueDim)
	return c
}

// kvRound returns x as a cache of typ holds it, in float64.
func kvRound(t testing.TB, typ kvType, x []float32) []float64 {
	y := make([]float32, len(x))
	if typ == kvF32 {
		copy(y, x)
	} else {
		b, err := gguf.Quantize(kvGGUFType(typ), x)
		require.NoError(t, err)
		require.NoError(t, gguf.Dequantize(kvGGUFType(typ), b, y))
	}
	out := make([]float64, len(y))
	for i, v := range y {
		out[i] = float64(v)
	}
	return out
}

// reference computes, in float64, the attention output of every query of
// c (rows in c.e.buf.att's layout) over keys and values conv(k), conv(v)
// per head row.
func (c *kvAttnCase) reference(conv func(x []float32) []float64) []float64 {
	s := &c.e.spec
	hd, vd, g := s.HeadDim, s.ValueDim, s.Heads/s.KVHeads
	var out []float64
	for i, seq := range c.seqs {
		K, V := make([][][]float64, len(c.k[i])), make([][][]float64, len(c.v[i]))
		for p := range c.k[i] {
			for h := range s.KVHeads {
				K[p] = append(K[p], conv(c.k[i][p][h*hd:(h+1)*hd]))
				V[p] = append(V[p], conv(c.v[i][p][h*vd:(h+1)*vd]))
			}
		}
		for qt := range seq.Tokens {
			row := c.e.buf.seqStart[i] + qt
			pos := seq.Pos + qt
			for qh := range s.Heads {
				q := c.e.buf.q[(row*s.Heads+qh)*hd:][:hd]
				kh := qh / g
				scores := make([]float64, pos+1)
				m := math.Inf(-1)
				for p := range scores {
					var d float64
					for j, x := range q {
						d += float64(x) * K[p][kh][j]
					}
					scores[p] = d / math.Sqrt(float64(hd))
					m = max(m, scores[p])
				}
				var sum float64
				o := make([]float64, vd)
				for p, sc := range scores {
					w := math.Exp(sc - m)
					sum += w
					for j := range o {
						o[j] += w * V[p][kh][j]
					}
				}
				for j := range o {
					o[j] /= sum
				}
				out = append(out, o...)
			}
		}
	}
	return out
}

// vecRelErr is ‖got − want‖ / ‖want‖.
func vecRelErr(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	return math.Sqrt(num / den)
}

// kvTypeTolerance bounds, per cache type, the relative error of the
// attention output against float64 attention over the unrounded keys and
// values. Each is above the worst the type's rounding gives over the test's
// cases (6e-7, 4e-4, 1.3e-2 and 0.18, with the queries newKVAttnCase
// draws); a zeroed scale gives an error of 1 and a misread layout one near
// √2.
var kvTypeTolerance = map[kvType]float64{kvF32: 1e-5, kvF16: 2e-3, kvQ8_0: 2e-2, kvQ4_0: 0.25}

// TestAttentionKVTypesMatchReference checks the attention of every cache
// type at every kernel level against float64: within float32 rounding of
// attention over the values the cache holds (so the kernels read the
// quantized blocks right), and within the type's tolerance of attention
// over the values written (so the quantization is as accurate as the type
// should be). Contexts cross block boundaries (16 tokens a block);
// queries are one decode row or a whole prefill; head dims include keys
// and values of different lengths.
func TestAttentionKVTypesMatchReference(t *testing.T) {
	specs := []model.Spec{
		{Heads: 8, KVHeads: 2, HeadDim: 64, ValueDim: 64},
		{Heads: 3, KVHeads: 3, HeadDim: 32, ValueDim: 96},
	}
	defer func(l kernLevel) { kernUse = l }(kernUse)
	worst := map[kvType]float64{}
	for _, level := range kernLevels() {
		kernUse = level
		for _, typ := range []kvType{kvF32, kvF16, kvQ8_0, kvQ4_0} {
			for si, spec := range specs {
				for _, ctx := range []int{1, 15, 16, 17, 40, 100} {
					for _, n := range []int{1, ctx} {
						if n == ctx && ctx > 40 {
							continue
						}
						name := fmt.Sprintf("kern=%s kv=%s spec=%d ctx=%d queries=%d", level, typ, si, ctx, n)
						c := newKVAttnCase(t, spec, typ, 2, ctx, n, uint64(ctx*7+n))
						c.e.attention(0, c.seqs, false)
						got := c.e.buf.att
						held := c.reference(func(x []float32) []float64 { return kvRound(t, typ, x) })
						require.Less(t, vecRelErr(got, held), 1e-5, "%s: against the values the cache holds", name)
						exact := c.reference(func(x []float32) []float64 { return kvRound(t, kvF32, x) })
						rel := vecRelErr(got, exact)
						require.Less(t, rel, kvTypeTolerance[typ], "%s: against the values written", name)
						worst[typ] = max(worst[typ], rel)
					}
				}
			}
		}
	}
	for typ, w := range worst {
		t.Logf("kv=%s: worst relative error %.2g (bound %g)", typ, w, kvTypeTolerance[typ])
	}
}

// TestKVCacheRefusesHeadDims checks that New refuses a quantized cache for
// a model whose head dim is not a multiple of 32, with an error that
// names the dims and the way out, and takes one whose head dim is.
func TestKVCacheRefusesHeadDims(t *testing.T) {
	f16 := openModel(t, tinyModel("llama", gguf.TypeQ8_0, false), nil) // head dim 16
	for _, kv := range []string{"q8_0", "Q4_0"} {
		cfg := testConfig()
		cfg.KVType = kv
		_, err := New(f16, cfg)
		require.ErrorContains(t, err, "multiples of 32")
		require.ErrorContains(t, err, "keys of 16")
	}
	cfg := testConfig()
	cfg.KVType = "q5_1"
	require.ErrorContains(t, cfg.Validate(), "q8_0")

	m := tinyModel("llama", gguf.TypeQ8_0, false)
	m.HeadDim = 32
	f32 := openModel(t, m, nil)
	for _, kv := range KVTypes {
		cfg := testConfig()
		cfg.KVType = kv
		e := newExec(t, f32, cfg)
		require.Equal(t, kv, e.KVType())
	}
}

// TestKVBlocksScaleWithType checks that the blocks a KV budget buys scale
// with the type's bytes: q8_0 holds 64/34 times the blocks of f16 and q4_0
// 64/18 times (all 32-value blocks), swap space likewise.
func TestKVBlocksScaleWithType(t *testing.T) {
	m := tinyModel("llama", gguf.TypeQ8_0, false)
	m.HeadDim = 32
	f := openModel(t, m, nil)
	info := map[string]engine.ExecutorInfo{}
	for _, kv := range KVTypes {
		e, err := New(f, Config{Threads: 1, KVCacheBytes: 64 << 20, SwapBytes: 16 << 20, KVType: kv})
		require.NoError(t, err)
		defer e.Close()
		info[kv] = e.Info()
		// 2 layers · 2 KV heads · (K + V) of 32 dims · 16 tokens.
		bytes := map[string]int{"f32": 4 * 32, "f16": 2 * 32, "q8_0": 34, "q4_0": 18}[kv] * 2 * 2 * 2 * 16
		require.Equal(t, (64<<20)/bytes, info[kv].NumBlocks, kv)
		require.Equal(t, (16<<20)/bytes, info[kv].SwapBlocks, kv)
	}
	require.InDelta(t, 64.0/34, float64(info["q8_0"].NumBlocks)/float64(info["f16"].NumBlocks), 1e-3)
	require.InDelta(t, 64.0/18, float64(info["q4_0"].NumBlocks)/float64(info["f16"].NumBlocks), 1e-3)
}

// TestKVBlockBytesRoundTrip checks blockBytes, the raw bytes a transfer of
// blocks between caches (or nodes) moves: for every type, a block's K and
// V of each layer are kvHeads·blockSize rows of the type's bytes, distinct
// blocks do not overlap, and copying them into a block of another cache
// of the same shape reproduces every key and value the first one decodes.
func TestKVBlockBytesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	const layers, bs, heads, hd, vd = 2, 16, 2, 64, 32
	ks := kernSetFor(kernUse)
	as := attnSetFor(kernUse)
	for _, typ := range []kvType{kvF32, kvF16, kvQ8_0, kvQ4_0} {
		a := newKVCache(typ, layers, 5, bs, heads, hd, vd)
		b := newKVCache(typ, layers, 2, bs, heads, hd, vd)
		for l := range layers {
			for slot := range bs {
				a.write(kernSetFor(kernUse), l, 3, slot, kernRandFloats(rng, heads*hd, 1), kernRandFloats(rng, heads*vd, 1))
			}
			k, v := a.blockBytes(l, 3)
			require.Len(t, k, heads*bs*typ.rowBytes(hd), "kv=%s", typ)
			require.Len(t, v, heads*bs*typ.rowBytes(vd), "kv=%s", typ)
			k2, _ := a.blockBytes(l, 2)
			require.NotEqual(t, k2, k, "kv=%s: block 2 is still zero", typ)
			bk, bv := b.blockBytes(l, 1)
			copy(bk, k)
			copy(bv, v)
		}
		for l := range layers {
			for h := range heads {
				scratchA, scratchB := make([]float32, bs*hd), make([]float32, bs*hd)
				require.Equal(t, a.keys(ks, as, l, 3, h, bs, scratchA), b.keys(ks, as, l, 1, h, bs, scratchB), "kv=%s keys", typ)
				require.Equal(t, a.values(ks, as, l, 3, h, bs, scratchA), b.values(ks, as, l, 1, h, bs, scratchB), "kv=%s values", typ)
			}
		}
	}
}
