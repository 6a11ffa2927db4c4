package sim

import (
	"math"
	"math/bits"
	"strings"

	"github.com/llmd/llmd/engine/hashmix"
)

// Placeholder prose. The token at output index i is a pure function of the
// sequence's seed and i, computed in O(1): the output is cut into windows
// of sentenceWindow tokens, and each window holds exactly one period at an
// offset drawn from the seed and the window number. Periods are therefore
// 9 to 15 tokens apart, and sentences run 6 to 14 words (a window may add
// a comma before its period and a paragraph break after it).
const (
	sentenceWindow = 12
	// periodMin and periodSpan place a window's period at offset
	// periodMin..periodMin+periodSpan-1, so the sentence start (and a
	// paragraph break) after it stay inside the window.
	periodMin  = 4
	periodSpan = 4

	// minOutputTokens is the shortest natural answer for the default mean.
	minOutputTokens = 16
)

// Salts separate the hash streams drawn from one seed.
const (
	saltWindow = 0x9e3779b97f4a7c15
	saltWord   = 0xbf58476d1ce4e5b9
	saltMask   = 0x94d049bb133111eb
	saltLength = 0x94d049bb133111eb
)

// unit maps h to a float64 in (0, 1].
func unit(h uint64) float64 {
	return (float64(h>>11) + 1) / (1 << 53)
}

// starterWords are the function words that may open a sentence.
var starterWords = buildStarters()

func buildStarters() []int {
	var ws []int
	for i, w := range functionWords {
		switch w {
		case "the", "this", "each", "some", "most", "such", "when", "while", "if", "its", "their", "all", "so", "then", "also":
			ws = append(ws, i)
		}
	}
	return ws
}

// textGen generates placeholder tokens.
type textGen struct {
	// meanOutput is the mean natural answer length in tokens; 0 means the
	// answer never ends on its own.
	meanOutput int
}

// window is the layout of one window of sentenceWindow tokens.
type window struct {
	period    int  // offset of the period
	comma     int  // offset of a comma; -1 for none
	paragraph bool // a paragraph break follows the period
}

func windowAt(seed uint64, k int) window {
	h := hashmix.Mix64(seed ^ hashmix.Mix64(uint64(k)+saltWindow))
	w := window{period: periodMin + int(h%periodSpan), comma: -1}
	h >>= 8
	w.paragraph = h%6 == 0
	h >>= 8
	if h%5 < 2 {
		h >>= 8
		w.comma = 1 + int(h%uint64(w.period-2))
	}
	return w
}

// token returns the token a sequence seeded with seed produces at output
// index i (i >= 0).
func (g textGen) token(seed uint64, i int) int32 {
	if end, ok := g.length(seed); ok && i == end {
		return eosID
	}
	k, off := i/sentenceWindow, i%sentenceWindow
	w := windowAt(seed, k)
	if k == 0 && w.comma == 1 {
		w.comma = 2 // not right after the answer's first word
	}
	switch {
	case off == w.period:
		return symbolIDs['.']
	case off == w.period+1 && w.paragraph:
		return newlineIDs[2]
	case i == 0, off == w.period+2 && w.paragraph:
		return g.startWord(seed, i, variantBareCap)
	case off == w.period+1:
		return g.startWord(seed, i, variantSpacedCap)
	case off == w.comma:
		return symbolIDs[',']
	}
	h := hashmix.Mix64(seed ^ hashmix.Mix64(uint64(i)+saltWord))
	// Function words only at odd indexes, so none follows another, and
	// neither right after a sentence's first word nor before a period or
	// a comma.
	start := w.period + 1
	if w.paragraph {
		start++
	}
	if i%2 == 1 && h%3 != 0 && i != 1 && off != start+1 && off != w.period-1 && off != w.comma-1 {
		return wordID(int((h>>8)%uint64(len(functionWords))), variantSpaced)
	}
	return wordID(len(functionWords)+int((h>>8)%uint64(len(contentWords))), variantSpaced)
}

// startWord returns the capitalized word that opens a sentence.
func (g textGen) startWord(seed uint64, i, variant int) int32 {
	h := hashmix.Mix64(seed ^ hashmix.Mix64(uint64(i)+saltWord))
	if h%2 == 0 {
		return wordID(starterWords[(h>>8)%uint64(len(starterWords))], variant)
	}
	return wordID(len(functionWords)+int((h>>8)%uint64(len(contentWords))), variant)
}

