package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The syntax tree of a regular expression.
type (
	reOp   uint8
	reNode struct {
		op       reOp
		ranges   []rng // reChars: the code points (sorted, merged, no surrogates)
		subs     []*reNode
		min, max int // reRepeat: the count, max -1 for unbounded
	}
	// reBranch is a top-level alternative with its anchors.
	reBranch struct {
		node       *reNode
		start, end bool // anchored by ^ at the start, $ at the end
	}
)

const (
	reEmpty  reOp = iota // the empty string
	reChars              // one character of a set (an empty set matches nothing)
	reConcat             // subs in sequence
	reAlt                // one of subs
	reRepeat             // subs[0], min to max times
)

var (
	// anyChar is every character: "." with newlines, the Σ of a search.
	anyChar = []rng{{0, 0xD7FF}, {0xE000, utf8.MaxRune}}
	// surrogates are code points no valid UTF-8 string holds.
	surrogates = []rng{{0xD800, 0xDFFF}}
)

func newConcat(items []*reNode) *reNode {
	var flat []*reNode
	for _, it := range items {
		switch it.op {
		case reConcat:
			flat = append(flat, it.subs...)
		case reEmpty:
		default:
			flat = append(flat, it)
		}
	}
	switch len(flat) {
	case 0:
		return &reNode{op: reEmpty}
	case 1:
		return flat[0]
	}
	return &reNode{op: reConcat, subs: flat}
}

func newAlt(subs []*reNode) *reNode {
	if len(subs) == 1 {
		return subs[0]
	}
	return &reNode{op: reAlt, subs: subs}
}

type reParser struct {
	src   string
	i     int
	depth int
}

// parseRegex parses a pattern into its top-level alternatives.
func parseRegex(src string) ([]reBranch, error) {
	if len(src) > maxPatternBytes {
		return nil, &RegexError{Msg: fmt.Sprintf("the pattern is %d bytes, the limit is %d", len(src), maxPatternBytes)}
	}
	if !utf8.ValidString(src) {
		return nil, &RegexError{Msg: "the pattern is not valid UTF-8"}
	}
	p := &reParser{src: src}
	var out []reBranch
	for {
		var b reBranch
		if p.more() && p.src[p.i] == '^' {
			p.i++
			b.start = true
		}
		n, end, err := p.concat()
		if err != nil {
			return nil, err
		}
		b.node, b.end = n, end
		out = append(out, b)
		if !p.more() {
			return out, nil
		}
		if p.src[p.i] == ')' {
			return nil, p.errf(p.i, "unexpected )")
		}
		p.i++ // |
	}
}

func (p *reParser) more() bool { return p.i < len(p.src) }

