package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tokTestMetadata is Metadata over a map, with the getter rules of the
// interface: integers of any type that fits, float32 or float64.
type tokTestMetadata map[string]any

func (m tokTestMetadata) String(key string) (string, bool) {
	v, ok := m[key].(string)
	return v, ok
}

func (m tokTestMetadata) Uint(key string) (uint64, bool) {
	switch v := m[key].(type) {
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int32:
		return uint64(v), v >= 0
	case int64:
		return uint64(v), v >= 0
	case int:
		return uint64(v), v >= 0
	}
	return 0, false
}

func (m tokTestMetadata) Int(key string) (int64, bool) {
	switch v := m[key].(type) {
	case uint32:
		return int64(v), true
	case uint64:
		return int64(v), v <= math.MaxInt64
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

func (m tokTestMetadata) Float(key string) (float64, bool) {
	switch v := m[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

func (m tokTestMetadata) Bool(key string) (bool, bool) {
	v, ok := m[key].(bool)
	return v, ok
}

func (m tokTestMetadata) Strings(key string) ([]string, bool) {
	v, ok := m[key].([]string)
	return v, ok
}

func (m tokTestMetadata) Float32s(key string) ([]float32, bool) {
	v, ok := m[key].([]float32)
	return v, ok
}

func (m tokTestMetadata) Int32s(key string) ([]int32, bool) {
	v, ok := m[key].([]int32)
	return v, ok
}

// Ids of the tiny SentencePiece vocabulary of tokTestSPMVocab.
const (
	spmTestSpace  = 259 // ▁
	spmTestH      = 260 // h
	spmTestL      = 262 // l
	spmTestLL     = 267 // ll
	spmTestHello  = 271 // ▁hello
	spmTestWorld  = 276 // ▁world
	spmTestUser   = 277 // <|user|>, user-defined
	spmTestByte00 = 3   // <0x00>
)

// tokTestSPMVocab is a tiny SentencePiece vocabulary: <unk>, <s>, </s>,
// the byte tokens, single characters of low score, and pieces whose
// scores make "hello world" merge in a known order.
func tokTestSPMVocab() Vocab {
	v := Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: -1, EOM: -1, UNK: 0, PAD: -1, AddBOS: true, AddSpacePrefix: true}
	add := func(s string, score float32, ty int32) {
		v.Tokens = append(v.Tokens, s)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, ty)
	}
	add("<unk>", 0, TokenTypeUnknown)
	add("<s>", 0, TokenTypeControl)
	add("</s>", 0, TokenTypeControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, TokenTypeByte)
	}
	for i, c := range []string{"▁", "h", "e", "l", "o", "w", "r", "d"} { // 259..266
		add(c, -1000-float32(i), TokenTypeNormal)
	}
	for i, p := range []string{"ll", "he", "▁he", "llo", "▁hello", "or", "▁w", "ld", "▁wor", "▁world"} { // 267..276
		add(p, -1-float32(i), TokenTypeNormal)
	}
	add("<|user|>", 0, TokenTypeUserDefined) // 277
	return v
}

// Ids of the tiny byte-level BPE vocabulary of tokTestBPEVocab; byte b
// has id b.
const (
	bpeTestHello = 259 // hello
	bpeTestWorld = 264 // Ġworld
	bpeTestBOS   = 265 // <|begin_of_text|>
	bpeTestEOT   = 266 // <|eot_id|>
	bpeTestThink = 267 // <think>, user-defined
	bpeTestXYZ   = 268 // xyz, reachable only whole (ignore_merges)
)

// tokTestBPEVocab is a tiny byte-level BPE vocabulary with the given
// pre-tokenizer: the 256 byte tokens in byte order, merges that build
// "hello" and "Ġworld", two control tokens and one user-defined token.
func tokTestBPEVocab(pre string) Vocab {
	v := Vocab{Model: "gpt2", Pre: pre, BOS: bpeTestBOS, EOS: bpeTestEOT, EOT: -1, EOM: -1, UNK: -1, PAD: -1, AddBOS: true}
	for b := range 256 {
		v.Tokens = append(v.Tokens, bpeByteStr[b])
		v.Types = append(v.Types, TokenTypeNormal)
	}
	for _, m := range []string{"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"} {
		v.Merges = append(v.Merges, m)
		v.Tokens = append(v.Tokens, strings.ReplaceAll(m, " ", ""))
		v.Types = append(v.Types, TokenTypeNormal)
	}
	v.Tokens = append(v.Tokens, "<|begin_of_text|>", "<|eot_id|>", "<think>", "xyz")
	v.Types = append(v.Types, TokenTypeControl, TokenTypeControl, TokenTypeUserDefined, TokenTypeNormal)
	return v
}

func tokTestNew(t testing.TB, v Vocab) *Tokenizer {
	t.Helper()
	tk, err := NewFromVocab(v)
	require.NoError(t, err)
	return tk
}

var (
	tokBuiltOnce sync.Once
	tokBuiltBPE  *Tokenizer
	tokBuiltSPM  *Tokenizer
)

// tokTestBuilt returns tokenizers over BuildVocab's vocabularies (built
// once per test binary).
func tokTestBuilt(t testing.TB) (bpe, spm *Tokenizer) {
	t.Helper()
	tokBuiltOnce.Do(func() {
		for kind, dst := range map[string]**Tokenizer{"bpe": &tokBuiltBPE, "spm": &tokBuiltSPM} {
			v, err := BuildVocab(kind, 1000)
			if err != nil {
				panic(err)
			}
			if *dst, err = NewFromVocab(v); err != nil {
				panic(err)
			}
		}
	})
	return tokBuiltBPE, tokBuiltSPM
}

func TestTokenizerSPMKnownAnswers(t *testing.T) {
	t.Parallel()
	tk := tokTestNew(t, tokTestSPMVocab())
	b := func(c byte) int32 { return spmTestByte00 + int32(c) }
	tests := map[string]struct {
		text       string
		addSpecial bool
		want       []int32
	}{
		"merged by score":             {"hello world", false, []int32{spmTestHello, spmTestWorld}},
		"bos added":                   {"hello world", true, []int32{1, spmTestHello, spmTestWorld}},
		"empty without special":       {"", false, []int32{}},
		"empty with special":          {"", true, []int32{1}},
		"equal scores merge leftmost": {"lll", false, []int32{spmTestSpace, spmTestLL, spmTestL}},
		"byte fallback":               {"hi", false, []int32{spmTestSpace, spmTestH, b('i')}},
		"multibyte byte fallback":     {"é", false, []int32{spmTestSpace, b(0xC3), b(0xA9)}},
		"newline falls back":          {"hello\nworld", false, []int32{spmTestHello, b('\n'), 264, 272, 274}},
		"spaces kept":                 {"hello  world", false, []int32{spmTestHello, spmTestSpace, spmTestWorld}},
		"control token literal":       {"hello</s>", false, []int32{spmTestHello, 2}},
		"space prefix after special":  {"<|user|>hello", false, []int32{spmTestUser, spmTestHello}},
		"unknown token literal":       {"<unk>", false, []int32{0}},
		"invalid utf8 kept as bytes":  {"h\xff", false, []int32{spmTestSpace, spmTestH, b(0xff)}},
		"truncated utf8 at end":       {"h\xc3", false, []int32{spmTestSpace, spmTestH, b(0xc3)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tk.Encode(tc.text, tc.addSpecial))
		})
	}
}

