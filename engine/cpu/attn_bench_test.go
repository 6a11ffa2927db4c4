package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model"
)

// attnExec is an executor with just what attention reads: one layer of
// cache for seqs sequences of ctx random keys and values, and n query rows
// per sequence at the end of its context (all ctx of them with n = ctx: a
// prefill), random.
func attnExec(t testing.TB, spec model.Spec, typ kvType, threads, seqs, ctx, n int) (*Executor, []engine.SeqInput) {
	const bs = 16
	rng := rand.New(rand.NewPCG(31, 32))
	nb := (ctx + bs - 1) / bs
	e := &Executor{spec: spec, pool: NewPool(threads), attnScale: float32(1 / math.Sqrt(float64(spec.HeadDim)))}
	t.Cleanup(e.pool.Close)
	e.info.BlockSize = bs
	e.dev = newKVCache(typ, 1, seqs*nb, bs, spec.KVHeads, spec.HeadDim, spec.ValueDim)
	for range e.pool.Threads() {
		e.scratch = append(e.scratch, newScratch(&e.spec, bs, spec.HeadDim))
	}
	seqIn := make([]engine.SeqInput, seqs)
	for i := range seqIn {
		blocks := make([]int32, nb)
		for b := range blocks {
			blocks[b] = int32(i*nb + b)
		}
		for p := range ctx {
			k := kernRandFloats(rng, spec.KVHeads*spec.HeadDim, 1)
			v := kernRandFloats(rng, spec.KVHeads*spec.ValueDim, 1)
			e.dev.write(kernSetFor(kernUse), 0, int(blocks[p/bs]), p%bs, k, v)
		}
		seqIn[i] = engine.SeqInput{SeqID: uint64(i), Tokens: make([]int32, n), Pos: ctx - n, Context: ctx, Blocks: blocks, Sample: true}
	}
	bf := &e.buf
	bf.seqStart = make([]int, seqs)
	for i := range seqs {
		bf.seqStart[i] = i * n
	}
	bf.q = kernRandFloats(rng, seqs*n*spec.Heads*spec.HeadDim, 1)
	bf.att = make([]float32, seqs*n*spec.Heads*spec.ValueDim)
	return e, seqIn
}

// attnSmall is the attention of the "small" benchmark shape: 12 query
// heads over 4 KV heads of 64.
var attnSmall = model.Spec{Dim: 768, Heads: 12, KVHeads: 4, HeadDim: 64, ValueDim: 64}

// BenchmarkAttention measures one layer's attention of the small shape
// on one thread, for each KV cache type: a decode step of 8 sequences at 512
// and 2048 tokens of context, and a 512-token prefill.
func BenchmarkAttention(b *testing.B) {
	for _, kv := range KVTypes {
		for _, c := range []struct {
			name         string
			seqs, ctx, n int
		}{
			{"decode/seqs=8/ctx=512", 8, 512, 1},
			{"decode/seqs=8/ctx=2048", 8, 2048, 1},
			{"prefill/ctx=512", 1, 512, 512},
		} {
			b.Run(fmt.Sprintf("kv=%s/%s", kv, c.name), func(b *testing.B) {
				typ, err := parseKVType(kv)
				if err != nil {
					b.Fatal(err)
				}
				e, seqs := attnExec(b, attnSmall, typ, 1, c.seqs, c.ctx, c.n)
				for b.Loop() {
					e.attention(0, seqs, false)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.seqs*c.n), "ns/query")
			})
		}
	}
}

// BenchmarkKVDequant measures each level's dequantizer of a quantized KV
// cache on one block of one head (16 tokens of 128 dims).
func BenchmarkKVDequant(b *testing.B) {
	rng := rand.New(rand.NewPCG(33, 34))
	x := kernRandFloats(rng, 16*128, 1)
	for _, typ := range []kvType{kvQ8_0, kvQ4_0} {
		src := make([]byte, typ.rowBytes(len(x)))
		map[kvType]func([]byte, []float32){kvQ8_0: quantRowQ8_0, kvQ4_0: quantRowQ4_0}[typ](src, x)
		dst := make([]float32, len(x))
		for _, level := range kernLevels() {
			as := attnSetFor(level)
			deq := map[kvType]func([]float32, []byte){kvQ8_0: as.dequantQ8_0, kvQ4_0: as.dequantQ4_0}[typ]
			b.Run(fmt.Sprintf("kv=%s/kern=%s", typ, level), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					deq(dst, src)
				}
			})
		}
	}
}
