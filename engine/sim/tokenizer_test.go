package sim

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	m, err := ModelByName("small")
	require.NoError(t, err)
	return NewTokenizer(m)
}

func TestTokenizerRoundTrip(t *testing.T) {
	t.Parallel()
	tok := testTokenizer(t)
	tests := map[string]struct {
		text   string
		tokens int
	}{
		"empty":             {text: "", tokens: 0},
		"one word":          {text: "river", tokens: 1},
		"spaced word":       {text: " river", tokens: 1},
		"capital":           {text: "The river", tokens: 2},
		"sentence":          {text: "The river is long, and the market is open.", tokens: 11},
		"paragraphs":        {text: "First light.\n\nThen the harbor.\nAgain.", tokens: 11},
		"many newlines":     {text: "end\n\n\n\nbegin\n\n\nend", tokens: 7},
		"spaces":            {text: "the  river   of    light     end", tokens: 9},
		"trailing space":    {text: "river ", tokens: 2},
		"leading spaces":    {text: "   the", tokens: 2},
		"tabs":              {text: "\tthe\tend\r\n", tokens: 6},
		"punctuation":       {text: "(the) [river]: \"light\"; so? all! a-the/an*or", tokens: 24},
		"symbols":           {text: "#$%&+=<>_`~|\\^@{}", tokens: 17},
		"space before mark": {text: "the , river .", tokens: 6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ids := tok.Encode(tc.text)
			require.Len(t, ids, tc.tokens, "%q -> %v", tc.text, ids)
			require.Equal(t, tc.text, tok.Decode(ids))
			require.Equal(t, ids, tok.Encode(tc.text), "deterministic")
			var b strings.Builder
			for _, id := range ids {
				require.True(t, id > tok.EOS() && int(id) < tok.VocabSize())
				b.WriteString(tok.DecodeToken(id))
			}
			require.Equal(t, tc.text, b.String(), "per-token decodes concatenate")
		})
	}
}

func TestTokenizerUnknown(t *testing.T) {
	t.Parallel()
	tok := testTokenizer(t)
	tests := map[string]struct {
		text   string
		tokens int
		spaced bool // the decoded text starts with a space
	}{
		"unknown word":     {text: "zebra", tokens: 2},
		"spaced unknown":   {text: " zebra", tokens: 2, spaced: true},
		"long word":        {text: " internationalization", tokens: 5, spaced: true},
		"upper case":       {text: "RIVER", tokens: 2},
		"mixed case":       {text: "rIver", tokens: 2},
		"number":           {text: " 1234567", tokens: 3, spaced: true},
		"short number":     {text: "42", tokens: 1},
		"accented":         {text: "naïve", tokens: 2},
		"cjk":              {text: "日本語", tokens: 3},
		"emoji":            {text: "🙂", tokens: 1},
		"invalid utf8":     {text: "\xff\xfe", tokens: 2},
		"unicode space":    {text: "a\u00a0b", tokens: 3},
		"word then number": {text: "river42", tokens: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ids := tok.Encode(tc.text)
			require.Len(t, ids, tc.tokens, "%q -> %v", tc.text, ids)
			require.Equal(t, ids, tok.Encode(tc.text))
			for _, id := range ids {
				require.True(t, id > tok.EOS() && int(id) < tok.VocabSize())
			}
			out := tok.Decode(ids)
			require.NotEmpty(t, out)
			require.Equal(t, tc.spaced, out[0] == ' ', "%q", out)
		})
	}
	require.NotEqual(t, tok.Encode(" zebra"), tok.Encode("zebra"))
	require.NotEqual(t, tok.Encode("zebra"), tok.Encode("zebras"))
}

func TestTokenizerSpecialIDs(t *testing.T) {
	t.Parallel()
	tok := testTokenizer(t)
	require.Equal(t, int32(0), tok.EOS())
	require.Empty(t, tok.DecodeToken(tok.EOS()))
	require.Empty(t, tok.DecodeToken(-1))
	require.Empty(t, tok.DecodeToken(int32(tok.VocabSize())))
	require.Equal(t, " river", tok.Decode([]int32{tok.EOS(), tok.Encode(" river")[0], -5}))
	require.Equal(t, 128256, tok.VocabSize())

	small := NewTokenizer(Model{VocabSize: 10})
	require.Equal(t, minVocabSize, small.VocabSize())
	for _, id := range small.Encode("some unknown words like xylophone and 98765") {
		require.Less(t, int(id), minVocabSize)
	}
}

func TestTokenizerPrefixStable(t *testing.T) {
	t.Parallel()
	tok := testTokenizer(t)
	// A longer text that extends a shorter one at a word boundary starts
	// with the shorter text's tokens (the prefix cache relies on it).
	base := "The harbor was quiet.\n\nThe river"
	ids := tok.Encode(base)
	for _, more := range []string{" carries light", ", and", ".\n\nNext"} {
		require.Equal(t, ids, tok.Encode(base + more)[:len(ids)], "%q", more)
	}
}

func TestTokenizerRandomWords(t *testing.T) {
	t.Parallel()
	tok := testTokenizer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	seps := []string{" ", " ", " ", ", ", ". ", "\n\n", "\n", "  ", "; ", " (", ") "}
	for range 300 {
		var b strings.Builder
		n := 1 + rng.IntN(60)
		for i := range n {
			w := word(rng.IntN(numWords))
			if rng.IntN(4) == 0 {
				w = capitalize(w)
			}
			b.WriteString(w)
			if i < n-1 {
				b.WriteString(seps[rng.IntN(len(seps))])
			}
		}
		text := b.String()
		ids := tok.Encode(text)
		require.Equal(t, text, tok.Decode(ids))
		require.Equal(t, n, countWordTokens(ids), "one token per listed word: %q", text)
	}
}

func countWordTokens(ids []int32) int {
	n := 0
	for _, id := range ids {
		if id >= wordBase && id < hashBase {
			n++
		}
	}
	return n
}

func FuzzTokenizer(f *testing.F) {
	for _, s := range []string{"", "The river.", "  \n\n\t", "naïve 日本語 🙂 12345", "\xff", "a\u00a0b", "x y  z"} {
		f.Add(s)
	}
	tok := testTokenizer(f)
	f.Fuzz(func(t *testing.T, text string) {
		ids := tok.Encode(text)
		require.Equal(t, ids, tok.Encode(text))
		for _, id := range ids {
			require.True(t, id > tok.EOS() && int(id) < tok.VocabSize(), "id %d", id)
		}
		// Never more tokens than bytes.
		require.LessOrEqual(t, len(ids), len(text))
		out := tok.Decode(ids)
		// Every token decodes to something but EOS, which Encode never
		// returns.
		if len(ids) > 0 {
			require.NotEmpty(t, out)
		}
	})
}
