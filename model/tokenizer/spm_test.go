package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// spmNaive is a direct reading of llama.cpp's SentencePiece merge:
// repeatedly merge the adjacent pair whose merged text is the token of
// highest score (leftmost on ties), then fall back to bytes.
func spmNaive(t *Tokenizer, text string) []int32 {
	text = strings.ReplaceAll(" "+text, " ", spmSpace)
	var syms []string
	for i := 0; i < len(text); {
		_, w := utf8.DecodeRuneInString(text[i:])
		syms = append(syms, text[i:i+w])
		i += w
	}
	for {
		best := -1
		var bestScore float32
		for i := 0; i+1 < len(syms); i++ {
			id, ok := t.ids[syms[i]+syms[i+1]]
			if !ok {
				continue
			}
			if s := t.scores[id]; best < 0 || s > bestScore {
				best, bestScore = i, s
			}
		}
		if best < 0 {
			break
		}
		syms = slices.Replace(syms, best, best+2, syms[best]+syms[best+1])
	}
	var out []int32
	for _, s := range syms {
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		for i := 0; i < len(s); i++ {
			out = append(out, t.byteTok[s[i]])
		}
	}
	return out
}

func TestSPMMatchesNaive(t *testing.T) {
	t.Parallel()
	_, built := tokTestBuilt(t)
	tiny := tokTestNew(t, tokTestSPMVocab())
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		s := tokRandomText(rng, 1+rng.IntN(40))
		if strings.Contains(s, "<") {
			continue // special tokens are cut out before the merge
		}
		for _, tk := range []*Tokenizer{built, tiny} {
			require.Equal(t, spmNaive(tk, s), tk.Encode(s, false), "%q", s)
		}
	}
}

func TestSPMByteFallbackWithoutByteTokens(t *testing.T) {
	t.Parallel()
	// Without <0xNN> tokens a character with no token becomes the
	// unknown token, or is dropped when there is none.
	v := Vocab{Model: "llama", Tokens: []string{"<unk>", "▁", "a"}, Scores: []float32{0, -1, -2},
		Types: []int32{TokenTypeUnknown, TokenTypeNormal, TokenTypeNormal}, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: 0, PAD: -1, AddSpacePrefix: true}
	tk := tokTestNew(t, v)
	require.Equal(t, []int32{1, 2, 0, 0}, tk.Encode("aé", true))
	v.UNK, v.Types[0] = -1, TokenTypeNormal
	tk = tokTestNew(t, v)
	require.Equal(t, []int32{1, 2}, tk.Encode("aé", true))
}

func TestSPMByteTokensFoundByText(t *testing.T) {
	t.Parallel()
	// Without token types, <0xNN> tokens are still the byte fallback.
	v := tokTestSPMVocab()
	v.Types = nil
	tk := tokTestNew(t, v)
	require.Equal(t, []int32{spmTestSpace, spmTestH, spmTestByte00 + 'i'}, tk.Encode("hi", false))
}
