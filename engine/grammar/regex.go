package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on the regular expressions RegexGBNF and the schema keyword
// "pattern" accept.
const (
	// maxPatternBytes bounds a pattern's text.
	maxPatternBytes = 1 << 16
	// maxRegexRepeat bounds the counts of x{m,n}, as Go's regexp does.
	maxRegexRepeat = 1000
	// maxRegexNesting bounds the nesting of groups.
	maxRegexNesting = 32
)

// RegexError reports a regular expression that does not parse.
type RegexError struct {
	Pos int // byte offset in the pattern
	Msg string
}

func (e *RegexError) Error() string {
	return fmt.Sprintf("grammar: regex at offset %d: %s", e.Pos, e.Msg)
}

// RegexGBNF compiles a regular expression to a GBNF grammar whose root rule
// matches exactly the strings the expression matches in full, as vLLM's
// guided_regex does (the pattern is anchored at both ends).
//
// The syntax and meaning are Go's regexp (RE2) on this subset: literals;
// escapes \d \w \s \D \W \S (ASCII, as in Go), escaped punctuation, \n \t
// \r \f \v \a, \xHH, \x{H...} and \uHHHH; . (any character but a
// newline); classes with ranges, negation and escapes; groups ( ), (?: )
// and named groups (?P<name> ) or (?<name> ), which match as plain groups;
// alternation; the repetitions * + ? {m} {m,} {m,n} (counts up to 1000), with
// or without the lazy suffix ?, which does not change what matches; and ^
// at the very start and $ at the very end of a top-level alternative.
// Anything else, such as backreferences, lookaround, word boundaries,
// Unicode classes (\p) and flags ((?i)), is refused with an
// [*UnsupportedError]; a pattern that does not parse with a [*RegexError].
func RegexGBNF(pattern string) (string, error) {
	branches, err := parseRegex(pattern)
	if err != nil {
		return "", err
	}
	rs := newRuleSet("")
	root := rs.reserve("root")
	e := &reEmitter{rs: rs, hint: "re"}
	alts := make([]string, len(branches))
	for i, b := range branches {
		alts[i] = e.emit(b.node).text
	}
	if err := rs.define(root, strings.Join(alts, " | ")); err != nil {
		return "", err
	}
	if !regexCanMatch(branches) {
		return "", &RegexError{Msg: "the pattern matches no string"}
	}
	return rs.text(), nil
}

// ChoiceGBNF returns a grammar matching exactly one of choices, as vLLM's
// guided_choice. It refuses an empty list.
func ChoiceGBNF(choices []string) (string, error) {
	if len(choices) == 0 {
		return "", fmt.Errorf("grammar: no choices")
	}
	alts := make([]string, len(choices))
	for i, c := range choices {
		if !utf8.ValidString(c) {
			return "", fmt.Errorf("grammar: choice %d is not valid UTF-8", i)
		}
		alts[i] = gbnfLiteral(c)
	}
	rs := newRuleSet("")
	if err := rs.define(rs.reserve("root"), strings.Join(alts, " | ")); err != nil {
		return "", err
	}
	return rs.text(), nil
}

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

// reEmitter writes the GBNF of a regular expression. In JSON mode the
// characters are those of a JSON string's contents, each written raw or
// escaped (see jsonChars).
type reEmitter struct {
	rs   *ruleSet
	hint string
	json bool
	// char is the rule for any JSON string character (JSON mode).
	char string
}

// gexpr is GBNF text and whether it is one item (that a repetition suffix
// may follow).
type gexpr struct {
	text   string
	single bool
}

