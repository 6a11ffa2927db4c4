// Package sample chooses the next token from a model's logits. It owns the
// sampling step of an executor: logit bias, the repetition, presence and
// frequency penalties, greedy decoding, temperature, top-k, top-p
// (nucleus) and min-p truncation, the seeded random draw, and the log
// probabilities reported with each token.
//
// A [Sampler] holds scratch buffers sized to the vocabulary, so a step
// allocates nothing; keep one per worker goroutine, since a Sampler is not
// safe for concurrent use. The random draw depends only on the sequence's
// seed and the output step, never on the rest of the batch or on earlier
// calls, so a preempted and recomputed sequence produces the same tokens
// from the same logits.
//
// Stop strings and end-of-generation ids are the caller's: the sampler
// returns a token id and does not know which ids end a generation.
//
// The passes over the whole vocabulary (the argmax, the top-k scan, the
// exponentials and their sums) use AVX-512 on amd64 CPUs that have it, with the same
// results bit for bit as the portable Go; the purego build tag leaves
// them out.
//
// sample imports engine (for [engine.SamplingParams]), golang.org/x/sys/cpu
// (to detect AVX-512) and the standard library only; it must not import
// daemon, cluster, store, tui or net/http.
package sample
