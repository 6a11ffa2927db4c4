package sim

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestExecutor(t testing.TB, cfg Config) (*Executor, *engine.VirtualClock) {
	t.Helper()
	clock := engine.NewVirtualClock(epoch)
	e, err := New(cfg, clock)
	require.NoError(t, err)
	return e, clock
}

// blocks returns a block table of consecutive ids from first covering n
// tokens.
func blocks(first int32, n, blockSize int) []int32 {
	bt := make([]int32, (n+blockSize-1)/blockSize)
	for i := range bt {
		bt[i] = first + int32(i)
	}
	return bt
}

// decodeSeq is one sequence's decode step at the given context.
func decodeSeq(id uint64, context int, seed uint64, generated int) engine.SeqInput {
	return engine.SeqInput{
		SeqID:     id,
		Tokens:    []int32{1},
		Pos:       context - 1,
		Context:   context,
		Blocks:    blocks(0, context, 16),
		Sample:    true,
		Generated: generated,
		Seed:      seed,
	}
}

// prefillSeq is a whole-prompt prefill of n tokens.
func prefillSeq(id uint64, n int, sample bool) engine.SeqInput {
	return engine.SeqInput{
		SeqID:   id,
		Tokens:  make([]int32, n),
		Context: n,
		Blocks:  blocks(0, n, 16),
		Sample:  sample,
		Seed:    id,
	}
}

func decodeBatch(seqs, context int) *engine.Batch {
	b := &engine.Batch{Seqs: make([]engine.SeqInput, seqs)}
	for i := range b.Seqs {
		b.Seqs[i] = decodeSeq(uint64(i), context, uint64(i), 0)
	}
	return b
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		gpu, model string
		tp         int
		memBytes   int64
		tokens     int
		numBlocks  int
	}{
		"flagship h100 tp1": {gpu: "h100", model: "flagship", tp: 1, memBytes: 81559 << 20, tokens: 19577, numBlocks: 1223},
		"flagship h200 tp1": {gpu: "h200", model: "flagship", tp: 1, memBytes: 143771 << 20, tokens: 198747, numBlocks: 12421},
		"flagship h100 tp2": {gpu: "h100", model: "flagship", tp: 2, memBytes: 2 * 81559 << 20, tokens: 254467, numBlocks: 15904},
		"mid h100 tp1":      {gpu: "h100", model: "mid", tp: 1, memBytes: 81559 << 20, tokens: 43643, numBlocks: 2727},
		"small h100 tp1":    {gpu: "h100", model: "small", tp: 1, memBytes: 81559 << 20, tokens: 464692, numBlocks: 29043},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, _ := newTestExecutor(t, testConfig(t, tc.gpu, tc.model, tc.tp))
			m := e.Config().Model
			// KV capacity = memory x TP - weights - 10% reserve.
			want := tc.memBytes - int64(float64(tc.memBytes)*0.10) - m.WeightBytes()
			require.Equal(t, want, e.KVCapacityBytes())
			require.Equal(t, int(want/m.KVBytesPerToken()), e.CapacityTokens())
			require.Equal(t, tc.tokens, e.CapacityTokens())

			info := e.Info()
			require.Equal(t, int(want/(m.KVBytesPerToken()*16)), info.NumBlocks)
			require.Equal(t, tc.numBlocks, info.NumBlocks)
			require.LessOrEqual(t, info.NumBlocks*info.BlockSize, e.CapacityTokens())
			require.Equal(t, m.ID, info.Model)
			require.Equal(t, 16, info.BlockSize)
			require.Equal(t, 32768, info.ContextLength)
			require.Equal(t, []int32{e.Tokenizer().EOS()}, info.EOS)
		})
	}
}

func TestKVReplicatedPastKVHeads(t *testing.T) {
	t.Parallel()
	e8, _ := newTestExecutor(t, testConfig(t, "h100", "small", 8))
	e16, _ := newTestExecutor(t, testConfig(t, "h100", "small", 16))
	// With 8 KV heads, TP 16 keeps every KV head twice: twice the bytes
	// per token, so the doubled capacity holds about as many tokens.
	require.InEpsilon(t, float64(2*e8.KVCapacityBytes()), float64(e16.KVCapacityBytes()), 0.02)
	require.InEpsilon(t, float64(e8.CapacityTokens()), float64(e16.CapacityTokens()), 0.02)
}