func (e *reEmitter) emit(n *reNode) gexpr {
	switch n.op {
	case reEmpty:
		return gexpr{`""`, true}
	case reChars:
		if e.json {
			return e.jsonChars(n.ranges)
		}
		if len(n.ranges) == 1 && n.ranges[0].lo == n.ranges[0].hi {
			return gexpr{gbnfLiteral(string(n.ranges[0].lo)), true}
		}
		return gexpr{gbnfClass(n.ranges), true}
	case reConcat:
		var items []gexpr
		var lit strings.Builder
		flush := func() {
			if lit.Len() > 0 {
				items = append(items, gexpr{gbnfLiteral(lit.String()), true})
				lit.Reset()
			}
		}
		for _, s := range n.subs {
			if s.op == reChars && len(s.ranges) == 1 && s.ranges[0].lo == s.ranges[0].hi {
				if enc, ok := e.literal(s.ranges[0].lo); ok {
					lit.WriteString(enc)
					continue
				}
			}
			flush()
			items = append(items, e.emit(s))
		}
		flush()
		if len(items) == 1 {
			return items[0]
		}
		texts := make([]string, len(items))
		for i, it := range items {
			texts[i] = it.text
		}
		return gexpr{strings.Join(texts, " "), false}
	case reAlt:
		alts := make([]string, len(n.subs))
		for i, s := range n.subs {
			alts[i] = e.emit(s).text
		}
		return gexpr{"( " + strings.Join(alts, " | ") + " )", true}
	default: // reRepeat
		sub := e.emit(n.subs[0])
		copies := max(n.min, 1) + max(n.max-n.min, 0)
		// Only what cannot be empty goes in a rule: the automaton must
		// not call a rule that may match nothing inside a loop.
		lo, _, _ := n.subs[0].lengths()
		switch {
		case !sub.single && copies > 2 && lo > 0:
			sub = gexpr{e.rs.shared(e.hint, sub.text), true}
		case !sub.single:
			sub = gexpr{"( " + sub.text + " )", true}
		}
		if n.min == 1 && n.max == 1 {
			return sub
		}
		return gexpr{e.rs.repeat(sub.text, n.min, n.max, e.hint), false}
	}
}

// literal returns the one way to write r in a literal, if there is only
// one.
func (e *reEmitter) literal(r rune) (string, bool) {
	if !e.json {
		return string(r), true
	}
	encs := jsonEncodings(r)
	if len(encs) != 1 {
		return "", false
	}
	return encs[0], true
}

// JSON string characters, and the escapes (other than \u) that write
// them.
var (
	jsonRaw      = []rng{{0x20, 0x21}, {0x23, 0x5B}, {0x5D, utf8.MaxRune}}
	shortEscapes = map[rune]byte{'"': '"', '\\': '\\', '/': '/', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}
	// escapeOrder is shortEscapes' keys in order, for deterministic output.
	escapeOrder = []rune{'\b', '\t', '\n', '\f', '\r', '"', '/', '\\'}
)

