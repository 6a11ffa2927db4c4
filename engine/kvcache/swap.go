package kvcache

import (
	"errors"
	"fmt"
)

// ErrSwapFull is returned by SwapSpace.Allocate when every host slot is in use.
var ErrSwapFull = errors.New("kvcache: swap space full")

// SwapSpace is a bounded set of host-memory slots, one block each, that
// preempted sequences' blocks are copied to and later brought back from.
type SwapSpace struct {
	used []bool
	free []int32
}

// NewSwapSpace returns a swap space of n slots (n may be zero: no swap).
func NewSwapSpace(n int) (*SwapSpace, error) {
	if n < 0 {
		return nil, fmt.Errorf("kvcache: negative swap space %d", n)
	}
	s := &SwapSpace{used: make([]bool, n), free: make([]int32, n)}
	for i := range n {
		s.free[i] = int32(n - 1 - i)
	}
	return s, nil
}

// NumSlots is the total number of slots.
func (s *SwapSpace) NumSlots() int { return len(s.used) }

// NumFree is the number of free slots.
func (s *SwapSpace) NumFree() int { return len(s.free) }

// NumUsed is the number of slots in use.
func (s *SwapSpace) NumUsed() int { return len(s.used) - len(s.free) }

// Allocate returns a free slot or ErrSwapFull.
func (s *SwapSpace) Allocate() (int32, error) {
	n := len(s.free)
	if n == 0 {
		return -1, ErrSwapFull
	}
	slot := s.free[n-1]
	s.free = s.free[:n-1]
	s.used[slot] = true
	return slot, nil
}

// Release frees slot.
func (s *SwapSpace) Release(slot int32) {
	if !s.used[slot] {
		panic(fmt.Sprintf("kvcache: Release of free swap slot %d", slot))
	}
	s.used[slot] = false
	s.free = append(s.free, slot)
}
