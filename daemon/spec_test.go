package daemon

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

// specCompletion serves the test GGUF model with speculation mode (and the
// model's own file as the draft model for "draft"), asks for a greedy
// completion of a prompt that repeats itself, and returns the text and the
// accepted draft tokens /metrics reports.
func specCompletion(t *testing.T, path, mode string) (string, float64) {
	t.Helper()
	cfg := testConfig()
	cfg.Models = nil
	cfg.Clock = nil
	cfg.ModelFiles = []string{path}
	cfg.Speculative = mode
	if mode == SpecDraft {
		cfg.DraftModel = path
	}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	c := testClient(t)
	resp, body := post(t, c, base+"/v1/completions",
		`{"model":"tiny","max_tokens":48,"temperature":0,"prompt":"one two three four five six seven one two three four five six seven one two three"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var cc api.Completion
	require.NoError(t, json.Unmarshal(body, &cc))
	require.Equal(t, 48, cc.Usage.CompletionTokens)
	_, metrics := get(t, c, base+"/metrics")
	return cc.Choices[0].Text, metricSum(t, string(metrics), "vllm:spec_decode_num_accepted_tokens_total")
}

// metricSum adds the values of every series of name in a Prometheus text
// exposition.
func metricSum(t *testing.T, text, name string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

// TestSpeculativeHTTP serves a GGUF model through the HTTP API with
// speculative decoding off, by prompt lookup and by a draft model: the
// greedy completions are the same, and /metrics counts accepted drafts.
func TestSpeculativeHTTP(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeTestGGUF(t, path)
	want, acc := specCompletion(t, path, SpecOff)
	require.Zero(t, acc)
	for _, mode := range []string{SpecNgram, SpecDraft} {
		t.Run(mode, func(t *testing.T) {
			got, acc := specCompletion(t, path, mode)
			require.Equal(t, want, got)
			t.Logf("%s: %v draft tokens accepted", mode, acc)
			if mode == SpecDraft {
				require.Positive(t, acc, "the model's own file drafts what it decodes")
			}
		})
	}
}

// TestSpeculativeConfig refuses inconsistent speculative settings and a
// draft model with another vocabulary, with messages that say what to do.
func TestSpeculativeConfig(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ mode, draft string }{
		"unknown mode":     {mode: "eagle"},
		"draft needs file": {mode: SpecDraft},
		"file needs draft": {mode: SpecNgram, draft: "x.gguf"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Speculative, cfg.DraftModel = tc.mode, tc.draft
			require.Error(t, cfg.Validate())
		})
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.gguf")
	writeTestGGUF(t, path)
	other := filepath.Join(dir, "other.gguf")
	writeOtherVocabGGUF(t, other)
	cfg := testConfig()
	cfg.Models = nil
	cfg.ModelFiles = []string{path}
	cfg.Speculative, cfg.DraftModel = SpecDraft, other
	_, err := Open(cfg, testLogger(t))
	require.ErrorIs(t, err, cpu.ErrVocabMismatch)
}

// writeOtherVocabGGUF writes writeTestGGUF's model with a vocabulary of 700
// tokens instead of 600.
func writeOtherVocabGGUF(t *testing.T, path string) {
	t.Helper()
	vocab, err := tokenizer.BuildVocab("bpe", 700)
	require.NoError(t, err)
	w, err := synth.Model{Arch: "llama", Name: "other", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64,
		Vocab: 700, ContextLength: 512, Type: gguf.TypeQ8_0, Seed: 8}.Writer()
	require.NoError(t, err)
	for k, v := range vocab.Metadata() {
		require.NoError(t, w.Set(k, v))
	}
	require.NoError(t, w.WriteFile(path))
}