func TestTokenizerBPEKnownAnswers(t *testing.T) {
	t.Parallel()
	qwen := tokTestNew(t, tokTestBPEVocab("qwen2"))
	llama := tokTestNew(t, tokTestBPEVocab("llama-bpe"))
	bytes := func(s string) []int32 {
		var ids []int32
		for i := 0; i < len(s); i++ {
			ids = append(ids, int32(s[i]))
		}
		return ids
	}
	cat := func(parts ...[]int32) []int32 {
		out := []int32{}
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := map[string]struct {
		tk         *Tokenizer
		text       string
		addSpecial bool
		want       []int32
	}{
		"merged by rank":            {qwen, "hello world", false, []int32{bpeTestHello, bpeTestWorld}},
		"bos added":                 {qwen, "hello world", true, []int32{bpeTestBOS, bpeTestHello, bpeTestWorld}},
		"empty":                     {qwen, "", false, []int32{}},
		"unmerged bytes":            {qwen, "hi!", false, bytes("hi!")},
		"space is Ġ":                {qwen, " ", false, []int32{int32(' ')}},
		"control tokens literal":    {qwen, "<|begin_of_text|>hello<|eot_id|>", false, []int32{bpeTestBOS, bpeTestHello, bpeTestEOT}},
		"user-defined literal":      {qwen, "<think>hello</think>", false, cat([]int32{bpeTestThink, bpeTestHello}, bytes("</think>"))},
		"no space prefix":           {qwen, "<think> world", false, []int32{bpeTestThink, bpeTestWorld}},
		"merges only, no whole":     {qwen, "xyz", false, bytes("xyz")},
		"ignore_merges takes whole": {llama, "xyz", false, []int32{bpeTestXYZ}},
		"invalid utf8 bytes kept":   {qwen, "\xff\xfe", false, []int32{0xff, 0xfe}},
		"utf8 bytes":                {qwen, "é", false, []int32{0xc3, 0xa9}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.tk.Encode(tc.text, tc.addSpecial))
		})
	}
}

