package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// kernMixTolerance is refTolerance for the K-quant and IQ4 files: the
// reference dequantizes the same weights, so what is left is the 8-bit
// rounding of the activations, as for Q4_K.
const kernMixTolerance = 6e-2

// TestForwardKQuantFiles writes small models of each new weight type and
// of llama-quantize's Q3_K_M, Q4_K_M and Q5_K_M mixtures, loads them with
// the executor and checks its logits against the float64 reference over a
// prefill and decode steps, and that each greedy token is the reference's
// best (or within the tolerance of it).
func TestForwardKQuantFiles(t *testing.T) {
	cases := map[string]struct {
		typ   gguf.TensorType
		mix   synth.Mix
		types []gguf.TensorType // the matrix types the file must hold
	}{
		"Q2_K":   {typ: gguf.TypeQ2_K, types: []gguf.TensorType{gguf.TypeQ2_K}},
		"Q3_K":   {typ: gguf.TypeQ3_K, types: []gguf.TensorType{gguf.TypeQ3_K}},
		"Q5_K":   {typ: gguf.TypeQ5_K, types: []gguf.TensorType{gguf.TypeQ5_K}},
		"IQ4_NL": {typ: gguf.TypeIQ4_NL, types: []gguf.TensorType{gguf.TypeIQ4_NL}},
		"IQ4_XS": {typ: gguf.TypeIQ4_XS, types: []gguf.TensorType{gguf.TypeIQ4_XS}},
		"Q3_K_M": {mix: synth.MixQ3_K_M, types: []gguf.TensorType{gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}},
		"Q4_K_M": {mix: synth.MixQ4_K_M, types: []gguf.TensorType{gguf.TypeQ4_K, gguf.TypeQ6_K}},
		"Q5_K_M": {mix: synth.MixQ5_K_M, types: []gguf.TensorType{gguf.TypeQ5_K, gguf.TypeQ6_K}},
	}
	for name, c := range cases {
		for _, arch := range []string{"llama", "qwen2"} {
			t.Run(name+"/"+arch, func(t *testing.T) {
				t.Parallel()
				m := synth.Model{Arch: arch, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 300,
					Type: c.typ, Mix: c.mix, Seed: 9, ContextLength: 512}
				f := openModel(t, m, nil)
				held := map[gguf.TensorType]bool{}
				for _, ti := range f.Tensors {
					if len(ti.Dims) == 2 {
						held[ti.Type] = true
					}
				}
				want := map[gguf.TensorType]bool{}
				for _, typ := range c.types {
					want[typ] = true
				}
				require.Equal(t, want, held, "matrix types")

				cfg := testConfig()
				checkAgainstRef(t, f, cfg, randomTokens(5, 29, m.Vocab), 3, kernMixTolerance)
				checkGreedy(t, f, cfg, randomTokens(6, 11, m.Vocab), 8, kernMixTolerance)
			})
		}
	}
}

// checkGreedy decodes steps greedy tokens after prompt with the executor
// and checks each against the reference's logits at the same point: the
// token must be the reference's best, or score within tol (relative to
// the logit scale) of it, a near tie that 8-bit activations may break
// either way.
func checkGreedy(t *testing.T, f *gguf.File, cfg Config, prompt []int32, steps int, tol float64) {
	t.Helper()
	e := newExec(t, f, cfg)
	rs := newRefModel(t, f).newSeq()
	s := newTestSeq(1, prompt, seqBlocks(e, 0, 1))
	var gen []int32
	for step := 0; step <= steps; step++ {
		n := len(prompt)
		if step > 0 {
			n = 1
		}
		in := s.next(n, true)
		want := rs.feed(in.Tokens...)
		out, _ := forwardLogits(t, e, &engine.Batch{Seqs: []engine.SeqInput{in}})
		tok := out.Tokens[0]
		best, scale := 0, 0.0
		for i, v := range want {
			if v > want[best] {
				best = i
			}
			scale = max(scale, math.Abs(v))
		}
		require.LessOrEqual(t, want[best]-want[tok], tol*scale, "step %d: greedy token %d, the reference's best is %d", step, tok, best)
		gen = append(gen, tok)
		s.accept(tok)
	}
	t.Logf("greedy tokens %v", gen)
}
