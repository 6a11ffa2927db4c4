package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// bpeByteRune is GPT-2's bytes_to_unicode map: printable bytes stand for
// themselves, the others for U+0100 onwards (space is Ġ U+0120, newline
// Ċ U+010A). bpeByteStr holds the same as UTF-8; bpeRuneByte is the
// inverse, -1 where a rune is not in the map.
var (
	bpeByteRune [256]rune
	bpeByteStr  [256]string
	bpeRuneByte [324]int16
)

func init() {
	for i := range bpeRuneByte {
		bpeRuneByte[i] = -1
	}
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
		if !printable {
			r = next
			next++
		}
		bpeByteRune[b] = r
		bpeByteStr[b] = string(r)
		bpeRuneByte[r] = int16(b)
	}
}

// bpeUnmap undoes the GPT-2 byte map. A rune outside the map is kept as
// its UTF-8 encoding.
func bpeUnmap(s string) string {
	same := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || bpeRuneByte[c] != int16(c) {
			same = false
			break
		}
	}
	if same {
		return s
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r >= 0 && int(r) < len(bpeRuneByte) && bpeRuneByte[r] >= 0 {
			b = append(b, byte(bpeRuneByte[r]))
		} else {
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// bpeScratch is reused across the pieces of one Encode call.
type bpeScratch struct {
	pre    pretokText
	pieces []string
	word   []byte
	syms   []tokSymbol
	heap   tokHeap
	key    []byte
}

// bpeEncode appends the ids of a run of raw text: pre-tokenized, each
// piece mapped through the GPT-2 byte map and merged by rank.
func (t *Tokenizer) bpeEncode(text string, out []int32, sc *bpeScratch) []int32 {
	if cap(sc.pieces) < len(text)/4 {
		sc.pieces = make([]string, 0, len(text)/4)
	}
	sc.pieces = pretokSplit(t.pre, text, &sc.pre, sc.pieces[:0])
	for _, piece := range sc.pieces {
		sc.word = sc.word[:0]
		for i := 0; i < len(piece); i++ {
			sc.word = append(sc.word, bpeByteStr[piece[i]]...)
		}
		out = t.bpeEncodeWord(sc.word, out, sc)
	}
	return out
}

// bpeEncodeWord merges one mapped piece as llama.cpp's BPE session does:
// the adjacent pair of lowest merge rank first (leftmost on ties), until no
// pair has a rank.
func (t *Tokenizer) bpeEncodeWord(word []byte, out []int32, sc *bpeScratch) []int32 {
	if t.ignoreMerges {
		if id, ok := t.ids[string(word)]; ok {
			return append(out, id)
		}
	}
	syms := tokMerge(word, sc.syms, &sc.heap, func(syms []tokSymbol, left, right int32) {
		t.bpeAddBigram(word, syms, sc, left, right)
	})
	sc.syms = syms
	if len(syms) == 0 {
		return out
	}
	for i := int32(0); i != -1; i = syms[i].next {
		s := syms[i]
		piece := word[s.start : s.start+s.n]
		if id, ok := t.ids[string(piece)]; ok {
			out = append(out, id)
			continue
		}
		// No token for the merged text: one token per character, as far
		// as the vocabulary has them.
		for j := 0; j < len(piece); {
			_, w := utf8.DecodeRune(piece[j:])
			if id, ok := t.ids[string(piece[j:j+w])]; ok {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
			j += w
		}
	}
	return out
}

func (t *Tokenizer) bpeAddBigram(word []byte, syms []tokSymbol, sc *bpeScratch, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := syms[left], syms[right]
	sc.key = append(sc.key[:0], word[l.start:l.start+l.n]...)
	sc.key = append(sc.key, ' ')
	sc.key = append(sc.key, word[r.start:r.start+r.n]...)
	rank, ok := t.merges[string(sc.key)]
	if !ok {
		return
	}
	// Lowest rank first, then leftmost.
	sc.heap.push(tokBigram{key: uint64(rank)<<32 | uint64(left), left: left, right: right, ln: l.n, rn: r.n})
}

// bpeMapString maps raw bytes through the GPT-2 byte map.
func bpeMapString(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(bpeByteStr[s[i]])
	}
	return b.String()
}
