package sim

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The vocabulary of every simulated model, by id:
//
//	0                     EOS (decodes to "")
//	[1, byteBase)         punctuation, whitespace and digit pieces (symbolPieces)
//	[byteBase, wordBase)  one-byte pieces for every other byte (bytePieces)
//	[wordBase, hashBase)  the word list four times: " word", " Word",
//	                      "word", "Word"
//	[hashBase, hashMid)   hashed pieces that start with a space
//	[hashMid, VocabSize)  hashed pieces without a leading space
//
// Word and hashed tokens carry their leading space, as in real BPE
// vocabularies, so concatenating per-token decodes gives readable text.
const (
	eosID = 0

	// minVocabSize leaves room for the fixed ids and a hashed range.
	minVocabSize = 4096

	// maxChunkBytes is the longest hashed piece: unknown words are split
	// into chunks of up to 4 bytes (at rune boundaries), about what a real
	// BPE vocabulary does with rare words.
	maxChunkBytes = 4
	// maxDigits is the longest run of digits in one token.
	maxDigits = 3
)

// symbolPieces are the fixed non-word tokens, ids 1 and up. Runs of spaces
// and newlines longer than a piece are split into several tokens.
var symbolPieces = [...]string{
	".", ",", "\n\n", "\n", " ", "  ", "   ", "    ", "\t", "\r",
	"!", "?", ":", ";", "'", "\"", "(", ")", "[", "]",
	"{", "}", "-", "/", "*", "&", "%", "$", "#", "@",
	"+", "=", "<", ">", "_", "`", "~", "|", "\\", "^",
}

// Word-list token variants, in vocabulary order.
const (
	variantSpaced = iota
	variantSpacedCap
	variantBare
	variantBareCap
	numVariants
)

var (
	numWords = len(functionWords) + len(contentWords)
	// bytePieces give every byte a token, so that a grammar can spell any
	// text (a JSON key, a non-ASCII enum value); only generation under a
	// grammar uses them.
	bytePieces = buildBytePieces()
	byteBase   = int32(1 + len(symbolPieces))
	wordBase   = byteBase + int32(len(bytePieces))
	hashBase   = wordBase + int32(numVariants*numWords)

	// pieces holds the text of every fixed id below hashBase.
	pieces = buildPieces()
	// bareIDs maps "word" and "Word" to their id without a leading space;
	// the spaced id is 2*numWords lower.
	bareIDs = buildBareIDs()
	// symbolIDs maps a one-byte symbol to its id (0: none).
	symbolIDs = buildSymbolIDs()
	// spaceIDs and newlineIDs are the ids of runs of k spaces or newlines,
	// by k.
	spaceIDs   = [...]int32{0, symbolID(" "), symbolID("  "), symbolID("   "), symbolID("    ")}
	newlineIDs = [...]int32{0, symbolID("\n"), symbolID("\n\n")}
)

// symbolID returns the id of a piece of symbolPieces, 0 if it is not one.
func symbolID(piece string) int32 {
	for i, s := range symbolPieces {
		if s == piece {
			return int32(1 + i)
		}
	}
	return 0
}

// word returns the i-th word of the list: function words, then content
// words.
func word(i int) string {
	if i < len(functionWords) {
		return functionWords[i]
	}
	return contentWords[i-len(functionWords)]
}

// wordID returns the id of word w (an index into the list) in variant v.
func wordID(w, v int) int32 {
	return wordBase + int32(v*numWords+w)
}

func capitalize(s string) string {
	return strings.ToUpper(s[:1]) + s[1:]
}

func buildPieces() []string {
	p := make([]string, hashBase)
	for i, s := range symbolPieces {
		p[1+i] = s
	}
	for i, s := range bytePieces {
		p[byteBase+int32(i)] = s
	}
	for w := range numWords {
		s := word(w)
		c := capitalize(s)
		p[wordID(w, variantSpaced)] = " " + s
		p[wordID(w, variantSpacedCap)] = " " + c
		p[wordID(w, variantBare)] = s
		p[wordID(w, variantBareCap)] = c
	}
	return p
}

