package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// attnHalves rounds x to half floats and returns them as the cache holds
// them, with their float32 values.
func attnHalves(x []float32) ([]byte, []float32) {
	h, f := make([]byte, 2*len(x)), make([]float32, len(x))
	for i, v := range x {
		b := gguf.Float32ToHalf(v)
		binary.LittleEndian.PutUint16(h[2*i:], b)
		f[i] = gguf.HalfToFloat32(b)
	}
	return h, f
}

// attnLengths are head sizes with every tail of 8 and 16 values.
var attnLengths = []int{1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 47, 48, 63, 64, 65, 80, 100, 128, 129}

// TestAttnDotsAgree checks every level's key dots against float64, F16
// against F32 bit for bit, and that a key's score does not depend on the
// other keys of the call.
func TestAttnDotsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, level := range kernLevels() {
		as := attnSetFor(level)
		for _, hd := range attnLengths {
			for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 16, 17} {
				name := fmt.Sprintf("kern=%s hd=%d keys=%d", level, hd, n)
				q := kernRandFloats(rng, hd, 1)
				kh, k := attnHalves(kernRandFloats(rng, n*hd, 1))
				const scale = 0.125
				got := make([]float32, n+1)
				got[n] = 42
				as.dotsF32(got[:n], q, k, scale)
				require.Equal(t, float32(42), got[n], name)
				for j := range n {
					var want, mag float64
					for i := range hd {
						want += float64(q[i]) * float64(k[j*hd+i])
						mag += math.Abs(float64(q[i]) * float64(k[j*hd+i]))
					}
					require.InDelta(t, want*scale, got[j], 1e-6*mag+1e-30, "%s key %d", name, j)
					one := make([]float32, 1)
					as.dotsF32(one, q, k[j*hd:(j+1)*hd], scale)
					require.Equal(t, got[j], one[0], "%s key %d alone", name, j)
				}
				got16 := make([]float32, n)
				as.dotsF16(got16, q, kh, scale)
				require.Equal(t, got[:n], got16, "%s f16", name)
			}
		}
	}
}

// TestAttnExpSumAgrees checks that every level's exponentials have
// expNeg's bits (and so its accuracy, TestExpNeg) and that the sum agrees
// with float64, over lengths with every tail and arguments down past the
// underflow, -Inf included.
func TestAttnExpSumAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, level := range kernLevels() {
		as := attnSetFor(level)
		for n := range 70 {
			s := make([]float32, n+1)
			for i := range n {
				s[i] = float32(rng.Float64()*100 - 95)
				if rng.IntN(10) == 0 {
					s[i] = float32(math.Inf(-1))
				}
			}
			s[n] = 42
			m := float32(5)
			if n > 0 {
				s[0] = m // the maximum itself: e^0 = 1
			}
			want := make([]float32, n)
			var wantSum, mag float64
			for i := range n {
				want[i] = expNeg(s[i] - m)
				wantSum += float64(want[i])
				mag += math.Abs(float64(want[i]))
			}
			got := as.expSum(s[:n], m)
			require.Equal(t, want, s[:n], "kern=%s n=%d", level, n)
			require.Equal(t, float32(42), s[n], "kern=%s n=%d", level, n)
			require.InDelta(t, wantSum, got, 1e-6*mag+1e-30, "kern=%s n=%d sum", level, n)
		}
	}
}

// TestAttnAccAgrees checks every level's weighted sums of values against
// float64, F16 against F32 bit for bit, and the rescaling by c.
func TestAttnAccAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, level := range kernLevels() {
		as := attnSetFor(level)
		for _, vd := range attnLengths {
			for _, n := range []int{1, 2, 3, 5, 16, 17} {
				for _, c := range []float32{1, 0.3, 0} {
					name := fmt.Sprintf("kern=%s vd=%d keys=%d c=%v", level, vd, n, c)
					vh, v := attnHalves(kernRandFloats(rng, n*vd, 1))
					p := make([]float32, n)
					for j := range p {
						p[j] = rng.Float32()
					}
					acc0 := kernRandFloats(rng, vd+1, 1)
					acc := append([]float32(nil), acc0...)
					as.accF32(acc[:vd], p, v, c)
					require.Equal(t, acc0[vd], acc[vd], name)
					for i := range vd {
						want := float64(acc0[i]) * float64(c)
						mag := math.Abs(want)
						for j := range n {
							want += float64(p[j]) * float64(v[j*vd+i])
							mag += math.Abs(float64(p[j]) * float64(v[j*vd+i]))
						}
						require.InDelta(t, want, acc[i], 1e-6*mag+1e-30, "%s value %d", name, i)
					}
					acc16 := append([]float32(nil), acc0[:vd]...)
					as.accF16(acc16, p, vh, c)
					require.Equal(t, acc[:vd], acc16, "%s f16", name)
				}
			}
		}
	}
}

