package kvcache

import (
	"errors"
	"fmt"
)

// ErrNoFreeBlocks is returned by Allocate when every block is in use.
var ErrNoFreeBlocks = errors.New("kvcache: no free blocks")

const none = -1

// Pool is a fixed set of KV blocks, each holding BlockSize tokens.
//
// A block is in exactly one of three states:
//   - used: its reference count is above zero;
//   - cached: free, but it still holds a committed prefix and sits in the
//     prefix index and the LRU, so a later sequence can reuse it;
//   - free: unreferenced and unhashed, on the free list.
//
// Allocate takes free blocks first and evicts the least recently used cached
// block only when none is left.
type Pool struct {
	blockSize int
	refs      []int32
	hashes    []Hash
	hashed    []bool
	free      []int32 // stack of free, unhashed blocks
	// LRU of cached blocks: an intrusive doubly linked list, oldest at head.
	prev, next []int32
	inLRU      []bool
	head, tail int32
	numCached  int
	index      map[Hash]int32
	evictions  uint64
	hook       IndexHook // nil: nobody is told
}

// IndexHook is told of every change to a Pool's prefix index: a hash added
// by Commit and a hash removed when its block is evicted. It is called on
// the pool's goroutine, inside the Pool method that made the change, so it
// must be quick; a hook read by other goroutines does its own locking.
type IndexHook interface {
	HashAdded(h Hash)
	HashRemoved(h Hash)
}

// NewPool returns a pool of numBlocks blocks of blockSize tokens each.
func NewPool(numBlocks, blockSize int) (*Pool, error) {
	if numBlocks < 1 {
		return nil, fmt.Errorf("kvcache: pool needs at least one block, got %d", numBlocks)
	}
	if blockSize < 1 || blockSize&(blockSize-1) != 0 {
		return nil, fmt.Errorf("kvcache: block size %d is not a power of two", blockSize)
	}
	p := &Pool{
		blockSize: blockSize,
		refs:      make([]int32, numBlocks),
		hashes:    make([]Hash, numBlocks),
		hashed:    make([]bool, numBlocks),
		free:      make([]int32, numBlocks),
		prev:      make([]int32, numBlocks),
		next:      make([]int32, numBlocks),
		inLRU:     make([]bool, numBlocks),
		head:      none,
		tail:      none,
		index:     make(map[Hash]int32),
	}
	// Hand out low ids first: the stack pops from the end.
	for i := range numBlocks {
		p.free[i] = int32(numBlocks - 1 - i)
	}
	return p, nil
}

// SetIndexHook makes h the pool's index hook (nil removes it) and tells h
// of every hash already in the index, in no particular order.
func (p *Pool) SetIndexHook(h IndexHook) {
	p.hook = h
	if h == nil {
		return
	}
	for hash := range p.index {
		h.HashAdded(hash)
	}
}

// BlockSize is the number of tokens per block.
func (p *Pool) BlockSize() int { return p.blockSize }

// NumBlocks is the total number of blocks.
func (p *Pool) NumBlocks() int { return len(p.refs) }

// NumFree is the number of blocks Allocate can hand out: free plus cached.
func (p *Pool) NumFree() int { return len(p.free) + p.numCached }

// NumCached is the number of cached blocks: free but holding a prefix.
func (p *Pool) NumCached() int { return p.numCached }

// NumUsed is the number of blocks with a reference.
func (p *Pool) NumUsed() int { return len(p.refs) - p.NumFree() }

// Evictions counts cached blocks reclaimed by Allocate.
func (p *Pool) Evictions() uint64 { return p.evictions }

// BlocksFor is the number of blocks that hold n tokens.
func (p *Pool) BlocksFor(n int) int { return (n + p.blockSize - 1) / p.blockSize }

// RefCount is block b's reference count.
func (p *Pool) RefCount(b int32) int { return int(p.refs[b]) }