func (p *reParser) errf(pos int, format string, args ...any) error {
	return &RegexError{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *reParser) unsupported(pos int, feature string) error {
	return &UnsupportedError{Feature: "regex " + feature, At: fmt.Sprintf("offset %d", pos)}
}

// concat parses items up to |, ) or the end. At the top level a $ right
// before | or the end anchors the alternative, and is reported.
func (p *reParser) concat() (*reNode, bool, error) {
	var items []*reNode
	for p.more() {
		c := p.src[p.i]
		if c == '|' || c == ')' {
			break
		}
		if c == '$' {
			at := p.i
			p.i++
			if p.depth == 0 && (!p.more() || p.src[p.i] == '|') {
				return newConcat(items), true, nil
			}
			return nil, false, p.unsupported(at, "anchor $ other than at the end")
		}
		n, err := p.repeat()
		if err != nil {
			return nil, false, err
		}
		items = append(items, n)
	}
	return newConcat(items), false, nil
}

// alt parses alternatives inside a group.
func (p *reParser) alt() (*reNode, error) {
	var subs []*reNode
	for {
		n, _, err := p.concat()
		if err != nil {
			return nil, err
		}
		subs = append(subs, n)
		if p.more() && p.src[p.i] == '|' {
			p.i++
			continue
		}
		return newAlt(subs), nil
	}
}

// repeat parses an atom and its repetition, if any.
func (p *reParser) repeat() (*reNode, error) {
	n, err := p.atom()
	if err != nil {
		return nil, err
	}
	at := p.i
	min, max, ok, err := p.quantifier()
	if err != nil || !ok {
		return n, err
	}
	n = &reNode{op: reRepeat, subs: []*reNode{n}, min: min, max: max}
	if p.more() && p.src[p.i] == '?' { // lazy: the same strings match
		p.i++
	} else if p.more() && p.src[p.i] == '+' {
		return nil, p.unsupported(at, "possessive repetition")
	}
	save := p.i
	if _, _, again, _ := p.quantifier(); again {
		return nil, p.errf(save, "nested repetition operator %q", p.src[at:p.i])
	}
	p.i = save
	return n, nil
}

// quantifier parses * + ? {m} {m,} or {m,n}; ok is false, and nothing is
// consumed, if none is here (a { that does not start one is a literal).
func (p *reParser) quantifier() (min, max int, ok bool, err error) {
	if !p.more() {
		return 0, 0, false, nil
	}
	switch p.src[p.i] {
	case '*':
		p.i++
		return 0, -1, true, nil
	case '+':
		p.i++
		return 1, -1, true, nil
	case '?':
		p.i++
		return 0, 1, true, nil
	case '{':
	default:
		return 0, 0, false, nil
	}
	start := p.i
	bad := false
	// num reads a count; ok is false if there are no digits. As in Go,
	// a count with a leading zero makes the { a literal.
	num := func() (int, bool) {
		s := p.i
		for p.more() && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
			p.i++
		}
		if s == p.i {
			return 0, false
		}
		if p.i-s > 1 && p.src[s] == '0' {
			bad = true
		}
		n, err := strconv.Atoi(p.src[s:p.i])
		if err != nil || n > maxRegexRepeat {
			return maxRegexRepeat + 1, true
		}
		return n, true
	}
	p.i++
	min, okMin := num()
	max = min
	if p.more() && p.src[p.i] == ',' {
		p.i++
		var okMax bool
		if max, okMax = num(); !okMax {
			max = -1
		}
		if !okMin && okMax && !bad && p.more() && p.src[p.i] == '}' {
			return 0, 0, false, p.errf(start, "repetition %s has no minimum (write {0,n})", p.src[start:p.i+1])
		}
	}
	if !okMin || bad || !p.more() || p.src[p.i] != '}' {
		p.i = start // a literal {
		return 0, 0, false, nil
	}
	p.i++
	if min > maxRegexRepeat || max > maxRegexRepeat {
		return 0, 0, false, p.errf(start, "repetition count over %d", maxRegexRepeat)
	}
	if max >= 0 && max < min {
		return 0, 0, false, p.errf(start, "repetition %s: the maximum is below the minimum", p.src[start:p.i])
	}
	return min, max, true, nil
}

func (p *reParser) atom() (*reNode, error) {
	start := p.i
	c := p.src[p.i]
	switch c {
	case '(':
		return p.group()
	case '[':
		return p.class()
	case '.':
		p.i++
		return &reNode{op: reChars, ranges: subtract(anyChar, []rng{{'\n', '\n'}})}, nil
	case '\\':
		rs, _, err := p.escape()
		if err != nil {
			return nil, err
		}
		return &reNode{op: reChars, ranges: subtract(rs, surrogates)}, nil
	case '*', '+', '?':
		return nil, p.errf(start, "missing argument to repetition operator %q", c)
	case '{':
		if _, _, ok, err := p.quantifier(); ok || err != nil {
			p.i = start
			return nil, p.errf(start, "missing argument to repetition operator")
		}
	case '^':
		return nil, p.unsupported(start, "anchor ^ other than at the start")
	}
	r, n := utf8.DecodeRuneInString(p.src[p.i:])
	p.i += n
	return &reNode{op: reChars, ranges: []rng{{r, r}}}, nil
}