func TestTokenizerDecode(t *testing.T) {
	t.Parallel()
	spm := tokTestNew(t, tokTestSPMVocab())
	bpe := tokTestNew(t, tokTestBPEVocab("qwen2"))
	tests := map[string]struct {
		tk   *Tokenizer
		ids  []int32
		want string
	}{
		"spm prefix space dropped after bos": {spm, []int32{1, spmTestHello, spmTestWorld}, "hello world"},
		"spm spaces kept without bos":        {spm, []int32{spmTestHello, spmTestWorld}, " hello world"},
		"spm control tokens hidden":          {spm, []int32{1, spmTestHello, 2, 0}, "hello"},
		"spm user-defined shown":             {spm, []int32{spmTestUser, spmTestHello}, "<|user|> hello"},
		"spm bytes joined":                   {spm, []int32{spmTestByte00 + 0xC3, spmTestByte00 + 0xA9}, "é"},
		"spm ids out of range skipped":       {spm, []int32{-1, 100000, spmTestH}, "h"},
		"bpe byte map undone":                {bpe, []int32{bpeTestHello, bpeTestWorld, '\n' + 0}, "hello world\n"},
		"bpe control hidden":                 {bpe, []int32{bpeTestBOS, bpeTestHello, bpeTestEOT}, "hello"},
		"bpe user-defined shown":             {bpe, []int32{bpeTestThink, bpeTestHello}, "<think>hello"},
		"bpe incomplete utf8 at end":         {bpe, []int32{0xe4, 0xb8}, "\xe4\xb8"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.tk.Decode(tc.ids))
		})
	}
}

func TestTokenizerDecodeToken(t *testing.T) {
	t.Parallel()
	spm := tokTestNew(t, tokTestSPMVocab())
	bpe := tokTestNew(t, tokTestBPEVocab("qwen2"))
	require.Equal(t, " hello", spm.DecodeToken(spmTestHello))
	require.Equal(t, "</s>", spm.DecodeToken(2))
	require.Equal(t, "\xc3", spm.DecodeToken(spmTestByte00+0xC3))
	require.Equal(t, " world", bpe.DecodeToken(bpeTestWorld))
	require.Equal(t, "\xe4", bpe.DecodeToken(0xe4))
	require.Equal(t, "<|eot_id|>", bpe.DecodeToken(bpeTestEOT))
	require.Empty(t, bpe.DecodeToken(-1))
	require.Empty(t, bpe.DecodeToken(int32(bpe.VocabSize())))
}

