package sample

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/llmd/llmd/engine"
)

// benchVocab is Llama 3's vocabulary size.
const benchVocab = 128256

// modelLogits returns logits shaped like a language model's: most of the
// vocabulary around 0 with a spread of 2.5, and a few dozen plausible
// tokens 8 to 20 above it.
func modelLogits(vocab int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 2.5)
	}
	for range 40 {
		l[r.IntN(vocab)] = float32(8 + r.Float64()*12)
	}
	return l
}

// BenchmarkSample measures one Sample over a Llama 3 sized vocabulary in
// each mode (and, for greedy and temperature, over smaller and larger
// ones), with a 2,048-token history of which 512 are generated; full
// also copies the logits afresh (about 8 µs here) since its penalties
// change them.
func BenchmarkSample(b *testing.B) {
	history := make([]int32, 2048)
	r := rand.New(rand.NewPCG(2, 2))
	for i := range history {
		history[i] = int32(r.IntN(benchVocab))
	}
	modes := []struct {
		name string
		p    engine.SamplingParams
	}{
		{"greedy", engine.SamplingParams{}},
		{"topk", engine.SamplingParams{Temperature: 0.8, TopK: 40}},
		{"topp", engine.SamplingParams{Temperature: 0.8, TopP: 0.9}},
		{"full", engine.SamplingParams{
			Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05,
			RepetitionPenalty: 1.1, PresencePenalty: 0.5, FrequencyPenalty: 0.5,
			LogitBias: map[int32]float32{1: 5, 2: -100},
		}},
		{"temperature", engine.SamplingParams{Temperature: 0.8}},
		{"topk1000", engine.SamplingParams{Temperature: 0.8, TopK: 1000, TopP: 0.9}},
	}
	for _, m := range modes {
		benchSample(b, benchVocab, m.name, m.p, history)
		if m.name == "greedy" || m.name == "temperature" {
			// Llama 2's and Qwen 2's vocabularies, for the two modes
			// whose cost is a pass over the whole vocabulary.
			for _, vocab := range []int{32000, 151936} {
				benchSample(b, vocab, m.name, m.p, history)
			}
		}
	}
}

// benchSample runs one case of BenchmarkSample: mode name with p over a
// vocabulary of vocab tokens.
func benchSample(b *testing.B, vocab int, name string, p engine.SamplingParams, history []int32) {
	src := modelLogits(vocab, 1)
	b.Run(fmt.Sprintf("vocab=%d/mode=%s", vocab, name), func(b *testing.B) {
		s := NewSampler(vocab)
		logits := make([]float32, vocab)
		b.ReportAllocs()
		step := 0
		copy(logits, src)
		// Bias and penalties change logits in place; the other modes
		// leave them as they are, so only those pay for a fresh copy.
		penalized := p.LogitBias != nil || p.RepetitionPenalty != 0
		for b.Loop() {
			if penalized {
				copy(logits, src)
			}
			s.Sample(logits, p, 42, step, history, 512)
			step++
		}
	})
}

func BenchmarkLogprobs(b *testing.B) {
	logits := modelLogits(benchVocab, 1)
	for _, top := range []int{0, 5} {
		b.Run(fmt.Sprintf("vocab=128256/top=%d", top), func(b *testing.B) {
			s := NewSampler(benchVocab)
			b.ReportAllocs()
			for b.Loop() {
				s.Logprobs(logits, 7, top)
			}
		})
	}
}
