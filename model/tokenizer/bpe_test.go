package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestBPEByteMap(t *testing.T) {
	t.Parallel()
	seen := map[rune]bool{}
	for b := range 256 {
		r := bpeByteRune[b]
		require.False(t, seen[r], "rune %U twice", r)
		seen[r] = true
	}
	require.Equal(t, 'Ġ', bpeByteRune[' '])
	require.Equal(t, 'Ċ', bpeByteRune['\n'])
	require.Equal(t, 'ĉ', bpeByteRune['\t'])
	require.Equal(t, 'A', bpeByteRune['A'])
	require.Equal(t, 'Ā', bpeByteRune[0])
	require.Equal(t, 'ÿ', bpeByteRune[0xff])
	require.Equal(t, 'Ń', bpeByteRune[0xad])

	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	mapped := bpeMapString(string(all))
	require.True(t, utf8.ValidString(mapped))
	require.Equal(t, string(all), bpeUnmap(mapped))
	require.Equal(t, "hello world\n", bpeUnmap("helloĠworldĊ"))
	require.Equal(t, "plain", bpeUnmap("plain"))
	require.Equal(t, "中", bpeUnmap("中"), "a rune outside the map is kept")
}

// bpeNaive is a direct reading of byte-level BPE: map the piece, then
// repeatedly merge the adjacent pair of lowest rank (leftmost on ties).
func bpeNaive(t *Tokenizer, text string) []int32 {
	var p pretokText
	var out []int32
	for _, piece := range pretokSplit(t.pre, text, &p, nil) {
		word := bpeMapString(piece)
		if id, ok := t.ids[word]; ok && t.ignoreMerges {
			out = append(out, id)
			continue
		}
		var syms []string
		for _, r := range word {
			syms = append(syms, string(r))
		}
		for {
			best, bestRank := -1, int32(0)
			for i := 0; i+1 < len(syms); i++ {
				if rank, ok := t.merges[syms[i]+" "+syms[i+1]]; ok && (best < 0 || rank < bestRank) {
					best, bestRank = i, rank
				}
			}
			if best < 0 {
				break
			}
			syms = slices.Replace(syms, best, best+2, syms[best]+syms[best+1])
		}
		for _, s := range syms {
			if id, ok := t.ids[s]; ok {
				out = append(out, id)
				continue
			}
			for _, r := range s {
				if id, ok := t.ids[string(r)]; ok {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// tokRandomText makes text from pieces that exercise merges, the
// pre-tokenizers and byte fallback.
func tokRandomText(rng *rand.Rand, words int) string {
	atoms := []string{
		"the", " the", " server", " token", "s", " and", "ing", " cache", " request", "Hello", " world",
		" ", "  ", "\n", "\n\n", "\t", ",", ".", "!", "'s", "'ll", "n't", "42", "1024", "3.14159",
		"é", "ï", "ß", "中文", "Привет", "🤖", "\u00a0", "    ", "x", "qz", "café", "\xff",
	}
	var b strings.Builder
	for range words {
		b.WriteString(atoms[rng.IntN(len(atoms))])
	}
	return b.String()
}

func TestBPEMatchesNaive(t *testing.T) {
	t.Parallel()
	built, _ := tokTestBuilt(t)
	qwenV, err := BuildVocab("bpe", 1000)
	require.NoError(t, err)
	qwenV.Pre = "qwen2"
	qwen := tokTestNew(t, qwenV)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		s := tokRandomText(rng, rng.IntN(40))
		for _, tk := range []*Tokenizer{built, qwen} {
			want := bpeNaive(tk, s)
			if want == nil {
				want = []int32{}
			}
			require.Equal(t, want, tk.Encode(s, false), "%q", s)
		}
	}
}
