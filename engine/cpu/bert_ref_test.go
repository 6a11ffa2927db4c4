package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// refEncoder is a plain float64 reference of the bert and nomic-bert
// forward pass, written from llama.cpp's bert graph (src/models/bert.cpp:
// token + type + position embeddings, token_embd_norm; per layer q/k/v
// with biases or fused qkv, RoPE for nomic-bert, attention over the whole
// input, attn_output with bias, residual and attn_output_norm, GELU FFN
// with biases or SwiGLU, residual and layer_output_norm) and its pooling
// (build_pooling), then L2 normalisation: one input at a time, every
// weight dequantized into float64, no batching or worker pool.
type refEncoder struct {
	spec            model.Spec
	embd, pos, typ0 []float64
	normW, normB    []float64
	layers          []refEncLayer
	rope            *refModel // for its RoPE only
}

type refEncLayer struct {
	q, k, v, o, up, gate, down []float64
	qb, kb, vb, ob, upB, downB []float64
	anW, anB, onW, onB         []float64
}

func newRefEncoder(t testing.TB, f *gguf.File) *refEncoder {
	t.Helper()
	spec, err := model.SpecFromFile(f)
	require.NoError(t, err)
	load := func(name string) []float64 {
		ti, ok := f.Tensor(name)
		require.True(t, ok, name)
		out := make([]float32, ti.Elements())
		require.NoError(t, gguf.Dequantize(ti.Type, f.TensorData(ti), out), name)
		v := make([]float64, len(out))
		for i, x := range out {
			v[i] = float64(x)
		}
		return v
	}
	s := spec
	m := &refEncoder{spec: spec, embd: load("token_embd.weight"), normW: load("token_embd_norm.weight"),
		normB: load("token_embd_norm.bias"), rope: &refModel{spec: spec}}
	if s.PosEmbed {
		m.pos = load("position_embd.weight")
	}
	if s.TokenTypes > 0 {
		m.typ0 = load("token_types.weight")[:s.Dim]
	}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		rl := refEncLayer{o: load(p + "attn_output.weight"), up: load(p + "ffn_up.weight"), down: load(p + "ffn_down.weight"),
			anW: load(p + "attn_output_norm.weight"), anB: load(p + "attn_output_norm.bias"),
			onW: load(p + "layer_output_norm.weight"), onB: load(p + "layer_output_norm.bias")}
		if s.FusedQKV {
			qkv := load(p + "attn_qkv.weight")
			n := s.Dim * s.Dim
			rl.q, rl.k, rl.v = qkv[:n], qkv[n:2*n], qkv[2*n:]
		} else {
			rl.q, rl.k, rl.v = load(p+"attn_q.weight"), load(p+"attn_k.weight"), load(p+"attn_v.weight")
		}
		if s.QKVBias {
			rl.qb, rl.kb, rl.vb = load(p+"attn_q.bias"), load(p+"attn_k.bias"), load(p+"attn_v.bias")
		}
		if s.AttnOutBias {
			rl.ob = load(p + "attn_output.bias")
		}
		if !s.GELU {
			rl.gate = load(p + "ffn_gate.weight")
		}
		if s.FFNBias {
			rl.upB, rl.downB = load(p+"ffn_up.bias"), load(p+"ffn_down.bias")
		}
		m.layers = append(m.layers, rl)
	}
	return m
}