// Allocate returns a block with reference count one and no hash. It returns
// ErrNoFreeBlocks when every block is in use.
func (p *Pool) Allocate() (int32, error) {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		p.refs[b] = 1
		return b, nil
	}
	if p.head == none {
		return none, ErrNoFreeBlocks
	}
	b := p.head
	p.unlink(b)
	delete(p.index, p.hashes[b])
	if p.hook != nil {
		p.hook.HashRemoved(p.hashes[b])
	}
	p.hashed[b] = false
	p.hashes[b] = Hash{}
	p.evictions++
	p.refs[b] = 1
	return b, nil
}

// Ref adds a reference to a used block (a fork shares it).
func (p *Pool) Ref(b int32) {
	if p.refs[b] <= 0 {
		panic(fmt.Sprintf("kvcache: Ref of unreferenced block %d", b))
	}
	p.refs[b]++
}

// Release drops one reference to b. A block whose count reaches zero goes to
// the LRU if it holds a committed prefix, else to the free list.
func (p *Pool) Release(b int32) {
	if p.refs[b] <= 0 {
		panic(fmt.Sprintf("kvcache: Release of unreferenced block %d", b))
	}
	p.refs[b]--
	if p.refs[b] > 0 {
		return
	}
	if p.hashed[b] {
		p.pushLRU(b)
		return
	}
	p.free = append(p.free, b)
}

// Commit records that used block b holds the full block whose chained hash is
// h, so later sequences can find it. If another block already holds h, b is
// left unhashed and Commit reports false. Committing b again under the hash
// it holds reports true and changes nothing.
func (p *Pool) Commit(b int32, h Hash) bool {
	if p.hashed[b] {
		return p.hashes[b] == h
	}
	if _, ok := p.index[h]; ok {
		return false
	}
	p.index[h] = b
	p.hashes[b] = h
	p.hashed[b] = true
	if p.hook != nil {
		p.hook.HashAdded(h)
	}
	return true
}

// Lookup returns the block holding h and takes a reference to it (taking it
// out of the LRU if it was cached).
func (p *Pool) Lookup(h Hash) (int32, bool) {
	b, ok := p.index[h]
	if !ok {
		return none, false
	}
	if p.refs[b] == 0 {
		p.unlink(b)
	}
	p.refs[b]++
	return b, true
}

// Probe reports whether a block holds h, and whether that block is cached
// (free), without taking a reference.
func (p *Pool) Probe(h Hash) (found, cached bool) {
	b, ok := p.index[h]
	if !ok {
		return false, false
	}
	return true, p.refs[b] == 0
}

// Hashed reports whether b holds a committed prefix.
func (p *Pool) Hashed(b int32) bool { return p.hashed[b] }

// CheckIdle returns an error unless every block is free or cached: no
// reference is left anywhere. Tests call it after draining (the idle invariant).
func (p *Pool) CheckIdle() error {
	for b, r := range p.refs {
		if r != 0 {
			return fmt.Errorf("kvcache: block %d still has %d references", b, r)
		}
	}
	if got := len(p.free) + p.numCached; got != len(p.refs) {
		return fmt.Errorf("kvcache: %d of %d blocks free", got, len(p.refs))
	}
	return nil
}

func (p *Pool) pushLRU(b int32) {
	p.prev[b], p.next[b] = p.tail, none
	if p.tail != none {
		p.next[p.tail] = b
	} else {
		p.head = b
	}
	p.tail = b
	p.inLRU[b] = true
	p.numCached++
}

func (p *Pool) unlink(b int32) {
	if !p.inLRU[b] {
		return
	}
	if p.prev[b] != none {
		p.next[p.prev[b]] = p.next[b]
	} else {
		p.head = p.next[b]
	}
	if p.next[b] != none {
		p.prev[p.next[b]] = p.prev[b]
	} else {
		p.tail = p.prev[b]
	}
	p.inLRU[b] = false
	p.numCached--
}
