package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on what Parse accepts, so that a hostile grammar cannot make the
// compiler or the automaton grow without bound.
const (
	// MaxSourceBytes bounds a grammar's text.
	MaxSourceBytes = 1 << 20
	// maxRepeat bounds the counts of x{m,n} (llama.cpp allows 2000).
	maxRepeat = 2000
	// maxStates bounds the compiled automaton (about 100 bytes a state).
	maxStates = 1 << 18
	// maxNesting bounds parentheses.
	maxNesting = 100
)

// SyntaxError reports a grammar that does not parse, with the line and
// column (1-based, in bytes) where parsing stopped.
type SyntaxError struct {
	Line, Col int
	Msg       string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("grammar: line %d col %d: %s", e.Line, e.Col, e.Msg)
}

// The syntax tree of a grammar: a rule is a choice of sequences of items.
type (
	choice []sequence
	seq    = []item
	// item is one element with its repetition: min to max times (max -1:
	// unbounded).
	item struct {
		kind     itemKind
		text     string // itemLiteral: the UTF-8 bytes to match
		ranges   []rng  // itemClass: code point ranges (sorted, merged)
		name     string // itemRef: the rule
		group    choice // itemGroup
		min, max int
		pos      int // offset in the source, for errors
	}
	sequence = seq
	itemKind uint8
	// rng is an inclusive range of code points.
	rng struct{ lo, hi rune }
)

const (
	itemLiteral itemKind = iota
	itemClass
	itemRef
	itemGroup
)

// syntax is a parsed grammar: its rules by name, in order of definition.
type syntax struct {
	names []string
	rules map[string]choice
	pos   map[string]int
}

type parser struct {
	src   string
	i     int
	depth int
}

// parse parses GBNF text as llama.cpp defines it (grammars/README.md):
// rules `name ::= alternatives`, string literals, character classes with
// ranges and negation, `.`, groups, `|`, `*`, `+`, `?`, `{m}`, `{m,}`,
// `{m,n}` and `#` comments. A rule's alternatives end at the end of the
// line unless inside parentheses or right after `|` or `::=`. Token
// references (`<[id]>`, `<name>`) are not supported.
func parse(src string) (*syntax, error) {
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("grammar: the grammar is %d bytes, the limit is %d", len(src), MaxSourceBytes)
	}
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("grammar: the grammar is not valid UTF-8")
	}
	p := &parser{src: src}
	g := &syntax{rules: map[string]choice{}, pos: map[string]int{}}
	p.space(true)
	for p.i < len(p.src) {
		start := p.i
		name := p.name()
		if name == "" {
			return nil, p.errf("expected a rule name")
		}
		p.space(false)
		if !strings.HasPrefix(p.src[p.i:], "::=") {
			return nil, p.errf("expected ::= after %q", name)
		}
		p.i += 3
		p.space(true)
		c, err := p.choice()
		if err != nil {
			return nil, err
		}
		if _, dup := g.rules[name]; dup {
			return nil, p.errAt(start, "rule %q is defined twice", name)
		}
		g.names = append(g.names, name)
		g.rules[name] = c
		g.pos[name] = start
		// The rule ends at a newline (or the end of the text).
		p.space(false)
		if p.i < len(p.src) && p.src[p.i] != '\n' && p.src[p.i] != '\r' {
			return nil, p.errf("unexpected %q", p.peekRune())
		}
		p.space(true)
	}
	for _, name := range g.names {
		if err := g.checkRefs(g.rules[name]); err != nil {
			return nil, err
		}
	}
	if _, ok := g.rules["root"]; !ok {
		return nil, &SyntaxError{Line: 1, Col: 1, Msg: "the grammar has no root rule"}
	}
	return g, nil
}

