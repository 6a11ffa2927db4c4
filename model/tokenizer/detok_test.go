package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestDetokenizerHoldsIncompleteUTF8(t *testing.T) {
	t.Parallel()
	spm := tokTestNew(t, tokTestSPMVocab())
	bpe := tokTestNew(t, tokTestBPEVocab("qwen2"))
	sb := func(c byte) int32 { return spmTestByte00 + int32(c) }
	type step struct {
		id   int32
		want string
	}
	tests := map[string]struct {
		tk    *Tokenizer
		steps []step
		flush string
	}{
		"spm two-byte character": {spm, []step{{sb(0xC3), ""}, {sb(0xA9), "é"}}, ""},
		"spm four-byte character": {spm, []step{
			{spmTestHello, " hello"}, {sb(0xF0), ""}, {sb(0x9F), ""}, {sb(0xA4), ""}, {sb(0x96), "🤖"}, {spmTestWorld, " world"},
		}, ""},
		"spm prefix space dropped after bos": {spm, []step{{1, ""}, {spmTestHello, "hello"}, {spmTestWorld, " world"}}, ""},
		"spm generated text keeps space":     {spm, []step{{spmTestHello, " hello"}}, ""},
		"spm bos then byte then text":        {spm, []step{{1, ""}, {sb('x'), "x"}, {spmTestWorld, " world"}}, ""},
		"bpe split character":                {bpe, []step{{0xe4, ""}, {0xb8, ""}, {0xad, "中"}}, ""},
		"bpe text then partial":              {bpe, []step{{bpeTestHello, "hello"}, {0xe4, ""}, {bpeTestWorld, "\xe4 world"}}, ""},
		"bpe invalid byte passes":            {bpe, []step{{0xff, "\xff"}, {0x80, "\x80"}}, ""},
		"bpe incomplete at the end":          {bpe, []step{{'a', "a"}, {0xf0, ""}, {0x9f, ""}}, "\xf0\x9f"},
		"bpe overlong start passes":          {bpe, []step{{0xe0, ""}, {0x80, "\xe0\x80"}}, ""},
		"bpe control hidden":                 {bpe, []step{{bpeTestBOS, ""}, {bpeTestHello, "hello"}, {bpeTestEOT, ""}}, ""},
		"bpe out of range":                   {bpe, []step{{-1, ""}, {1 << 30, ""}, {'a', "a"}}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := NewDetokenizer(tc.tk)
			for i, s := range tc.steps {
				require.Equal(t, s.want, d.Add(s.id), "step %d", i)
			}
			require.Equal(t, tc.flush, d.Flush())
			require.Empty(t, d.Flush())
		})
	}
}

// TestDetokenizerEqualsDecode feeds encoded random text token by token:
// every Add returns text that does not end inside a character, and all of
// it together is Decode of the same ids and the original text.
func TestDetokenizerEqualsDecode(t *testing.T) {
	t.Parallel()
	bpe, spm := tokTestBuilt(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		s := strings.ToValidUTF8(tokRandomText(rng, rng.IntN(30)), "?")
		for _, tk := range []*Tokenizer{bpe, spm} {
			ids := tk.Encode(s, true)
			d := NewDetokenizer(tk)
			var b strings.Builder
			for _, id := range ids {
				out := d.Add(id)
				require.True(t, utf8.ValidString(out), "%q", out)
				b.WriteString(out)
			}
			require.Empty(t, d.Flush())
			require.Equal(t, tk.Decode(ids), b.String())
			require.Equal(t, s, b.String())
		}
	}
}

func TestDetokCompleteLen(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{
		"": 0, "abc": 3, "é": 2, "a\xc3": 1, "a\xe4\xb8": 1, "a\xf0\x9f\xa4": 1, "🤖": 4,
		"\x80\x80\x80\x80": 4, "a\xff": 2, "a\xe0\x80": 3, "\xf4\x90": 2,
	} {
		require.Equal(t, want, detokCompleteLen(s), "%q", s)
	}
}