// embed returns the pooled, normalised embedding of tokens.
func (m *refEncoder) embed(tokens []int32) []float64 {
	s := m.spec
	d := s.Dim
	n := len(tokens)
	x := make([][]float64, n)
	for i, tok := range tokens {
		x[i] = append([]float64(nil), m.embd[int(tok)*d:(int(tok)+1)*d]...)
		if m.typ0 != nil {
			refAdd(x[i], m.typ0)
		}
		if m.pos != nil {
			refAdd(x[i], m.pos[i*d:(i+1)*d])
		}
		x[i] = refLayerNorm(x[i], m.normW, m.normB, s.NormEps)
	}
	hd := s.HeadDim
	for _, l := range m.layers {
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range n {
			q[i], k[i], v[i] = refMatVec(l.q, x[i]), refMatVec(l.k, x[i]), refMatVec(l.v, x[i])
			if l.qb != nil {
				refAdd(q[i], l.qb)
				refAdd(k[i], l.kb)
				refAdd(v[i], l.vb)
			}
			if !s.PosEmbed {
				for h := range s.Heads {
					m.rope.rope(q[i][h*hd:(h+1)*hd], i)
					m.rope.rope(k[i][h*hd:(h+1)*hd], i)
				}
			}
		}
		for i := range n {
			att := make([]float64, d)
			for h := range s.Heads {
				scores := make([]float64, n)
				mx := math.Inf(-1)
				for j := range n {
					var dot float64
					for c := range hd {
						dot += q[i][h*hd+c] * k[j][h*hd+c]
					}
					scores[j] = dot / math.Sqrt(float64(hd))
					mx = max(mx, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j := range n {
					for c := range hd {
						att[h*hd+c] += scores[j] / sum * v[j][h*hd+c]
					}
				}
			}
			o := refMatVec(l.o, att)
			if l.ob != nil {
				refAdd(o, l.ob)
			}
			refAdd(o, x[i])
			h := refLayerNorm(o, l.anW, l.anB, s.NormEps)
			up := refMatVec(l.up, h)
			if l.upB != nil {
				refAdd(up, l.upB)
			}
			if l.gate != nil {
				g := refMatVec(l.gate, h)
				for c := range up {
					up[c] *= g[c] / (1 + math.Exp(-g[c]))
				}
			} else {
				for c := range up {
					up[c] = refGELUHalf(up[c])
				}
			}
			f := refMatVec(l.down, up)
			if l.downB != nil {
				refAdd(f, l.downB)
			}
			refAdd(f, h)
			x[i] = refLayerNorm(f, l.onW, l.onB, s.NormEps)
		}
	}
	pooled := make([]float64, d)
	rows := x
	switch s.Pooling {
	case model.PoolingCLS:
		rows = x[:1]
	case model.PoolingLast:
		rows = x[n-1:]
	}
	for _, r := range rows {
		refAdd(pooled, r)
	}
	var ss float64
	for i := range pooled {
		pooled[i] /= float64(len(rows))
		ss += pooled[i] * pooled[i]
	}
	for i := range pooled {
		pooled[i] /= math.Sqrt(ss)
	}
	return pooled
}

// refLayerNorm is (x − mean)/√(var + eps)·w + b.
func refLayerNorm(x, w, b []float64, eps float64) []float64 {
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var vr float64
	for _, v := range x {
		vr += (v - mean) * (v - mean)
	}
	scale := 1 / math.Sqrt(vr/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = (v-mean)*scale*w[i] + b[i]
	}
	return out
}

// encModel is a small encoder: 64 wide, 4 heads, 2 layers, 200 tokens, a
// context of 48.
func encModel(arch string, typ gguf.TensorType, pooling string) synth.Model {
	return synth.Model{Arch: arch, Dim: 64, Layers: 2, Heads: 4, FFN: 128, Vocab: 200, Type: typ, Seed: 11,
		ContextLength: 48, Pooling: pooling}
}

func newEmbedder(t testing.TB, f *gguf.File, cfg EmbedConfig) *Embedder {
	t.Helper()
	e, err := NewEmbedder(f, cfg)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

// encInputs are inputs of several lengths, one of them the whole context.
func encInputs(vocab, ctx int) [][]int32 {
	rng := rand.New(rand.NewPCG(3, 4))
	var out [][]int32
	for _, n := range []int{1, 5, 17, ctx, 9} {
		in := make([]int32, n)
		for i := range in {
			in[i] = int32(rng.IntN(vocab))
		}
		out = append(out, in)
	}
	return out
}

// TestEmbedderAgainstRef checks each architecture and pooling against the
// float64 reference: float weights to float32 rounding, Q8_0 to the
// activations' 8-bit quantization.
func TestEmbedderAgainstRef(t *testing.T) {
	cases := []struct {
		arch, pooling string
		typ           gguf.TensorType
		tol           float64
	}{
		{"bert", "cls", gguf.TypeF32, 2e-5},
		{"bert", "mean", gguf.TypeF16, 2e-5},
		{"bert", "last", gguf.TypeQ8_0, 3e-2},
		{"nomic-bert", "mean", gguf.TypeF32, 2e-5},
		{"nomic-bert", "cls", gguf.TypeBF16, 2e-5},
		{"nomic-bert", "mean", gguf.TypeQ8_0, 3e-2},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s/%s", c.arch, c.pooling, c.typ), func(t *testing.T) {
			m := encModel(c.arch, c.typ, c.pooling)
			f := openModel(t, m, nil)
			ref := newRefEncoder(t, f)
			e := newEmbedder(t, f, EmbedConfig{Threads: 3})
			inputs := encInputs(m.Vocab, m.ContextLength)
			got, err := e.Embed(t.Context(), inputs)
			require.NoError(t, err)
			require.Len(t, got, len(inputs))
			for i, in := range inputs {
				want := ref.embed(in)
				require.Len(t, got[i], m.Dim)
				var worst, norm float64
				for j, v := range got[i] {
					worst = max(worst, math.Abs(float64(v)-want[j]))
					norm += float64(v) * float64(v)
				}
				require.InDelta(t, 1, norm, 1e-5, "input %d is not unit length", i)
				require.Less(t, worst, c.tol, "input %d (%d tokens): max deviation from the reference", i, len(in))
			}
		})
	}
}

// TestEmbedderBatchInvariant checks that an input's embedding does not
// depend on its batch: alone, together, or split into passes by a small
// MaxBatchTokens, the bits are the same.
func TestEmbedderBatchInvariant(t *testing.T) {
	for _, arch := range []string{"bert", "nomic-bert"} {
		t.Run(arch, func(t *testing.T) {
			m := encModel(arch, gguf.TypeQ8_0, "mean")
			f := openModel(t, m, nil)
			inputs := encInputs(m.Vocab, m.ContextLength)
			together, err := newEmbedder(t, f, EmbedConfig{Threads: 2}).Embed(t.Context(), inputs)
			require.NoError(t, err)
			small := newEmbedder(t, f, EmbedConfig{Threads: 4, MaxBatchTokens: 1})
			require.Equal(t, m.ContextLength, small.MaxBatchTokens(), "raised to the context")
			split, err := small.Embed(t.Context(), inputs)
			require.NoError(t, err)
			require.Equal(t, together, split)
			for i, in := range inputs {
				alone, err := small.Embed(t.Context(), [][]int32{in})
				require.NoError(t, err)
				require.Equal(t, together[i], alone[0], "input %d", i)
			}
		})
	}
}

func TestEmbedderRefusals(t *testing.T) {
	m := encModel("bert", gguf.TypeF16, "cls")
	f := openModel(t, m, nil)
	e := newEmbedder(t, f, EmbedConfig{Threads: 2})
	for name, in := range map[string][][]int32{
		"no inputs":      nil,
		"empty input":    {{1, 2}, {}},
		"too long":       {make([]int32, m.ContextLength+1)},
		"token too big":  {{1, int32(m.Vocab)}},
		"token negative": {{-1}},
	} {
		_, err := e.Embed(t.Context(), in)
		require.ErrorIs(t, err, ErrEmbedInput, name)
	}
	_, err := New(f, Config{Threads: 1})
	require.ErrorContains(t, err, "embedding model")
	_, err = NewEmbedder(openModel(t, tinyModel("llama", gguf.TypeF16, false), nil), EmbedConfig{})
	require.ErrorContains(t, err, "generative")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = e.Embed(ctx, [][]int32{{1, 2}})
	require.ErrorIs(t, err, context.Canceled)

	e.Close()
	e.Close()
	_, err = e.Embed(t.Context(), [][]int32{{1}})
	require.ErrorIs(t, err, ErrClosed)
}