func TestSwapSlots(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, DefaultConfig())
	// 64 GiB over 16 tokens x 131,072 bytes.
	require.Equal(t, 32768, e.SwapSlots())
}

func TestStepTimeGrowsWithContext(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, DefaultConfig())
	contexts := []int{16, 128, 1024, 4096, 16384}
	for _, seqs := range []int{1, 16, 64} {
		var prev time.Duration
		for _, ctx := range contexts {
			d := e.StepTime(decodeBatch(seqs, ctx))
			require.Greater(t, d, prev, "context %d, %d seqs", ctx, seqs)
			prev = d
		}
	}
	for _, ctx := range contexts {
		require.Greater(t, e.StepTime(decodeBatch(64, ctx)), e.StepTime(decodeBatch(16, ctx)), "context %d", ctx)
	}
}

func TestStepTimeRoofline(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		model        string
		batch        *engine.Batch
		computeBound bool
	}{
		"decode 1 seq":            {model: "small", batch: decodeBatch(1, 1024)},
		"decode 16 seqs":          {model: "small", batch: decodeBatch(16, 1024)},
		"decode 256 seqs":         {model: "small", batch: decodeBatch(256, 1024)},
		"flagship decode 32 seqs": {model: "flagship", batch: decodeBatch(32, 512)},
		"prefill 2048":            {model: "small", batch: &engine.Batch{Seqs: []engine.SeqInput{prefillSeq(1, 2048, true)}}},
		"prefill 512 chunks x4": {model: "mid", batch: &engine.Batch{Seqs: []engine.SeqInput{
			prefillSeq(1, 512, false), prefillSeq(2, 512, false), prefillSeq(3, 512, false), prefillSeq(4, 512, true),
		}}, computeBound: true},
	}
	tests["prefill 2048"] = struct {
		model        string
		batch        *engine.Batch
		computeBound bool
	}{model: "small", batch: tests["prefill 2048"].batch, computeBound: true}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, _ := newTestExecutor(t, testConfig(t, "h100", tc.model, 1))
			c := e.Cost(tc.batch)
			require.Equal(t, tc.computeBound, c.ComputeBound(), "memory %v, compute %v", c.MemoryTime, c.ComputeTime)
			require.Equal(t, max(c.MemoryTime, c.ComputeTime)+time.Millisecond, c.Total())
			require.Equal(t, c.Total(), e.StepTime(tc.batch))
		})
	}
}

func TestCostFormula(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, DefaultConfig())
	m := e.Config().Model
	b := decodeBatch(4, 1000)
	c := e.Cost(b)
	// Weights once, plus each sequence's context read and one token written.
	wantBytes := float64(m.WeightBytes()) + 4*(1000+1)*float64(m.KVBytesPerToken())
	require.InEpsilon(t, wantBytes, c.Bytes, 1e-12)
	require.InDelta(t, wantBytes/3.35e12, c.MemoryTime.Seconds(), 1e-9)
	attn := 4.0 * 32 * 32 * 128 * 1000 // per token, over its 1000-token context
	require.InEpsilon(t, 4*(2*float64(m.Params)+attn), c.FLOPs, 1e-12)
	require.Zero(t, c.TransferTime)

	// Copies move a block's KV within device memory: read and write.
	b.Copies = []engine.BlockCopy{{Src: 1, Dst: 2}}
	require.InEpsilon(t, wantBytes+2*16*float64(m.KVBytesPerToken()), e.Cost(b).Bytes, 1e-12)

	// Swaps move blocks over the host link.
	b.SwapOut = []engine.BlockSwap{{Device: 3, Host: 0}, {Device: 4, Host: 1}}
	require.InDelta(t, 2*16*float64(m.KVBytesPerToken())/50e9, e.Cost(b).TransferTime.Seconds(), 1e-9)

	require.Zero(t, e.StepTime(nil))
	require.Zero(t, e.StepTime(&engine.Batch{}))
}

