package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/llmd/llmd/engine/kvcache"
)

// KVTransfer is an optional Executor ability: reading and writing the KV
// contents of whole blocks as bytes, so that one engine's cached prefix
// blocks can be installed in another's (disaggregated prefill and decode).
// Without it the engine neither exports nor imports blocks.
//
// Locking: the engine calls ExportBlocks and ImportBlocks from its step
// goroutine, between steps, like Forward.
type KVTransfer interface {
	// KVLayout describes the bytes of one block; two executors exchange
	// blocks only when their layouts are equal.
	KVLayout() KVLayout
	// ExportBlocks returns the contents of blocks ids, KVLayout().BlockBytes
	// bytes each, in order.
	ExportBlocks(ids []int32) ([]byte, error)
	// ImportBlocks writes data (len(ids) blocks of BlockBytes bytes, as
	// ExportBlocks returns them) into blocks ids.
	ImportBlocks(ids []int32, data []byte) error
}

// KVLayout is what must match for a block's bytes to mean the same thing
// on two executors.
type KVLayout struct {
	// Model is the served model id; Shape names the architecture and the
	// dimensions that fix the KV layout ("qwen2 L24 kv2x64/64").
	Model, Shape string
	// KVType is the element type of the cache ("f16", "f32", ...).
	KVType string
	// Layers and BlockSize (tokens) are the cache's; BlockBytes is one
	// block's bytes over every layer, K and V.
	Layers, BlockSize, BlockBytes int
}

// KV transfer format, version 1 (all integers little-endian):
//
//	"LKVX" u16 version
//	str model, str shape, str kv type (u16 length, bytes)
//	u32 layers, u32 block size, u32 block bytes, u32 count
//	count x (u64 hash hi, u64 hash lo)
//	count x block bytes (the blocks in the hashes' order)
//	u64 xxh3 of everything before
//
// The blocks are contiguous, so a decoded transfer's Data aliases it.
const (
	kvxMagic   = "LKVX"
	kvxVersion = 1
	// maxKVXString bounds a header string.
	maxKVXString = 512
)

// Errors of ImportKV. A refused transfer installs nothing: the request it
// was for recomputes its prompt.
var (
	// ErrKVFormat refuses a transfer that is malformed, corrupt (its
	// checksum does not match) or of another format version.
	ErrKVFormat = errors.New("engine: KV transfer malformed or corrupt")
	// ErrKVLayout refuses a transfer of another model or KV layout.
	ErrKVLayout = errors.New("engine: KV transfer of another model or KV layout")
	// ErrNoKVTransfer: the executor cannot read or write block bytes, or
	// the prefix cache is off.
	ErrNoKVTransfer = errors.New("engine: this engine does not transfer KV blocks")
)

// KVBlocks is a decoded transfer: the layout it was written with and, per
// block, its chain hash and bytes (Data holds len(Hashes) blocks).
type KVBlocks struct {
	Layout KVLayout
	Hashes []kvcache.Hash
	Data   []byte
}

