package pipeline

import (
	"strings"
	"unicode/utf8"
)

// textStream turns one choice's tokens into text to send, holding back what
// may still turn out to be the start of a stop string or an incomplete UTF-8
// sequence. Stop text is never sent.
type textStream struct {
	stops   []string
	pending string
	stopped bool
	// matched is the stop string that ended the choice ("" for none).
	matched string
}

// push adds a token's text. It returns the text that is now safe to send
// and whether a stop string matched (the choice is then over; later pushes
// return nothing).
func (t *textStream) push(piece string) (out string, stopped bool) {
	if t.stopped {
		return "", true
	}
	t.pending += piece
	cut, matched := -1, ""
	for _, s := range t.stops {
		if i := strings.Index(t.pending, s); i >= 0 && (cut < 0 || i < cut) {
			cut, matched = i, s
		}
	}
	if cut >= 0 {
		out = t.pending[:cut]
		t.pending = ""
		t.stopped, t.matched = true, matched
		return out, true
	}
	keep := 0
	for _, s := range t.stops {
		if k := overlap(t.pending, s); k > keep {
			keep = k
		}
	}
	if k := partialRune(t.pending); k > keep {
		keep = k
	}
	out = t.pending[:len(t.pending)-keep]
	t.pending = t.pending[len(t.pending)-keep:]
	return out, false
}

// flush returns whatever is held back, at the end of a choice.
func (t *textStream) flush() string {
	out := t.pending
	t.pending = ""
	return out
}

// overlap returns the length of the longest proper prefix of stop that is a
// suffix of s.
func overlap(s, stop string) int {
	n := min(len(s), len(stop)-1)
	for k := n; k > 0; k-- {
		if strings.HasSuffix(s, stop[:k]) {
			return k
		}
	}
	return 0
}

// partialRune returns the number of bytes at the end of s that start a
// UTF-8 sequence not yet complete.
func partialRune(s string) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(s); k++ {
		b := s[len(s)-k]
		if utf8.RuneStart(b) {
			if b >= utf8.RuneSelf && !utf8.FullRuneInString(s[len(s)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
