package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

// wpmTestVocab is a hand-made BERT vocabulary in llama.cpp's GGUF form.
func wpmTestVocab() tokTestMetadata {
	toks := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
		"▁hello", "▁world", "▁un", "aff", "able", "▁!", "▁,", "▁a", "▁cafe", "▁.", "▁中", "▁文",
		"▁hell", "o", "▁x", "▁über", "▁u", "ber", "▁$", "▁Hello"}
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = TokenTypeNormal
		if i < 5 {
			types[i] = TokenTypeControl
		}
	}
	return tokTestMetadata{
		"tokenizer.ggml.model":              "bert",
		"tokenizer.ggml.tokens":             toks,
		"tokenizer.ggml.token_type":         types,
		"tokenizer.ggml.cls_token_id":       uint32(2),
		"tokenizer.ggml.seperator_token_id": uint32(3),
		"tokenizer.ggml.unknown_token_id":   uint32(1),
		"tokenizer.ggml.padding_token_id":   uint32(0),
	}
}

func TestWordPieceEncode(t *testing.T) {
	tk, err := New(wpmTestVocab())
	require.NoError(t, err)
	id := func(s string) int32 {
		i, ok := tk.TokenID(s)
		require.True(t, ok, s)
		return i
	}
	cases := []struct {
		name, text string
		want       []string
	}{
		{"words", "hello world", []string{"▁hello", "▁world"}},
		{"lowercased", "HeLLo   World", []string{"▁hello", "▁world"}},
		{"punctuation splits", "hello, world!", []string{"▁hello", "▁,", "▁world", "▁!"}},
		{"continuations", "unaffable", []string{"▁un", "aff", "able"}},
		{"longest match first", "hello hellooo", []string{"▁hello", "▁hello", "o", "o"}},
		{"unknown word", "hello xyz", []string{"▁hello", "[UNK]"}},
		{"accents stripped", "Café", []string{"▁cafe"}},
		{"decomposed accents dropped", "Cafe\u0301", []string{"▁cafe"}},
		{"umlaut stripped", "Über", []string{"▁u", "ber"}},
		{"ideographs split", "中文", []string{"▁中", "▁文"}},
		{"ascii symbol split", "a$a", []string{"▁a", "▁$", "▁a"}},
		{"controls dropped", "hel\x00lo\u200b world", []string{"▁hello", "▁world"}},
		{"whitespace kinds", "hello\u3000\tworld\u00a0!", []string{"▁hello", "▁world", "▁!"}},
		{"empty", "", nil},
		{"only spaces", " \n ", nil},
		{"special literal", "hello [MASK] world", []string{"▁hello", "[MASK]", "▁world"}},
		{"invalid utf-8 dropped", "hel\xfflo", []string{"▁hello"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want []int32
			for _, s := range c.want {
				want = append(want, id(s))
			}
			got := tk.Encode(c.text, false)
			require.Equal(t, want, nilIfEmpty(got))
			withSpecial := tk.Encode(c.text, true)
			require.Equal(t, append(append([]int32{2}, want...), 3), withSpecial)
		})
	}
}

func nilIfEmpty(s []int32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestWordPieceOptions(t *testing.T) {
	md := wpmTestVocab()
	md["tokenizer.ggml.normalizer.lowercase"] = false
	md["tokenizer.ggml.add_sep_token"] = false
	tk, err := New(md)
	require.NoError(t, err)
	hello, _ := tk.TokenID("▁Hello")
	unk, _ := tk.TokenID("[UNK]")
	// Case kept; strip_accents follows lowercase (off): "Café" is unknown.
	require.Equal(t, []int32{2, hello, unk}, tk.Encode("Hello Café", true))
	sep, ok := tk.SEP()
	require.True(t, ok)
	require.Equal(t, int32(3), sep)

	md = wpmTestVocab()
	md["tokenizer.ggml.seperator_token_id"] = uint32(1000)
	_, err = New(md)
	var ve *VocabError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, tokKeySEP, ve.Key)

	md = wpmTestVocab()
	md["tokenizer.ggml.normalizer.lowercase"] = "yes"
	_, err = New(md)
	require.ErrorAs(t, err, &ve)

	_, err = NewFromVocab(Vocab{Model: "bert", Tokens: []string{"a"}, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1})
	require.ErrorAs(t, err, &ve)
}

