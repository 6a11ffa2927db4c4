package cpu

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
)

// kvAccuracy is how a quantized KV cache's logits compare with an F16
// cache's over the same tokens.
type kvAccuracy struct {
	positions int     // positions compared (each a next-token distribution)
	top1      int     // positions whose argmax is the F16 cache's greedy token
	firstDiff int     // generated tokens before free-running greedy output first differs (positions if never)
	maxErr    float64 // largest |Δlogit| over the largest |logit| of its row (relErr)
	meanErr   float64 // that error's mean over the positions
	meanAbs   float64 // mean |Δlogit|
	maxAbs    float64 // largest |Δlogit|
}

// kvAccuracyRun generates n greedy tokens after each prompt with an F16
// cache, then feeds the same tokens (teacher forcing) to an executor with
// a cache of typ and compares the logits of every position; it also runs
// typ free, to see where its own greedy output first departs.
func kvAccuracyRun(t *testing.T, f *gguf.File, typ string, prompts [][]int32, n int) kvAccuracy {
	t.Helper()
	cfg := Config{Threads: 2, BlockSize: 16, KVBlocks: 64, NoSwap: true}
	cfg.KVType = "f16"
	ref := newExec(t, f, cfg)
	cfg.KVType = typ
	e := newExec(t, f, cfg)
	var acc kvAccuracy
	var sumAbs float64
	var count int
	for i, prompt := range prompts {
		want := newTestSeq(uint64(i), prompt, seqBlocks(ref, 0, 1))
		wantLogits := runSeqs(t, ref, []*testSeq{want}, len(prompt), n)[0]

		forced := newTestSeq(uint64(i), append(slices.Clone(prompt), want.gen...), seqBlocks(e, 0, 1))
		for step := range n {
			k := 1
			if step == 0 {
				k = len(prompt)
			}
			in := forced.next(k, true)
			_, got := forwardLogits(t, e, &engine.Batch{Seqs: []engine.SeqInput{in}})
			w := wantLogits[step]
			wf := make([]float64, len(w))
			for j, v := range w {
				wf[j] = float64(v)
				d := math.Abs(float64(got[0][j]) - float64(v))
				sumAbs += d
				acc.maxAbs = max(acc.maxAbs, d)
			}
			count += len(w)
			re := relErr(got[0], wf)
			acc.maxErr = max(acc.maxErr, re)
			acc.meanErr += re
			if int32(argmax(got[0])) == want.gen[step] {
				acc.top1++
			}
			acc.positions++
		}

		free := newTestSeq(uint64(i), prompt, seqBlocks(e, 0, 1))
		runSeqs(t, e, []*testSeq{free}, len(prompt), n)
		same := 0
		for same < n && free.gen[same] == want.gen[same] {
			same++
		}
		acc.firstDiff += same
	}
	acc.meanAbs = sumAbs / float64(count)
	acc.meanErr /= float64(acc.positions)
	return acc
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// kvAccuracyBounds are generous bounds on a cache's departure from F16
// over the fixtures (the measured figures are in BENCHMARKS.md, "Quantized
// KV cache"): at least this share of positions keeps the F16 greedy token,
// and the logits' error relative to their scale, averaged over the
// positions, stays below meanErr. (Not the largest error: in the MoE
// model a small change in the attention output can flip an expert choice,
// which moves a few positions' logits a lot.) A cache that reads a wrong
// layout or a zeroed scale attends to garbage and misses both by far.
var kvAccuracyBounds = map[string]struct{ top1, meanErr float64 }{
	"f32":  {0.90, 0.03},
	"q8_0": {0.90, 0.03},
	"q4_0": {0.50, 0.20},
}

// TestKVQuantizedAccuracyFixtures measures f32 (as a floor), q8_0 and q4_0
// caches against an F16 cache on the fixtures whose head dims allow them (llama.cpp's own
// files: llama Q4_K_M with heads of 64, qwen3, qwen3moe and gemma3 with
// heads of 32, gemma3 with sliding-window layers): 4 random prompts of 40
// tokens, 48 greedy tokens each (crossing three block boundaries), logits
// compared position by position under teacher forcing.
func TestKVQuantizedAccuracyFixtures(t *testing.T) {
	dir := fixtures.Dir(t)
	files := []string{"llama-spm-d256-q4_k_m.gguf", "qwen3-d64-q8_0.gguf", "qwen3moe-d64-q8_0.gguf", "gemma3-d64-q8_0.gguf"}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("fixture %s not found", path)
			}
			f, err := gguf.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			spec, err := model.SpecFromFile(f)
			require.NoError(t, err)
			var prompts [][]int32
			for i := range 4 {
				prompts = append(prompts, randomTokens(uint64(60+i), 40, spec.Vocab))
			}
			for _, typ := range []string{"f32", "q8_0", "q4_0"} {
				a := kvAccuracyRun(t, f, typ, prompts, 48)
				top1 := float64(a.top1) / float64(a.positions)
				t.Logf("%s kv=%s: greedy agreement %d/%d (%.1f%%), free-running greedy identical for %.1f tokens on average; "+
					"logit error relative to the logit scale mean %.3g max %.3g, |Δlogit| mean %.3g max %.3g",
					name, typ, a.top1, a.positions, 100*top1, float64(a.firstDiff)/float64(len(prompts)), a.meanErr, a.maxErr, a.meanAbs, a.maxAbs)
				b := kvAccuracyBounds[typ]
				require.GreaterOrEqual(t, top1, b.top1, fmt.Sprintf("%s kv=%s: greedy agreement", name, typ))
				require.LessOrEqual(t, a.meanErr, b.meanErr, fmt.Sprintf("%s kv=%s: logit error", name, typ))
			}
		})
	}
}