// TestCostEfficiencies: the efficiencies stretch the memory and compute
// times by their inverse, and the sequence overhead adds per sequence.
func TestCostEfficiencies(t *testing.T) {
	t.Parallel()
	roof, _ := newTestExecutor(t, DefaultConfig())
	cfg := DefaultConfig()
	cfg.BandwidthEfficiency, cfg.ComputeEfficiency, cfg.SeqOverhead = 0.8, 0.5, 80*time.Microsecond
	cal, _ := newTestExecutor(t, cfg)
	for _, b := range []*engine.Batch{decodeBatch(4, 1000), {Seqs: []engine.SeqInput{prefillSeq(1, 512, true)}}} {
		r, c := roof.Cost(b), cal.Cost(b)
		require.Equal(t, r.Bytes, c.Bytes)
		require.Equal(t, r.FLOPs, c.FLOPs)
		require.InEpsilon(t, r.MemoryTime.Seconds()/0.8, c.MemoryTime.Seconds(), 1e-6)
		require.InEpsilon(t, r.ComputeTime.Seconds()/0.5, c.ComputeTime.Seconds(), 1e-6)
		require.Equal(t, time.Millisecond+time.Duration(len(b.Seqs))*80*time.Microsecond, c.Overhead)
	}
	require.InEpsilon(t, roof.PrefillTime(1000).Seconds()/0.5, cal.PrefillTime(1000).Seconds(), 1e-6)
	require.Equal(t, roof.SwapTime(10), cal.SwapTime(10), "the host link is not scaled")
	require.Zero(t, cal.StepTime(&engine.Batch{}))
}

func TestCostTensorParallel(t *testing.T) {
	t.Parallel()
	e1, _ := newTestExecutor(t, testConfig(t, "h100", "mid", 1))
	e4, _ := newTestExecutor(t, testConfig(t, "h100", "mid", 4))
	b := decodeBatch(8, 2048)
	c1, c4 := e1.Cost(b), e4.Cost(b)
	require.Equal(t, c1.Bytes, c4.Bytes)
	require.InEpsilon(t, c1.MemoryTime.Seconds()/4, c4.MemoryTime.Seconds(), 1e-5)
	require.InEpsilon(t, c1.ComputeTime.Seconds()/4, c4.ComputeTime.Seconds(), 1e-5)
}

func TestCostFP8(t *testing.T) {
	t.Parallel()
	// The flagship's FP8 weights run at the FP8 rate on an H100 and at the
	// BF16 rate on an A100, which has no FP8 tensor cores.
	prefill := &engine.Batch{Seqs: []engine.SeqInput{prefillSeq(1, 16, true)}}
	h100, _ := newTestExecutor(t, testConfig(t, "h100", "flagship", 1))
	a100, _ := newTestExecutor(t, testConfig(t, "a100", "flagship", 1))
	matmul := 2 * float64(h100.Config().Model.Params) * 16
	require.InEpsilon(t, matmul/1979e12, h100.Cost(prefill).ComputeTime.Seconds(), 0.01)
	require.InEpsilon(t, matmul/312e12, a100.Cost(prefill).ComputeTime.Seconds(), 0.01)
}

// recordingClock is a virtual clock that records every Sleep.
type recordingClock struct {
	*engine.VirtualClock
	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *recordingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return c.VirtualClock.Sleep(ctx, d)
}

func TestForwardAdvancesClock(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		scale float64
	}{
		"real time":     {scale: 1},
		"100x faster":   {scale: 0.01},
		"4x slower":     {scale: 4},
		"tiny fraction": {scale: 1e-6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, "h100", "mid", 1)
			cfg.TimeScale = tc.scale
			clock := &recordingClock{VirtualClock: engine.NewVirtualClock(epoch)}
			e, err := New(cfg, clock)
			require.NoError(t, err)

			// 16 prompts of 2048 tokens: a step of about two seconds.
			b := &engine.Batch{}
			for i := range 16 {
				b.Seqs = append(b.Seqs, prefillSeq(uint64(i), 2048, true))
			}
			step := e.StepTime(b)
			require.Greater(t, step, time.Second)

			wall := time.Now()
			out, err := e.Forward(t.Context(), b)
			require.NoError(t, err)
			require.Less(t, time.Since(wall), step/2, "Forward must sleep on its clock, not in real time")

			want := time.Duration(float64(step) * tc.scale)
			require.InDelta(t, want, out.Duration, 1)
			require.Equal(t, epoch.Add(out.Duration), clock.Now())
			require.Equal(t, []time.Duration{out.Duration}, clock.sleeps)
		})
	}
}

func TestForwardRealClock(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.TimeScale = 0.5
	e, err := New(cfg, engine.RealClock{})
	require.NoError(t, err)
	b := decodeBatch(1, 64)
	wall := time.Now()
	out, err := e.Forward(t.Context(), b)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(wall), out.Duration)
	require.Equal(t, seconds(e.StepTime(b).Seconds()*0.5), out.Duration)
}

