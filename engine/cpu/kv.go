package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// kvCache holds the keys and values of a number of blocks for every layer,
// as float32 or as IEEE half floats (little-endian bytes, the layout the
// kernels' F16 converters read). The device cache has one block per
// engine block id; the host cache (swap space) one per host slot.
//
// Layout: per layer one slice for K and one for V, each
// [block][kvHead][slot][dim] with slot < blockSize. One head's keys of one
// block are contiguous, so attention reads a block of one head as a single
// run, and a block of one layer (all heads) is one contiguous range, so
// copies and swaps are one copy per layer and per K or V.
//
// Locking: none; the executor's step (under its mutex) is the only user, and
// within a step concurrent writers touch disjoint slots.
type kvCache struct {
	f16       bool
	blocks    int
	blockSize int
	kvHeads   int
	headDim   int // key length per head
	valueDim  int // value length per head

	k32, v32 [][]float32 // per layer, when !f16
	k16, v16 [][]byte    // per layer, when f16: two bytes per value
}

// newKVCache allocates a zeroed cache of blocks blocks. Large allocations
// come from fresh, lazily mapped memory, so untouched blocks cost no
// resident memory.
func newKVCache(f16 bool, layers, blocks, blockSize, kvHeads, headDim, valueDim int) *kvCache {
	c := &kvCache{f16: f16, blocks: blocks, blockSize: blockSize, kvHeads: kvHeads, headDim: headDim, valueDim: valueDim}
	kn, vn := blocks*c.kBlockElems(), blocks*c.vBlockElems()
	if f16 {
		c.k16, c.v16 = make([][]byte, layers), make([][]byte, layers)
		for l := range layers {
			c.k16[l], c.v16[l] = make([]byte, 2*kn), make([]byte, 2*vn)
		}
	} else {
		c.k32, c.v32 = make([][]float32, layers), make([][]float32, layers)
		for l := range layers {
			c.k32[l], c.v32[l] = make([]float32, kn), make([]float32, vn)
		}
	}
	return c
}

// kvBytesPerBlock is the memory of one block over all layers, K and V.
func kvBytesPerBlock(spec model.Spec, blockSize int, f16 bool) int64 {
	elem := 4
	if f16 {
		elem = 2
	}
	return spec.KVBytesPerToken(elem) * int64(blockSize)
}

// kBlockElems and vBlockElems are the values one block holds per layer.
func (c *kvCache) kBlockElems() int { return c.blockSize * c.kvHeads * c.headDim }
func (c *kvCache) vBlockElems() int { return c.blockSize * c.kvHeads * c.valueDim }

// write stores the key k (kvHeads*headDim values) and value v
// (kvHeads*valueDim values) of one token of layer l at slot of block.
func (c *kvCache) write(l, block, slot int, k, v []float32) {
	hd, vd, bs := c.headDim, c.valueDim, c.blockSize
	for h := range c.kvHeads {
		ko := ((block*c.kvHeads+h)*bs + slot) * hd
		vo := ((block*c.kvHeads+h)*bs + slot) * vd
		if c.f16 {
			toHalf(c.k16[l][2*ko:2*(ko+hd)], k[h*hd:(h+1)*hd])
			toHalf(c.v16[l][2*vo:2*(vo+vd)], v[h*vd:(h+1)*vd])
		} else {
			copy(c.k32[l][ko:ko+hd], k[h*hd:(h+1)*hd])
			copy(c.v32[l][vo:vo+vd], v[h*vd:(h+1)*vd])
		}
	}
}

// keys returns the first n keys of head h in block of layer l, n*headDim
// values: a view of the cache when it holds float32, else converted into
// scratch (which must hold n*headDim values) with ks's converter.
func (c *kvCache) keys(ks *kernSet, l, block, h, n int, scratch []float32) []float32 {
	o := (block*c.kvHeads + h) * c.blockSize * c.headDim
	m := n * c.headDim
	if !c.f16 {
		return c.k32[l][o : o+m]
	}
	ks.f16ToF32(scratch[:m], c.k16[l][2*o:2*(o+m)])
	return scratch[:m]
}

// values is keys for the values.
func (c *kvCache) values(ks *kernSet, l, block, h, n int, scratch []float32) []float32 {
	o := (block*c.kvHeads + h) * c.blockSize * c.valueDim
	m := n * c.valueDim
	if !c.f16 {
		return c.v32[l][o : o+m]
	}
	ks.f16ToF32(scratch[:m], c.v16[l][2*o:2*(o+m)])
	return scratch[:m]
}

// keyHalves returns the first n keys of head h in block of layer l of an
// F16 cache, in place: n*headDim half floats as bytes.
func (c *kvCache) keyHalves(l, block, h, n int) []byte {
	o := (block*c.kvHeads + h) * c.blockSize * c.headDim
	return c.k16[l][2*o : 2*(o+n*c.headDim)]
}

// valueHalves is keyHalves for the values.
func (c *kvCache) valueHalves(l, block, h, n int) []byte {
	o := (block*c.kvHeads + h) * c.blockSize * c.valueDim
	return c.v16[l][2*o : 2*(o+n*c.valueDim)]
}

// copyBlock copies block src of cache from into block dst of c, every
// layer, K and V, bit for bit. The caches must have the same shape and
// type apart from their block counts.
func (c *kvCache) copyBlock(dst int, from *kvCache, src int) {
	kn, vn := c.kBlockElems(), c.vBlockElems()
	if c.f16 {
		kn, vn = 2*kn, 2*vn
		for l := range c.k16 {
			copy(c.k16[l][dst*kn:(dst+1)*kn], from.k16[l][src*kn:(src+1)*kn])
			copy(c.v16[l][dst*vn:(dst+1)*vn], from.v16[l][src*vn:(src+1)*vn])
		}
		return
	}
	for l := range c.k32 {
		copy(c.k32[l][dst*kn:(dst+1)*kn], from.k32[l][src*kn:(src+1)*kn])
		copy(c.v32[l][dst*vn:(dst+1)*vn], from.v32[l][src*vn:(src+1)*vn])
	}
}

// parseKVType maps Config.KVType to whether the cache holds half floats.
func parseKVType(s string) (f16 bool, err error) {
	switch s {
	case "", "f16", "F16":
		return true, nil
	case "f32", "F32":
		return false, nil
	}
	return false, fmt.Errorf("cpu: KV type %q is not supported (want f16 or f32)", s)
}

// toHalf converts src to IEEE half floats, little-endian, in dst (two
// bytes per value), rounding to nearest even.
func toHalf(dst []byte, src []float32) {
	for i, f := range src[:len(dst)/2] {
		binary.LittleEndian.PutUint16(dst[2*i:], gguf.Float32ToHalf(f))
	}
}