// buildBytePieces returns a one-byte piece for every byte value 1 to 255
// that is not a symbol piece.
func buildBytePieces() []string {
	var out []string
	for c := 1; c < 256; c++ {
		if slices.Contains(symbolPieces[:], string(rune(c))) && c < utf8.RuneSelf {
			continue
		}
		out = append(out, string([]byte{byte(c)}))
	}
	return out
}

func buildBareIDs() map[string]int32 {
	m := make(map[string]int32, 2*numWords)
	for w := range numWords {
		s := word(w)
		m[s] = wordID(w, variantBare)
		m[capitalize(s)] = wordID(w, variantBareCap)
	}
	return m
}

func buildSymbolIDs() [utf8.RuneSelf]int32 {
	var t [utf8.RuneSelf]int32
	for i, s := range symbolPieces {
		if len(s) == 1 {
			t[s[0]] = int32(1 + i)
		}
	}
	return t
}

// Tokenizer turns text into the token ids of a simulated model and back.
// Encoding is deterministic: the same text always gives the same ids (the
// prefix cache relies on it). Words of the built-in list, punctuation and
// whitespace round-trip exactly; any other piece is hashed into the upper
// part of the vocabulary and decodes to a placeholder syllable string of
// the same spacing.
//
// Locking: a Tokenizer is immutable and safe for concurrent use.
type Tokenizer struct {
	vocab   int32
	hashMid int32
}

// NewTokenizer returns the tokenizer of m. A vocabulary smaller than the
// minimum Model.Validate accepts is treated as that minimum.
func NewTokenizer(m Model) *Tokenizer {
	v := int32(max(m.VocabSize, minVocabSize))
	return &Tokenizer{vocab: v, hashMid: hashBase + (v-hashBase)/2}
}

// EOS returns the end-of-sequence token id.
func (t *Tokenizer) EOS() int32 { return eosID }

// VocabSize returns the number of token ids; every id Encode returns is
// below it.
func (t *Tokenizer) VocabSize() int { return int(t.vocab) }

// Encode tokenizes text: about one token per word, one per punctuation
// mark, whitespace runs in pieces, a single space attached to the word or
// number after it, unknown words in chunks of up to 4 bytes and numbers in
// groups of up to 3 digits. The caller owns the returned slice.
func (t *Tokenizer) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text)/4+1)
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == ' ':
			n := spanOf(text, i, ' ')
			// The last space of a run goes with a following word.
			attach := i+n < len(text) && isWordStart(text[i+n:])
			spaces := n
			if attach {
				spaces--
			}
			ids = appendRun(ids, spaces, spaceIDs[:])
			i += n
			if attach {
				var end int
				ids, end = t.appendWord(ids, text, i, true)
				i = end
			}
		case c == '\n':
			n := spanOf(text, i, '\n')
			ids = appendRun(ids, n, newlineIDs[:])
			i += n
		case isWordStart(text[i:]):
			ids, i = t.appendWord(ids, text, i, false)
		case c < utf8.RuneSelf:
			if id := symbolIDs[c]; id != 0 {
				ids = append(ids, id)
			} else {
				ids = append(ids, t.hashed(text[i:i+1], false))
			}
			i++
		default:
			_, size := utf8.DecodeRuneInString(text[i:])
			ids = append(ids, t.hashed(text[i:i+size], false))
			i += size
		}
	}
	return ids
}

// appendRun appends a run of n equal characters as pieces of up to
// len(pieceIDs)-1 characters; pieceIDs[k] is the id of the piece of k.
func appendRun(ids []int32, n int, pieceIDs []int32) []int32 {
	for n > 0 {
		k := min(n, len(pieceIDs)-1)
		ids = append(ids, pieceIDs[k])
		n -= k
	}
	return ids
}