func TestForwardCancelled(t *testing.T) {
	t.Parallel()
	e, clock := newTestExecutor(t, DefaultConfig())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := e.Forward(ctx, decodeBatch(2, 100))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, epoch, clock.Now())
}

func TestForwardTokens(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, DefaultConfig())
	b := &engine.Batch{Seqs: []engine.SeqInput{
		decodeSeq(1, 100, 42, 7),
		prefillSeq(2, 64, false),
		prefillSeq(3, 64, true),
		decodeSeq(4, 300, 42, 7),
		decodeSeq(5, 300, 43, 7),
	}}
	out, err := e.Forward(t.Context(), b)
	require.NoError(t, err)
	require.Len(t, out.Tokens, 5)
	require.Equal(t, int32(-1), out.Tokens[1], "no token without Sample")
	require.Equal(t, e.TokenAt(42, 7), out.Tokens[0])
	require.Equal(t, e.TokenAt(3, 0), out.Tokens[2])
	require.Equal(t, out.Tokens[0], out.Tokens[3], "same seed and index, same token")
	for i, tok := range out.Tokens {
		if i != 1 {
			require.GreaterOrEqual(t, tok, int32(0))
			require.Less(t, int(tok), e.Tokenizer().VocabSize())
		}
	}
	require.Equal(t, int32(-1), e.TokenAt(1, -1))
}

// generate runs Forward step by step for the sequence seeded with seed,
// alongside other sequences, and returns its first n tokens.
func generate(t *testing.T, e *Executor, seed uint64, n, others int) []int32 {
	t.Helper()
	var toks []int32
	prompt := 20
	for g := range n {
		b := &engine.Batch{}
		for j := range others {
			b.Seqs = append(b.Seqs, decodeSeq(uint64(100+j), 50+j, uint64(j)*7919+uint64(g), g+j))
		}
		var s engine.SeqInput
		if g == 0 {
			s = prefillSeq(1, prompt, true)
			s.Seed = seed
		} else {
			s = decodeSeq(1, prompt+g, seed, g)
		}
		// Put the sequence in the middle of the batch.
		mid := len(b.Seqs) / 2
		b.Seqs = append(b.Seqs[:mid], append([]engine.SeqInput{s}, b.Seqs[mid:]...)...)
		out, err := e.Forward(t.Context(), b)
		require.NoError(t, err)
		toks = append(toks, out.Tokens[mid])
	}
	return toks
}

func TestTokensIndependentOfBatch(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MeanOutputTokens = 0
	e, _ := newTestExecutor(t, cfg)
	alone := generate(t, e, 99, 60, 0)
	crowded := generate(t, e, 99, 60, 9)
	require.Equal(t, alone, crowded)

	// A recomputed sequence (preempted, then prefilled again with its
	// output so far) continues with the same tokens.
	b := &engine.Batch{Seqs: []engine.SeqInput{prefillSeq(1, 20+30, true)}}
	b.Seqs[0].Seed, b.Seqs[0].Generated = 99, 30
	out, err := e.Forward(t.Context(), b)
	require.NoError(t, err)
	require.Equal(t, alone[30], out.Tokens[0])

	// Another executor gives the same tokens.
	e2, _ := newTestExecutor(t, cfg)
	require.Equal(t, alone, generate(t, e2, 99, 60, 3))
	require.NotEqual(t, alone, generate(t, e2, 100, 60, 0))
}

func TestNaturalLength(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mean int
	}{
		"default":  {mean: 150},
		"short":    {mean: 3},
		"one":      {mean: 1},
		"medium":   {mean: 40},
		"long":     {mean: 1000},
		"boundary": {mean: 2 * sentenceWindow},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.MeanOutputTokens = tc.mean
			e, _ := newTestExecutor(t, cfg)
			const seeds = 4000
			sum, lo, hi := 0, 1<<30, 0
			for seed := range uint64(seeds) {
				n, ok := e.NaturalLength(seed)
				require.True(t, ok)
				sum += n
				lo, hi = min(lo, n), max(hi, n)
			}
			mean := float64(sum) / seeds
			require.InEpsilon(t, float64(tc.mean), mean, 0.15, "mean length %.1f", mean)
			require.GreaterOrEqual(t, lo, min(minOutputTokens, max(1, tc.mean/2)))
			require.LessOrEqual(t, hi, 4*tc.mean+2*sentenceWindow)
			if tc.mean > 1 {
				require.Greater(t, hi, lo)
			}
		})
	}
}