func TestTokenizerAccessors(t *testing.T) {
	t.Parallel()
	spm := tokTestNew(t, tokTestSPMVocab())
	bos, ok := spm.BOS()
	require.True(t, ok)
	require.Equal(t, int32(1), bos)
	require.Equal(t, int32(2), spm.EOS())
	require.True(t, spm.AddBOS())
	require.False(t, spm.AddEOS())
	require.Equal(t, 278, spm.VocabSize())
	require.Equal(t, "llama", spm.Model())
	require.Equal(t, "▁hello", spm.Token(spmTestHello))
	require.Empty(t, spm.Token(-5))
	id, ok := spm.TokenID("▁world")
	require.True(t, ok)
	require.Equal(t, int32(spmTestWorld), id)
	_, ok = spm.TokenID("nope")
	require.False(t, ok)
	require.Equal(t, int32(TokenTypeByte), spm.TokenType(spmTestByte00))
	require.Equal(t, int32(TokenTypeUndefined), spm.TokenType(9999))

	v := tokTestBPEVocab("qwen2")
	v.BOS, v.AddBOS, v.AddEOS = -1, true, true
	bpe := tokTestNew(t, v)
	_, ok = bpe.BOS()
	require.False(t, ok)
	require.False(t, bpe.AddBOS(), "AddBOS without a BOS id")
	require.Equal(t, []int32{bpeTestHello, bpeTestEOT}, bpe.Encode("hello", true))
}

func TestTokenizerEndOfGeneration(t *testing.T) {
	t.Parallel()
	v := tokTestBPEVocab("qwen2")
	v.EOS = -1
	v.Tokens = append(v.Tokens, "<|im_end|>", "</s>", "<|eom_id|>", "<|file_sep|>", "<|im_start|>")
	v.Types = append(v.Types, TokenTypeControl, TokenTypeNormal, TokenTypeNormal, TokenTypeControl, TokenTypeControl)
	tk := tokTestNew(t, v)
	imEnd, s, eom, fileSep, imStart := int32(269), int32(270), int32(271), int32(272), int32(273)

	require.Equal(t, []int32{bpeTestEOT, imEnd, s, eom, fileSep}, tk.EndOfGeneration())
	for _, id := range tk.EndOfGeneration() {
		require.True(t, tk.IsEndOfGeneration(id))
	}
	require.False(t, tk.IsEndOfGeneration(imStart))
	require.False(t, tk.IsEndOfGeneration(bpeTestHello))
	require.False(t, tk.IsEndOfGeneration(-1))
	// As in llama.cpp, end-of-generation tokens become control tokens:
	// matched literally and hidden by Decode.
	require.Equal(t, int32(TokenTypeControl), tk.TokenType(s))
	require.Equal(t, []int32{s}, tk.Encode("</s>", false))
	require.Empty(t, tk.Decode([]int32{s, eom}))
	// The end-of-turn token is found by text when the file names none.
	require.Equal(t, int32(bpeTestEOT), tk.eot)
	require.Equal(t, eom, tk.eom)

	v = tokTestBPEVocab("qwen2")
	v.EOS, v.EOT, v.EOM = bpeTestHello, bpeTestWorld, 'x'
	tk = tokTestNew(t, v)
	require.Equal(t, []int32{'x', bpeTestHello, bpeTestWorld, bpeTestEOT}, tk.EndOfGeneration())
}

func TestTokenizerSpecialTokensLongestFirst(t *testing.T) {
	t.Parallel()
	v := tokTestBPEVocab("qwen2")
	v.Tokens = append(v.Tokens, "<|a|>", "<|a|><|b|>", "a|>xyz")
	v.Types = append(v.Types, TokenTypeControl, TokenTypeControl, TokenTypeUserDefined)
	tk := tokTestNew(t, v)
	a, ab, axyz := int32(269), int32(270), int32(271)
	tests := map[string]struct {
		text string
		want []int32
	}{
		"longer token wins":          {"<|a|><|b|>", []int32{ab}},
		"shorter token alone":        {"<|a|>hello<|a|>", []int32{a, bpeTestHello, a}},
		"longest cut first, overlap": {"<|a|>xyz", []int32{'<', '|', axyz}},
		"adjacent repeats":           {"<|a|><|a|>", []int32{a, a}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tk.Encode(tc.text, false))
		})
	}
}

func TestTokenizerVocabMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]Vocab{"spm": tokTestSPMVocab(), "bpe": tokTestBPEVocab("llama-bpe")} {
		t.Run(name, func(t *testing.T) {
			md := v.Metadata()
			for key := range md {
				require.True(t, strings.HasPrefix(key, "tokenizer.ggml."), key)
			}
			require.Equal(t, v.Model, md["tokenizer.ggml.model"])
			require.Equal(t, v.Tokens, md["tokenizer.ggml.tokens"])
			require.Equal(t, uint32(v.BOS), md["tokenizer.ggml.bos_token_id"])
			require.NotContains(t, md, "tokenizer.ggml.eot_token_id")

			direct := tokTestNew(t, v)
			viaMD, err := New(tokTestMetadata(md))
			require.NoError(t, err)
			for _, s := range []string{"hello world", "hi <think>é\n", "xyz</s><|eot_id|>", ""} {
				require.Equal(t, direct.Encode(s, true), viaMD.Encode(s, true), s)
			}
			require.Equal(t, direct.EndOfGeneration(), viaMD.EndOfGeneration())
			require.Equal(t, direct.AddBOS(), viaMD.AddBOS())
		})
	}
}

func TestNewTokenizerDefaults(t *testing.T) {
	t.Parallel()
	spm := tokTestSPMVocab()
	md := tokTestMetadata{
		"tokenizer.ggml.model":  "llama",
		"tokenizer.ggml.tokens": spm.Tokens,
		"tokenizer.ggml.scores": spm.Scores,
		// token_type as int64s would not be Int32s: keep int32.
		"tokenizer.ggml.token_type": spm.Types,
	}
	tk, err := New(md)
	require.NoError(t, err)
	bos, _ := tk.BOS()
	require.Equal(t, int32(1), bos, "llama default BOS")
	require.Equal(t, int32(2), tk.EOS(), "llama default EOS")
	require.True(t, tk.AddBOS())
	require.Equal(t, []int32{1, spmTestHello}, tk.Encode("hello", true), "add_space_prefix defaults to true")

	md["tokenizer.ggml.add_space_prefix"] = false
	md["tokenizer.ggml.add_bos_token"] = false
	md["tokenizer.ggml.add_eos_token"] = true
	tk, err = New(md)
	require.NoError(t, err)
	require.Equal(t, []int32{268, 270, 2}, tk.Encode("hello", true), "he+llo, no space prefix, EOS")

	bpe := tokTestBPEVocab("")
	for pre, addBOS := range map[string]bool{"llama-bpe": true, "llama3": true, "qwen2": false, "default": false, "gpt-2": false} {
		md := tokTestMetadata{
			"tokenizer.ggml.model":        "gpt2",
			"tokenizer.ggml.pre":          pre,
			"tokenizer.ggml.tokens":       bpe.Tokens,
			"tokenizer.ggml.token_type":   bpe.Types,
			"tokenizer.ggml.merges":       bpe.Merges,
			"tokenizer.ggml.bos_token_id": uint32(bpeTestBOS),
		}
		tk, err := New(md)
		require.NoError(t, err, pre)
		require.Equal(t, addBOS, tk.AddBOS(), pre)
		require.Equal(t, int32(-1), tk.EOS(), pre)
	}
}

