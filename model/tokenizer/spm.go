package tokenizer

import (
	"math"
	"strings"
)

// spmSpace is SentencePiece's stand-in for a space, U+2581 "▁".
const spmSpace = "\u2581"

// spmScratch is reused across the runs of one Encode call.
type spmScratch struct {
	syms []tokSymbol
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
	syms := tokMerge(text, sc.syms, &sc.heap, func(syms []tokSymbol, left, right int32) {
		t.spmAddBigram(text, syms, sc, left, right)
	})
	sc.syms = syms
	if len(syms) == 0 {
		return out
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

func (t *Tokenizer) spmAddBigram(text string, syms []tokSymbol, sc *spmScratch, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := syms[left], syms[right]
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