func (p *reParser) group() (*reNode, error) {
	start := p.i
	p.i++
	rest := p.src[p.i:]
	switch {
	case !strings.HasPrefix(rest, "?"):
	case strings.HasPrefix(rest, "?:"):
		p.i += 2
	case strings.HasPrefix(rest, "?P<") || strings.HasPrefix(rest, "?<") && !strings.HasPrefix(rest, "?<=") && !strings.HasPrefix(rest, "?<!"):
		// A named group matches as a plain one: nothing can refer to it.
		p.i += strings.IndexByte(rest, '<') + 1
		end := strings.IndexByte(p.src[p.i:], '>')
		if end <= 0 {
			return nil, p.errf(start, "bad named group")
		}
		for _, r := range p.src[p.i : p.i+end] {
			if r != '_' && !isASCIIAlnum(r) {
				return nil, p.errf(start, "bad group name %q", p.src[p.i:p.i+end])
			}
		}
		p.i += end + 1
	case strings.HasPrefix(rest, "?=") || strings.HasPrefix(rest, "?!"):
		return nil, p.unsupported(start, "lookahead "+strconv.Quote("("+rest[:2]))
	case strings.HasPrefix(rest, "?<=") || strings.HasPrefix(rest, "?<!"):
		return nil, p.unsupported(start, "lookbehind "+strconv.Quote("("+rest[:3]))
	case strings.HasPrefix(rest, "?P="):
		return nil, p.unsupported(start, "backreference (?P=")
	case strings.HasPrefix(rest, "?>"):
		return nil, p.unsupported(start, "atomic group (?>")
	default:
		end := strings.IndexAny(rest, ":)")
		if end < 0 {
			end = len(rest) - 1
		}
		return nil, p.unsupported(start, "flags "+strconv.Quote("("+rest[:end+1]))
	}
	p.depth++
	if p.depth > maxRegexNesting {
		return nil, p.errf(start, "groups nest deeper than %d", maxRegexNesting)
	}
	n, err := p.alt()
	if err != nil {
		return nil, err
	}
	if !p.more() || p.src[p.i] != ')' {
		return nil, p.errf(start, "missing )")
	}
	p.i++
	p.depth--
	return n, nil
}

// class parses [...] or [^...]. A ] right after [ or [^ is a literal, as
// is a - that cannot make a range.
func (p *reParser) class() (*reNode, error) {
	start := p.i
	p.i++
	negate := false
	if p.more() && p.src[p.i] == '^' {
		negate = true
		p.i++
	}
	var rs []rng
	for first := true; ; first = false {
		if !p.more() {
			return nil, p.errf(start, "missing ]")
		}
		if p.src[p.i] == ']' && !first {
			p.i++
			break
		}
		if strings.HasPrefix(p.src[p.i:], "[:") {
			return nil, p.unsupported(p.i, "POSIX class [:name:]")
		}
		at := p.i
		lo, multi, err := p.classChar()
		if err != nil {
			return nil, err
		}
		if multi || p.i+1 >= len(p.src) || p.src[p.i] != '-' || p.src[p.i+1] == ']' {
			rs = append(rs, lo...)
			continue
		}
		p.i++
		hi, multi, err := p.classChar()
		if err != nil {
			return nil, err
		}
		if multi || hi[0].lo < lo[0].lo {
			return nil, p.errf(at, "invalid class range %q", p.src[at:p.i])
		}
		rs = append(rs, rng{lo[0].lo, hi[0].lo})
	}
	rs = normalize(rs)
	if negate {
		rs = complement(rs)
	}
	return &reNode{op: reChars, ranges: subtract(rs, surrogates)}, nil
}

