package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers split text into pieces before byte-level BPE merges
// run within each piece. Their reference definitions are regular
// expressions with a lookahead (\s+(?!\S)), which Go's regexp lacks, so
// each is a hand-written scanner with the same semantics, following
// llama.cpp's own scanners (unicode.cpp unicode_regex_split_custom_gpt2 and
// _llama3). Positions are code points; an invalid UTF-8 byte is one code
// point of its own that is neither letter, number nor space, and is kept
// as it is.

// pretokKind selects a pre-tokenizer.
type pretokKind uint8

const (
	// pretokDefault is llama.cpp's default chain for BPE vocabularies:
	// [\p{P}\$\+<=>\^~\|]+, then the GPT-2 regex, then \p{N}+, then
	// [0-9][0-9][0-9], each splitting the pieces of the one before.
	pretokDefault pretokKind = iota
	// pretokGPT2 is 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
	// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
	pretokGPT2
	// pretokLlama3 is (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
	// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+.
	pretokLlama3
	// pretokQwen2 is pretokLlama3 with \p{N} (one digit) for \p{N}{1,3}.
	pretokQwen2
)

// pretokKindFor maps tokenizer.ggml.pre to a pre-tokenizer as llama.cpp
// does (src/llama-vocab.cpp).
func pretokKindFor(pre string) (pretokKind, error) {
	switch pre {
	case "", "default":
		return pretokDefault, nil
	case "gpt-2", "gpt2":
		return pretokGPT2, nil
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2":
		return pretokLlama3, nil
	case "qwen2", "deepseek-r1-qwen", "megrez":
		return pretokQwen2, nil
	}
	return 0, fmt.Errorf("%w: %s %s", ErrUnsupported, tokKeyPre, tokQuote(pre))
}

// Character classes. A position outside the text has class 0, which is
// how the scanners see the end of the text.
const (
	pretokLetter uint8 = 1 << iota // \p{L}
	pretokNumber                   // \p{N}
	pretokSpace                    // \s
	pretokOther                    // [^\s\p{L}\p{N}]
	pretokPunct                    // \p{P} (with pretokOther)
)

var pretokASCII = func() (c [utf8.RuneSelf]uint8) {
	for r := range c {
		c[r] = pretokClassOf(rune(r))
	}
	return c
}()

func pretokClassOf(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return pretokLetter
	case unicode.IsNumber(r):
		return pretokNumber
	case unicode.IsSpace(r):
		return pretokSpace
	case unicode.IsPunct(r):
		return pretokOther | pretokPunct
	}
	return pretokOther
}

// pretokText is text decoded into code points.
type pretokText struct {
	s   string
	r   []rune
	cls []uint8
	off []int // byte offset of each code point, and len(s) at the end
}

func (p *pretokText) reset(s string) {
	if cap(p.off) < len(s)+1 {
		// A code point is at least one byte: this is enough.
		p.r, p.cls, p.off = make([]rune, 0, len(s)), make([]uint8, 0, len(s)), make([]int, 0, len(s)+1)
	}
	p.s, p.r, p.cls, p.off = s, p.r[:0], p.cls[:0], p.off[:0]
	for i := 0; i < len(s); {
		c, w := rune(s[i]), 1
		var cl uint8
		if c < utf8.RuneSelf {
			cl = pretokASCII[c]
		} else {
			c, w = utf8.DecodeRuneInString(s[i:])
			if c == utf8.RuneError && w == 1 {
				c = -1 // an invalid byte: matches nothing but "other"
				cl = pretokOther
			} else {
				cl = pretokClassOf(c)
			}
		}
		p.r = append(p.r, c)
		p.cls = append(p.cls, cl)
		p.off = append(p.off, i)
		i += w
	}
	p.off = append(p.off, len(s))
}

func (p *pretokText) class(i int) uint8 {
	if i < len(p.cls) {
		return p.cls[i]
	}
	return 0
}

func (p *pretokText) rune(i int) rune {
	if i < len(p.r) {
		return p.r[i]
	}
	return -2 // out of range, unlike any code point or invalid byte
}

// pretokSplit appends the pieces of s (substrings of s) to dst.
func pretokSplit(kind pretokKind, s string, p *pretokText, dst []string) []string {
	switch kind {
	case pretokLlama3:
		return pretokScanLlama3(s, 3, p, dst)
	case pretokQwen2:
		return pretokScanLlama3(s, 1, p, dst)
	case pretokGPT2:
		return pretokScanGPT2(s, p, dst)
	}
	return pretokSplitDefault(s, p, dst)
}

