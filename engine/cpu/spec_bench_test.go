package cpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/internal/cpushapes"
	"github.com/llmd/llmd/model/gguf"
)

// specBenchModes are the configurations BenchmarkSpeculative compares, in
// the order each round runs them.
var specBenchModes = []string{"off", "ngram", "draft", "agreeing"}

// BenchmarkSpeculative measures speculative decoding end to end through
// the engine on the CPU executor: the 0.5B shape in F16 (cpushapes; another
// with LLMD_SPEC_SHAPE=tiny|small) as the target, decoding greedily 64
// tokens (LLMD_SPEC_TOKENS=n for another length; LLMD_SPEC_K=k for another
// most draft tokens per step than --spec-tokens' default) after a repetitive prompt
// (a 48-token passage three times), without speculation, with prompt
// lookup, and with the target's own Q4_0 copy (the same random
// draws, quantized) as the draft model; and, as "agreeing", a target whose
// F16 weights are that Q4_0 copy's values (dequantized), so that the same
// draft agrees with it as a good distilled draft would (random weights
// make the plain copy's argmax disagree often). "agreeing" is measured
// against its own "off" run, its target being another file. Each b.N
// iteration is one round that runs the modes in turn (A/B interleaved), so
// drift of the machine hits all alike (each round starting at the next mode). Per mode it reports the decode tokens/s over the
// streams (output tokens after the first over the time from the first
// token to the last, median over rounds) and the ITL (its inverse per
// stream); per speculative mode the ratio to "off" in the same round
// (median, min and max over the rounds) and the acceptance rate. With 8
// streams speculation is off by default (--spec-max-batch 4): the ratio
// shows what switching off costs. Run it with
// `go test -run '^$' -bench Speculative -benchtime 3x -timeout 30m ./engine/cpu/`.
func BenchmarkSpeculative(b *testing.B) {
	shape := cpushapes.Shapes[len(cpushapes.Shapes)-1]
	if name := os.Getenv("LLMD_SPEC_SHAPE"); name != "" {
		i := slices.IndexFunc(cpushapes.Shapes, func(s cpushapes.Shape) bool { return s.Name == name })
		if i < 0 {
			b.Fatalf("LLMD_SPEC_SHAPE=%s: no such shape", name)
		}
		shape = cpushapes.Shapes[i]
	}
	target, draft := shape.Model, shape.Model
	target.Type, target.Seed = gguf.TypeF16, 1
	draft.Type, draft.Seed = gguf.TypeQ4_0, 1
	tf := openModel(b, target, nil)
	df := openModel(b, draft, nil)
	af := dequantizedCopy(b, df)
	passage := randomTokens(7, 48, target.Vocab)
	prompt := slices.Concat(passage, passage, passage)
	maxTok := 64
	if v := os.Getenv("LLMD_SPEC_TOKENS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			b.Fatalf("LLMD_SPEC_TOKENS=%s: want a number of tokens of at least 2", v)
		}
		maxTok = n
	}
	for _, streams := range []int{1, 8} {
		b.Run(fmt.Sprintf("shape=%s/streams=%d", shape.Name, streams), func(b *testing.B) {
			rates := map[string][]float64{}
			ratios := map[string][]float64{}
			var drafted, accepted [4]uint64
			round := 0
			for b.Loop() {
				// Each round starts at another mode, so that no mode always
				// runs first (or right after another's engine).
				offs := map[string]float64{}
				for i := range specBenchModes {
					mi := (i + round) % len(specBenchModes)
					mode := specBenchModes[mi]
					var rate float64
					var st engine.Stats
					if mode == "agreeing" {
						// Against its own target without speculation.
						base, _ := specBenchRun(b, af, df, "off", prompt, streams, maxTok)
						rates["agreeing-off"] = append(rates["agreeing-off"], base)
						offs[mode] = base
						rate, st = specBenchRun(b, af, df, "draft", prompt, streams, maxTok)
					} else {
						rate, st = specBenchRun(b, tf, df, mode, prompt, streams, maxTok)
					}
					rates[mode] = append(rates[mode], rate)
					drafted[mi] += st.SpecDraftTokens
					accepted[mi] += st.SpecAcceptedTokens
				}
				for _, mode := range specBenchModes[1:] {
					off := offs[mode]
					if off == 0 {
						off = rates["off"][len(rates["off"])-1]
					}
					ratios[mode] = append(ratios[mode], rates[mode][len(rates[mode])-1]/off)
				}
				round++
			}
			b.ReportMetric(median(rates["agreeing-off"]), "agreeing-off-tokens/s")
			for mi, mode := range specBenchModes {
				r := median(rates[mode])
				b.ReportMetric(r, mode+"-tokens/s")
				b.ReportMetric(1000*float64(streams)/r, mode+"-itl-ms")
				if mode == "off" {
					continue
				}
				rs := ratios[mode]
				b.ReportMetric(median(rs), mode+"-ratio")
				b.ReportMetric(slices.Min(rs), mode+"-ratio-min")
				b.ReportMetric(slices.Max(rs), mode+"-ratio-max")
				// Drafted tokens per round: 0 where speculation stayed off.
				b.ReportMetric(float64(drafted[mi])/float64(round), mode+"-drafted/round")
				if drafted[mi] > 0 {
					b.ReportMetric(float64(accepted[mi])/float64(drafted[mi]), mode+"-acceptance")
				}
			}
		})
	}
}

