// Package sim is a SIMULATED executor: it implements [engine.Executor]
// without any model weights. There is no real model here and the text it
// produces is placeholder prose, so every simulated model id starts with
// "sim/" and nobody mistakes it for a real one.
//
// What is simulated is the cost of running a real model on a real GPU: a
// roofline model of one step. [GPU] profiles give memory, memory bandwidth
// and peak dense FLOP/s from public datasheets; [Model] profiles give the
// shape of a transformer (layers, KV heads, head dimension, parameters and
// their dtypes). From these the [Executor] derives the KV cache capacity
// (GPU memory times the tensor-parallel degree, less the weights and a
// reserve) and the time of each step: the larger of the bytes moved (the
// weights once, plus the KV cache every sequence reads and writes) over the
// bandwidth and the FLOPs over the peak, plus a fixed overhead and any
// host-link time for swapped blocks. DefaultConfig is that pure roofline,
// an upper bound; [CalibratedConfig] scales the peaks by the efficiencies
// real kernels reach and adds host time per sequence, fitted to published
// vLLM throughput (see its constants). Forward sleeps that long on an
// [engine.Clock]: the real clock for a demo or a load test, a virtual clock
// to simulate an hour of traffic in seconds.
//
// The tokens are deterministic: the token a sequence produces at output
// index i depends only on its seed and i, never on the prompt or the rest
// of the batch, so a preempted and recomputed sequence produces the same
// text. The [Tokenizer] maps a built-in list of English words and
// punctuation to fixed ids and hashes anything else into the rest of the
// vocabulary, so prompts get realistic token counts and the same text
// always gives the same ids.
//
// sim is also the engine's test executor. It imports engine and the
// standard library only; it must not import daemon, cluster, store, tui or
// net/http.
package sim
