package cpu

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/llmd/llmd/model"
)

// kvType is what the KV cache stores one K or V value as.
type kvType uint8

// The KV cache types, named as llama.cpp's -ctk/-ctv values.
const (
	kvF16  kvType = iota // IEEE half floats, 2 bytes a value (the default)
	kvF32                // float32, 4 bytes a value
	kvQ8_0               // GGUF Q8_0 blocks: 32 int8 values and an f16 scale, 34 bytes
	kvQ4_0               // GGUF Q4_0 blocks: 32 4-bit values and an f16 scale, 18 bytes
)

// KVTypes lists the values Config.KVType accepts, default first.
var KVTypes = []string{"f16", "f32", "q8_0", "q4_0"}

func (t kvType) String() string { return KVTypes[t] }

// quantized reports whether t stores 32-value blocks with a scale.
func (t kvType) quantized() bool { return t == kvQ8_0 || t == kvQ4_0 }

// rowBytes is the bytes of n values of t; for the quantized types n is a
// multiple of 32 (New checks the head dims).
func (t kvType) rowBytes(n int) int {
	switch t {
	case kvF32:
		return 4 * n
	case kvQ8_0:
		return n / 32 * 34
	case kvQ4_0:
		return n / 32 * 18
	}
	return 2 * n
}

// parseKVType maps Config.KVType (any case; "" is f16) to a kvType.
func parseKVType(s string) (kvType, error) {
	if s == "" {
		return kvF16, nil
	}
	for i, n := range KVTypes {
		if strings.EqualFold(s, n) {
			return kvType(i), nil
		}
	}
	return 0, fmt.Errorf("cpu: KV cache type %q is not supported (want one of %s)", s, strings.Join(KVTypes, ", "))
}

// checkKVType refuses a quantized KV type for a model whose key or value
// head dims are not whole 32-value blocks.
func checkKVType(t kvType, spec model.Spec) error {
	if t.quantized() && (spec.HeadDim%32 != 0 || spec.ValueDim%32 != 0) {
		return fmt.Errorf("cpu: KV cache type %s needs head dims that are multiples of 32, and %s has keys of %d and values of %d: use f16 or f32",
			t, spec.Arch, spec.HeadDim, spec.ValueDim)
	}
	return nil
}

// kvCache holds the keys and values of a number of blocks for every layer,
// as float32, IEEE half floats (little-endian bytes, the layout the
// kernels' F16 converters read) or GGUF Q8_0 or Q4_0 blocks. The device
// cache has one block per engine block id; the host cache (swap space) one
// per host slot.
//
// Layout: per layer one slice for K and one for V, each
// [block][kvHead][slot] rows of one head's dims, a row of headDim keys
// taking kRow bytes (valueDim values vRow bytes) in the cache's type; a
// quantized row is headDim/32 whole blocks. One head's keys of one block
// are contiguous, so attention reads (and dequantizes) a block of one head
// as a single run, and a block of one layer (all heads) is one contiguous
// byte range, so copies and swaps are one copy per layer and per K or V
// whatever the type, and blockBytes can hand out that range.
//
// Locking: none; the executor's step (under its mutex) is the only user, and
// within a step concurrent writers touch disjoint slots.
type kvCache struct {
	typ        kvType
	blocks     int
	blockSize  int
	kvHeads    int
	headDim    int // key length per head
	valueDim   int // value length per head
	kRow, vRow int // bytes of one head's key or value of one token

	k32, v32 [][]float32 // per layer, when typ is kvF32
	kb, vb   [][]byte    // per layer, for every other type
}

// newKVCache allocates a zeroed cache of blocks blocks. Large allocations
// come from fresh, lazily mapped memory, so untouched blocks cost no
// resident memory.
func newKVCache(typ kvType, layers, blocks, blockSize, kvHeads, headDim, valueDim int) *kvCache {
	c := &kvCache{typ: typ, blocks: blocks, blockSize: blockSize, kvHeads: kvHeads, headDim: headDim, valueDim: valueDim,
		kRow: typ.rowBytes(headDim), vRow: typ.rowBytes(valueDim)}
	if typ == kvF32 {
		kn, vn := blocks*c.kBlockElems(), blocks*c.vBlockElems()
		c.k32, c.v32 = make([][]float32, layers), make([][]float32, layers)
		for l := range layers {
			c.k32[l], c.v32[l] = make([]float32, kn), make([]float32, vn)
		}
		return c
	}
	kn, vn := blocks*c.kBlockBytes(), blocks*c.vBlockBytes()
	c.kb, c.vb = make([][]byte, layers), make([][]byte, layers)
	for l := range layers {
		c.kb[l], c.vb[l] = make([]byte, kn), make([]byte, vn)
	}
	return c
}

// kvBytesPerBlock is the memory of one block over all layers, K and V, in
// type typ: what the KV budget is divided by.
func kvBytesPerBlock(spec model.Spec, blockSize int, typ kvType) int64 {
	row := typ.rowBytes(spec.HeadDim) + typ.rowBytes(spec.ValueDim)
	return int64(spec.Layers) * int64(spec.KVHeads) * int64(row) * int64(blockSize)
}

// kBlockElems and vBlockElems are the values one block holds per layer.
func (c *kvCache) kBlockElems() int { return c.blockSize * c.kvHeads * c.headDim }
func (c *kvCache) vBlockElems() int { return c.blockSize * c.kvHeads * c.valueDim }