// classChar reads one character of a class or a class escape (multi).
func (p *reParser) classChar() ([]rng, bool, error) {
	if p.src[p.i] == '\\' {
		return p.escape()
	}
	r, n := utf8.DecodeRuneInString(p.src[p.i:])
	p.i += n
	return []rng{{r, r}}, false, nil
}

// Go's ASCII Perl classes.
var (
	digitRanges = []rng{{'0', '9'}}
	wordRanges  = []rng{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	spaceRanges = []rng{{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}
)

// escape reads an escape; multi reports a class (\d and the like).
func (p *reParser) escape() (rs []rng, multi bool, err error) {
	start := p.i
	if p.i+1 >= len(p.src) {
		return nil, false, p.errf(start, "trailing backslash")
	}
	c, n := utf8.DecodeRuneInString(p.src[p.i+1:])
	p.i += 1 + n
	one := func(r rune) ([]rng, bool, error) { return []rng{{r, r}}, false, nil }
	switch c {
	case 'd':
		return digitRanges, true, nil
	case 'w':
		return wordRanges, true, nil
	case 's':
		return spaceRanges, true, nil
	case 'D':
		return subtract(anyChar, digitRanges), true, nil
	case 'W':
		return subtract(anyChar, wordRanges), true, nil
	case 'S':
		return subtract(anyChar, spaceRanges), true, nil
	case 'n':
		return one('\n')
	case 't':
		return one('\t')
	case 'r':
		return one('\r')
	case 'f':
		return one('\f')
	case 'v':
		return one('\v')
	case 'a':
		return one('\a')
	case 'x', 'u':
		var hex string
		switch {
		case c == 'x' && strings.HasPrefix(p.src[p.i:], "{"):
			end := strings.IndexByte(p.src[p.i:], '}')
			if end < 0 {
				return nil, false, p.errf(start, "missing } in \\x{...}")
			}
			hex = p.src[p.i+1 : p.i+end]
			p.i += end + 1
		default:
			width := map[rune]int{'x': 2, 'u': 4}[c]
			if p.i+width > len(p.src) {
				return nil, false, p.errf(start, "short \\%c escape", c)
			}
			hex = p.src[p.i : p.i+width]
			p.i += width
		}
		v, err := strconv.ParseUint(hex, 16, 32)
		if err != nil || hex == "" || v > utf8.MaxRune || strings.ContainsAny(hex, "+-") {
			return nil, false, p.errf(start, "bad escape %q", p.src[start:p.i])
		}
		return one(rune(v)) // a surrogate matches nothing (see atom, class)
	case 'b', 'B', 'A', 'z', 'Z', 'G':
		return nil, false, p.unsupported(start, "assertion \\"+string(c))
	case 'p', 'P':
		return nil, false, p.unsupported(start, "Unicode class \\"+string(c))
	case 'k':
		return nil, false, p.unsupported(start, "backreference \\k")
	case 'Q', 'E':
		return nil, false, p.unsupported(start, "quoting \\Q...\\E")
	case 'c':
		return nil, false, p.unsupported(start, "control escape \\c")
	}
	if c >= '0' && c <= '9' {
		return nil, false, p.unsupported(start, "backreference or octal escape \\"+string(c))
	}
	if c < utf8.RuneSelf && !isASCIIAlnum(c) {
		return one(c) // escaped punctuation stands for itself
	}
	return nil, false, p.errf(start, "unknown escape %q", p.src[start:p.i])
}

func isASCIIAlnum(r rune) bool {
	return r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

// subtract returns the code points of a not in b (both sorted, merged).
func subtract(a, b []rng) []rng {
	return intersect(a, complement(b))
}

// intersect returns the code points in both a and b (sorted, merged).
func intersect(a, b []rng) []rng {
	var out []rng
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, rng{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

func contains(rs []rng, r rune) bool {
	for _, x := range rs {
		if r >= x.lo && r <= x.hi {
			return true
		}
	}
	return false
}

// unbounded marks a length without a maximum.
const unbounded = -1

// lengths returns the fewest and most characters n matches (hi unbounded
// when there is no most), and ok false if it matches nothing.
func (n *reNode) lengths() (lo, hi int, ok bool) {
	const big = 1 << 30
	switch n.op {
	case reEmpty:
		return 0, 0, true
	case reChars:
		return 1, 1, len(n.ranges) > 0
	case reConcat:
		for _, s := range n.subs {
			l, h, ok := s.lengths()
			if !ok {
				return 0, 0, false
			}
			lo = min(lo+l, big)
			if hi != unbounded {
				if h == unbounded {
					hi = unbounded
				} else {
					hi = min(hi+h, big)
				}
			}
		}
		return lo, hi, true
	case reAlt:
		lo = big
		for _, s := range n.subs {
			l, h, sok := s.lengths()
			if !sok {
				continue
			}
			if !ok {
				lo, hi, ok = l, h, true
				continue
			}
			lo = min(lo, l)
			if hi != unbounded && (h == unbounded || h > hi) {
				hi = h
			}
		}
		return lo, hi, ok
	default: // reRepeat
		l, h, ok := n.subs[0].lengths()
		if !ok {
			return 0, 0, n.min == 0
		}
		lo = min(l*n.min, big)
		switch {
		case h == 0:
			hi = 0
		case h == unbounded || n.max == unbounded:
			hi = unbounded
		default:
			hi = min(h*n.max, big)
		}
		return lo, hi, true
	}
}

func regexCanMatch(bs []reBranch) bool {
	for _, b := range bs {
		if _, _, ok := b.node.lengths(); ok {
			return true
		}
	}
	return false
}

// restrictLength returns n limited to strings of lo to hi characters (hi
// unbounded for no limit), or ok false where that takes more than
// adjusting one repetition: it handles n already within the limits, a
// sequence with one part of variable length, alternatives, and a
// repetition of something of fixed length.
func restrictLength(n *reNode, lo, hi int) (*reNode, bool) {
	l, h, ok := n.lengths()
	if !ok {
		return n, true
	}
	if l >= lo && (hi == unbounded || h != unbounded && h <= hi) {
		return n, true
	}
	none := &reNode{op: reChars}
	if hi != unbounded && (l > hi) || h != unbounded && h < lo {
		return none, true
	}
	switch n.op {
	case reConcat:
		fixed, varying := 0, -1
		for i, s := range n.subs {
			sl, sh, _ := s.lengths()
			if sl == sh {
				fixed += sl
				continue
			}
			if varying >= 0 {
				return nil, false
			}
			varying = i
		}
		sub, ok := restrictLength(n.subs[varying], max(lo-fixed, 0), sub0(hi, fixed))
		if !ok {
			return nil, false
		}
		subs := append([]*reNode(nil), n.subs...)
		subs[varying] = sub
		return &reNode{op: reConcat, subs: subs}, true
	case reAlt:
		subs := make([]*reNode, len(n.subs))
		for i, s := range n.subs {
			if subs[i], ok = restrictLength(s, lo, hi); !ok {
				return nil, false
			}
		}
		return &reNode{op: reAlt, subs: subs}, true
	case reRepeat:
		k, kh, _ := n.subs[0].lengths()
		if k != kh || k == 0 {
			return nil, false
		}
		cmin := max(n.min, (lo+k-1)/k)
		cmax := n.max
		if hi != unbounded && (cmax == unbounded || hi/k < cmax) {
			cmax = hi / k
		}
		if cmax != unbounded && cmax < cmin {
			return none, true
		}
		return &reNode{op: reRepeat, subs: n.subs, min: cmin, max: cmax}, true
	}
	return nil, false
}

// sub0 is hi-d, unbounded staying unbounded (hi ≥ d, checked before).
func sub0(hi, d int) int {
	if hi == unbounded {
		return unbounded
	}
	return max(hi-d, 0)
}