func TestEOSAtNaturalLength(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, DefaultConfig())
	eos := e.Tokenizer().EOS()
	for seed := range uint64(20) {
		n, ok := e.NaturalLength(seed)
		require.True(t, ok)
		toks := generate(t, e, seed, n+1, 2)
		for i, tok := range toks[:n] {
			require.NotEqual(t, eos, tok, "seed %d: EOS at %d before %d", seed, i, n)
		}
		require.Equal(t, eos, toks[n], "seed %d", seed)
	}
}

func TestNoEOSWithoutMeanOutput(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MeanOutputTokens = 0
	e, _ := newTestExecutor(t, cfg)
	for seed := range uint64(50) {
		_, ok := e.NaturalLength(seed)
		require.False(t, ok)
		for i := range 2000 {
			require.NotEqual(t, e.Tokenizer().EOS(), e.TokenAt(seed, i))
		}
	}
}

func TestPlaceholderProse(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, DefaultConfig())
	tok := e.Tokenizer()
	for seed := range uint64(200) {
		n, _ := e.NaturalLength(seed)
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = e.TokenAt(seed, i)
		}
		text := tok.Decode(ids)
		require.NotEmpty(t, text)
		require.True(t, text[0] >= 'A' && text[0] <= 'Z', "seed %d starts %q", seed, text)
		require.True(t, text[len(text)-1] == '.', "seed %d ends mid-sentence: %q", seed, text)
		// Output tokens re-encode to themselves.
		require.Equal(t, ids, tok.Encode(text), "seed %d: %q", seed, text)

		var words, sentences int
		first := true
		for _, id := range ids {
			switch s := tok.DecodeToken(id); s {
			case ".":
				lo := 6
				if first {
					lo = periodMin - 1
				}
				require.GreaterOrEqual(t, words, lo, "seed %d: %q", seed, text)
				require.LessOrEqual(t, words, 14, "seed %d: %q", seed, text)
				words, first = 0, false
				sentences++
			case ",", "\n\n":
			default:
				words++
			}
		}
		require.Zero(t, words)
		require.Positive(t, sentences)
	}
}

