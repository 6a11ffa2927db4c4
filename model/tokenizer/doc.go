// Package tokenizer turns text into token ids and back as llama.cpp does
// for the same vocabulary: SentencePiece-style (tokenizer.ggml.model
// "llama", merged by score) and byte-level BPE ("gpt2", with the GPT-2,
// Llama 3 and Qwen 2 pre-tokenizers). [New] builds a [Tokenizer] from a
// model file's tokenizer.ggml.* metadata and [NewFromVocab] from a
// [Vocab]; a [Detokenizer] turns generated ids into text as they come;
// [BuildVocab] learns a small real vocabulary, without downloads, for test
// models.
//
// tokenizer imports model/gguf (for [gguf.Metadata]) and nothing else of
// llmd.
package tokenizer
