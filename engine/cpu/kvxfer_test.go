package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// xferModel is a small llama with grouped-query attention.
var xferModel = synth.Model{Arch: "llama", Dim: 64, Layers: 3, Heads: 2, KVHeads: 1, FFN: 128, Vocab: 512, Type: gguf.TypeF32, Seed: 7}

// runEngine starts an engine over e until the test ends.
func runEngine(t *testing.T, e *Executor) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.ExpectedOutputTokens = 1
	eng, err := engine.New(e, engine.RealClock{}, cfg, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return eng
}

// generate runs a greedy request of prompt and returns its tokens and the
// prompt tokens served from the prefix cache.
func generate(t *testing.T, eng *engine.Engine, id string, prompt []int32, n int) ([]int32, int) {
	t.Helper()
	st, err := eng.Submit(t.Context(), engine.Request{ID: id, Priority: engine.PriorityPaid, Prompt: prompt, MaxTokens: n, N: 1})
	require.NoError(t, err)
	toks, _, usage, err := engine.Collect(t.Context(), st)
	require.NoError(t, err)
	return toks[0], usage.CachedTokens
}

func TestKVTransferRoundTrip(t *testing.T) {
	f := openModel(t, xferModel, nil)
	for _, kvType := range []string{"f16", "f32", "q8_0", "q4_0"} {
		t.Run(kvType, func(t *testing.T) {
			cfg := Config{BlockSize: 16, KVBlocks: 64, KVType: kvType, NoSwap: true, Threads: 1}
			prefill, decode, single := newExec(t, f, cfg), newExec(t, f, cfg), newExec(t, f, cfg)
			ep, ed, es := runEngine(t, prefill), runEngine(t, decode), runEngine(t, single)
			prompt := randomTokens(3, 70, xferModel.Vocab) // four full blocks and six tokens
			chain := kvcache.HashChain(prompt, 16)
			want, _ := generate(t, es, "single", prompt, 8)

			// The prefill node runs the prompt; its full blocks stay cached.
			_, _ = generate(t, ep, "prefill", prompt, 1)
			require.Equal(t, []int{0, 1, 2, 3}, ed.MissingBlocks(chain))
			data, n, err := ep.ExportKV(t.Context(), chain)
			require.NoError(t, err)
			require.Equal(t, 4, n)
			k, err := engine.DecodeKV(data)
			require.NoError(t, err)
			require.Equal(t, prefill.KVLayout(), k.Layout)
			require.Equal(t, chain, k.Hashes)
			require.Len(t, k.Data, 4*k.Layout.BlockBytes)

			res, err := ed.ImportKV(t.Context(), data, chain)
			require.NoError(t, err)
			require.Equal(t, engine.KVImport{Imported: 4}, res)
			require.Empty(t, ed.MissingBlocks(chain))
			// Byte for byte what the prefill node computed.
			again, n, err := ed.ExportKV(t.Context(), chain)
			require.NoError(t, err)
			require.Equal(t, 4, n)
			require.Equal(t, data, again)

			// The decode node serves the prompt from the imported blocks
			// (64 of 70 tokens) with the single node's tokens.
			got, cached := generate(t, ed, "decode", prompt, 8)
			require.Equal(t, 64, cached)
			require.Equal(t, want, got)

			// Importing again skips every block.
			res, err = ed.ImportKV(t.Context(), data, chain)
			require.NoError(t, err)
			require.Equal(t, engine.KVImport{Held: 4}, res)
		})
	}
}

// TestKVTransferSkipsHeldBlocks: a decode node that holds the first two
// blocks asks for the other two; the transfer carries only those.
func TestKVTransferSkipsHeldBlocks(t *testing.T) {
	f := openModel(t, xferModel, nil)
	cfg := Config{BlockSize: 16, KVBlocks: 64, KVType: "f16", NoSwap: true, Threads: 1}
	ep, ed := runEngine(t, newExec(t, f, cfg)), runEngine(t, newExec(t, f, cfg))
	prompt := randomTokens(4, 70, xferModel.Vocab)
	chain := kvcache.HashChain(prompt, 16)
	_, _ = generate(t, ep, "p", prompt, 1)
	_, _ = generate(t, ed, "warm", prompt[:33], 1) // two full blocks

	missing := ed.MissingBlocks(chain)
	require.Equal(t, []int{2, 3}, missing)
	all, _, err := ep.ExportKV(t.Context(), chain)
	require.NoError(t, err)
	want := []kvcache.Hash{chain[2], chain[3]}
	part, n, err := ep.ExportKV(t.Context(), want)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	layout, err := ep.KVLayout()
	require.NoError(t, err)
	require.Equal(t, len(all)-2*(16+layout.BlockBytes), len(part))
	res, err := ed.ImportKV(t.Context(), part, chain)
	require.NoError(t, err)
	require.Equal(t, engine.KVImport{Imported: 2}, res)
	_, cached := generate(t, ed, "d", prompt, 2)
	require.Equal(t, 64, cached)

	// An export stops at the first block the node does not hold.
	other := randomTokens(5, 40, xferModel.Vocab)
	data, n, err := ep.ExportKV(t.Context(), append(kvcache.HashChain(other, 16), chain...))
	require.NoError(t, err)
	require.Zero(t, n)
	k, err := engine.DecodeKV(data)
	require.NoError(t, err)
	require.Empty(t, k.Hashes)
}