func TestWordPieceDefaults(t *testing.T) {
	// No special ids in the file: llama.cpp's BERT defaults, [CLS] 101 and
	// [SEP] 102, [UNK] 100.
	toks := make([]string, 110)
	for i := range toks {
		toks[i] = "[unused" + strconv.Itoa(i) + "]"
	}
	toks[100], toks[101], toks[102], toks[105] = "[UNK]", "[CLS]", "[SEP]", "▁hi"
	tk, err := New(tokTestMetadata{"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": toks})
	require.NoError(t, err)
	require.Equal(t, []int32{101, 105, 100, 102}, tk.Encode("hi there", true))
}

func TestWordPieceBuiltVocab(t *testing.T) {
	v, err := BuildVocab("wordpiece", 900)
	require.NoError(t, err)
	require.Len(t, v.Tokens, 900)
	tk, err := New(tokTestMetadata(v.Metadata()))
	require.NoError(t, err)
	unk, _ := tk.TokenID("[UNK]")
	toks := tk.Encode(vocabCorpus, true)
	require.NotContains(t, toks, unk, "every word of the built-in text is covered")
	require.Less(t, len(toks), len(strings.Fields(vocabCorpus))*3)
	require.Equal(t, "[CLS]", tk.Token(toks[0]))
	require.Equal(t, "[SEP]", tk.Token(toks[len(toks)-1]))
	require.Equal(t, " the small server", tk.Decode(tk.Encode("The small server", false)))

	_, err = BuildVocab("wordpiece", 10)
	require.Error(t, err)
}

// TestWordPieceLlamaCpp checks the encoder against llama.cpp's own test
// of the BGE vocabulary (models/ggml-vocab-bert-bge.gguf with its .inp and
// .out files, read from the llama.cpp repository, not copied here):
// LLMD_WPM_VOCAB names the .gguf, the other two lie beside it. Extract
// them with
//
//	git -C /work/.mirror/ngxson+llama.cpp/repo show HEAD:models/ggml-vocab-bert-bge.gguf > /tmp/bge.gguf
//
// (and likewise .inp and .out to /tmp/bge.gguf.inp and .out).
func TestWordPieceLlamaCpp(t *testing.T) {
	path := os.Getenv("LLMD_WPM_VOCAB")
	if path == "" {
		t.Skip("LLMD_WPM_VOCAB is not set: it names llama.cpp's models/ggml-vocab-bert-bge.gguf, with .inp and .out beside it")
	}
	f, err := gguf.Open(path)
	require.NoError(t, err)
	tk, err := New(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	inp, err := os.ReadFile(path + ".inp")
	require.NoError(t, err)
	out, err := os.ReadFile(path + ".out")
	require.NoError(t, err)
	// As llama.cpp's test-tokenizer-0 splits them: a separator at the very
	// end starts no further text.
	const sep = "\n__ggml_vocab_test__\n"
	texts := strings.Split(strings.TrimSuffix(string(inp), sep), sep)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, lines, len(texts))
	for i, text := range texts {
		var want []int32
		for _, f := range strings.Fields(lines[i]) {
			n, err := strconv.Atoi(f)
			require.NoError(t, err)
			want = append(want, int32(n))
		}
		require.Equal(t, want, nilIfEmpty(tk.Encode(text, false)), "text %d %q", i, text)
	}
	require.Equal(t, []int32{101, 7592, 2088, 102}, tk.Encode("Hello world", true))
}