func (g *syntax) checkRefs(c choice) error {
	for _, s := range c {
		for _, it := range s {
			switch it.kind {
			case itemRef:
				if _, ok := g.rules[it.name]; !ok {
					return fmt.Errorf("grammar: rule %q is used but not defined", it.name)
				}
			case itemGroup:
				if err := g.checkRefs(it.group); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (p *parser) errf(format string, args ...any) error { return p.errAt(p.i, format, args...) }

func (p *parser) errAt(at int, format string, args ...any) error {
	line := 1 + strings.Count(p.src[:at], "\n")
	col := at - strings.LastIndexByte(p.src[:at], '\n')
	return &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) peekRune() string {
	r, _ := utf8.DecodeRuneInString(p.src[p.i:])
	return string(r)
}

// space skips blanks and comments, and newlines when newlines is set.
func (p *parser) space(newlines bool) {
	for p.i < len(p.src) {
		switch c := p.src[p.i]; {
		case c == ' ' || c == '\t':
			p.i++
		case c == '#':
			for p.i < len(p.src) && p.src[p.i] != '\n' && p.src[p.i] != '\r' {
				p.i++
			}
		case (c == '\n' || c == '\r') && newlines:
			p.i++
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *parser) name() string {
	start := p.i
	for p.i < len(p.src) && isNameByte(p.src[p.i]) {
		p.i++
	}
	return p.src[start:p.i]
}

// choice parses alternatives separated by |.
func (p *parser) choice() (choice, error) {
	var c choice
	for {
		s, err := p.sequence()
		if err != nil {
			return nil, err
		}
		c = append(c, s)
		if p.i < len(p.src) && p.src[p.i] == '|' {
			p.i++
			p.space(true)
			continue
		}
		return c, nil
	}
}

// sequence parses items up to |, ), a newline outside parentheses, or the
// end.
func (p *parser) sequence() (sequence, error) {
	var s sequence
	for {
		p.space(p.depth > 0)
		if p.i >= len(p.src) {
			return s, nil
		}
		c := p.src[p.i]
		if c == '|' || c == ')' || c == '\n' || c == '\r' {
			return s, nil
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		s = append(s, it)
	}
}

// item parses one element and its repetition suffix.
func (p *parser) item() (item, error) {
	start := p.i
	var it item
	switch c := p.src[p.i]; {
	case c == '"':
		p.i++
		var b strings.Builder
		for {
			if p.i >= len(p.src) {
				return item{}, p.errAt(start, "unterminated string literal")
			}
			if p.src[p.i] == '"' {
				p.i++
				break
			}
			if p.src[p.i] == '\n' || p.src[p.i] == '\r' {
				return item{}, p.errf("newline in a string literal (write \\n)")
			}
			r, err := p.char()
			if err != nil {
				return item{}, err
			}
			b.WriteRune(r)
		}
		it = item{kind: itemLiteral, text: b.String()}
	case c == '[':
		ranges, err := p.class()
		if err != nil {
			return item{}, err
		}
		it = item{kind: itemClass, ranges: ranges}
	case c == '.':
		p.i++
		it = item{kind: itemClass, ranges: []rng{{0, utf8.MaxRune}}}
	case c == '(':
		p.i++
		p.depth++
		if p.depth > maxNesting {
			return item{}, p.errf("parentheses nest deeper than %d", maxNesting)
		}
		p.space(true)
		g, err := p.choice()
		if err != nil {
			return item{}, err
		}
		p.space(true)
		if p.i >= len(p.src) || p.src[p.i] != ')' {
			return item{}, p.errAt(start, "unclosed (")
		}
		p.i++
		p.depth--
		it = item{kind: itemGroup, group: g}
	case c == '<' || c == '!':
		return item{}, p.errf("token references (<...>) are not supported")
	case isNameByte(c):
		name := p.name()
		p.space(false)
		if strings.HasPrefix(p.src[p.i:], "::=") {
			return item{}, p.errAt(start, "missing newline before the rule %q", name)
		}
		it = item{kind: itemRef, name: name}
	default:
		return item{}, p.errf("unexpected %q", p.peekRune())
	}
	it.pos = start
	it.min, it.max = 1, 1
	p.space(p.depth > 0)
	if p.i >= len(p.src) {
		return it, nil
	}
	switch p.src[p.i] {
	case '*':
		p.i++
		it.min, it.max = 0, -1
	case '+':
		p.i++
		it.min, it.max = 1, -1
	case '?':
		p.i++
		it.min, it.max = 0, 1
	case '{':
		min, max, err := p.braces()
		if err != nil {
			return item{}, err
		}
		it.min, it.max = min, max
	default:
		return it, nil
	}
	return it, nil
}

// braces parses {m}, {m,} or {m,n}.
func (p *parser) braces() (int, int, error) {
	start := p.i
	p.i++
	p.space(true)
	num := func() (int, bool) {
		s := p.i
		for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
			p.i++
		}
		if s == p.i {
			return 0, false
		}
		n, err := strconv.Atoi(p.src[s:p.i])
		if err != nil || n > maxRepeat {
			return maxRepeat + 1, true
		}
		return n, true
	}
	min, ok := num()
	if !ok {
		return 0, 0, p.errf("expected a number after {")
	}
	max := min
	p.space(true)
	if p.i < len(p.src) && p.src[p.i] == ',' {
		p.i++
		p.space(true)
		var ok bool
		if max, ok = num(); !ok {
			max = -1
		}
		p.space(true)
	}
	if p.i >= len(p.src) || p.src[p.i] != '}' {
		return 0, 0, p.errAt(start, "unclosed {")
	}
	p.i++
	if min > maxRepeat || max > maxRepeat {
		return 0, 0, p.errAt(start, "repetition count over %d", maxRepeat)
	}
	if max >= 0 && max < min {
		return 0, 0, p.errAt(start, "repetition {%d,%d}: the maximum is below the minimum", min, max)
	}
	return min, max, nil
}

// class parses [...] or [^...] into sorted, merged code point ranges.
func (p *parser) class() ([]rng, error) {
	start := p.i
	p.i++
	negate := false
	if p.i < len(p.src) && p.src[p.i] == '^' {
		negate = true
		p.i++
	}
	var rs []rng
	for {
		if p.i >= len(p.src) {
			return nil, p.errAt(start, "unterminated character class")
		}
		if p.src[p.i] == ']' {
			p.i++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.i+1 < len(p.src) && p.src[p.i] == '-' && p.src[p.i+1] != ']' {
			p.i++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errf("character range %q-%q is reversed", lo, hi)
			}
		}
		rs = append(rs, rng{lo, hi})
	}
	rs = normalize(rs)
	if negate {
		rs = complement(rs)
	}
	return rs, nil
}

// char reads one character of a literal or class, decoding escapes.
func (p *parser) char() (rune, error) {
	if p.src[p.i] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.i:])
		p.i += n
		return r, nil
	}
	if p.i+1 >= len(p.src) {
		return 0, p.errf("escape at the end of the grammar")
	}
	c := p.src[p.i+1]
	p.i += 2
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '/':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.i+n > len(p.src) {
			return 0, p.errf("short \\%c escape", c)
		}
		v, err := strconv.ParseUint(p.src[p.i:p.i+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errf("bad \\%c escape %q", c, p.src[p.i:p.i+n])
		}
		p.i += n
		return rune(v), nil
	}
	return 0, p.errAt(p.i-2, "unknown escape \\%c", c)
}

// normalize sorts and merges ranges.
func normalize(rs []rng) []rng {
	if len(rs) == 0 {
		return rs
	}
	out := append([]rng(nil), rs...)
	for i := 1; i < len(out); i++ { // insertion sort: classes are short
		for j := i; j > 0 && out[j].lo < out[j-1].lo; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	merged := out[:1]
	for _, r := range out[1:] {
		last := &merged[len(merged)-1]
		if r.lo <= last.hi+1 {
			last.hi = max(last.hi, r.hi)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// complement returns the code points in [0, MaxRune] not in the sorted,
// merged ranges rs.
func complement(rs []rng) []rng {
	var out []rng
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, rng{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, rng{next, utf8.MaxRune})
	}
	return out
}