// TestAttentionBatchInvariant checks, at every kernel level and for every
// cache type, that each query of a prefill (chunks of 16 tokens over 3
// query heads per KV head, whose F16 blocks are converted once) gets
// exactly the bits it gets alone (one token, F16 read in place), and
// that the last-row-only pass of the last layer agrees too; over one
// softmax step (37 keys) and several (300 keys, steps of 128), with and
// without a sliding window that starts inside a step. The prefill also
// agrees with float64 attention over the cache's values.
func TestAttentionBatchInvariant(t *testing.T) {
	defer func(l kernLevel) { kernUse = l }(kernUse)
	for _, level := range kernLevels() {
		kernUse = level
		for _, typ := range []kvType{kvF32, kvF16, kvQ8_0, kvQ4_0} {
			for _, c := range []struct{ ctx, window int }{{37, 0}, {300, 0}, {300, 90}} {
				hd := 24
				if typ.quantized() {
					hd = 32
				}
				spec := model.Spec{Dim: 144, Heads: 6, KVHeads: 2, HeadDim: hd, ValueDim: hd}
				if c.window > 0 {
					spec.SlidingWindow, spec.SlidingPattern = c.window, 2
				}
				hv := spec.Heads * spec.ValueDim
				qd := spec.Heads * spec.HeadDim
				ctx := c.ctx
				name := fmt.Sprintf("kern=%s kv=%s ctx=%d window=%d", level, typ, ctx, c.window)
				e, seqs := attnExec(t, spec, typ, 2, 1, ctx, ctx)
				require.Equal(t, 128, e.scratch[0].span, name)
				e.attention(0, seqs, false)
				prefill := append([]float32(nil), e.buf.att[:ctx*hv]...)
				q := append([]float32(nil), e.buf.q[:ctx*qd]...)
				attnCheckRef(t, e, seqs[0].Blocks, q, prefill, c.window, name)

				last := seqs[0]
				e.attention(0, []engine.SeqInput{last}, true)
				require.Equal(t, prefill[(ctx-1)*hv:], e.buf.att[:hv], "%s: last row alone", name)

				for r := range ctx {
					copy(e.buf.q, q[r*qd:(r+1)*qd])
					one := engine.SeqInput{Tokens: []int32{0}, Pos: r, Context: r + 1, Blocks: last.Blocks, Sample: true}
					e.attention(0, []engine.SeqInput{one}, false)
					require.Equal(t, prefill[r*hv:(r+1)*hv], e.buf.att[:hv], "%s: row %d alone", name, r)
				}
			}
		}
	}
}

// attnCheckRef checks the attention out of a prefill of queries q over the
// first len(out)/hv positions of e's cache (layer 0, blocks) against
// float64 causal attention over the cache's (dequantized) values, each
// query seeing the window keys up to its own (all with window 0).
func attnCheckRef(t *testing.T, e *Executor, blocks []int32, q, out []float32, window int, name string) {
	s := &e.spec
	bs := e.info.BlockSize
	hd, vd := s.HeadDim, s.ValueDim
	g := s.Heads / s.KVHeads
	n := len(out) / (s.Heads * vd)
	ks, as := kernSetFor(kernLevelGo), attnSetFor(kernLevelGo)
	kf, vf := make([]float32, bs*hd), make([]float32, bs*vd)
	for h := range s.Heads {
		kh := h / g
		keys, vals := make([][]float32, n), make([][]float32, n)
		for p := range n {
			blk := int(blocks[p/bs])
			keys[p] = append([]float32(nil), e.dev.keys(ks, as, 0, blk, kh, bs, kf)[p%bs*hd:][:hd]...)
			vals[p] = append([]float32(nil), e.dev.values(ks, as, 0, blk, kh, bs, vf)[p%bs*vd:][:vd]...)
		}
		for r := range n {
			first := 0
			if window > 0 {
				first = max(0, r-window+1)
			}
			qh := q[(r*s.Heads+h)*hd:][:hd]
			scores := make([]float64, r+1)
			mx := math.Inf(-1)
			for p := first; p <= r; p++ {
				var d float64
				for i, v := range qh {
					d += float64(v) * float64(keys[p][i])
				}
				scores[p] = d * float64(e.attnScale)
				mx = max(mx, scores[p])
			}
			var sum float64
			for p := first; p <= r; p++ {
				scores[p] = math.Exp(scores[p] - mx)
				sum += scores[p]
			}
			got := out[(r*s.Heads+h)*vd:][:vd]
			for i := range vd {
				var want float64
				for p := first; p <= r; p++ {
					want += scores[p] / sum * float64(vals[p][i])
				}
				require.InDelta(t, want, got[i], 1e-5, "%s: row %d head %d value %d", name, r, h, i)
			}
		}
	}
}

// TestSwigluAgrees checks that every level's SwiGLU has swigluGo's bits,
// over lengths with every tail and gates from deep negative to large
// positive, with zeros, infinities and NaN.
func TestSwigluAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -87.3, 87.3, -200, 200}
	for _, level := range kernLevels() {
		as := attnSetFor(level)
		for n := range 70 {
			gate, up := make([]float32, n+1), make([]float32, n)
			for i := range n {
				gate[i] = float32(rng.NormFloat64() * 6)
				if rng.IntN(8) == 0 {
					gate[i] = specials[rng.IntN(len(specials))]
				}
				up[i] = float32(rng.NormFloat64())
			}
			gate[n] = 42
			want := append([]float32(nil), gate[:n]...)
			swigluGo(want, up)
			as.swiglu(gate[:n], up)
			for i := range n {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(gate[i]), "kern=%s n=%d i=%d", level, n, i)
			}
			require.Equal(t, float32(42), gate[n], "kern=%s n=%d: wrote past the end", level, n)
		}
	}
}

// TestAttnMax checks each level's max against a plain scan on every
// length up to 40 (vectors and tails) with the largest value at each
// place, and on the empty slice.
func TestAttnMax(t *testing.T) {
	for _, l := range kernLevels() {
		as := attnSetFor(l)
		require.Equal(t, float32(math.Inf(-1)), as.max(nil), "kern=%s", l)
		for n := 1; n <= 40; n++ {
			for at := range n {
				s := make([]float32, n+1)
				for i := range s {
					s[i] = -float32(i) - 1
				}
				s[at], s[n] = 5, 7 // s[n] is past the slice
				require.Equal(t, float32(5), as.max(s[:n]), "kern=%s n=%d largest at %d", l, n, at)
			}
		}
	}
}
