package tokenizer

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/llmd/llmd/model/gguf"
)

// tokModelWPM is a WordPiece vocabulary (tokenizer.ggml.model "bert").
const tokModelWPM = tokModelBPE + 1

// WordPiece keys beyond the common ones.
const (
	tokKeyCLS          = "tokenizer.ggml.cls_token_id"
	tokKeyAddSEP       = "tokenizer.ggml.add_sep_token"
	tokKeyLowercase    = "tokenizer.ggml.normalizer.lowercase"
	tokKeyStripAccents = "tokenizer.ggml.normalizer.strip_accents"
)

// WordPiece holds the settings of a WordPiece vocabulary (BERT's) beyond
// Vocab's common fields. In the GGUF form of such a vocabulary, as
// llama.cpp's converter writes it, a token that may start a word carries
// a ▁ prefix and a continuation piece (Hugging Face's "##ing") has none.
type WordPiece struct {
	// SEP is the separator token Encode with addSpecial puts last when
	// AddSEP is set ([SEP]); -1 for none.
	SEP    int32
	AddSEP bool
	// Lowercase lowercases the text before it is split; StripAccents
	// drops accents (each character is replaced by the first character
	// of its canonical decomposition and combining marks are removed).
	Lowercase, StripAccents bool
}

// wpmState is a WordPiece tokenizer's settings.
type wpmState struct {
	sep                     int32
	addSep                  bool
	lowercase, stripAccents bool
	// maxLen is the longest token text in bytes: no match is longer.
	maxLen int
}

// wpmDefaults sets llama.cpp's defaults of a "bert" vocabulary of n
// tokens: [CLS] 101 first, [SEP] 102 last, [UNK] 100, [PAD] 0, the text
// lowercased and stripped of accents. Defaults beyond the vocabulary are
// dropped.
func wpmDefaults(v *Vocab, n int) {
	v.BOS, v.UNK, v.PAD = 101, 100, 0
	v.AddBOS = true
	v.WordPiece = &WordPiece{SEP: 102, AddSEP: true, Lowercase: true, StripAccents: true}
	if n <= 102 {
		v.WordPiece.SEP = -1
	}
}

// wpmReadKeys reads the WordPiece keys of md into v (after the common
// ones): the separator id, the CLS id when no BOS id is given,
// add_sep_token and the normalizer flags (strip_accents defaults to
// lowercase, as in llama.cpp).
func wpmReadKeys(md gguf.Metadata, v *Vocab, n int) error {
	wp := v.WordPiece
	if id, present, err := tokReadID(md, tokKeySEP, n); err != nil {
		return err
	} else if present {
		wp.SEP = id
	}
	if _, present, _ := tokReadID(md, tokKeyBOS, n); !present {
		// llama.cpp's BERT converter writes the CLS id, not a BOS id.
		if id, present, err := tokReadID(md, tokKeyCLS, n); err == nil && present {
			v.BOS = id
		}
	}
	for _, b := range []struct {
		key string
		val *bool
	}{{tokKeyAddSEP, &wp.AddSEP}, {tokKeyLowercase, &wp.Lowercase}} {
		if x, ok := md.Bool(b.key); ok {
			*b.val = x
		} else if tokHasKey(md, b.key) {
			return tokVocabErr(b.key, -1, "not a bool")
		}
	}
	wp.StripAccents = wp.Lowercase
	if x, ok := md.Bool(tokKeyStripAccents); ok {
		wp.StripAccents = x
	} else if tokHasKey(md, tokKeyStripAccents) {
		return tokVocabErr(tokKeyStripAccents, -1, "not a bool")
	}
	return nil
}

// wpmInit checks v's WordPiece settings and sets t's.
func (t *Tokenizer) wpmInit(v Vocab) error {
	wp := v.WordPiece
	if wp == nil {
		return tokVocabErr(tokKeyModel, -1, "a bert vocabulary needs its WordPiece settings")
	}
	if wp.SEP < -1 || wp.SEP >= int32(len(t.tokens)) {
		return tokVocabErr(tokKeySEP, -1, "token id %d out of range for %d tokens", wp.SEP, len(t.tokens))
	}
	st := &wpmState{sep: wp.SEP, addSep: wp.AddSEP && wp.SEP >= 0, lowercase: wp.Lowercase, stripAccents: wp.StripAccents}
	for _, s := range t.tokens {
		st.maxLen = max(st.maxLen, len(s))
	}
	t.wpm = st
	// llama.cpp adds no EOS to a WordPiece encoding, only the separator.
	t.addEOS = false
	return nil
}