// specBenchRun runs streams greedy requests of maxTok tokens after prompt
// through a fresh engine on the target in tf, with speculation as mode
// (drafting with the model in df for "draft"), and returns the decode
// tokens/s over all streams and the engine's stats.
func specBenchRun(b *testing.B, tf, df *gguf.File, mode string, prompt []int32, streams, maxTok int) (float64, engine.Stats) {
	b.Helper()
	blocks := streams * ((len(prompt)+maxTok)/16 + 2)
	e, err := New(tf, Config{BlockSize: 16, KVBlocks: blocks, KVType: "f16", NoSwap: true})
	require.NoError(b, err)
	defer e.Close()
	ecfg := engine.DefaultConfig()
	if v := os.Getenv("LLMD_SPEC_K"); v != "" {
		k, err := strconv.Atoi(v)
		require.NoError(b, err, "LLMD_SPEC_K")
		ecfg.Spec.MaxTokens = k
	}
	switch mode {
	case "ngram":
		ecfg.Spec.Drafter = engine.NgramDrafter{}
	case "draft":
		d, err := NewDraftModel(df, tf, Config{BlockSize: 16, KVBlocks: blocks, KVType: "f16"})
		require.NoError(b, err)
		defer d.Close()
		ecfg.Spec.Drafter = d
	}
	eng, err := engine.New(e, engine.RealClock{}, ecfg, nil)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error)
	go func() { done <- eng.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		first, last time.Time
		tokens      int
	)
	for i := range streams {
		// Each stream's prompt differs in its first token, so that none
		// is served from another's prefix cache.
		p := slices.Clone(prompt)
		p[0] = int32(i)
		st, err := eng.Submit(b.Context(), engine.Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: maxTok, N: 1,
			Priority: engine.PriorityPaid})
		require.NoError(b, err)
		wg.Go(func() {
			var t0, t1 time.Time
			n := 0
			for {
				ev, err := st.Next(b.Context())
				if err != nil || ev.Last() {
					break
				}
				if ev.Kind == engine.EventToken {
					if n == 0 {
						t0 = ev.Time
					}
					t1 = ev.Time
					n++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() || t0.Before(first) {
				first = t0
			}
			if t1.After(last) {
				last = t1
			}
			tokens += n - 1
		})
	}
	wg.Wait()
	if !last.After(first) {
		b.Fatalf("%s: no decode time measured", mode)
	}
	return float64(tokens) / last.Sub(first).Seconds(), eng.Stats()
}