// jsonEncodings lists the ways r may be written inside a JSON string of a
// "pattern" schema: raw where JSON allows, its short escape if it has one,
// and \u00XX (either case) for a control character.
func jsonEncodings(r rune) []string {
	var out []string
	if contains(jsonRaw, r) {
		out = append(out, string(r))
	}
	if c, ok := shortEscapes[r]; ok {
		out = append(out, `\`+string(c))
	}
	if r < 0x20 {
		lo, up := fmt.Sprintf(`\u%04x`, r), fmt.Sprintf(`\u%04X`, r)
		out = append(out, lo)
		if up != lo {
			out = append(out, up)
		}
	}
	return out
}

// jsonChars writes the JSON-string encodings of the characters rs: raw
// ones as a class, then short escapes, then \u00XX for control
// characters. Every code point gets the shared rule for any character,
// which also admits \uXXXX for the others.
func (e *reEmitter) jsonChars(rs []rng) gexpr {
	if len(subtract(anyChar, rs)) == 0 && e.char != "" {
		return gexpr{e.char, true}
	}
	if len(rs) == 1 && rs[0].lo == rs[0].hi {
		encs := jsonEncodings(rs[0].lo)
		alts := make([]string, len(encs))
		for i, s := range encs {
			alts[i] = gbnfLiteral(s)
		}
		if len(alts) == 1 {
			return gexpr{alts[0], true}
		}
		return gexpr{"( " + strings.Join(alts, " | ") + " )", true}
	}
	var alts []string
	if raw := intersect(rs, jsonRaw); len(raw) > 0 {
		alts = append(alts, gbnfClass(raw))
	}
	var esc []rng
	for _, r := range escapeOrder {
		if contains(rs, r) {
			c := rune(shortEscapes[r])
			esc = append(esc, rng{c, c})
		}
	}
	if len(esc) > 0 {
		alts = append(alts, `"\\" `+gbnfClass(normalize(esc)))
	}
	var ctl []string
	for hiNibble := range rune(2) {
		var low []rng
		for d := range rune(16) {
			if !contains(rs, hiNibble<<4|d) {
				continue
			}
			if d < 10 {
				low = append(low, rng{'0' + d, '0' + d})
			} else {
				low = append(low, rng{'a' + d - 10, 'a' + d - 10}, rng{'A' + d - 10, 'A' + d - 10})
			}
		}
		if len(low) > 0 {
			ctl = append(ctl, gbnfLiteral(string('0'+hiNibble))+" "+gbnfClass(normalize(low)))
		}
	}
	switch len(ctl) {
	case 0:
	case 1:
		alts = append(alts, `"\\u00" `+ctl[0])
	default:
		alts = append(alts, `"\\u00" ( `+strings.Join(ctl, " | ")+" )")
	}
	switch len(alts) {
	case 0:
		return gexpr{"[]", true}
	case 1:
		if !strings.Contains(alts[0], " ") {
			return gexpr{alts[0], true}
		}
		return gexpr{"( " + alts[0] + " )", true}
	}
	return gexpr{e.rs.shared(e.hint+"-char", strings.Join(alts, " | ")), true}
}

// A ruleSet collects the rules of a grammar being written: names unique
// and deterministic, in the order they were reserved.
type ruleSet struct {
	prefix string
	names  []string
	bodies map[string]string
	taken  map[string]bool
	memo   map[string]string // body → rule, for shared rules
	size   int
}

func newRuleSet(prefix string) *ruleSet {
	return &ruleSet{prefix: prefix, bodies: map[string]string{}, taken: map[string]bool{}, memo: map[string]string{}}
}

// maxHint bounds the part of a rule name that comes from a hint.
const maxHint = 48

// reserve returns a new rule name made of the prefix and hint (made a
// valid name), with a number added if it is taken.
func (rs *ruleSet) reserve(hint string) string {
	var b strings.Builder
	for _, r := range hint {
		if b.Len() >= maxHint {
			break
		}
		if r < utf8.RuneSelf && (isASCIIAlnum(r) || r == '-') {
			b.WriteRune(r)
		} else if !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	base := rs.prefix + strings.Trim(b.String(), "-")
	if base == rs.prefix {
		base += "r"
	}
	name := base
	for i := 2; rs.taken[name]; i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	rs.taken[name] = true
	rs.names = append(rs.names, name)
	return name
}

// define sets the body of a reserved rule; it fails once the grammar
// would be longer than MaxSourceBytes.
func (rs *ruleSet) define(name, body string) error {
	rs.bodies[name] = body
	rs.size += len(name) + len(body) + 6
	if rs.size > MaxSourceBytes {
		return fmt.Errorf("grammar: the grammar would be over %d bytes", MaxSourceBytes)
	}
	return nil
}

// add reserves and defines a rule. An error (the size limit) shows in
// text's caller through err.
func (rs *ruleSet) add(hint, body string) string {
	name := rs.reserve(hint)
	_ = rs.define(name, body)
	return name
}

// shared returns a rule with this body, the same one each time.
func (rs *ruleSet) shared(hint, body string) string {
	if name, ok := rs.memo[body]; ok {
		return name
	}
	name := rs.add(hint, body)
	rs.memo[body] = name
	return name
}

// err reports whether the grammar grew past the size limit.
func (rs *ruleSet) err() error {
	if rs.size > MaxSourceBytes {
		return fmt.Errorf("grammar: the grammar would be over %d bytes", MaxSourceBytes)
	}
	return nil
}

// text returns the rules, one a line, in the order reserved.
func (rs *ruleSet) text() string {
	var b strings.Builder
	for _, n := range rs.names {
		if body, ok := rs.bodies[n]; ok {
			b.WriteString(n)
			b.WriteString(" ::= ")
			b.WriteString(body)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// repeat writes item x (one item) repeated lo to hi times (hi unbounded
// for no limit). Counts over the parser's limit are split into blocks,
// each a rule: x{4500} is blk{2} x{500} with blk ::= x{2000}.
func (rs *ruleSet) repeat(x string, lo, hi int, hint string) string {
	switch {
	case hi == unbounded && lo == 0:
		return x + "*"
	case hi == unbounded && lo == 1:
		return x + "+"
	case hi == unbounded:
		return rs.exact(x, lo, hint) + " " + x + "*"
	case lo == 0 && hi == 0:
		return `""`
	case lo == 0 && hi == 1:
		return x + "?"
	case lo == hi:
		return rs.exact(x, lo, hint)
	case hi <= maxRepeat:
		return fmt.Sprintf("%s{%d,%d}", x, lo, hi)
	case lo == 0:
		return rs.upTo(x, hi, hint)
	}
	return rs.exact(x, lo, hint) + " " + rs.upTo(x, hi-lo, hint)
}

func (rs *ruleSet) exact(x string, n int, hint string) string {
	switch {
	case n == 1:
		return x
	case n <= maxRepeat:
		return fmt.Sprintf("%s{%d}", x, n)
	}
	blk := rs.shared(hint+"-blk", fmt.Sprintf("%s{%d}", x, maxRepeat))
	out := rs.exact(blk, n/maxRepeat, hint)
	if r := n % maxRepeat; r > 0 {
		out += " " + rs.exact(x, r, hint)
	}
	return out
}

// upTo writes x repeated 0 to n times, n > maxRepeat: fewer than q full
// blocks then up to a block less one, or q blocks then up to the rest.
func (rs *ruleSet) upTo(x string, n int, hint string) string {
	if n <= maxRepeat {
		return rs.repeat(x, 0, n, hint)
	}
	blk := rs.shared(hint+"-blk", fmt.Sprintf("%s{%d}", x, maxRepeat))
	q, r := n/maxRepeat, n%maxRepeat
	low := rs.upTo(blk, q-1, hint) + " " + rs.repeat(x, 0, maxRepeat-1, hint)
	high := rs.exact(blk, q, hint)
	if r > 0 {
		high += " " + rs.repeat(x, 0, r, hint)
	}
	return "( " + low + " | " + high + " )"
}

// gbnfLiteral writes s as a GBNF string literal.
func gbnfLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			writeGBNFRune(&b, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// gbnfClass writes sorted, merged ranges as a GBNF class, negated where
// that is shorter. Empty ranges give [], which matches nothing.
func gbnfClass(rs []rng) string {
	// The surrogates are no characters: a class may hold them or not.
	neg := subtract(complement(rs), surrogates)
	negated := len(rs) > 0 && len(neg) < len(rs)
	var b strings.Builder
	b.WriteByte('[')
	list := rs
	if negated {
		b.WriteByte('^')
		list = neg
	}
	for _, r := range list {
		writeClassRune(&b, r.lo)
		if r.hi > r.lo {
			if r.hi > r.lo+1 {
				b.WriteByte('-')
			}
			writeClassRune(&b, r.hi)
		}
	}
	b.WriteByte(']')
	return b.String()
}

func writeClassRune(b *strings.Builder, r rune) {
	switch r {
	case ']', '[', '\\', '^', '-':
		b.WriteByte('\\')
		b.WriteRune(r)
	default:
		writeGBNFRune(b, r)
	}
}

// writeGBNFRune writes r as itself if printable, else as an escape.
func writeGBNFRune(b *strings.Builder, r rune) {
	switch {
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r == '\t':
		b.WriteString(`\t`)
	case r < 0x20 || r == 0x7F:
		fmt.Fprintf(b, `\x%02X`, r)
	case r < utf8.RuneSelf || unicode.IsPrint(r) && r != utf8.RuneError:
		b.WriteRune(r)
	case r <= 0xFFFF:
		fmt.Fprintf(b, `\u%04X`, r)
	default:
		fmt.Fprintf(b, `\U%08X`, r)
	}
}
