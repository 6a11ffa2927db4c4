// Package synth makes models with random weights: a [Model] describes a
// model of a given shape in one of the [Architectures] (llama, qwen2,
// qwen3, qwen3moe, phi3, gemma3), and [Model.Writer] returns a
// [gguf.Writer] holding its architecture metadata and weights, to which
// the caller adds a tokenizer (see tokenizer.BuildVocab) before writing.
// Tests, benchmarks and `llmctl model init` use it.
//
// synth imports model/gguf and nothing else of llmd.
package synth
