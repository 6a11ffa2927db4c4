package cpu

import (
	"fmt"
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
	e := &Executor{spec: spec, pool: NewPool(threads)}
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
			e.dev.write(0, int(blocks[p/bs]), p%bs, k, v)
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