// dequantizedCopy writes f again with every Q4_0 tensor stored as F16 of
// its dequantized values (the rest as it is) and opens it: a model whose
// Q4_0 quantization is f.
func dequantizedCopy(b *testing.B, f *gguf.File) *gguf.File {
	b.Helper()
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		if k == "general.file_type" {
			v = uint32(1) // MOSTLY_F16
		}
		require.NoError(b, w.Set(k, v), k)
	}
	for _, t := range f.Tensors {
		data := f.TensorData(t)
		if t.Type != gguf.TypeQ4_0 {
			require.NoError(b, w.AddTensorData(t.Name, t.Dims, t.Type, data))
			continue
		}
		vals := make([]float32, t.Elements())
		require.NoError(b, gguf.Dequantize(t.Type, data, vals))
		require.NoError(b, w.AddTensor(t.Name, t.Dims, gguf.TypeF16, vals))
	}
	path := filepath.Join(b.TempDir(), "agreeing.gguf")
	require.NoError(b, w.WriteFile(path))
	out, err := gguf.Open(path)
	require.NoError(b, err)
	b.Cleanup(func() { _ = out.Close() })
	return out
}

// BenchmarkSpeculativeStep measures the parts of a speculative step on the
// executor alone, one sequence at about 150 tokens of context: a target
// step over rows tokens (rows = 1 is plain decoding, rows = k+1 verifies k
// drafts, all rows sampled) for the 0.5B shape (LLMD_SPEC_SHAPE for
// another) in F16, and one decode step of its Q4_0 copy (a drafted token).
// With them, a step that drafts k tokens accepted with probability a each
// yields (1-a^(k+1))/(1-a) tokens for k Q4_0 steps plus one target step of
// k+1 rows. Run it with
// `go test -run '^$' -bench SpeculativeStep -benchtime 20x ./engine/cpu/`.
func BenchmarkSpeculativeStep(b *testing.B) {
	shape := cpushapes.Shapes[len(cpushapes.Shapes)-1]
	if name := os.Getenv("LLMD_SPEC_SHAPE"); name != "" {
		i := slices.IndexFunc(cpushapes.Shapes, func(s cpushapes.Shape) bool { return s.Name == name })
		if i < 0 {
			b.Fatalf("LLMD_SPEC_SHAPE=%s: no such shape", name)
		}
		shape = cpushapes.Shapes[i]
	}
	for _, tc := range []struct {
		typ  gguf.TensorType
		rows []int
	}{{gguf.TypeF16, []int{1, 2, 4, 6, 8}}, {gguf.TypeQ4_0, []int{1}}} {
		m := shape.Model
		m.Type, m.Seed = tc.typ, 1
		f := openModel(b, m, nil)
		for _, rows := range tc.rows {
			b.Run(fmt.Sprintf("shape=%s/type=%s/rows=%d", shape.Name, tc.typ, rows), func(b *testing.B) {
				const promptLen = 144
				e := newExec(b, f, Config{BlockSize: 16, KVBlocks: (promptLen + 16 + 16) / 16, KVType: "f16", NoSwap: true})
				s := newTestSeq(1, randomTokens(3, promptLen, m.Vocab), seqBlocks(e, 0, 1))
				_, err := e.Forward(b.Context(), &engine.Batch{Seqs: []engine.SeqInput{s.next(promptLen, false)}})
				require.NoError(b, err)
				toks := randomTokens(4, rows, m.Vocab)
				in := engine.SeqInput{SeqID: 1, Tokens: toks, Pos: promptLen, Context: promptLen + rows, Blocks: s.blocks,
					Sample: true, History: s.toks, Draft: rows - 1}
				for b.Loop() {
					if _, err := e.Forward(b.Context(), &engine.Batch{Seqs: []engine.SeqInput{in}}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(1000*b.Elapsed().Seconds()/float64(b.N), "ms/step")
			})
		}
	}
}
