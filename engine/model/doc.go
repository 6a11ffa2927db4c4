// Package model reads and writes model files and turns them into what the
// engine and the API need: GGUF files (read memory-mapped, every count,
// length and offset checked against the file size, since model files are
// untrusted input), model specs, tokenizers (SentencePiece-style and
// byte-level BPE), chat templates, and model resolution (a path, a models
// directory, or an Ollama store by name).
//
// It does no model math beyond dequantization; the forward pass lives in
// engine/cpu. It must not import daemon, cluster, store, tui or net/http.
package model
