package cpu

import (
	"fmt"

	"github.com/llmd/llmd/engine"
)

var _ engine.KVTransfer = (*Executor)(nil)

// KVLayout implements engine.KVTransfer: the served model id, the
// architecture and KV dimensions, the cache's element type and one block's
// bytes over every layer.
func (e *Executor) KVLayout() engine.KVLayout {
	c := e.dev
	return engine.KVLayout{
		Model:      e.info.Model,
		Shape:      fmt.Sprintf("%s L%d kv%dx%d/%d", e.spec.Arch, e.spec.Layers, c.kvHeads, c.headDim, c.valueDim),
		KVType:     c.typ.String(),
		Layers:     e.spec.Layers,
		BlockSize:  c.blockSize,
		BlockBytes: c.transferBlockBytes(),
	}
}

// ExportBlocks implements engine.KVTransfer: per block, per layer, the
// block's keys then its values, as the cache stores them (blockBytes: half
// floats, float32 little-endian, or GGUF Q8_0/Q4_0 blocks).
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
	if c.blocks == 0 {
		return 0
	}
	n := 0
	for l := range c.layers() {
		k, v := c.blockBytes(l, 0)
		n += len(k) + len(v)
	}
	return n
}

// appendBlock appends block b's bytes, layer by layer, keys then values.
func (c *kvCache) appendBlock(out []byte, b int) []byte {
	for l := range c.layers() {
		k, v := c.blockBytes(l, b)
		out = append(append(out, k...), v...)
	}
	return out
}

// setBlock writes block b from data, as appendBlock wrote it.
func (c *kvCache) setBlock(b int, data []byte) {
	for l := range c.layers() {
		k, v := c.blockBytes(l, b)
		data = data[copy(k, data):]
		data = data[copy(v, data):]
	}
}
