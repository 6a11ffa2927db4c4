package tokenizer

import "unicode/utf8"

// tokSymbol is a run [start, start+n) of a text being merged, linked to its
// neighbours; n is 0 once merged into the symbol on its left.
type tokSymbol struct {
	start, n   int32
	prev, next int32
}

// tokMerge runs the merge loop that byte-level BPE and SentencePiece share
// (llama.cpp's): text is cut into UTF-8 characters (an invalid byte is one
// of its own), add queues each adjacent pair that may merge, and the best
// queued pair is merged again and again, re-queuing the pairs around it,
// until none is left. It returns the symbols, linked from index 0; syms
// and heap are reused scratch.
func tokMerge[T string | []byte](text T, syms []tokSymbol, heap *tokHeap, add func(syms []tokSymbol, left, right int32)) []tokSymbol {
	syms = syms[:0]
	for i := 0; i < len(text); {
		var w int
		switch s := any(text).(type) {
		case string:
			_, w = utf8.DecodeRuneInString(s[i:])
		case []byte:
			_, w = utf8.DecodeRune(s[i:])
		}
		n := int32(len(syms))
		syms = append(syms, tokSymbol{start: int32(i), n: int32(w), prev: n - 1, next: n + 1})
		i += w
	}
	if len(syms) == 0 {
		return syms
	}
	syms[len(syms)-1].next = -1
	*heap = (*heap)[:0]
	for i := 1; i < len(syms); i++ {
		add(syms, int32(i-1), int32(i))
	}
	for len(*heap) > 0 {
		bg := heap.pop()
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
		add(syms, l.prev, bg.left)
		add(syms, bg.left, l.next)
	}
	return syms
}
