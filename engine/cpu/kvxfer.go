package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/llmd/llmd/engine"
)

var _ engine.KVTransfer = (*Executor)(nil)

// KVLayout implements engine.KVTransfer: the served model id, the
// architecture and KV dimensions, the cache's element type and one block's
// bytes over every layer.
func (e *Executor) KVLayout() engine.KVLayout {
	c := e.dev
	kvType := "f32"
	if c.f16 {
		kvType = "f16"
	}
	return engine.KVLayout{
		Model:      e.info.Model,
		Shape:      fmt.Sprintf("%s L%d kv%dx%d/%d", e.spec.Arch, e.spec.Layers, c.kvHeads, c.headDim, c.valueDim),
		KVType:     kvType,
		Layers:     e.spec.Layers,
		BlockSize:  c.blockSize,
		BlockBytes: c.transferBlockBytes(),
	}
}

// ExportBlocks implements engine.KVTransfer: per block, per layer, the
// block's keys then its values, as the cache stores them (half floats, or
// float32 little-endian).
func (e *Executor) ExportBlocks(ids []int32) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	c := e.dev
	if err := c.checkIDs(ids); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(ids)*c.transferBlockBytes())
	for _, b := range ids {
		out = c.appendBlock(out, int(b))
	}
	return out, nil
}

// ImportBlocks implements engine.KVTransfer: it writes data, as
// ExportBlocks returns it, into blocks ids.
func (e *Executor) ImportBlocks(ids []int32, data []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	c := e.dev
	if err := c.checkIDs(ids); err != nil {
		return err
	}
	bb := c.transferBlockBytes()
	if len(data) != len(ids)*bb {
		return fmt.Errorf("cpu: import of %d blocks needs %d bytes, got %d", len(ids), len(ids)*bb, len(data))
	}
	for i, b := range ids {
		c.setBlock(int(b), data[i*bb:(i+1)*bb])
	}
	return nil
}

// checkIDs refuses a block id outside the cache.
func (c *kvCache) checkIDs(ids []int32) error {
	for _, b := range ids {
		if b < 0 || int(b) >= c.blocks {
			return fmt.Errorf("cpu: KV block %d out of range [0, %d)", b, c.blocks)
		}
	}
	return nil
}

// transferBlockBytes is one block's bytes over every layer, K and V, as
// appendBlock writes them.
func (c *kvCache) transferBlockBytes() int {
	elem, layers := 4, len(c.k32)
	if c.f16 {
		elem, layers = 2, len(c.k16)
	}
	return layers * (c.kBlockElems() + c.vBlockElems()) * elem
}

// appendBlock appends block b's bytes, layer by layer, keys then values.
func (c *kvCache) appendBlock(out []byte, b int) []byte {
	kn, vn := c.kBlockElems(), c.vBlockElems()
	if c.f16 {
		for l := range c.k16 {
			out = append(out, c.k16[l][2*b*kn:2*(b+1)*kn]...)
			out = append(out, c.v16[l][2*b*vn:2*(b+1)*vn]...)
		}
		return out
	}
	for l := range c.k32 {
		for _, f := range c.k32[l][b*kn : (b+1)*kn] {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
		}
		for _, f := range c.v32[l][b*vn : (b+1)*vn] {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
		}
	}
	return out
}

// setBlock writes block b from data, as appendBlock wrote it.
func (c *kvCache) setBlock(b int, data []byte) {
	kn, vn := c.kBlockElems(), c.vBlockElems()
	if c.f16 {
		for l := range c.k16 {
			data = data[copy(c.k16[l][2*b*kn:2*(b+1)*kn], data):]
			data = data[copy(c.v16[l][2*b*vn:2*(b+1)*vn], data):]
		}
		return
	}
	for l := range c.k32 {
		for i := range kn {
			c.k32[l][b*kn+i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		data = data[4*kn:]
		for i := range vn {
			c.v32[l][b*vn+i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		data = data[4*vn:]
	}
}