// kBlockBytes and vBlockBytes are the bytes one block takes per layer.
func (c *kvCache) kBlockBytes() int { return c.blockSize * c.kvHeads * c.kRow }
func (c *kvCache) vBlockBytes() int { return c.blockSize * c.kvHeads * c.vRow }

// write stores the key k (kvHeads*headDim values) and value v
// (kvHeads*valueDim values) of one token of layer l at slot of block,
// converting (with ks's F16 conversion) or quantizing each head's row.
func (c *kvCache) write(ks *kernSet, l, block, slot int, k, v []float32) {
	hd, vd, bs := c.headDim, c.valueDim, c.blockSize
	for h := range c.kvHeads {
		row := (block*c.kvHeads+h)*bs + slot
		kh, vh := k[h*hd:(h+1)*hd], v[h*vd:(h+1)*vd]
		if c.typ == kvF32 {
			copy(c.k32[l][row*hd:(row+1)*hd], kh)
			copy(c.v32[l][row*vd:(row+1)*vd], vh)
			continue
		}
		kd := c.kb[l][row*c.kRow : (row+1)*c.kRow]
		vd := c.vb[l][row*c.vRow : (row+1)*c.vRow]
		switch c.typ {
		case kvF16:
			ks.f32ToF16(kd, kh)
			ks.f32ToF16(vd, vh)
		case kvQ8_0:
			quantRowQ8_0(kd, kh)
			quantRowQ8_0(vd, vh)
		case kvQ4_0:
			quantRowQ4_0(kd, kh)
			quantRowQ4_0(vd, vh)
		}
	}
}

// keys returns the first n keys of head h in block of layer l, n*headDim
// values: a view of the cache when it holds float32, else converted or
// dequantized into scratch (which must hold n*headDim values) with ks's F16
// converter or as's dequantizers.
func (c *kvCache) keys(ks *kernSet, as *attnSet, l, block, h, n int, scratch []float32) []float32 {
	m := n * c.headDim
	if c.typ == kvF32 {
		o := (block*c.kvHeads + h) * c.blockSize * c.headDim
		return c.k32[l][o : o+m]
	}
	c.decode(ks, as, scratch[:m], c.keyBytes(l, block, h, n))
	return scratch[:m]
}

// values is keys for the values.
func (c *kvCache) values(ks *kernSet, as *attnSet, l, block, h, n int, scratch []float32) []float32 {
	m := n * c.valueDim
	if c.typ == kvF32 {
		o := (block*c.kvHeads + h) * c.blockSize * c.valueDim
		return c.v32[l][o : o+m]
	}
	c.decode(ks, as, scratch[:m], c.valueBytes(l, block, h, n))
	return scratch[:m]
}

// decode converts rows of the cache's (non-F32) type in src to dst.
func (c *kvCache) decode(ks *kernSet, as *attnSet, dst []float32, src []byte) {
	switch c.typ {
	case kvF16:
		ks.f16ToF32(dst, src)
	case kvQ8_0:
		as.dequantQ8_0(dst, src)
	case kvQ4_0:
		as.dequantQ4_0(dst, src)
	}
}

// keyBytes returns the first n keys of head h in block of layer l of a
// cache that is not F32, in place: n rows of kRow bytes.
func (c *kvCache) keyBytes(l, block, h, n int) []byte {
	o := (block*c.kvHeads + h) * c.blockSize * c.kRow
	return c.kb[l][o : o+n*c.kRow]
}

// valueBytes is keyBytes for the values.
func (c *kvCache) valueBytes(l, block, h, n int) []byte {
	o := (block*c.kvHeads + h) * c.blockSize * c.vRow
	return c.vb[l][o : o+n*c.vRow]
}

// blockBytes returns the raw bytes of block of layer l, K and V, in the
// cache's type and layout ([kvHead][slot] rows): views of the cache, valid
// until it is written. They are what copies and swaps move, so writing
// them into another cache of the same model, type and block size (with
// copy) reproduces the block bit for bit; the transfer of blocks between
// nodes serialises them. On the little-endian hosts the kernels assume,
// an F32 cache's bytes are its float32 values' IEEE encodings.
func (c *kvCache) blockBytes(l, block int) (k, v []byte) {
	if c.typ == kvF32 {
		kn, vn := c.kBlockElems(), c.vBlockElems()
		return f32Bytes(c.k32[l][block*kn : (block+1)*kn]), f32Bytes(c.v32[l][block*vn : (block+1)*vn])
	}
	kn, vn := c.kBlockBytes(), c.vBlockBytes()
	return c.kb[l][block*kn : (block+1)*kn], c.vb[l][block*vn : (block+1)*vn]
}

// f32Bytes views s as its bytes.
func f32Bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

// layers is the number of layers the cache holds.
func (c *kvCache) layers() int {
	if c.typ == kvF32 {
		return len(c.k32)
	}
	return len(c.kb)
}

// copyBlock copies block src of cache from into block dst of c, every
// layer, K and V, bit for bit. The caches must have the same shape and
// type apart from their block counts.
func (c *kvCache) copyBlock(dst int, from *kvCache, src int) {
	for l := range c.layers() {
		dk, dv := c.blockBytes(l, dst)
		sk, sv := from.blockBytes(l, src)
		copy(dk, sk)
		copy(dv, sv)
	}
}
