// Package bitset is a fixed-size set of small non-negative integers, one
// bit each, for the engine's and executors' per-step bookkeeping.
package bitset

// Set holds the integers [0, n) of New(n).
type Set []uint64

// New returns an empty set for the integers [0, n).
func New(n int) Set { return make(Set, (n+63)/64) }

// Has reports whether i is in s.
func (s Set) Has(i int32) bool { return s[i/64]&(1<<(i%64)) != 0 }

// Add puts i in s.
func (s Set) Add(i int32) { s[i/64] |= 1 << (i % 64) }

// Remove takes i out of s.
func (s Set) Remove(i int32) { s[i/64] &^= 1 << (i % 64) }
