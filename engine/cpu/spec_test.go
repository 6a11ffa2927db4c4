package cpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sample"
	"github.com/llmd/llmd/model/gguf"
)

// specRequest is one request of a speculative run.
type specRequest struct {
	prompt []int32
	params engine.SamplingParams
	n      int
}

// runEngineSpec runs reqs through an engine on e with the given drafter
// (nil: no speculation) and returns each request's choices, the stats once
// every block is back, and whether each request ended normally.
func runEngineSpec(t *testing.T, e *Executor, d engine.Drafter, reqs []specRequest, maxTok int) ([][][]int32, engine.Stats) {
	t.Helper()
	ecfg := engine.DefaultConfig()
	ecfg.ExpectedOutputTokens = 1 // admit on the prompt alone: preemption under a small cache
	if d != nil {
		ecfg.Spec = engine.SpecConfig{Drafter: d, MaxTokens: 6, MaxBatch: 64}
	}
	eng, err := engine.New(e, engine.RealClock{}, ecfg, nil)
	require.NoError(t, err)
	streams := make([]*engine.Stream, len(reqs))
	for i, r := range reqs {
		streams[i], err = eng.Submit(t.Context(), engine.Request{ID: fmt.Sprint("r", i), Priority: engine.PriorityPaid,
			Prompt: r.prompt, MaxTokens: maxTok, N: max(r.n, 1), Seed: uint64(i), Sampling: r.params})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- eng.Run(ctx) }()
	got := make([][][]int32, len(reqs))
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() {
			toks, _, _, err := engine.Collect(t.Context(), st)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			got[i] = toks
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return eng.Stats().BlocksUsed == 0 }, 5*time.Second, time.Millisecond)
	st := eng.Stats()
	cancel()
	require.NoError(t, <-done)
	return got, st
}

// repetitivePrompt is a prompt that quotes itself: a random passage
// repeated, so that prompt lookup proposes long drafts.
func repetitivePrompt(seed uint64, vocab int) []int32 {
	passage := randomTokens(seed, 24, vocab)
	p := slices.Clone(passage)
	p = append(p, randomTokens(seed+1, 5, vocab)...)
	return append(p, passage...)
}

// specRequests mixes greedy and sampled requests (with penalties), a
// repetitive prompt and an n = 2 request sharing its prompt's blocks.
func specRequests(vocab int) []specRequest {
	var reqs []specRequest
	for i := range 6 {
		r := specRequest{prompt: randomTokens(uint64(200+i), 20, vocab)}
		if i%2 == 1 {
			r.params = sampled
		}
		if i%3 == 0 {
			r.prompt = repetitivePrompt(uint64(300+i), vocab)
		}
		reqs = append(reqs, r)
	}
	reqs = append(reqs, specRequest{prompt: repetitivePrompt(400, vocab), n: 2})
	return reqs
}

// requireSameChoices compares two runs choice by choice (bit for bit when
// the kernels are batch-invariant, see requireSameRun).
func requireSameChoices(t *testing.T, want, got [][][]int32) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Len(t, got[i], len(want[i]), "request %d", i)
		for c := range want[i] {
			requireSameRun(t, want[i][c], got[i][c], nil, nil, fmt.Sprintf("request %d choice %d", i, c))
		}
	}
}

// TestSpeculativeEngine runs the same requests through the engine on the
// CPU executor without speculation, with prompt lookup and with a draft
// model (the target's own file: it agrees with the target wherever the
// batching does), in a roomy cache and in caches small enough to preempt
// by recompute and by swap: the tokens are the same, greedy and sampled
// (the verification draws each position as decoding does), drafts were
// verified and accepted, and every block of the target and of the draft
// cache is back at the end.
func TestSpeculativeEngine(t *testing.T) {
	f := openModel(t, tinyModel("qwen2", gguf.TypeQ8_0, true), nil)
	reqs := specRequests(300)
	const maxTok = 40
	want, _ := runEngineSpec(t, newExec(t, f, Config{Threads: 2, KVBlocks: 64, KVType: "f16"}), nil, reqs, maxTok)
	cases := map[string]Config{
		"roomy":     {Threads: 2, KVBlocks: 64, KVType: "f16"},
		"recompute": {Threads: 2, KVBlocks: 10, KVType: "f16", NoSwap: true},
		"swap":      {Threads: 2, KVBlocks: 10, KVType: "f16"},
	}
	for name, cfg := range cases {
		t.Run(name+"/ngram", func(t *testing.T) {
			got, st := runEngineSpec(t, newExec(t, f, cfg), engine.NgramDrafter{}, reqs, maxTok)
			requireSameChoices(t, want, got)
			t.Logf("drafts %d, tokens %d, accepted %d, preemptions %d (swap %d)", st.SpecDrafts, st.SpecDraftTokens,
				st.SpecAcceptedTokens, st.Preemptions, st.PreemptionsSwap)
			require.Positive(t, st.SpecDraftTokens)
			if name != "roomy" {
				require.Positive(t, st.Preemptions)
			}
		})
		t.Run(name+"/draft", func(t *testing.T) {
			d, err := NewDraftModel(f, f, Config{Threads: 2, KVBlocks: 32, KVType: "f16"})
			require.NoError(t, err)
			defer d.Close()
			got, st := runEngineSpec(t, newExec(t, f, cfg), d, reqs, maxTok)
			requireSameChoices(t, want, got)
			t.Logf("drafts %d, tokens %d, accepted %d, preemptions %d (swap %d)", st.SpecDrafts, st.SpecDraftTokens,
				st.SpecAcceptedTokens, st.Preemptions, st.PreemptionsSwap)
			require.Positive(t, st.SpecAcceptedTokens)
			require.Zero(t, d.NumSeqs(), "draft state of finished sequences")
			require.Zero(t, d.BlocksUsed(), "draft cache blocks leaked")
		})
	}
}

