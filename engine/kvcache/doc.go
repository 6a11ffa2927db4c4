// Package kvcache manages the paged KV cache's memory: a pool of fixed-size
// blocks with reference counts, a hash-chained prefix index that lets a new
// sequence reuse the blocks of an identical earlier prefix, an LRU of cached
// blocks that are free but still hold a prefix, and a host swap space.
//
// It holds no tensors and does no model math: executors own the bytes, and
// this package only decides which block ids hold what. It imports nothing of
// llmd.
//
// Locking: none. The engine's step goroutine owns a Pool.
package kvcache