// spanOf returns the length of the run of byte c starting at text[i].
func spanOf(text string, i int, c byte) int {
	n := 0
	for i+n < len(text) && text[i+n] == c {
		n++
	}
	return n
}

// isWordStart reports whether s starts with a letter or a digit.
func isWordStart(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isLetter(r) || isDigit(r)
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r)
}

func isDigit(r rune) bool { return '0' <= r && r <= '9' }

// appendWord appends the tokens of the run of letters (or of digits) that
// starts at text[i], spaced if a space preceded it, and returns the index
// after the run.
func (t *Tokenizer) appendWord(ids []int32, text string, i int, spaced bool) ([]int32, int) {
	r, _ := utf8.DecodeRuneInString(text[i:])
	digits := isDigit(r)
	end := i
	for end < len(text) {
		r, size := utf8.DecodeRuneInString(text[end:])
		if digits && !isDigit(r) || !digits && !isLetter(r) {
			break
		}
		end += size
	}
	w := text[i:end]
	if !digits {
		if id, ok := bareIDs[w]; ok {
			if spaced {
				id -= 2 * int32(numWords)
			}
			return append(ids, id), end
		}
	}
	limit := maxChunkBytes
	if digits {
		limit = maxDigits
	}
	for len(w) > 0 {
		n := 0
		for n < len(w) {
			_, size := utf8.DecodeRuneInString(w[n:])
			if n > 0 && n+size > limit {
				break
			}
			n += size
		}
		ids = append(ids, t.hashed(w[:n], spaced))
		w = w[n:]
		spaced = false
	}
	return ids, end
}

// hashed returns the id of a piece outside the fixed vocabulary: an FNV-1a
// hash of its bytes into the spaced or the unspaced half of the hashed
// range.
func (t *Tokenizer) hashed(piece string, spaced bool) int32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(piece); i++ {
		h ^= uint64(piece[i])
		h *= 1099511628211
	}
	if spaced {
		return hashBase + int32(h%uint64(t.hashMid-hashBase))
	}
	return t.hashMid + int32(h%uint64(t.vocab-t.hashMid))
}

// DecodeToken returns the text of one token: words with their leading
// space, "" for EOS and for ids outside the vocabulary, and a placeholder
// syllable string for a hashed id. Decoding is per token and context-free.
func (t *Tokenizer) DecodeToken(id int32) string {
	var b strings.Builder
	t.appendToken(&b, id)
	return b.String()
}

// Decode returns the text of ids, the concatenation of their DecodeToken
// texts.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		t.appendToken(&b, id)
	}
	return b.String()
}

// syllable parts of placeholder text for hashed ids.
const (
	consonants = "bdfgklmnprstvz"
	vowels     = "aeiou"
)

func (t *Tokenizer) appendToken(b *strings.Builder, id int32) {
	switch {
	case id <= eosID || id >= t.vocab:
		return
	case id < hashBase:
		b.WriteString(pieces[id])
		return
	case id < t.hashMid:
		b.WriteByte(' ')
		id -= hashBase
	default:
		id -= t.hashMid
	}
	// Two syllables name the id's hashed piece; the text is a stand-in,
	// the original is not recoverable.
	x := int(id)
	for range 2 {
		b.WriteByte(consonants[x%len(consonants)])
		x /= len(consonants)
		b.WriteByte(vowels[x%len(vowels)])
		x /= len(vowels)
	}
}

// TokenBytes returns the text of every token id as bytes (nil for EOS):
// the vocabulary a grammar matches tokens against.
func (t *Tokenizer) TokenBytes() [][]byte {
	out := make([][]byte, t.vocab)
	var b strings.Builder
	for id := int32(1); id < t.vocab; id++ {
		b.Reset()
		t.appendToken(&b, id)
		out[id] = []byte(b.String())
	}
	return out
}