func TestNewTokenizerErrors(t *testing.T) {
	t.Parallel()
	spm := tokTestSPMVocab()
	bpe := tokTestBPEVocab("qwen2")
	base := func(v Vocab) tokTestMetadata { return tokTestMetadata(v.Metadata()) }
	with := func(v Vocab, key string, val any) tokTestMetadata {
		md := base(v)
		if val == nil {
			delete(md, key)
		} else {
			md[key] = val
		}
		return md
	}
	dupTokens := append([]string{}, spm.Tokens...)
	dupTokens[5] = dupTokens[6]
	badTypes := append([]int32{}, spm.Types...)
	badTypes[3] = 9
	nanScores := append([]float32{}, spm.Scores...)
	nanScores[7] = float32(math.NaN())
	byteTypes := append([]int32{}, spm.Types...)
	byteTypes[spmTestH] = TokenTypeByte

	tests := map[string]struct {
		md          tokTestMetadata
		key         string // for a *VocabError
		unsupported bool
	}{
		"no model":               {md: with(spm, "tokenizer.ggml.model", nil), key: "tokenizer.ggml.model"},
		"model not a string":     {md: with(spm, "tokenizer.ggml.model", uint32(1)), key: "tokenizer.ggml.model"},
		"unknown model":          {md: with(spm, "tokenizer.ggml.model", "t5"), unsupported: true},
		"unknown pre":            {md: with(bpe, "tokenizer.ggml.pre", "deepseek-llm"), unsupported: true},
		"no tokens":              {md: with(spm, "tokenizer.ggml.tokens", nil), key: "tokenizer.ggml.tokens"},
		"empty tokens":           {md: with(spm, "tokenizer.ggml.tokens", []string{}), key: "tokenizer.ggml.tokens"},
		"tokens wrong type":      {md: with(spm, "tokenizer.ggml.tokens", []int32{1}), key: "tokenizer.ggml.tokens"},
		"duplicate token":        {md: with(spm, "tokenizer.ggml.tokens", dupTokens), key: "tokenizer.ggml.tokens"},
		"too many tokens":        {md: with(spm, "tokenizer.ggml.tokens", make([]string, tokMaxVocab+1)), key: "tokenizer.ggml.tokens"},
		"scores too short":       {md: with(spm, "tokenizer.ggml.scores", spm.Scores[:10]), key: "tokenizer.ggml.scores"},
		"scores wrong type":      {md: with(spm, "tokenizer.ggml.scores", []string{"x"}), key: "tokenizer.ggml.scores"},
		"NaN score":              {md: with(spm, "tokenizer.ggml.scores", nanScores), key: "tokenizer.ggml.scores"},
		"types too long":         {md: with(spm, "tokenizer.ggml.token_type", append(append([]int32{}, spm.Types...), 1)), key: "tokenizer.ggml.token_type"},
		"unknown token type":     {md: with(spm, "tokenizer.ggml.token_type", badTypes), key: "tokenizer.ggml.token_type"},
		"byte token not <0xNN>":  {md: with(spm, "tokenizer.ggml.token_type", byteTypes), key: "tokenizer.ggml.tokens"},
		"gpt2 without merges":    {md: with(bpe, "tokenizer.ggml.merges", nil), key: "tokenizer.ggml.merges"},
		"merge without space":    {md: with(bpe, "tokenizer.ggml.merges", []string{"ab"}), key: "tokenizer.ggml.merges"},
		"merge with two spaces":  {md: with(bpe, "tokenizer.ggml.merges", []string{"a b c"}), key: "tokenizer.ggml.merges"},
		"merge leading space":    {md: with(bpe, "tokenizer.ggml.merges", []string{" ab"}), key: "tokenizer.ggml.merges"},
		"merge trailing space":   {md: with(bpe, "tokenizer.ggml.merges", []string{"ab "}), key: "tokenizer.ggml.merges"},
		"bos out of range":       {md: with(spm, "tokenizer.ggml.bos_token_id", uint32(278)), key: "tokenizer.ggml.bos_token_id"},
		"eos negative":           {md: with(spm, "tokenizer.ggml.eos_token_id", int32(-3)), key: "tokenizer.ggml.eos_token_id"},
		"eot not an integer":     {md: with(spm, "tokenizer.ggml.eot_token_id", "x"), key: "tokenizer.ggml.eot_token_id"},
		"add_bos not a bool":     {md: with(spm, "tokenizer.ggml.add_bos_token", uint32(1)), key: "tokenizer.ggml.add_bos_token"},
		"eom far out of range":   {md: with(spm, "tokenizer.ggml.eom_token_id", uint64(math.MaxUint64)), key: "tokenizer.ggml.eom_token_id"},
		"types not integers":     {md: with(spm, "tokenizer.ggml.token_type", []string{"1"}), key: "tokenizer.ggml.token_type"},
		"merges not strings":     {md: with(bpe, "tokenizer.ggml.merges", []int32{1}), key: "tokenizer.ggml.merges"},
		"add_space_prefix wrong": {md: with(spm, "tokenizer.ggml.add_space_prefix", "yes"), key: "tokenizer.ggml.add_space_prefix"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tk, err := New(tc.md)
			require.Error(t, err)
			require.Nil(t, tk)
			require.True(t, strings.HasPrefix(err.Error(), "model: "), err.Error())
			if tc.unsupported {
				require.ErrorIs(t, err, ErrUnsupported)
				return
			}
			var ve *VocabError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.key, ve.Key, err.Error())
		})
	}
}

