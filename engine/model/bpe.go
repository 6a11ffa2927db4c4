package model

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

// bpeSymbol is a run [start, start+n) of the mapped word, linked to its
// neighbours; n is 0 once merged into the symbol on its left.
type bpeSymbol struct {
	start, n   int32
	prev, next int32
}

// bpeScratch is reused across the pieces of one Encode call.
type bpeScratch struct {
	pre    pretokText
	pieces []string
	word   []byte
	syms   []bpeSymbol
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
	sc.syms = sc.syms[:0]
	for i := 0; i < len(word); {
		_, w := utf8.DecodeRune(word[i:])
		n := int32(len(sc.syms))
		sc.syms = append(sc.syms, bpeSymbol{start: int32(i), n: int32(w), prev: n - 1, next: n + 1})
		i += w
	}
	if len(sc.syms) == 0 {
		return out
	}
	sc.syms[len(sc.syms)-1].next = -1
	sc.heap = sc.heap[:0]
	for i := 1; i < len(sc.syms); i++ {
		t.bpeAddBigram(word, sc, int32(i-1), int32(i))
	}
	syms := sc.syms
	for len(sc.heap) > 0 {
		bg := sc.heap.pop()
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n != bg.ln || r.n != bg.rn || l.n == 0 {
			continue // stale: one side has merged since
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		t.bpeAddBigram(word, sc, l.prev, bg.left)
		t.bpeAddBigram(word, sc, bg.left, l.next)
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

func (t *Tokenizer) bpeAddBigram(word []byte, sc *bpeScratch, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := sc.syms[left], sc.syms[right]
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