// EncodeKV writes blocks in the transfer format.
func EncodeKV(k KVBlocks) []byte {
	l := k.Layout
	n := 4 + 2 + 6 + len(l.Model) + len(l.Shape) + len(l.KVType) + 16 + len(k.Hashes)*16 + len(k.Data) + 8
	b := make([]byte, 0, n)
	b = append(b, kvxMagic...)
	b = binary.LittleEndian.AppendUint16(b, kvxVersion)
	for _, s := range []string{l.Model, l.Shape, l.KVType} {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	for _, v := range []int{l.Layers, l.BlockSize, l.BlockBytes, len(k.Hashes)} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for _, h := range k.Hashes {
		b = binary.LittleEndian.AppendUint64(b, h.Hi)
		b = binary.LittleEndian.AppendUint64(b, h.Lo)
	}
	b = append(b, k.Data[:len(k.Hashes)*l.BlockBytes]...)
	return binary.LittleEndian.AppendUint64(b, xxh3.Hash(b))
}

// DecodeKV reads a transfer. Errors wrap ErrKVFormat. Data aliases b.
func DecodeKV(b []byte) (KVBlocks, error) {
	bad := func(what string) (KVBlocks, error) { return KVBlocks{}, fmt.Errorf("%w: %s", ErrKVFormat, what) }
	if len(b) < 4+2+8 || string(b[:4]) != kvxMagic {
		return bad("no LKVX header")
	}
	body, sum := b[:len(b)-8], binary.LittleEndian.Uint64(b[len(b)-8:])
	if xxh3.Hash(body) != sum {
		return bad("checksum mismatch")
	}
	if v := binary.LittleEndian.Uint16(body[4:]); v != kvxVersion {
		return bad(fmt.Sprintf("format version %d, want %d", v, kvxVersion))
	}
	p := body[6:]
	var strs [3]string
	for i := range strs {
		if len(p) < 2 {
			return bad("truncated header")
		}
		n := int(binary.LittleEndian.Uint16(p))
		if n > maxKVXString || len(p) < 2+n {
			return bad("header string too long or truncated")
		}
		strs[i], p = string(p[2:2+n]), p[2+n:]
	}
	if len(p) < 16 {
		return bad("truncated header")
	}
	var nums [4]int
	for i := range nums {
		nums[i] = int(binary.LittleEndian.Uint32(p[4*i:]))
	}
	p = p[16:]
	l := KVLayout{Model: strs[0], Shape: strs[1], KVType: strs[2], Layers: nums[0], BlockSize: nums[1], BlockBytes: nums[2]}
	count := nums[3]
	if l.BlockBytes < 1 || l.Layers < 1 || l.BlockSize < 1 {
		return bad("zero layers, block size or block bytes")
	}
	if uint64(len(p)) != uint64(count)*uint64(16+l.BlockBytes) {
		return bad(fmt.Sprintf("%d bytes of blocks, want %d x %d", len(p), count, 16+l.BlockBytes))
	}
	k := KVBlocks{Layout: l, Hashes: make([]kvcache.Hash, count), Data: p[16*count:]}
	for i := range count {
		k.Hashes[i] = kvcache.Hash{Hi: binary.LittleEndian.Uint64(p[16*i:]), Lo: binary.LittleEndian.Uint64(p[16*i+8:])}
	}
	return k, nil
}

// KVImport reports what ImportKV installed.
type KVImport struct {
	// Imported blocks were written and committed as cached prefix blocks;
	// Held were skipped because this engine already held them.
	Imported, Held int
}

// transfer returns the executor's KV ability, or ErrNoKVTransfer.
func (e *Engine) transfer() (KVTransfer, error) {
	x, ok := e.exec.(KVTransfer)
	if !ok || e.cfg.DisablePrefixCache {
		return nil, ErrNoKVTransfer
	}
	return x, nil
}

// KVLayout is the layout of this engine's blocks, or ErrNoKVTransfer.
func (e *Engine) KVLayout() (KVLayout, error) {
	x, err := e.transfer()
	if err != nil {
		return KVLayout{}, err
	}
	return x.KVLayout(), nil
}

// MissingBlocks returns the indices in chain of the hashes this engine's
// prefix cache does not hold (the blocks a transfer would bring); safe for
// concurrent use. The answer may be stale by the time it is used.
func (e *Engine) MissingBlocks(chain []kvcache.Hash) []int {
	return e.dir.missing(chain)
}

// ExportKV returns, in the transfer format, the cached blocks holding the
// chain hashes want, in order, up to the first one this engine does not
// hold (a block after a gap extends no prefix), and the number of blocks
// exported. It runs on the step goroutine between steps.
func (e *Engine) ExportKV(ctx context.Context, want []kvcache.Hash) ([]byte, int, error) {
	x, err := e.transfer()
	if err != nil {
		return nil, 0, err
	}
	var (
		out  []byte
		n    int
		xerr error
	)
	err = e.onLoop(ctx, func() {
		pool := e.sched.Pool()
		ids := make([]int32, 0, len(want))
		for _, h := range want {
			b, ok := pool.Lookup(h)
			if !ok {
				break
			}
			ids = append(ids, b)
		}
		defer func() {
			for _, b := range ids {
				pool.Release(b)
			}
		}()
		data, err := x.ExportBlocks(ids)
		if err != nil {
			xerr = fmt.Errorf("engine: export KV blocks: %w", err)
			return
		}
		out = EncodeKV(KVBlocks{Layout: x.KVLayout(), Hashes: want[:len(ids)], Data: data})
		n = len(ids)
	})
	if err != nil {
		return nil, 0, err
	}
	return out, n, xerr
}

// ImportKV installs a transfer's blocks as cached prefix blocks under
// their chain hashes, so that a request whose prompt has that chain hits
// them in the prefix cache. Only hashes in expect (the chain of the prompt
// the transfer is for) are taken, in their chain order, and only while
// each block's parent is held or imported: a transfer naming blocks the
// prompt does not have is refused. Blocks already held are skipped. It
// stops early, keeping what it installed, when no block is free. A
// transfer of another layout fails with ErrKVLayout, a malformed one with
// ErrKVFormat; either installs nothing. It runs on the step goroutine
// between steps.
func (e *Engine) ImportKV(ctx context.Context, data []byte, expect []kvcache.Hash) (KVImport, error) {
	x, err := e.transfer()
	if err != nil {
		return KVImport{}, err
	}
	k, pos, err := e.checkImport(x, data, expect)
	if err != nil {
		return KVImport{}, err
	}
	var (
		res  KVImport
		xerr error
	)
	err = e.onLoop(ctx, func() { res, xerr = e.importBlocks(x, k, expect, pos) })
	if err != nil {
		return KVImport{}, err
	}
	return res, xerr
}

// checkImport decodes a transfer and checks it against this engine's
// layout and the prompt's chain; pos maps each hash of expect to its index.
func (e *Engine) checkImport(x KVTransfer, data []byte, expect []kvcache.Hash) (KVBlocks, map[kvcache.Hash]int, error) {
	k, err := DecodeKV(data)
	if err != nil {
		return KVBlocks{}, nil, err
	}
	if own := x.KVLayout(); k.Layout != own {
		return KVBlocks{}, nil, fmt.Errorf("%w: got %s %s %s (%d layers, %d-token blocks of %d bytes), this engine has %s %s %s (%d, %d, %d)",
			ErrKVLayout, k.Layout.Model, k.Layout.Shape, k.Layout.KVType, k.Layout.Layers, k.Layout.BlockSize, k.Layout.BlockBytes,
			own.Model, own.Shape, own.KVType, own.Layers, own.BlockSize, own.BlockBytes)
	}
	pos := make(map[kvcache.Hash]int, len(expect))
	for i, h := range expect {
		pos[h] = i
	}
	for _, h := range k.Hashes {
		if _, ok := pos[h]; !ok {
			return KVBlocks{}, nil, fmt.Errorf("%w: a block's hash is not in the prompt's chain", ErrKVFormat)
		}
	}
	return k, pos, nil
}

// ImportKVStepping is ImportKV for a driver that runs the engine with Step
// (a simulator): it installs the blocks at once, on the caller's
// goroutine, which must be the one that calls Step, between steps.
func (e *Engine) ImportKVStepping(data []byte, expect []kvcache.Hash) (KVImport, error) {
	x, err := e.transfer()
	if err != nil {
		return KVImport{}, err
	}
	k, pos, err := e.checkImport(x, data, expect)
	if err != nil {
		return KVImport{}, err
	}
	return e.importBlocks(x, k, expect, pos)
}

// importBlocks is ImportKV on the step goroutine.
func (e *Engine) importBlocks(x KVTransfer, k KVBlocks, expect []kvcache.Hash, pos map[kvcache.Hash]int) (KVImport, error) {
	pool := e.sched.Pool()
	bb := k.Layout.BlockBytes
	var res KVImport
	var ids []int32
	var hashes []kvcache.Hash
	// data aliases the transfer while every block so far is taken, in
	// order; it is copied only once one is skipped.
	data := k.Data[:0:0]
	aliased := true
	taken := make(map[kvcache.Hash]bool, len(k.Hashes))
	for i, h := range k.Hashes {
		if p := pos[h]; p > 0 {
			if found, _ := pool.Probe(expect[p-1]); !found && !taken[expect[p-1]] {
				break // a gap: what follows extends no prefix
			}
		}
		if found, _ := pool.Probe(h); found || taken[h] {
			if found {
				res.Held++
			}
			if aliased {
				aliased = false
				data = append(make([]byte, 0, len(k.Data)), data...)
			}
			continue
		}
		b, err := pool.Allocate()
		if err != nil {
			break
		}
		taken[h] = true
		ids = append(ids, b)
		hashes = append(hashes, h)
		if aliased && i == len(ids)-1 {
			data = k.Data[:(i+1)*bb]
		} else {
			if aliased {
				aliased = false
				data = append(make([]byte, 0, len(k.Data)), data...)
			}
			data = append(data, k.Data[i*bb:(i+1)*bb]...)
		}
	}
	if len(ids) > 0 {
		if err := x.ImportBlocks(ids, data); err != nil {
			for _, b := range ids {
				pool.Release(b)
			}
			return KVImport{Held: res.Held}, fmt.Errorf("engine: import KV blocks: %w", err)
		}
	}
	for i, b := range ids {
		if pool.Commit(b, hashes[i]) {
			res.Imported++
		}
		pool.Release(b)
	}
	e.publishStats()
	return res, nil
}

// onLoop runs fn on the step goroutine between steps and waits for it (or
// for ctx; fn still runs). It returns ErrClosed once the engine has
// stopped.
func (e *Engine) onLoop(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.ops = append(e.ops, func() {
		defer close(done)
		fn()
	})
	e.mu.Unlock()
	e.signal()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
