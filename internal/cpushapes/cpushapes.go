// Package cpushapes holds the model shapes that the CPU executor's
// benchmark (engine/cpu) and the HTTP one (cmd/llmd) measure. llama.cpp is
// measured beside llmd in the same run by make bench-peer
// (scripts/benchpeer), never from figures kept here.
package cpushapes

import (
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// Shape is one model shape: random weights (speed does not depend on
// them), written as `llmctl model init` writes them.
type Shape struct {
	Name  string
	Model synth.Model
}

// Shapes are tiny, small and 0.5B.
var Shapes = []Shape{
	{"tiny", synth.Model{Arch: "llama", Dim: 288, Layers: 6, Heads: 6, KVHeads: 6, FFN: 768, Vocab: 32000}},
	{"small", synth.Model{Arch: "llama", Dim: 768, Layers: 12, Heads: 12, KVHeads: 4, FFN: 2048, Vocab: 128256}},
	{"0.5B", synth.Model{Arch: "qwen2", Dim: 896, Layers: 24, Heads: 14, KVHeads: 2, FFN: 4864, Vocab: 151936, Tied: true}},
}

// Types are the weight types each shape is measured in.
var Types = []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0}
