// Package gguf reads and writes GGUF model files: a [File] (versions 2
// and 3) with its typed key/value metadata ([Metadata]) and tensor infos,
// mapped read-only by [Open] or parsed from memory by [Parse]; the tensor
// types ([TensorType]) with their dequantization and quantization
// ([Dequantize], [Quantize]) and half-float conversion; and the [Writer],
// which builds version 3 files.
//
// Model files are untrusted input: every count, length and offset is
// checked against the bytes that remain before anything is allocated, and
// a file is refused with [ErrNotGGUF], a [*FormatError] or an
// [*UnsupportedTypeError].
//
// gguf imports nothing of llmd: what the metadata means (the model's
// shape, its tokenizer, its chat template) belongs to the packages that
// import it.
package gguf