// pretokScanLlama3 is the Llama 3 scanner; maxDigits is 3 for Llama 3 and 1
// for Qwen2.
func pretokScanLlama3(s string, maxDigits int, p *pretokText, dst []string) []string {
	p.reset(s)
	n := len(p.r)
	prev := 0
	add := func(end int) {
		if end > prev {
			dst = append(dst, s[p.off[prev]:p.off[end]])
		}
		prev = end
	}
	for pos := 0; pos < n; {
		c, f := p.r[pos], p.cls[pos]

		// (?i:'s|'t|'re|'ve|'m|'ll|'d)
		if c == '\'' && pos+1 < n {
			c1 := unicode.ToLower(p.r[pos+1])
			if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
				pos += 2
				add(pos)
				continue
			}
			if pos+2 < n {
				c2 := unicode.ToLower(p.r[pos+2])
				if c1 == 'r' && c2 == 'e' || c1 == 'v' && c2 == 'e' || c1 == 'l' && c2 == 'l' {
					pos += 3
					add(pos)
					continue
				}
			}
		}

		// [^\r\n\p{L}\p{N}]?\p{L}+
		if c != '\r' && c != '\n' && f&pretokNumber == 0 {
			if f&pretokLetter != 0 || p.class(pos+1)&pretokLetter != 0 {
				pos++
				for p.class(pos)&pretokLetter != 0 {
					pos++
				}
				add(pos)
				continue
			}
		}

		// \p{N}{1,3} or \p{N}
		if f&pretokNumber != 0 {
			ini := pos
			for p.class(pos)&pretokNumber != 0 {
				pos++
				if pos-ini >= maxDigits {
					add(pos)
					ini = pos
				}
			}
			add(pos)
			continue
		}

		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		f2 := f
		if c == ' ' {
			f2 = p.class(pos + 1)
		}
		if f2&pretokOther != 0 {
			if c == ' ' {
				pos++
			}
			for p.class(pos)&pretokOther != 0 {
				pos++
			}
			for r := p.rune(pos); r == '\r' || r == '\n'; r = p.rune(pos) {
				pos++
			}
			add(pos)
			continue
		}

		nws, lastRN := 0, 0
		for p.class(pos+nws)&pretokSpace != 0 {
			if r := p.r[pos+nws]; r == '\r' || r == '\n' {
				lastRN = pos + nws + 1
			}
			nws++
		}
		// \s*[\r\n]+
		if lastRN > 0 {
			pos = lastRN
			add(pos)
			continue
		}
		// \s+(?!\S)
		if nws > 1 && pos+nws < n {
			pos += nws - 1
			add(pos)
			continue
		}
		// \s+
		if nws > 0 {
			pos += nws
			add(pos)
			continue
		}
		pos++
		add(pos)
	}
	return dst
}

// pretokScanGPT2 is the GPT-2 scanner.
func pretokScanGPT2(s string, p *pretokText, dst []string) []string {
	p.reset(s)
	n := len(p.r)
	prev := 0
	add := func(end int) {
		if end > prev {
			dst = append(dst, s[p.off[prev]:p.off[end]])
		}
		prev = end
	}
	for pos := 0; pos < n; {
		c, f := p.r[pos], p.cls[pos]

		// 's|'t|'re|'ve|'m|'ll|'d
		if c == '\'' && pos+1 < n {
			c1 := p.r[pos+1]
			if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
				pos += 2
				add(pos)
				continue
			}
			if pos+2 < n {
				c2 := p.r[pos+2]
				if c1 == 'r' && c2 == 'e' || c1 == 'v' && c2 == 'e' || c1 == 'l' && c2 == 'l' {
					pos += 3
					add(pos)
					continue
				}
			}
		}

		// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
		f2 := f
		if c == ' ' {
			f2 = p.class(pos + 1)
		}
		if want := f2 & (pretokLetter | pretokNumber | pretokOther); want != 0 {
			if c == ' ' {
				pos++
			}
			for p.class(pos)&want != 0 {
				pos++
			}
			add(pos)
			continue
		}

		nws := 0
		for p.class(pos+nws)&pretokSpace != 0 {
			nws++
		}
		// \s+(?!\S)
		if nws > 1 && pos+nws < n {
			pos += nws - 1
			add(pos)
			continue
		}
		// \s+
		if nws > 0 {
			pos += nws
			add(pos)
			continue
		}
		pos++
		add(pos)
	}
	return dst
}

// pretokSplitDefault is llama.cpp's default BPE chain. Each stage keeps the
// text between its matches as pieces too.
func pretokSplitDefault(s string, p *pretokText, dst []string) []string {
	// [\p{P}\$\+<=>\^~\|]+
	stage1 := pretokRuns(s, nil, func(r rune) bool {
		switch r {
		case '$', '+', '<', '=', '>', '^', '~', '|':
			return true
		}
		return r >= 0 && unicode.IsPunct(r)
	})
	var stage2 []string
	for _, piece := range stage1 {
		stage2 = pretokScanGPT2(piece, p, stage2)
	}
	var stage3 []string
	for _, piece := range stage2 {
		stage3 = pretokRuns(piece, stage3, unicode.IsNumber)
	}
	for _, piece := range stage3 {
		dst = pretokTriples(piece, dst)
	}
	return dst
}

// pretokRuns splits s into maximal runs of code points that match and the
// text between them. An invalid byte is passed to match as -1.
func pretokRuns(s string, dst []string, match func(rune) bool) []string {
	start := 0     // start of the current piece
	inRun := false // whether the current piece is a run of matches
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			r = -1
		}
		m := match(r)
		if m != inRun && i > start {
			dst = append(dst, s[start:i])
			start = i
		}
		inRun = m
		i += w
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}

// pretokTriples splits s at every [0-9][0-9][0-9] match, leftmost first.
func pretokTriples(s string, dst []string) []string {
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	start := 0
	for i := 0; i+3 <= len(s); {
		if digit(s[i]) && digit(s[i+1]) && digit(s[i+2]) {
			if i > start {
				dst = append(dst, s[start:i])
			}
			dst = append(dst, s[i:i+3])
			i += 3
			start = i
			continue
		}
		i++
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}