// TestKVTransferRefused: a transfer of another layout, a corrupt one and
// one naming blocks the prompt does not have install nothing, and the
// request recomputes with the same tokens.
func TestKVTransferRefused(t *testing.T) {
	f := openModel(t, xferModel, nil)
	cfg := Config{BlockSize: 16, KVBlocks: 64, KVType: "f16", NoSwap: true, Threads: 1}
	ep, ed := runEngine(t, newExec(t, f, cfg)), runEngine(t, newExec(t, f, cfg))
	f32 := cfg
	f32.KVType = "f32"
	eo := runEngine(t, newExec(t, f, f32))
	prompt := randomTokens(6, 50, xferModel.Vocab)
	chain := kvcache.HashChain(prompt, 16)
	want, _ := generate(t, ep, "p", prompt, 6)
	data, _, err := ep.ExportKV(t.Context(), chain)
	require.NoError(t, err)

	_, err = eo.ImportKV(t.Context(), data, chain)
	require.ErrorIs(t, err, engine.ErrKVLayout)
	require.Zero(t, eo.Stats().BlocksCached)

	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/2] ^= 1
	_, err = ed.ImportKV(t.Context(), corrupt, chain)
	require.ErrorIs(t, err, engine.ErrKVFormat)
	_, err = ed.ImportKV(t.Context(), data[:len(data)-9], chain)
	require.ErrorIs(t, err, engine.ErrKVFormat)
	_, err = ed.ImportKV(t.Context(), data, kvcache.HashChain(randomTokens(7, 50, xferModel.Vocab), 16))
	require.ErrorIs(t, err, engine.ErrKVFormat)
	require.Zero(t, ed.Stats().BlocksCached)

	got, cached := generate(t, ed, "d", prompt, 6)
	require.Zero(t, cached)
	require.Equal(t, want, got)
}

// BenchmarkKVTransfer measures a transfer's cost at both ends for a prompt
// of 2,048 tokens of a small llama (6 layers, 4 KV heads of 64, F16 KV:
// 128 blocks of 96 KiB): the export on the prefill node (blocks read and
// encoded) and the import on the decode node (decoded, checked, written
// and committed), without the network.
func BenchmarkKVTransfer(b *testing.B) {
	m := synth.Model{Arch: "llama", Dim: 256, Layers: 6, Heads: 4, KVHeads: 4, FFN: 768, Vocab: 512, ContextLength: 4096, Type: gguf.TypeQ8_0, Seed: 5}
	f := openModel(b, m, nil)
	cfg := Config{BlockSize: 16, KVBlocks: 160, KVType: "f16", NoSwap: true, Threads: 1}
	ecfg := engine.DefaultConfig()
	ecfg.ExpectedOutputTokens = 1
	start := func() *engine.Engine {
		eng, err := engine.New(newExec(b, f, cfg), engine.RealClock{}, ecfg, nil)
		require.NoError(b, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- eng.Run(ctx) }()
		b.Cleanup(func() {
			cancel()
			<-done
		})
		return eng
	}
	ep := start()
	prompt := randomTokens(9, 2049, m.Vocab)
	chain := kvcache.HashChain(prompt, 16)
	st, err := ep.Submit(b.Context(), engine.Request{ID: "p", Priority: engine.PriorityPaid, Prompt: prompt, MaxTokens: 1, N: 1})
	require.NoError(b, err)
	_, _, _, err = engine.Collect(b.Context(), st)
	require.NoError(b, err)
	data, n, err := ep.ExportKV(b.Context(), chain)
	require.NoError(b, err)
	require.Equal(b, len(chain), n)

	b.Run("export", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, _, err := ep.ExportKV(b.Context(), chain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("import", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		ed := start()
		for b.Loop() {
			res, err := ed.ImportKV(b.Context(), data, chain)
			if err != nil || res.Imported+res.Held != len(chain) {
				b.Fatal(res, err)
			}
			b.StopTimer()
			ed = start() // an empty cache for the next import
			b.StartTimer()
		}
	})
}
