package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// BenchmarkEmbedder embeds inputs of 64 tokens with a bge-small-shaped
// encoder (384 wide, 12 heads, 1536 FFN; 4 layers to keep it short),
// several inputs per call (one forward pass) against one per call.
func BenchmarkEmbedder(b *testing.B) {
	m := synth.Model{Arch: "bert", Dim: 384, Layers: 4, Heads: 12, FFN: 1536, Vocab: 1000, Type: gguf.TypeQ8_0,
		ContextLength: 512, Seed: 1, Pooling: "cls"}
	f := openModel(b, m, nil)
	e := newEmbedder(b, f, EmbedConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, inputs := range []int{1, 8, 32} {
		batch := make([][]int32, inputs)
		for i := range batch {
			batch[i] = make([]int32, 64)
			for j := range batch[i] {
				batch[i][j] = int32(rng.IntN(m.Vocab))
			}
		}
		b.Run(fmt.Sprintf("inputs=%d/tokens=64", inputs), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Embed(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(inputs*64*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