// TestSpeculativeFixture is TestSpeculativeEngine's greedy check on the
// F16 fixture with its Q4_0 copy as the draft model (llama.cpp's own
// files, the same random draws quantized), and prompt lookup on
// repetitive prompts.
func TestSpeculativeFixture(t *testing.T) {
	target := openFixture(t, "llama-spm-d64-f16.gguf")
	draft := openFixture(t, "llama-spm-d64-q4_0.gguf")
	e := newExec(t, target, Config{Threads: 2, KVBlocks: 64, KVType: "f16"})
	vocab := e.Spec().Vocab
	var reqs []specRequest
	for i := range 4 {
		reqs = append(reqs, specRequest{prompt: repetitivePrompt(uint64(500+i), vocab)})
	}
	const maxTok = 48
	want, _ := runEngineSpec(t, e, nil, reqs, maxTok)
	got, st := runEngineSpec(t, newExec(t, target, Config{Threads: 2, KVBlocks: 64, KVType: "f16"}), engine.NgramDrafter{}, reqs, maxTok)
	requireSameChoices(t, want, got)
	// Random weights over 32,000 tokens do not quote the prompt, so prompt
	// lookup rarely finds the suffix: this checks that its drafts change
	// nothing, not that they pay (TestSpeculativeEngine's small vocabulary
	// repeats itself and drafts plenty).
	t.Logf("ngram: drafts %d, tokens %d, accepted %d", st.SpecDrafts, st.SpecDraftTokens, st.SpecAcceptedTokens)

	d, err := NewDraftModel(draft, target, Config{Threads: 2, KVBlocks: 64, KVType: "f16"})
	require.NoError(t, err)
	defer d.Close()
	got, st = runEngineSpec(t, newExec(t, target, Config{Threads: 2, KVBlocks: 64, KVType: "f16"}), d, reqs, maxTok)
	requireSameChoices(t, want, got)
	t.Logf("q4_0 draft: drafts %d, tokens %d, accepted %d", st.SpecDrafts, st.SpecDraftTokens, st.SpecAcceptedTokens)
	require.Positive(t, st.SpecAcceptedTokens)
}

// TestDraftModelVocab refuses a draft model with another vocabulary.
func TestDraftModelVocab(t *testing.T) {
	f := openModel(t, tinyModel("qwen2", gguf.TypeQ8_0, true), nil)
	m := tinyModel("qwen2", gguf.TypeQ8_0, true)
	m.Vocab = 320
	other := openModel(t, m, nil)
	_, err := NewDraftModel(other, f, Config{Threads: 1, KVBlocks: 8})
	require.ErrorIs(t, err, ErrVocabMismatch)
}

// TestVerifyStep checks a verification step directly: drafts that are the
// greedy continuation are all accepted and the next token follows; a
// draft wrong at position 2 keeps the first two and returns the right
// third token; the logits of each position are those of plain decoding.
func TestVerifyStep(t *testing.T) {
	f := openModel(t, tinyModel("llama", gguf.TypeF32, false), nil)
	e := newExec(t, f, testConfig())
	prompt := randomTokens(9, 21, 300)
	want := generateAlone(t, e, prompt, 6, 0, engine.SamplingParams{})
	for _, tc := range []struct {
		name   string
		draft  []int32
		accept int
	}{
		{"all", want[1:5], 4},
		{"wrong third", []int32{want[1], want[2], (want[3] + 1) % 300, want[4]}, 2},
		{"wrong first", []int32{(want[1] + 1) % 300}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSeq(1, prompt, seqBlocks(e, 0, 1))
			runSeqs(t, e, []*testSeq{s}, 1000, 1) // prefill, sample want[0]
			require.Equal(t, want[:1], s.gen)
			in := s.next(1, true)
			in.Tokens = append(slices.Clone(in.Tokens), tc.draft...)
			in.Context += len(tc.draft)
			in.Draft = len(tc.draft)
			out, err := e.Forward(t.Context(), &engine.Batch{Seqs: []engine.SeqInput{in}})
			require.NoError(t, err)
			require.Equal(t, tc.accept, out.Accepted[0])
			require.Equal(t, want[1+tc.accept], out.Tokens[0])
		})
	}
}

