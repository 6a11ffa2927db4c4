package grammar

import (
	"math/rand/v2"
	"regexp"
	resyntax "regexp/syntax"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// matcher returns a full-match function for g that reuses one automaton,
// which is much faster than Grammar.Match over many strings.
func matcher(g *Grammar) func(string) bool {
	a := newAutomaton(g)
	return func(s string) bool {
		x := a.walk(a.start(), []byte(s))
		return x != dead && a.sets[x].end
	}
}

// goFull compiles pattern with Go's regexp for a full match.
func goFull(t testing.TB, pattern string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	require.NoError(t, err, pattern)
	return re
}

func TestRegexGBNF(t *testing.T) {
	tests := map[string]struct {
		pattern string
		goExpr  string // Go's spelling, where it differs
		strs    []string
	}{
		"literal":         {pattern: `abc`, strs: []string{"abc", "ab", "abcd", ""}},
		"alternation":     {pattern: `a|bc|`, strs: []string{"a", "bc", "", "b", "abc"}},
		"star plus quest": {pattern: `a*b+c?`, strs: []string{"b", "aabbc", "c", "abcc", "aab"}},
		"counted":         {pattern: `x{2}y{1,3}z{2,}`, strs: []string{"xxyzz", "xxyyyzzzz", "xyzz", "xxyyyyzz", "xxyz"}},
		"lazy":            {pattern: `a+?b*?c??d{1,2}?`, strs: []string{"a", "abbcd", "aadd", "ad", "b"}},
		"classes":         {pattern: `[a-c][^a-c\n][\d_x-]`, strs: []string{"ad1", "b\u00e9_", "cz-", "aa1", "a\n1", "bdx", "bdy"}},
		"class edge":      {pattern: `[]a][^]b][a-b-c][\d-z]`, strs: []string{"]x-z", "a]c5", "bx-z", "]]a-", "]xb-"}},
		"perl classes":    {pattern: `\d\w\s\D\W\S`, strs: []string{"0a a!x", "9_\tb\u00e9\u65e5", "aa a!x", "0a\va!x"}},
		"dot":             {pattern: `a.c`, strs: []string{"abc", "a\u00e9c", "a\U0001F600c", "a\nc", "ac"}},
		"escapes":         {pattern: `\.\*\\\(\)\[\]\{\}\|\^\$\?\+\ \_`, strs: []string{`.*\()[]{}|^$?+ _`, "x"}},
		"control escapes": {pattern: `\n\t\r\f\v\a\x41\x{e9}`, strs: []string{"\n\t\r\f\v\aA\u00e9", "nt"}},
		"unicode escape":  {pattern: `\u00e9[\u0041-\u0043]`, goExpr: `\x{00e9}[\x{0041}-\x{0043}]`, strs: []string{"\u00e9B", "eB", "\u00e9D"}},
		"groups":          {pattern: `(ab|c)(?:d|ef)+(?P<n>g)?(?<m>h)`, strs: []string{"abdh", "cefdgh", "abh", "cdggh"}},
		"nested repeat":   {pattern: `(a(bc){2})*d`, strs: []string{"d", "abcbcd", "abcbcabcbcd", "abcd"}},
		"anchors":         {pattern: `^ab|cd$`, strs: []string{"ab", "cd", "abcd", ""}},
		"only anchors":    {pattern: `^$`, strs: []string{"", "a"}},
		"literal brace":   {pattern: `a{,b{1x}{01}c{0,01}`, strs: []string{"a{,b{1x}{01}c{0,01}", "a{,b{1x}", "a{,b{1x}{01}"}},
		"empty group":     {pattern: `()a(|b)`, strs: []string{"a", "ab", "b"}},
		"unicode":         {pattern: `\u65e5+[\u00e0-\u00ff]`, goExpr: `\x{65e5}+[\x{00e0}-\x{00ff}]`, strs: []string{"\u65e5\u65e5\u00e9", "\u65e5a", "\u00e9"}},
		"big count":       {pattern: `a{1000}`, strs: []string{strings.Repeat("a", 1000), strings.Repeat("a", 999)}},
		"surrogate range": {pattern: `[\x{D800}-\x{E000}]`, strs: []string{"\ue000", "a"}},
		"json-ish":        {pattern: `\{"[a-z]+": -?\d+(\.\d+)?\}`, strs: []string{`{"ab": -12.5}`, `{"": 1}`, `{"a": 1.}`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := RegexGBNF(tc.pattern)
			require.NoError(t, err)
			g, err := Compile(src)
			require.NoError(t, err, src)
			goExpr := tc.pattern
			if tc.goExpr != "" {
				goExpr = tc.goExpr
			}
			re := goFull(t, goExpr)
			match := matcher(g)
			for _, s := range tc.strs {
				assert.Equal(t, re.MatchString(s), match(s), "%q on %q\n%s", tc.pattern, s, src)
			}
		})
	}
}

func TestRegexErrors(t *testing.T) {
	unsupported := map[string]string{
		`a(?=b)`:         "lookahead",
		`a(?!b)`:         "lookahead",
		`(?<=a)b`:        "lookbehind",
		`(?<!a)b`:        "lookbehind",
		`(a)\1`:          "backreference",
		`(?P<x>a)(?P=x)`: "backreference",
		`\k<x>`:          "backreference",
		`(?i)abc`:        "flags",
		`(?s:.)`:         "flags",
		`\bword\b`:       `assertion \b`,
		`\Aa\z`:          "assertion",
		`\pL`:            "Unicode class",
		`[[:alpha:]]`:    "POSIX class",
		`a^b`:            "anchor ^",
		`a$b`:            "anchor $",
		`(^a)`:           "anchor ^",
		`(a$)`:           "anchor $",
		`a*+`:            "possessive",
		`(?>a)`:          "atomic group",
		`\Qa\E`:          "quoting",
	}
	for pattern, feature := range unsupported {
		t.Run(pattern, func(t *testing.T) {
			_, err := RegexGBNF(pattern)
			var ue *UnsupportedError
			require.ErrorAs(t, err, &ue)
			assert.Contains(t, ue.Feature, feature)
		})
	}
	syntaxErrors := map[string]string{
		`a(b`:                "missing )",
		`a)b`:                "unexpected )",
		`[ab`:                "missing ]",
		`*a`:                 "missing argument",
		`a{2}{3}`:            "nested repetition",
		`a**`:                "nested repetition",
		`a{1001}`:            "over 1000",
		`a{3,2}`:             "below the minimum",
		`a{,3}`:              "no minimum",
		`[z-a]`:              "invalid class range",
		`[a-\d]`:             "invalid class range",
		`a\`:                 "trailing backslash",
		`\q`:                 "unknown escape",
		`\x{110000}`:         "bad escape",
		`\u12`:               "short",
		`[^\x00-\x{10FFFF}]`: "matches no string",
		strings.Repeat("(", 40) + strings.Repeat(")", 40): "nest deeper",
	}
	for pattern, msg := range syntaxErrors {
		t.Run(pattern, func(t *testing.T) {
			_, err := RegexGBNF(pattern)
			var re *RegexError
			require.ErrorAs(t, err, &re)
			assert.Contains(t, re.Msg, msg)
		})
	}
}

func TestChoiceGBNF(t *testing.T) {
	choices := []string{"yes", "no", "", `say "hi"\n`, "caf\u00e9", "a\tb"}
	src, err := ChoiceGBNF(choices)
	require.NoError(t, err)
	g, err := Compile(src)
	require.NoError(t, err, src)
	for _, c := range choices {
		assert.True(t, g.Match(c), c)
	}
	for _, s := range []string{"ye", "yesno", "No", `say "hi"`, "cafe"} {
		assert.False(t, g.Match(s), s)
	}
	_, err = ChoiceGBNF(nil)
	require.Error(t, err)
	_, err = ChoiceGBNF([]string{"\xff"})
	require.Error(t, err)
	_, err = RegexGBNF("\xff")
	var re *RegexError
	require.ErrorAs(t, err, &re)
}

// randomPattern writes a random pattern in the subset, in Go's syntax.
func randomPattern(r *rand.Rand, depth int) string {
	var b strings.Builder
	if r.IntN(6) == 0 {
		b.WriteByte('^')
	}
	b.WriteString(randomAlt(r, depth))
	if r.IntN(6) == 0 {
		b.WriteByte('$')
	}
	return b.String()
}

func randomAlt(r *rand.Rand, depth int) string {
	n := 1
	if r.IntN(4) == 0 {
		n = 2 + r.IntN(2)
	}
	alts := make([]string, n)
	for i := range alts {
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteString(randomAtom(r, depth))
			if r.IntN(3) == 0 {
				b.WriteString([]string{"*", "+", "?", "{2}", "{1,3}", "{0,}", "{0,2}", "{3}"}[r.IntN(8)])
				if r.IntN(5) == 0 {
					b.WriteByte('?')
				}
			}
		}
		alts[i] = b.String()
	}
	return strings.Join(alts, "|")
}

var patternAtoms = []string{
	"a", "b", "c", "x", "\u00e9", "\u65e5", `\.`, `\*`, `\\`, `\(`, `\[`, `\|`, `\{`, `\}`, `\$`, `\^`, `"`, "/", `\n`, `\t`, `\x01`, " ",
	"[abc]", "[a-c]", "[^ab]", `[\d_]`, `[^\n"]`, "[x-z\u00e0-\u00ff]", `[\\"/]`, `\d`, `\w`, `\s`, `\D`, `\W`, `\S`, ".",
	`[\x00-\x1f]`, "-", "{", "}", "]",
}

func randomAtom(r *rand.Rand, depth int) string {
	if depth > 0 && r.IntN(4) == 0 {
		open := []string{"(", "(?:", "(?P<g>"}[r.IntN(3)]
		return open + randomAlt(r, depth-1) + ")"
	}
	return patternAtoms[r.IntN(len(patternAtoms))]
}

// genMatch appends to b a random string matched by re (parsed by Go's
// regexp/syntax), repetitions kept short; false if re matches nothing.
func genMatch(re *resyntax.Regexp, r *rand.Rand, b *strings.Builder) bool {
	switch re.Op {
	case resyntax.OpNoMatch:
		return false
	case resyntax.OpLiteral:
		for _, c := range re.Rune {
			b.WriteRune(c)
		}
	case resyntax.OpCharClass:
		if len(re.Rune) == 0 {
			return false
		}
		for range 10 {
			i := r.IntN(len(re.Rune) / 2)
			lo, hi := re.Rune[2*i], re.Rune[2*i+1]
			if hi-lo > 300 && r.IntN(2) == 0 {
				hi = lo + 300 // favour the start of huge ranges
			}
			c := lo + rune(r.IntN(int(hi-lo+1)))
			if c < 0xD800 || c > 0xDFFF {
				b.WriteRune(c)
				return true
			}
		}
		return false
	case resyntax.OpAnyCharNotNL, resyntax.OpAnyChar:
		b.WriteRune([]rune{'a', 'z', ' ', '"', '\\', '\u00e9', '\U0001F600', '\x01', '\t'}[r.IntN(9)])
	case resyntax.OpCapture:
		return genMatch(re.Sub[0], r, b)
	case resyntax.OpConcat:
		for _, s := range re.Sub {
			if !genMatch(s, r, b) {
				return false
			}
		}
	case resyntax.OpAlternate:
		for _, i := range r.Perm(len(re.Sub)) {
			save := b.Len()
			if genMatch(re.Sub[i], r, b) {
				return true
			}
			s := b.String()[:save]
			b.Reset()
			b.WriteString(s)
		}
		return false
	case resyntax.OpStar, resyntax.OpPlus, resyntax.OpQuest, resyntax.OpRepeat:
		lo, hi := 0, 3
		switch re.Op {
		case resyntax.OpPlus:
			lo = 1
		case resyntax.OpQuest:
			hi = 1
		case resyntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if hi < 0 {
				hi = lo + 2
			}
		}
		for range lo + r.IntN(hi-lo+1) {
			if !genMatch(re.Sub[0], r, b) {
				return false
			}
		}
	}
	return true
}

// regexSamples returns strings to try pattern on: some it matches (from
// Go's parse of it), their mutations, and random ones.
func regexSamples(t testing.TB, r *rand.Rand, goExpr string) []string {
	re, err := resyntax.Parse(goExpr, resyntax.Perl)
	require.NoError(t, err)
	alphabet := []rune("abcxz\u00e9\u65e5.*\\([|{}$^\"/\n\t\x01 _-09]")
	var out []string
	for range 12 {
		var b strings.Builder
		if genMatch(re, r, &b) {
			s := b.String()
			out = append(out, s, mutate(r, s, alphabet))
		}
	}
	for range 12 {
		rs := make([]rune, r.IntN(6))
		for i := range rs {
			rs[i] = alphabet[r.IntN(len(alphabet))]
		}
		out = append(out, string(rs))
	}
	return out
}

// mutate inserts, deletes or replaces a character of s.
func mutate(r *rand.Rand, s string, alphabet []rune) string {
	rs := []rune(s)
	i := r.IntN(len(rs) + 1)
	c := alphabet[r.IntN(len(alphabet))]
	switch {
	case r.IntN(3) == 0 || len(rs) == 0:
		rs = append(rs[:i], append([]rune{c}, rs[i:]...)...)
	case r.IntN(2) == 0 && i < len(rs):
		rs = append(rs[:i], rs[i+1:]...)
	case i < len(rs):
		rs[i] = c
	}
	return string(rs)
}

// Random patterns of the subset agree with Go's regexp on what they match
// in full.
func TestRegexProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 300 {
		pattern := randomPattern(r, 2)
		src, err := RegexGBNF(pattern)
		if err != nil {
			var re *RegexError
			require.ErrorAs(t, err, &re, pattern)
			require.Contains(t, re.Msg, "matches no string", pattern)
			continue
		}
		g, err := Compile(src)
		require.NoError(t, err, "%d: %q\n%s", i, pattern, src)
		re := goFull(t, pattern)
		match := matcher(g)
		for _, s := range regexSamples(t, r, pattern) {
			require.Equal(t, re.MatchString(s), match(s), "%d: %q on %q\n%s", i, pattern, s, src)
		}
	}
}

// FuzzRegexGBNF checks, for the patterns both RegexGBNF and Go's regexp
// accept, that they agree on a string.
func FuzzRegexGBNF(f *testing.F) {
	for _, s := range [][2]string{
		{`a(b|c)*d`, "abcbd"}, {`[^a-c]{2,3}`, "xyz"}, {`\d+\.\d*`, "12."}, {`^a|b$`, "b"},
		{`(?:x|yz)+?`, "yzx"}, {`.\w\s\W`, "\u00e9a !"}, {`a{,2}{`, "a{,2}{"}, {`[]-]`, "-"},
		{`0{0,00}`, "0"}, {`0{00}`, "0{00}"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, input string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(input) || len(pattern) > 200 {
			return
		}
		re, err := regexp.Compile(`^(?:` + pattern + `)$`)
		if err != nil {
			return
		}
		src, err := RegexGBNF(pattern)
		if err != nil {
			return
		}
		g, err := Compile(src)
		if err != nil {
			return // too large
		}
		if got, want := g.Match(input), re.MatchString(input); got != want {
			t.Fatalf("%q on %q: grammar %v, Go %v\n%s", pattern, input, got, want, src)
		}
	})
}
