package sim

import (
	"fmt"

	"github.com/llmd/llmd/engine"
)

var _ engine.KVTransfer = (*Executor)(nil)

// KVLayout implements engine.KVTransfer. The simulator keeps no K/V, so a
// block's bytes are one placeholder byte: a transfer between simulated
// engines moves the prefix cache's hashes, and whoever drives them
// charges the time of the model's real KV bytes (KVBytesPerToken; see
// RunDisagg).
func (e *Executor) KVLayout() engine.KVLayout {
	m := e.cfg.Model
	return engine.KVLayout{Model: m.ID, Shape: fmt.Sprintf("sim tp%d", e.cfg.TP), KVType: "sim", Layers: m.Layers,
		BlockSize: e.cfg.BlockSize, BlockBytes: 1}
}

// ExportBlocks implements engine.KVTransfer: a zero byte per block.
func (e *Executor) ExportBlocks(ids []int32) ([]byte, error) {
	for _, b := range ids {
		if b < 0 || int(b) >= e.info.NumBlocks {
			return nil, fmt.Errorf("sim: KV block %d out of range [0, %d)", b, e.info.NumBlocks)
		}
	}
	return make([]byte, len(ids)), nil
}

// ImportBlocks implements engine.KVTransfer: nothing to write.
func (e *Executor) ImportBlocks(ids []int32, data []byte) error {
	if len(data) != len(ids) {
		return fmt.Errorf("sim: import of %d blocks needs %d bytes, got %d", len(ids), len(ids), len(data))
	}
	for _, b := range ids {
		if b < 0 || int(b) >= e.info.NumBlocks {
			return fmt.Errorf("sim: KV block %d out of range [0, %d)", b, e.info.NumBlocks)
		}
	}
	return nil
}