// TestSpeculativeSampledDistribution checks, over many seeded draws, that
// a verification step emits its first token with the target's
// distribution whatever the draft: the chi-square statistic of the first
// token against the target's probabilities (temperature 0.7, top-k 12,
// from the model's logits at that position) stays under the 0.1% critical
// value, with the most likely token as the draft. The same test rejects a
// broken rule (accept the draft with probability p(d), on rejection draw
// from p itself instead of p without d), which shows it has the power to.
func TestSpeculativeSampledDistribution(t *testing.T) {
	f := openModel(t, tinyModel("llama", gguf.TypeF32, false), nil)
	e := newExec(t, f, testConfig())
	prompt := randomTokens(11, 17, 300)
	params := engine.SamplingParams{Temperature: 0.7, TopK: 12}

	// The target's logits at the first verified position.
	s := newTestSeq(1, prompt, seqBlocks(e, 0, 1))
	b := engine.Batch{Seqs: []engine.SeqInput{s.next(len(prompt), true)}}
	_, rows := forwardLogits(t, e, &b)
	probs := targetProbs(rows[0], params)
	draft := int32(0)
	for tok, p := range probs {
		if p > probs[draft] {
			draft = int32(tok)
		}
	}
	t.Logf("draft %d has p = %.3f", draft, probs[draft])

	const draws = 3000
	counts := make([]int, len(probs))
	accepted := 0
	for seed := range uint64(draws) {
		in := engine.SeqInput{SeqID: 1, Tokens: []int32{prompt[len(prompt)-1], draft}, Pos: len(prompt) - 1,
			Context: len(prompt) + 1, Blocks: s.blocks, Sample: true, History: prompt, Seed: seed,
			Sampling: params, Draft: 1}
		out, err := e.Forward(t.Context(), &engine.Batch{Seqs: []engine.SeqInput{in}})
		require.NoError(t, err)
		first := out.Tokens[0]
		if out.Accepted[0] == 1 {
			first = draft
			accepted++
		}
		counts[first]++
	}
	chi, df := chiSquare(counts, probs, draws)
	crit := chiSquareCrit001(df)
	t.Logf("verification: chi-square %.1f on %d degrees of freedom (0.1%% critical %.1f); accepted %d of %d (p(d) %.3f)",
		chi, df, crit, accepted, draws, probs[draft])
	require.Less(t, chi, crit)
	require.InDelta(t, probs[draft], float64(accepted)/draws, 0.05)

	// The broken rule, on the same draws of the sampler.
	sm := sample.NewSampler(300)
	broken := make([]int, len(probs))
	for seed := range uint64(draws) {
		coin := float64(mixSeed(seed)>>11) * 0x1p-53
		if coin < probs[draft] {
			broken[draft]++
			continue
		}
		l := slices.Clone(rows[0])
		broken[sm.Sample(l, params, seed, 0, prompt, 0)]++
	}
	chiB, _ := chiSquare(broken, probs, draws)
	t.Logf("broken rule: chi-square %.1f", chiB)
	require.Greater(t, chiB, crit, "the test must reject a wrong acceptance rule")
}

// targetProbs is the sampler's distribution over logits with p's
// temperature and top-k (no other truncation), in float64.
func targetProbs(logits []float32, p engine.SamplingParams) []float64 {
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	probs := make([]float64, len(logits))
	m := float64(logits[idx[0]])
	sum := 0.0
	for _, i := range idx[:p.TopK] {
		probs[i] = math.Exp((float64(logits[i]) - m) / p.Temperature)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	return probs
}

// chiSquare is Pearson's statistic of counts (n draws) against probs over
// the tokens of positive probability, and its degrees of freedom. A count
// on a token of probability 0 makes it infinite.
func chiSquare(counts []int, probs []float64, n int) (float64, int) {
	chi, bins := 0.0, 0
	for tok, p := range probs {
		if p == 0 {
			if counts[tok] > 0 {
				return math.Inf(1), 1
			}
			continue
		}
		exp := p * float64(n)
		d := float64(counts[tok]) - exp
		chi += d * d / exp
		bins++
	}
	return chi, bins - 1
}

// chiSquareCrit001 approximates the 0.1% critical value of the chi-square
// distribution with df degrees of freedom (Wilson-Hilferty).
func chiSquareCrit001(df int) float64 {
	const z = 3.0902 // the normal's 99.9% quantile
	k := float64(df)
	a := 2 / (9 * k)
	return k * math.Pow(1-a+z*math.Sqrt(a), 3)
}

// mixSeed is an independent coin per seed for the broken rule.
func mixSeed(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
