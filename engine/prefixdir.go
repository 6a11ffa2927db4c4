package engine

import (
	"sync"

	"github.com/llmd/llmd/engine/kvcache"
)

// recentPrefixCap bounds the recent list of a prefix directory: with at
// most about log2(prompt blocks)+2 keys a prompt, 4096 keys remember
// several hundred prompts in a fixed couple of hundred KiB.
const recentPrefixCap = 4096

// prefixDir is the engine's prefix directory, read by other goroutines
// while the step goroutine runs: a mirror of the block pool's prefix index
// (kept by the pool's index hook) and a bounded LRU of the summary keys of
// recently admitted prompts (fed by admission).
//
// Locking: mu guards everything. The step goroutine writes; any goroutine
// reads.
type prefixDir struct {
	mu   sync.RWMutex
	held map[kvcache.Hash]struct{} // the pool's index
	// recent is an LRU of summary keys: an intrusive doubly linked list
	// over fixed slots, most recent at head.
	keys       []kvcache.Hash
	prev, next []int32
	head, tail int32
	slot       map[kvcache.Hash]int32
	capacity   int
}

var _ kvcache.IndexHook = (*prefixDir)(nil)

// newPrefixDir returns a directory for a pool of numBlocks blocks that
// remembers up to capacity recent keys.
func newPrefixDir(numBlocks, capacity int) *prefixDir {
	return &prefixDir{
		held:     make(map[kvcache.Hash]struct{}, numBlocks),
		slot:     make(map[kvcache.Hash]int32),
		head:     -1,
		tail:     -1,
		capacity: capacity,
	}
}

// HashAdded implements kvcache.IndexHook.
func (d *prefixDir) HashAdded(h kvcache.Hash) {
	d.mu.Lock()
	d.held[h] = struct{}{}
	d.mu.Unlock()
}

// HashRemoved implements kvcache.IndexHook. The key stays in the recent
// list (a prompt's keys are touched at admission, before its blocks are
// committed); readers skip keys that are not held.
func (d *prefixDir) HashRemoved(h kvcache.Hash) {
	d.mu.Lock()
	delete(d.held, h)
	d.mu.Unlock()
}

// cachedPrefix is how many leading hashes of chain the index holds.
func (d *prefixDir) cachedPrefix(chain []kvcache.Hash) int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for i, h := range chain {
		if _, ok := d.held[h]; !ok {
			return i
		}
	}
	return len(chain)
}

// missing returns the indices in chain of the hashes the index does not
// hold.
func (d *prefixDir) missing(chain []kvcache.Hash) []int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []int
	for i, h := range chain {
		if _, ok := d.held[h]; !ok {
			out = append(out, i)
		}
	}
	return out
}

// recentPrefixes returns up to max held keys, most recently touched first.
func (d *prefixDir) recentPrefixes(max int) []kvcache.Hash {
	if max <= 0 {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]kvcache.Hash, 0, min(max, len(d.keys)))
	for i := d.head; i >= 0 && len(out) < max; i = d.next[i] {
		if _, ok := d.held[d.keys[i]]; ok {
			out = append(out, d.keys[i])
		}
	}
	return out
}

// notePrompt touches the summary keys of a prompt whose full blocks hash to
// chain: the depths 0, 1, 3, 7, ... (2^k - 1) and the last full block, in
// that order, so the deepest key of the latest prompt ends up first.
func (d *prefixDir) notePrompt(chain []kvcache.Hash) {
	n := len(chain)
	if n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < n-1; i = 2*i + 1 {
		d.touch(chain[i])
	}
	d.touch(chain[n-1])
}

// touch moves h to the front of the recent list, adding it (and dropping
// the least recent key when full) if it is not there. mu is held.
func (d *prefixDir) touch(h kvcache.Hash) {
	if i, ok := d.slot[h]; ok {
		if i != d.head {
			d.unlink(i)
			d.pushFront(i)
		}
		return
	}
	var i int32
	if len(d.keys) < d.capacity {
		i = int32(len(d.keys))
		d.keys = append(d.keys, h)
		d.prev = append(d.prev, -1)
		d.next = append(d.next, -1)
	} else {
		i = d.tail
		d.unlink(i)
		delete(d.slot, d.keys[i])
		d.keys[i] = h
	}
	d.slot[h] = i
	d.pushFront(i)
}

func (d *prefixDir) pushFront(i int32) {
	d.prev[i], d.next[i] = -1, d.head
	if d.head >= 0 {
		d.prev[d.head] = i
	} else {
		d.tail = i
	}
	d.head = i
}

func (d *prefixDir) unlink(i int32) {
	if d.prev[i] >= 0 {
		d.next[d.prev[i]] = d.next[i]
	} else {
		d.head = d.next[i]
	}
	if d.next[i] >= 0 {
		d.prev[d.next[i]] = d.prev[i]
	} else {
		d.tail = d.prev[i]
	}
}

// BlockSize is the KV block size in tokens: the block size to hash a prompt
// with (kvcache.HashChain) for CachedPrefix.
func (e *Engine) BlockSize() int { return e.info.BlockSize }

// CachedPrefix returns how many leading hashes of chain, the block hash
// chain of a prompt (kvcache.HashChain(prompt, e.BlockSize())), are in the
// KV cache's prefix index right now, in used or cached blocks: the blocks
// of that prompt a request admitted now could reuse, if none is evicted
// first. It does not wait for a step; safe to call from any goroutine.
func (e *Engine) CachedPrefix(chain []kvcache.Hash) int {
	return e.dir.cachedPrefix(chain)
}

// RecentPrefixes returns up to max summary keys of the most recently
// admitted prompts, most recent first, without duplicates, and only keys
// the prefix index still holds. The keys of a prompt are the hashes of its
// block chain at depths 0, 1, 3, 7, 15, ... and of its last full block;
// holding the key at depth i means holding blocks 0 through i of that
// prompt (the pool evicts a cached block before its ancestors). Safe to call
// from any goroutine.
func (e *Engine) RecentPrefixes(max int) []kvcache.Hash {
	return e.dir.recentPrefixes(max)
}
