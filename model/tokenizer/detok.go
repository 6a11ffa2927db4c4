package tokenizer

import "unicode/utf8"

// Detokenizer turns a stream of token ids into text as they come, for
// streaming generated text. A character split over several byte tokens
// (SentencePiece byte fallback, or a byte-level BPE token that ends inside
// a character) is held back until it is complete, so each Add returns
// whole characters. Bytes that can never become valid UTF-8 are passed
// through, so the concatenation of everything Add and Flush return equals
// Decode of the same ids.
//
// Control, unknown and unused tokens produce nothing. For a SentencePiece
// vocabulary with add_space_prefix, when the stream starts with BOS (a
// whole encoded prompt) the leading space of the first text after it is
// dropped, since the encoder put it there; a stream of generated tokens
// keeps its spaces. A Detokenizer is not safe for concurrent use.
type Detokenizer struct {
	t          *Tokenizer
	pending    []byte
	started    bool
	stripSpace bool
}

// NewDetokenizer returns a detokenizer for t at the start of a stream.
func NewDetokenizer(t *Tokenizer) *Detokenizer {
	return &Detokenizer{t: t}
}

// Add takes the next token and returns the text that is now complete,
// possibly "". Ids out of range produce nothing.
func (d *Detokenizer) Add(id int32) string {
	t := d.t
	if !d.started {
		d.started = true
		d.stripSpace = t.addSpacePrefix && t.bos >= 0 && id == t.bos
	}
	if id < 0 || int(id) >= len(t.pieces) || t.tokHidden(id) {
		return ""
	}
	piece := t.pieces[id]
	if piece == "" {
		return ""
	}
	if d.stripSpace {
		d.stripSpace = false
		if piece[0] == ' ' {
			piece = piece[1:]
		}
	}
	if len(d.pending) == 0 {
		cut := detokCompleteLen(piece)
		if cut == len(piece) {
			return piece
		}
		d.pending = append(d.pending, piece[cut:]...)
		return piece[:cut]
	}
	d.pending = append(d.pending, piece...)
	cut := detokCompleteLen(string(d.pending))
	out := string(d.pending[:cut])
	d.pending = d.pending[:copy(d.pending, d.pending[cut:])]
	return out
}

// Flush returns what is held back (an incomplete UTF-8 sequence) and
// empties the buffer, for the end of a stream.
func (d *Detokenizer) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// detokCompleteLen returns the length of the longest prefix of s that does
// not end inside a UTF-8 sequence that more bytes could still complete.
func detokCompleteLen(s string) int {
	// Only the last three bytes can start an incomplete sequence.
	for i := len(s) - 1; i >= 0 && i >= len(s)-3; i-- {
		c := s[i]
		if c&0xC0 == 0x80 {
			continue // a continuation byte: look further back for its start
		}
		if !utf8.FullRuneInString(s[i:]) {
			return i
		}
		return len(s)
	}
	return len(s)
}