func TestForwardInvalid(t *testing.T) {
	t.Parallel()
	ok := func() engine.SeqInput { return decodeSeq(1, 40, 1, 0) }
	tests := map[string]func(b *engine.Batch){
		"no tokens":        func(b *engine.Batch) { b.Seqs[0].Tokens = nil },
		"negative pos":     func(b *engine.Batch) { b.Seqs[0].Pos = -1; b.Seqs[0].Context = 0 },
		"context mismatch": func(b *engine.Batch) { b.Seqs[0].Context++ },
		"past context length": func(b *engine.Batch) {
			b.Seqs[0] = decodeSeq(1, 32769, 1, 0)
		},
		"negative generated": func(b *engine.Batch) { b.Seqs[0].Generated = -1 },
		"short block table":  func(b *engine.Batch) { b.Seqs[0].Blocks = b.Seqs[0].Blocks[:2] },
		"nil block table":    func(b *engine.Batch) { b.Seqs[0].Blocks = nil },
		"block out of range": func(b *engine.Batch) { b.Seqs[0].Blocks[2] = 1 << 30 },
		"negative block":     func(b *engine.Batch) { b.Seqs[0].Blocks[2] = -1 },
		"copy out of range":  func(b *engine.Batch) { b.Copies = []engine.BlockCopy{{Src: 0, Dst: -1}} },
		"swap out of range device": func(b *engine.Batch) {
			b.SwapOut = []engine.BlockSwap{{Device: 1 << 30, Host: 0}}
		},
		"swap space exceeded": func(b *engine.Batch) {
			b.SwapOut = []engine.BlockSwap{{Device: 1, Host: 32768}}
		},
		"negative host slot": func(b *engine.Batch) { b.SwapOut = []engine.BlockSwap{{Device: 1, Host: -1}} },
		"two swaps to one slot": func(b *engine.Batch) {
			b.SwapOut = []engine.BlockSwap{{Device: 1, Host: 5}, {Device: 2, Host: 5}}
		},
		"swap in from empty slot": func(b *engine.Batch) { b.SwapIn = []engine.BlockSwap{{Device: 1, Host: 7}} },
		"swap in from a slot swapped out to": func(b *engine.Batch) {
			b.SwapOut = []engine.BlockSwap{{Device: 1, Host: 7}}
			b.SwapIn = []engine.BlockSwap{{Device: 2, Host: 7}}
		},
		"swap in twice from a slot": func(b *engine.Batch) {
			b.SwapOut = []engine.BlockSwap{{Device: 1, Host: 6}}
			b.SwapIn = []engine.BlockSwap{{Device: 2, Host: 3}, {Device: 3, Host: 3}}
		},
		"swap in twice to a block": func(b *engine.Batch) {
			b.SwapIn = []engine.BlockSwap{{Device: 2, Host: 3}, {Device: 2, Host: 4}}
		},
		"swap in out of range slot": func(b *engine.Batch) { b.SwapIn = []engine.BlockSwap{{Device: 1, Host: 1 << 30}} },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, clock := newTestExecutor(t, DefaultConfig())
			// Slots 3 and 4 hold blocks.
			_, err := e.Forward(t.Context(), &engine.Batch{SwapOut: []engine.BlockSwap{{Device: 10, Host: 3}, {Device: 11, Host: 4}}})
			require.NoError(t, err)
			before := clock.Now()
			b := &engine.Batch{Seqs: []engine.SeqInput{ok()}}
			edit(b)
			out, err := e.Forward(t.Context(), b)
			require.Error(t, err)
			require.Nil(t, out)
			t.Log(err)
			require.Equal(t, before, clock.Now(), "a refused batch takes no time")
			// The executor still works, and nothing of the refused batch
			// was applied.
			_, err = e.Forward(t.Context(), &engine.Batch{Seqs: []engine.SeqInput{ok()}})
			require.NoError(t, err)
			_, err = e.Forward(t.Context(), &engine.Batch{SwapIn: []engine.BlockSwap{{Device: 1, Host: 5}}})
			require.Error(t, err, "host slot 5 holds nothing")
			_, err = e.Forward(t.Context(), &engine.Batch{SwapIn: []engine.BlockSwap{{Device: 1, Host: 7}}})
			require.Error(t, err, "host slot 7 holds nothing")
			_, err = e.Forward(t.Context(), &engine.Batch{SwapIn: []engine.BlockSwap{{Device: 2, Host: 3}, {Device: 3, Host: 4}}})
			require.NoError(t, err, "host slots 3 and 4 still hold their blocks")
		})
	}
	e, _ := newTestExecutor(t, DefaultConfig())
	_, err := e.Forward(t.Context(), nil)
	require.Error(t, err)
}

func TestForwardSwap(t *testing.T) {
	t.Parallel()
	e, clock := newTestExecutor(t, DefaultConfig())
	swap := func(b *engine.Batch) error {
		t.Helper()
		_, err := e.Forward(t.Context(), b)
		return err
	}
	// Swap out two blocks; their slots now hold blocks.
	require.NoError(t, swap(&engine.Batch{SwapOut: []engine.BlockSwap{{Device: 3, Host: 0}, {Device: 4, Host: 1}}}))
	require.Greater(t, clock.Now(), epoch, "swaps take host-link time")
	// Swap one back in; its slot is free again.
	require.NoError(t, swap(&engine.Batch{SwapIn: []engine.BlockSwap{{Device: 9, Host: 0}}}))
	require.Error(t, swap(&engine.Batch{SwapIn: []engine.BlockSwap{{Device: 9, Host: 0}}}))
	// A slot may be overwritten: the engine frees slots of cancelled
	// sequences without telling the executor.
	require.NoError(t, swap(&engine.Batch{SwapOut: []engine.BlockSwap{{Device: 5, Host: 1}}}))
	// Out, then in, in one batch: the device block freed by the swap out
	// takes the block swapped in.
	require.NoError(t, swap(&engine.Batch{
		SwapOut: []engine.BlockSwap{{Device: 6, Host: 2}},
		SwapIn:  []engine.BlockSwap{{Device: 6, Host: 1}},
		Copies:  []engine.BlockCopy{{Src: 6, Dst: 7}},
		Seqs:    []engine.SeqInput{decodeSeq(1, 40, 1, 0)},
	}))
	require.NoError(t, swap(&engine.Batch{SwapIn: []engine.BlockSwap{{Device: 8, Host: 2}}}))
	require.Error(t, swap(&engine.Batch{SwapIn: []engine.BlockSwap{{Device: 8, Host: 1}}}))
	// The last slot is usable.
	last := int32(e.SwapSlots() - 1)
	require.NoError(t, swap(&engine.Batch{SwapOut: []engine.BlockSwap{{Device: 5, Host: last}}}))
}

