package model

import (
	"math"
	"strings"
	"unicode/utf8"
)

// spmSpace is SentencePiece's stand-in for a space, U+2581 "▁".
const spmSpace = "\u2581"

// spmSymbol is a run [start, start+n) of the escaped text, linked to its
// neighbours; n is 0 once merged into the symbol on its left.
type spmSymbol struct {
	start, n   int32
	prev, next int32
}

// spmScratch is reused across the runs of one Encode call.
type spmScratch struct {
	syms []spmSymbol
	heap tokHeap
}

// spmEncode appends the ids of a run of raw text the way llama.cpp's SPM
// session does: spaces become ▁ (with one in front when spacePrefix), the
// text is cut into UTF-8 characters (an invalid byte is one of its own),
// and the adjacent pair whose merged text is the token of highest score is
// merged first (leftmost on ties), until no merged pair is a token. A
// character left without a token falls back to its bytes, <0xNN>.
//
// When no token has a ▁ after another character (t.spmWords), no merge can
// cross the start of a word, so each word merges on its own: the same
// result, with small heaps instead of one over the whole text.
func (t *Tokenizer) spmEncode(text string, spacePrefix bool, out []int32, sc *spmScratch) []int32 {
	if spacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", spmSpace)
	if !t.spmWords {
		return t.spmMerge(text, out, sc)
	}
	start := 0
	for i := len(spmSpace); i < len(text); {
		j := strings.Index(text[i:], spmSpace)
		if j < 0 {
			break
		}
		i += j
		if !strings.HasSuffix(text[:i], spmSpace) {
			out = t.spmMerge(text[start:i], out, sc)
			start = i
		}
		i += len(spmSpace)
	}
	return t.spmMerge(text[start:], out, sc)
}

// spmMerge appends the ids of escaped text.
func (t *Tokenizer) spmMerge(text string, out []int32, sc *spmScratch) []int32 {
	sc.syms = sc.syms[:0]
	for i := 0; i < len(text); {
		// llama.cpp sizes a character by its first byte alone, so an
		// invalid byte swallows the bytes after it; here it stands alone,
		// which changes nothing for valid UTF-8 and keeps the text that
		// follows an invalid byte intact.
		_, w := utf8.DecodeRuneInString(text[i:])
		n := int32(len(sc.syms))
		sc.syms = append(sc.syms, spmSymbol{start: int32(i), n: int32(w), prev: n - 1, next: n + 1})
		i += w
	}
	if len(sc.syms) == 0 {
		return out
	}
	sc.syms[len(sc.syms)-1].next = -1
	sc.heap = sc.heap[:0]
	for i := 1; i < len(sc.syms); i++ {
		t.spmAddBigram(text, sc, int32(i-1), int32(i))
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
		t.spmAddBigram(text, sc, l.prev, bg.left)
		t.spmAddBigram(text, sc, bg.left, l.next)
	}
	for i := int32(0); i != -1; i = syms[i].next {
		s := syms[i]
		piece := text[s.start : s.start+s.n]
		if id, ok := t.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			if id := t.byteTok[piece[j]]; id >= 0 {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

func (t *Tokenizer) spmAddBigram(text string, sc *spmScratch, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := sc.syms[left], sc.syms[right]
	id, ok := t.ids[text[l.start:r.start+r.n]]
	if !ok {
		return
	}
	var score float32
	if t.scores != nil {
		score = t.scores[id]
	}
	// Highest score first, then leftmost.
	sc.heap.push(tokBigram{key: uint64(^spmSortable(score))<<32 | uint64(left), left: left, right: right, ln: l.n, rn: r.n})
}

// spmSortable maps a score (not NaN) to a uint32 in the same order.
func spmSortable(f float32) uint32 {
	if f == 0 {
		f = 0 // -0 and +0 are equal scores
	}
	b := math.Float32bits(f)
	if b&(1<<31) != 0 {
		return ^b
	}
	return b | 1<<31
}

// spmWordsIndependent reports whether no token has ▁ after another
// character, so that no merge can cross the start of a word.
func spmWordsIndependent(tokens []string) bool {
	for _, tok := range tokens {
		if i := strings.Index(tok, spmSpace); i >= 0 {
			rest := strings.TrimLeft(tok, spmSpace)
			if strings.Contains(rest, spmSpace) {
				return false
			}
			if i > 0 {
				return false
			}
		}
	}
	return true
}
