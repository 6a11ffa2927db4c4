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
