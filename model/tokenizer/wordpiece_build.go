package tokenizer

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// wpmSpecials are a built WordPiece vocabulary's control tokens, first, in
// the order of BERT's: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4.
var wpmSpecials = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}

// vocabBuildWordPiece builds a BERT-style WordPiece vocabulary of size
// tokens in the GGUF form llama.cpp's converter writes (a word-initial
// piece carries ▁, a continuation none): the control tokens of
// wpmSpecials, every character of the built-in text both as a word start
// and as a continuation, then the pieces that byte-pair merges learn from
// the text's lowercased words, and, when the text runs out, [unusedN]
// tokens. Words are split as the tokenizer splits them, so every word of
// the text is covered.
func vocabBuildWordPiece(size int) (Vocab, error) {
	words := wpmWords(vocabCorpus, true, true, nil)
	vw := vocabWords(words, func(w string) []string {
		var syms []string
		for i, r := range []rune(w) {
			if i == 0 {
				syms = append(syms, spmSpace+string(r))
				continue
			}
			syms = append(syms, string(r))
		}
		return syms
	})
	charCount := map[string]int{}
	for _, w := range vw {
		for _, r := range strings.TrimPrefix(strings.Join(w.syms, ""), spmSpace) {
			charCount[string(r)] += w.count
		}
	}
	chars := make([]string, 0, len(charCount))
	for c := range charCount {
		chars = append(chars, c)
	}
	slices.SortFunc(chars, func(a, b string) int {
		if c := cmp.Compare(charCount[b], charCount[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	minSize := len(wpmSpecials) + 2*len(chars)
	if size < minSize {
		return Vocab{}, fmt.Errorf("model: wordpiece vocabulary size %d below the minimum of %d", size, minSize)
	}
	v := Vocab{Model: "bert", Pre: "default", BOS: 2, EOS: -1, EOT: -1, EOM: -1, UNK: 1, PAD: 0, AddBOS: true,
		WordPiece: &WordPiece{SEP: 3, AddSEP: true, Lowercase: true, StripAccents: true}}
	seen := map[string]bool{}
	add := func(s string, ty int32) {
		if seen[s] {
			return
		}
		seen[s] = true
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, ty)
	}
	for _, s := range wpmSpecials {
		add(s, TokenTypeControl)
	}
	for _, c := range chars {
		add(spmSpace+c, TokenTypeNormal)
		add(c, TokenTypeNormal)
	}
	for _, m := range vocabLearn(vw, size-len(v.Tokens)) {
		add(m[0]+m[1], TokenTypeNormal)
		if len(v.Tokens) == size {
			break
		}
	}
	for i := 0; len(v.Tokens) < size; i++ {
		add(fmt.Sprintf("[unused%d]", i), TokenTypeNormal)
	}
	return v, nil
}
