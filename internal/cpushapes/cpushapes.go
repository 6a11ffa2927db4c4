// Package cpushapes holds the model shapes that issue 5 measures the CPU
// executor on, and llama.cpp's figures for them on the same machine type,
// for the executor's benchmark (engine/cpu) and the HTTP one (cmd/llmd).
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

// LlamaCppGen is llama.cpp's generation tokens/s at one stream (llama-bench
// tg, 2 threads), by "shape/TYPE".
var LlamaCppGen = map[string]float64{
	"tiny/F16": 532, "tiny/Q8_0": 1176, "tiny/Q4_0": 1291,
	"small/F16": 71.5, "small/Q8_0": 81.0, "small/Q4_0": 107,
	"0.5B/F16": 25.7, "0.5B/Q8_0": 28.3, "0.5B/Q4_0": 38.2,
}

// LlamaCppServer8 is llama.cpp's server's aggregate tokens/s at 8
// concurrent streams, by "shape/TYPE" (none for tiny F16).
var LlamaCppServer8 = map[string]float64{
	"tiny/Q8_0": 1091, "tiny/Q4_0": 1114,
	"small/F16": 133, "small/Q8_0": 148, "small/Q4_0": 160,
	"0.5B/F16": 54, "0.5B/Q8_0": 61, "0.5B/Q4_0": 76,
}
