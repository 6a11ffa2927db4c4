// Package cpu is the engine's CPU executor: a real transformer forward pass
// for the llama, qwen2, qwen3, qwen3moe (mixture of experts), phi3 and
// gemma3 architectures over the weights of a GGUF file, with the KV cache
// in paged blocks that the engine's block pool hands out. The cache holds
// keys and values as f16 (the default), f32, or GGUF's Q8_0 or Q4_0 blocks
// ([Config].KVType, [KVTypes]); attention dequantizes a quantized block of
// one head as it reads it, and a block of one layer is one contiguous
// byte range whatever the type, so swaps and copies move raw bytes.
//
// It owns the executor ([Executor], [Config], [New]): batch validation, the
// block operations (swap to and from host memory, copy-on-write copies) on
// real K/V bytes, the fused forward step of a whole batch (every weight
// matrix read once per step for all rows), paged attention through each
// sequence's block table, RoPE, and the matrix kernels and worker [Pool]
// the forward pass runs on. Tokens are chosen from the logits by
// engine/sample.
//
// The embedding encoders (bert, nomic-bert) run on an [Embedder]
// instead: one bidirectional forward pass over several inputs, pooled and
// normalised, with no KV cache ([NewEmbedder], [Embedder.Embed]).
//
// Goroutines: the executor's [Pool] is the only source of goroutines; it is
// owned by the [Executor] (or [Embedder]) and stopped by its Close.
//
// cpu imports engine, model (the spec) and model/gguf (the weights); it
// must not import daemon, cluster, store, tui, cmd or net/http (checked by
// scripts/check-imports.sh), nor engine/kvcache or the scheduler's state:
// block tables arrive as plain data in [engine.Batch].
package cpu