// SEP returns the separator id of a WordPiece vocabulary ([SEP]), if it
// has one.
func (t *Tokenizer) SEP() (int32, bool) {
	if t.wpm == nil || t.wpm.sep < 0 {
		return -1, false
	}
	return t.wpm.sep, true
}

// metadata adds the WordPiece keys to m.
func (wp *WordPiece) metadata(m map[string]any) {
	if wp.SEP >= 0 {
		m[tokKeySEP] = uint32(wp.SEP)
	}
	m[tokKeyAddSEP] = wp.AddSEP
	m[tokKeyLowercase] = wp.Lowercase
	m[tokKeyStripAccents] = wp.StripAccents
}

// wpmEncode appends the WordPiece encoding of text's fragments (special
// tokens matched literally are kept as they are), then the separator when
// addSpecial asks for it.
func (t *Tokenizer) wpmEncode(text string, frags []tokFragment, addSpecial bool, out []int32) []int32 {
	var words []string
	for _, f := range frags {
		if f.id >= 0 {
			out = append(out, f.id)
			continue
		}
		words = wpmWords(text[f.start:f.end], t.wpm.lowercase, t.wpm.stripAccents, words[:0])
		for _, w := range words {
			out = t.wpmWord(w, out)
		}
	}
	if addSpecial && t.wpm.addSep {
		out = append(out, t.wpm.sep)
	}
	return out
}

// wpmWord appends the tokens of one word: from each position the longest
// vocabulary text that matches, the first one with the ▁ a word starts
// with. A word that cannot be covered whole becomes the unknown token.
func (t *Tokenizer) wpmWord(word string, out []int32) []int32 {
	w := spmSpace + word
	start := len(out)
	for i := 0; i < len(w); {
		matched := false
		for j := min(len(w), i+t.wpm.maxLen); j > i; j-- {
			if id, ok := t.ids[w[i:j]]; ok {
				out = append(out, id)
				i, matched = j, true
				break
			}
		}
		if !matched {
			out = out[:start]
			break
		}
	}
	if len(out) == start && t.unk >= 0 {
		out = append(out, t.unk)
	}
	return out
}

// wpmWords splits text into words the way BERT's pre-tokenizer does (as
// llama.cpp implements it): whitespace separates words; NUL, U+FFFD and
// control characters are dropped, and so are combining marks when
// stripping accents; each punctuation character, ASCII symbol and CJK
// ideograph is a word of its own. Words are appended to words.
func wpmWords(text string, lower, strip bool, words []string) []string {
	var cur []byte
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = cur[:0]
		}
	}
	for _, r := range text {
		if strip {
			r = wpmFirstDecomposed(r)
		}
		if wpmSpace(r) {
			flush()
			continue
		}
		if r == 0 || r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
			continue
		}
		if strip && unicode.IsMark(r) {
			continue
		}
		single := unicode.IsPunct(r) || (r < 0x7F && unicode.IsSymbol(r)) || wpmCJK(r)
		if lower {
			r = unicode.ToLower(r)
		}
		if single {
			flush()
			words = append(words, string(r))
			continue
		}
		cur = utf8.AppendRune(cur, r)
	}
	flush()
	return words
}

// wpmFirstDecomposed is the first character of r's canonical
// decomposition (r itself when it has none): llama.cpp's NFD table keeps
// only that character, which drops the accents of precomposed letters.
func wpmFirstDecomposed(r rune) rune {
	switch {
	case r < 0xC0:
		return r // nothing below À decomposes
	case r >= 0xAC00 && r <= 0xD7A3:
		// A Hangul syllable decomposes algorithmically: its leading jamo.
		return 0x1100 + (r-0xAC00)/588
	}
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	if d := norm.NFD.Properties(buf[:n]).Decomposition(); len(d) > 0 {
		first, _ := utf8.DecodeRune(d)
		return first
	}
	return r
}

// wpmSpace reports Unicode's White_Space characters, as llama.cpp's table.
func wpmSpace(r rune) bool {
	switch {
	case r >= 0x09 && r <= 0x0D, r >= 0x2000 && r <= 0x200A:
		return true
	}
	switch r {
	case 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return false
}

// wpmCJK reports the CJK ideograph blocks BERT splits into single
// characters (the ranges of Hugging Face's _is_chinese_char, with
// llama.cpp's 0x2B920 start of Extension E).
func wpmCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) || (r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}
