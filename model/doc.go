// Package model describes and finds models: [Spec], the shape of a model
// read from its GGUF metadata and tensors ([SpecFromFile]), and model
// resolution ([Resolve]): a path, a models directory, or an Ollama store
// by name, each model found as a [ModelRef].
//
// The model file itself is handled by the packages under model/:
//
//   - model/gguf: the GGUF format: reading (memory-mapped, every count,
//     length and offset checked against the file size, since model files
//     are untrusted input), writing, tensor types and (de)quantization.
//   - model/tokenizer: tokenizers built from a file's metadata
//     (SentencePiece-style and byte-level BPE), and small built
//     vocabularies for test models.
//   - model/chat: the model's Jinja chat template, rendered in a sandbox,
//     and the built-in fallback formats.
//   - model/synth: models with random weights, for tests and
//     `llmctl model init`.
//   - model/toolcall: the tool-call formats of chat templates (Hermes,
//     Llama 3 JSON, Mistral): detection from a template, an incremental
//     parser of generated text into calls, and GBNF for a forced call.
//
// Imports point one way: gguf imports nothing of llmd; model, tokenizer
// and synth import gguf; chat and toolcall import none of them. Nothing under model/
// imports a package of llmd outside model/, nor net/http (checked by
// scripts/check-imports.sh). It does no model math beyond dequantization;
// the forward pass lives in engine/cpu.
package model
