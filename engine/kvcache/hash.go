package kvcache

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Hash identifies the contents of a full block: the hash of its tokens
// chained with its parent block's hash, so equal hashes mean equal prefixes.
// It is 128 bits wide, so a collision (which would hand a sequence the wrong
// KV) is not a practical concern.
type Hash struct{ Hi, Lo uint64 }

// IsZero reports whether h is the zero Hash, the parent of a first block.
func (h Hash) IsZero() bool { return h == Hash{} }

// HashBlock returns the hash of a block holding tokens whose parent block
// hashes to parent (the zero Hash for the first block).
func HashBlock(parent Hash, tokens []int32) Hash {
	var stack [16 + 4*64]byte
	buf := stack[:0]
	if n := 16 + 4*len(tokens); n > len(stack) {
		buf = make([]byte, 0, n)
	}
	buf = binary.LittleEndian.AppendUint64(buf, parent.Hi)
	buf = binary.LittleEndian.AppendUint64(buf, parent.Lo)
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	h := xxh3.Hash128(buf)
	return Hash{Hi: h.Hi, Lo: h.Lo}
}

// HashChain returns the chained hashes of every full block of tokens, in
// order. A trailing partial block has no hash.
func HashChain(tokens []int32, blockSize int) []Hash {
	n := len(tokens) / blockSize
	hashes := make([]Hash, n)
	var parent Hash
	for i := range n {
		parent = HashBlock(parent, tokens[i*blockSize:(i+1)*blockSize])
		hashes[i] = parent
	}
	return hashes
}
