package grammar

import "unicode/utf8"

// byteRange is an inclusive range of byte values.
type byteRange struct{ lo, hi byte }

// utf8Sequences turns a range of code points into sequences of byte
// ranges: a string is the UTF-8 encoding of a code point in [lo, hi] if and
// only if it matches one of the sequences, byte i in range i. Surrogates
// (U+D800 to U+DFFF) have no UTF-8 encoding and are left out. The
// sequences are disjoint and in order.
func utf8Sequences(lo, hi rune, out [][]byteRange) [][]byteRange {
	if lo > hi {
		return out
	}
	// Leave out the surrogates.
	if lo <= 0xDFFF && hi >= 0xD800 {
		out = utf8Sequences(lo, 0xD7FF, out)
		return utf8Sequences(0xE000, hi, out)
	}
	// Split where the encoded length changes.
	for _, m := range [...]rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && m < hi {
			out = utf8Sequences(lo, m, out)
			return utf8Sequences(m+1, hi, out)
		}
	}
	if hi <= 0x7F {
		return append(out, []byteRange{{byte(lo), byte(hi)}})
	}
	// Split until every byte position varies independently: the low i
	// continuation bytes of lo are all 0x80 and of hi all 0xBF wherever
	// lo and hi differ above them.
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				out = utf8Sequences(lo, lo|m, out)
				return utf8Sequences((lo|m)+1, hi, out)
			}
			if hi&m != m {
				out = utf8Sequences(lo, (hi&^m)-1, out)
				return utf8Sequences(hi&^m, hi, out)
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	s := make([]byteRange, n)
	for i := range s {
		s[i] = byteRange{a[i], b[i]}
	}
	return append(out, s)
}