// length returns the output index at which a sequence seeded with seed
// emits EOS, and false if it never does (meanOutput 0).
//
// The target length is a minimum plus a gamma(2)-distributed tail, capped
// at 4x the mean. For means of two windows or more the answer then runs on
// to the end of its sentence (EOS takes the place of the next sentence's
// first token), and the target's mean is lowered by the half window that
// adds on average.
func (g textGen) length(seed uint64) (int, bool) {
	m := g.meanOutput
	if m <= 0 {
		return 0, false
	}
	lo := min(minOutputTokens, max(1, m/2))
	mean := float64(m)
	aligned := m >= 2*sentenceWindow
	if aligned {
		mean -= sentenceWindow / 2
	}
	theta := max(0, mean-float64(lo)) / 2
	h := hashmix.Mix64(seed ^ saltLength)
	tail := -theta * (math.Log(unit(hashmix.Mix64(h))) + math.Log(unit(hashmix.Mix64(h^saltWord))))
	target := lo + int(math.Round(math.Min(tail, float64(4*m-lo))))
	if !aligned {
		return target, true
	}
	k, off := target/sentenceWindow, target%sentenceWindow
	if p := windowAt(seed, k).period; off <= p+1 {
		return k*sentenceWindow + p + 1, true
	}
	return (k+1)*sentenceWindow + windowAt(seed, k+1).period + 1, true
}

// closers are the tokens that finish a JSON value, in the order the
// simulator tries them: under a grammar it prefers them now and then, so
// that what it generates ends. The quote comes first: inside a string the
// brackets are text.
var closers = [...]int32{symbolIDs['"'], symbolIDs['}'], symbolIDs[']']}

// masked returns the token a sequence produces at output index i when only
// the tokens in mask are allowed (a grammar: structured output). EOS comes
// first where allowed; then, one time in eight, a closing quote or
// bracket if one is allowed, so that strings and arrays end; then tok, the
// unconstrained choice, if allowed; else a pseudo-random allowed token. It
// depends only on its arguments, so a preempted sequence produces the same
// tokens again. An empty mask gives EOS, which the engine reports as a
// grammar that admits no token.
func (g textGen) masked(tok int32, seed uint64, i int, mask []uint64) int32 {
	allowed := func(t int32) bool { return t >= 0 && int(t>>6) < len(mask) && mask[t>>6]&(1<<(t&63)) != 0 }
	if allowed(eosID) {
		return eosID
	}
	h := hashmix.Mix64(seed ^ hashmix.Mix64(uint64(i)+saltMask))
	if h%8 == 0 || !allowed(tok) && h%3 == 0 {
		for _, c := range closers {
			if allowed(c) {
				return c
			}
		}
	}
	if allowed(tok) {
		return tok
	}
	// The first allowed token at or after a random id, wrapping around,
	// and not whitespace if any other is allowed: a grammar allows
	// whitespace almost everywhere, and JSON is written compactly.
	n := len(mask) * 64
	start := int((h >> 8) % uint64(n))
	first := int32(-1)
	for t := nextAllowed(mask, start); t >= 0; t = nextAllowed(mask, int(t)+1) {
		if first < 0 {
			first = t
		} else if t == first {
			break // wrapped around: only whitespace is allowed
		}
		if !isSpacePiece(t) {
			return t
		}
	}
	if first >= 0 {
		return first
	}
	return eosID
}

// nextAllowed returns the first token at or after from (wrapping around)
// that mask allows, -1 if none.
func nextAllowed(mask []uint64, from int) int32 {
	n := len(mask) * 64
	if n == 0 {
		return -1
	}
	from %= n
	w0 := from >> 6
	if word := mask[w0] &^ (1<<(from&63) - 1); word != 0 {
		return int32(w0*64 + bits.TrailingZeros64(word))
	}
	for k := 1; k <= len(mask); k++ {
		w := (w0 + k) % len(mask)
		if mask[w] != 0 {
			return int32(w*64 + bits.TrailingZeros64(mask[w]))
		}
	}
	return -1
}

// isSpacePiece reports whether token t is whitespace only.
func isSpacePiece(t int32) bool {
	if t <= eosID || t >= hashBase {
		return false
	}
	return strings.TrimSpace(pieces[t]) == ""
}
