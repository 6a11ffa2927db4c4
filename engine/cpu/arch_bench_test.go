package cpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// BenchmarkArchMoE compares a mixture of experts (8 experts of 1024, 2
// used) with the dense models of the same active weights (FFN 2048) and
// the same total weights (FFN 8192), all Q8_0 with qwen3 attention:
// decode steps of 1 and 8 sequences and a 128-token prefill. A MoE step
// reads only the experts its tokens chose, so one sequence should decode
// near the small dense model's speed, and eight (most experts touched)
// between the two. Run it with
// `go test -run '^$' -bench ArchMoE -benchtime 2s ./engine/cpu/`.
func BenchmarkArchMoE(b *testing.B) {
	base := synth.Model{Dim: 512, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64, Vocab: 4096, Type: gguf.TypeQ8_0, Seed: 1, ContextLength: 1024}
	shapes := []struct {
		name string
		edit func(m *synth.Model)
	}{
		{"moe-8x1024-top2", func(m *synth.Model) {
			m.Arch, m.FFN, m.Experts, m.ExpertsUsed, m.ExpertFFN = "qwen3moe", 1024, 8, 2, 1024
		}},
		{"dense-ffn2048", func(m *synth.Model) { m.Arch, m.FFN = "qwen3", 2048 }},
		{"dense-ffn8192", func(m *synth.Model) { m.Arch, m.FFN = "qwen3", 8192 }},
	}
	for _, sh := range shapes {
		m := base
		sh.edit(&m)
		var f *gguf.File
		outer := b
		open := func() *gguf.File {
			if f == nil {
				f = openModel(outer, m, nil)
			}
			return f
		}
		b.Run(fmt.Sprintf("model=%s/prompt=128", sh.name), func(b *testing.B) {
			const n = 128
			e := newExec(b, open(), Config{BlockSize: 16, KVBlocks: n / 16, KVType: "f16", NoSwap: true})
			blocks := seqBlocks(e, 0, 1)
			toks := randomTokens(1, n, m.Vocab)
			for b.Loop() {
				batch := engine.Batch{Seqs: []engine.SeqInput{{SeqID: 1, Tokens: toks, Context: n, Blocks: blocks, Sample: true, History: toks}}}
				_, err := e.Forward(b.Context(), &batch)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
		for _, seqs := range []int{1, 8} {
			b.Run(fmt.Sprintf("model=%s/gen/seqs=%d", sh.name, seqs), func(b *testing.B) {
				const promptLen, window = 32, 64
				e := newExec(b, open(), Config{BlockSize: 16, KVBlocks: seqs * (promptLen + window) / 16, KVType: "f16", NoSwap: true})
				var batch engine.Batch
				ts := make([]*testSeq, seqs)
				for i := range ts {
					ts[i] = newTestSeq(uint64(i), randomTokens(uint64(i), promptLen, m.Vocab), seqBlocks(e, i, seqs))
					batch.Seqs = append(batch.Seqs, ts[i].next(promptLen, false))
				}
				_, err := e.Forward(b.Context(), &batch)
				require.NoError(b, err)
				steps := 0
				for b.Loop() {
					pos := promptLen + steps%window
					for i := range batch.Seqs {
						tok := []int32{int32(1 + i + steps%7)}
						batch.Seqs[i] = engine.SeqInput{SeqID: uint64(i), Tokens: tok, Pos: pos, Context: pos + 1, Blocks: ts[i].blocks, Sample: true}
					}
					if _, err := e.Forward(b.Context(), &batch); err != nil {
						b.Fatal(err)
					}
					steps++
				}
				b.ReportMetric(float64(seqs*steps)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