func TestNewTokenizerLenient(t *testing.T) {
	t.Parallel()
	spm := tokTestSPMVocab()
	md := tokTestMetadata(spm.Metadata())
	// llama.cpp keeps its default for a bad unknown or padding id.
	md["tokenizer.ggml.padding_token_id"] = uint32(99999)
	md["tokenizer.ggml.unknown_token_id"] = uint32(99999)
	tk, err := New(md)
	require.NoError(t, err)
	require.Equal(t, int32(0), tk.unk)
	require.Equal(t, int32(-1), tk.pad)

	// An empty token is renamed, not refused, and the input is not
	// modified.
	tokens := append([]string{}, spm.Tokens...)
	tokens[spmTestH] = ""
	md["tokenizer.ggml.tokens"] = tokens
	tk, err = New(md)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("[EMPTY_%d]", spmTestH), tk.Token(spmTestH))
	require.Empty(t, tokens[spmTestH])
}

func TestNewTokenizerFromVocabErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]func(v *Vocab){
		"bos below -1":      func(v *Vocab) { v.BOS = -2 },
		"pad out of range":  func(v *Vocab) { v.PAD = int32(len(v.Tokens)) },
		"unk out of range":  func(v *Vocab) { v.UNK = 1 << 30 },
		"types short":       func(v *Vocab) { v.Types = v.Types[:3] },
		"model empty":       func(v *Vocab) { v.Model = "" },
		"too many merges":   func(v *Vocab) { v.Merges = make([]string, tokMaxMerges+1) },
		"byte token is two": func(v *Vocab) { v.Types[bpeTestHello] = TokenTypeByte },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			v := tokTestBPEVocab("qwen2")
			mutate(&v)
			_, err := NewFromVocab(v)
			require.Error(t, err)
			var ve *VocabError
			if !errors.As(err, &ve) {
				require.ErrorIs(t, err, ErrUnsupported)
			}
		})
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	t.Parallel()
	bpe, spm := tokTestBuilt(t)
	texts := []string{
		"", " ", "  ", "\n", "Hello world", "  leading and trailing  ", "line\nbreaks\r\n\r\nand\ttabs",
		"Numbers 1234567 and 3.14159", "I'm sure they'll say we've DONE IT'S", "café naïve façade Øresund straße",
		"日本語のテキスト 中文 한국어", "Привет, мир!", "emoji 🤖🚀 family 👨‍👩‍👧", "\x00\x01 control \x7f",
		"invalid \xff\xfe utf8 \xc3", "    def f(x):\n        return x**2\n",
	}
	for _, s := range texts {
		require.Equal(t, s, bpe.Decode(bpe.Encode(s, true)), "bpe %q", s)
		require.Equal(t, s, spm.Decode(spm.Encode(s, true)), "spm %q", s)
	}
}