func TestCostModel(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	e, _ := newTestExecutor(t, cfg)
	info := e.Info()
	require.Equal(t, e.SwapSlots(), info.SwapBlocks)

	// One block of sim/small is 16 x 131,072 bytes; PCIe Gen5 moves 50 GB/s.
	require.InDelta(t, 10*16*131072/50e9, e.SwapTime(10).Seconds(), 1e-9)
	require.Zero(t, e.SwapTime(0))
	require.Zero(t, e.PrefillTime(0))

	// Prefilling is the compute of a prefill batch, without the weight
	// reads or the step overhead.
	for _, n := range []int{1, 512, 4096} {
		c := e.Cost(&engine.Batch{Seqs: []engine.SeqInput{prefillSeq(1, n, true)}})
		require.InDelta(t, c.ComputeTime, e.PrefillTime(n), 1)
	}
	// A long sequence is cheaper to swap (out and back) than to recompute.
	require.Less(t, 2*e.SwapTime(4096/16), e.PrefillTime(4096))

	cfg.TimeScale = 0.1
	scaled, _ := newTestExecutor(t, cfg)
	require.InDelta(t, e.SwapTime(100)/10, scaled.SwapTime(100), 1)
	require.InDelta(t, e.PrefillTime(100)/10, scaled.PrefillTime(100), 1)
}

func TestForwardNoSwapSpace(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.HostSwapBytes = 0
	e, _ := newTestExecutor(t, cfg)
	require.Zero(t, e.SwapSlots())
	require.Zero(t, e.Info().SwapBlocks)
	_, err := e.Forward(t.Context(), &engine.Batch{SwapOut: []engine.BlockSwap{{Device: 1, Host: 0}}})
	require.Error(t, err)
}

func TestForwardConcurrent(t *testing.T) {
	t.Parallel()
	e, clock := newTestExecutor(t, DefaultConfig())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				_, err := e.Forward(t.Context(), decodeBatch(1+w, 10+i))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Greater(t, clock.Now(), epoch)
}

func BenchmarkForward(b *testing.B) {
	for _, seqs := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("seqs=%d", seqs), func(b *testing.B) {
			e, _ := newTestExecutor(b, DefaultConfig())
			batch := decodeBatch(seqs, 1024)
			b.ReportAllocs()
			for b.Loop() {
				for i := range batch.Seqs {
					batch.Seqs[i].Generated++
				}
				if _, err := e.Forward(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(seqs*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestKVFP8 checks the FP8 KV cache option's accounting (Model.KVDTypeBytes
// 1), the same as the CPU executor's quantized caches: a token's KV bytes
// halve against FP16, so the blocks the same memory holds, the swap slots
// and the tokens in the cache double, and a decode step reads half the KV
// bytes.
func TestKVFP8(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"small", "flagship"} {
		cfg := testConfig(t, "h100", model, 1)
		fp16, _ := newTestExecutor(t, cfg)
		cfg.Model.KVDTypeBytes = 1
		fp8, _ := newTestExecutor(t, cfg)
		require.Equal(t, cfg.Model.KVBytesPerToken()*2, fp16.Config().Model.KVBytesPerToken(), model)
		require.Equal(t, fp16.KVCapacityBytes(), fp8.KVCapacityBytes(), model)
		a, b := fp16.Info(), fp8.Info()
		require.InDelta(t, 2*a.NumBlocks, b.NumBlocks, 1, model)
		require.InDelta(t, 2*a.SwapBlocks, b.SwapBlocks, 1, model)
		require.InDelta(t, 2*fp16.CapacityTokens(), fp8.CapacityTokens(), 1, model)

		step := decodeBatch(8, 2048)
		kv16 := fp16.Cost(step).Bytes - float64(cfg.Model.WeightBytes())
		kv8 := fp8.Cost(step).Bytes - float64(cfg.Model.WeightBytes())
		require.InEpsilon(t, kv16/2, kv8, 1e-9, model)
	}
}
