// Package synth makes models with random weights: a [Model] describes a
// llama or qwen2 model of a given shape, and [Model.Writer] returns a
// [gguf.Writer] holding its architecture metadata and weights, to which
// the caller adds a tokenizer (see tokenizer.BuildVocab) before writing.
// Tests, benchmarks and `llmctl model init` use it.
//
// synth imports model/gguf and nothing else of llmd.
package synth
