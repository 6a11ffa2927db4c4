package toolcall

// The byte-level pieces the parser scans with: UTF-8 tails, JSON string
// literals and the scanner of bare JSON values.

import (
	"encoding/json"
	"unicode/utf8"
)

// incompleteTail returns the length of an incomplete UTF-8 sequence at
// the end of s (0 if there is none).
func incompleteTail(s string) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(s); n++ {
		c := s[len(s)-n]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRuneInString(s[len(s)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}

// decodeString decodes a JSON string literal, quotes included.
func decodeString(lit []byte) (string, bool) {
	if len(lit) < 2 {
		return "", false
	}
	inner := lit[1 : len(lit)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			plain = false
			break
		}
	}
	if plain {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", false
	}
	return s, true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r'
}

// isNameByte reports whether c may be in a Mistral bare function name.
func isNameByte(c byte) bool {
	return isIdentByte(c) || c == '-' || c == '.'
}

// scanner finds the end of a JSON value: it tracks strings, escapes and
// bracket nesting, and ends a bare number or literal at the first byte
// that cannot be part of one. It does not otherwise check the JSON.
type scanner struct {
	depth int
	str   bool // inside a string
	esc   bool // after a backslash in a string
	bare  bool // inside a number or literal at the top level
}

// start begins a value at its first byte c, which it does not consume.
// It reports false if no JSON value starts with c.
func (s *scanner) start(c byte) bool {
	*s = scanner{}
	switch {
	case c == '{' || c == '[' || c == '"':
		return true
	case c == '-' || '0' <= c && c <= '9' || c == 't' || c == 'f' || c == 'n':
		s.bare = true
		return true
	}
	return false
}

// scan reads the value from text[i:]. It returns the end of what belongs
// to the value and whether the value ended there.
func (s *scanner) scan(text string, i int) (int, bool) {
	for j := i; j < len(text); j++ {
		c := text[j]
		switch {
		case s.bare:
			if !isBareByte(c) {
				return j, true
			}
		case s.str:
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.str = false
				if s.depth == 0 {
					return j + 1, true
				}
			}
		case c == '"':
			s.str = true
		case c == '{' || c == '[':
			s.depth++
		case c == '}' || c == ']':
			if s.depth--; s.depth <= 0 {
				return j + 1, true
			}
		}
	}
	return len(text), false
}

func isBareByte(c byte) bool {
	return isIdentByte(c) || c == '-' || c == '+' || c == '.'
}
