package grammar

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustFile(t testing.TB, name string) *Grammar {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	g, err := Compile(string(src))
	require.NoError(t, err)
	return g
}

func TestMatchExamples(t *testing.T) {
	tests := map[string]struct {
		file     string
		accept   []string
		reject   []string
		prefixes []string
	}{
		"json": {
			file: "json.gbnf",
			accept: []string{
				`{}`, `{"a":1}`, `{ "a": [1, 2.5, -3e10, true, null, "x\n\"y\u00e9"], "b": {"c": {}} }`,
				"{\"k\": \"caf\u00e9 \u65e5\u672c\"}\n", `{"e": "\u00e9"}`, `{"n": -0.25E+3}`,
			},
			reject: []string{
				``, `[]`, `{"a":}`, `{"a":1,}`, `{'a':1}`, `{"a":01}`, "{\"a\":\"\x01\"}", `{"a":1}}`, `{"a":"\x"}`,
				`{"a":1234567890123456789}`,
			},
			prefixes: []string{`{"a": [1, `, `{"ab`, `{"a":"\u00`},
		},
		"arithmetic": {
			file:     "arithmetic.gbnf",
			accept:   []string{"1+2= 3\n", "(a*b)-c/4=x\n2=2\n", "ab_1 +7 =z\n"},
			reject:   []string{"", "1+2\n", "+1=2\n", "1=2", "A=1\n"},
			prefixes: []string{"(a*", "1+2= 3\n4"},
		},
		"list": {
			file:   "list.gbnf",
			accept: []string{"- one\n", "- one\n- two two\n", "- \u00fcber \u65e5\n"},
			reject: []string{"", "- \n", "-one\n", "- a\nb\n", "- a\u2028b\n"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := mustFile(t, tc.file)
			for _, s := range tc.accept {
				assert.True(t, g.Match(s), "should match %q", s)
			}
			for _, s := range tc.reject {
				assert.False(t, g.Match(s), "should not match %q", s)
			}
			for _, s := range tc.prefixes {
				assert.True(t, g.MatchPrefix(s), "should be a prefix: %q", s)
				assert.False(t, g.Match(s), "should not be complete: %q", s)
			}
		})
	}
}

func TestSyntax(t *testing.T) {
	tests := map[string]struct {
		src    string
		accept []string
		reject []string
		err    string
	}{
		"repetition":          {src: `root ::= "a"{2,3} "b"{2} "c"{1,} "d"?`, accept: []string{"aabbc", "aaabbcccd"}, reject: []string{"abbc", "aaaabbc", "aabc"}},
		"exact zero":          {src: `root ::= "x" "a"{0} "y"`, accept: []string{"xy"}, reject: []string{"xay"}},
		"nested group":        {src: "root ::= (\"a\" (\"b\" | \"c\")* )+\n", accept: []string{"a", "abcb", "aba"}, reject: []string{"b", ""}},
		"multi-line rule":     {src: "root ::= x\nx ::=\n  \"a\" |\n  \"b\" # a comment\n", accept: []string{"a", "b"}},
		"dot":                 {src: `root ::= . .`, accept: []string{"ab", "\u00e9\U0001F600"}, reject: []string{"a", "abc"}},
		"escapes":             {src: `root ::= "\x41\u00e9\t\"\\" [\]\-]`, accept: []string{"A\u00e9\t\"\\]", "A\u00e9\t\"\\-"}},
		"negated class":       {src: `root ::= [^a-c]`, accept: []string{"d", "\u00e9", "\U0010FFFF"}, reject: []string{"a", "b", "", "\xff"}},
		"empty alternative":   {src: `root ::= | "a"`, accept: []string{"", "a"}},
		"class without range": {src: `root ::= [-a]`, accept: []string{"-", "a"}, reject: []string{"b"}},
		"right recursion":     {src: "root ::= \"(\" root \")\" | \"x\"", accept: []string{"x", "((x))"}, reject: []string{"((x)"}},
		"no root":             {src: `a ::= "x"`, err: "no root rule"},
		"undefined":           {src: `root ::= a`, err: `rule "a" is used but not defined`},
		"duplicate":           {src: "root ::= \"a\"\nroot ::= \"b\"", err: "defined twice"},
		"left recursion":      {src: "root ::= root \"a\" | \"b\"", err: "left-recursive"},
		"hidden left rec":     {src: "root ::= e\ne ::= n e \"+\" | \"1\"\nn ::= \"-\"?", err: "left-recursive"},
		"unterminated string": {src: `root ::= "abc`, err: "unterminated string"},
		"unterminated class":  {src: `root ::= [abc`, err: "unterminated character class"},
		"reversed range":      {src: `root ::= [z-a]`, err: "reversed"},
		"bad repeat":          {src: `root ::= "a"{3,2}`, err: "maximum is below"},
		"huge repeat":         {src: `root ::= "a"{5000}`, err: "over 2000"},
		"token reference":     {src: `root ::= <[1234]>`, err: "token references"},
		"missing ::=":         {src: `root = "a"`, err: "expected ::="},
		"unclosed paren":      {src: `root ::= ("a"`, err: "unclosed ("},
		"bad escape":          {src: `root ::= "\q"`, err: `unknown escape \q`},
		"too many states":     {src: `root ::= ((("a"{2000}){2000}){2000})`, err: "more than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, err := Compile(tc.src)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			for _, s := range tc.accept {
				assert.True(t, g.Match(s), "should match %q", s)
			}
			for _, s := range tc.reject {
				assert.False(t, g.Match(s), "should not match %q", s)
			}
		})
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	_, err := Compile("root ::= \"a\"\nx ::= \"b\" )")
	var se *SyntaxError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 2, se.Line)
	assert.Equal(t, 11, se.Col)
}

// The UTF-8 sequences of a range match exactly the encodings of its code
// points: checked for every code point against a few ranges.
func TestUTF8Sequences(t *testing.T) {
	ranges := []rng{{0, 0x10FFFF}, {0x61, 0x7A}, {0x80, 0x7FF}, {0x7F0, 0x812}, {0xFFF0, 0x10010}, {0x3041, 0x30FF}, {0xD000, 0xE100}, {0x10000, 0x10FFFF}}
	for _, r := range ranges {
		seqs := utf8Sequences(r.lo, r.hi, nil)
		var buf [4]byte
		for c := rune(0); c <= utf8.MaxRune; c++ {
			if c >= 0xD800 && c <= 0xDFFF {
				continue
			}
			n := utf8.EncodeRune(buf[:], c)
			matches := 0
			for _, s := range seqs {
				if len(s) != n {
					continue
				}
				ok := true
				for i := range s {
					if buf[i] < s[i].lo || buf[i] > s[i].hi {
						ok = false
						break
					}
				}
				if ok {
					matches++
				}
			}
			want := 0
			if c >= r.lo && c <= r.hi {
				want = 1
			}
			if matches != want {
				t.Fatalf("range %U-%U: %U matches %d sequences, want %d", r.lo, r.hi, c, matches, want)
			}
		}
	}
}

// testVocab is a vocabulary of ASCII pieces, multi-byte characters and
// their fragments (as byte-level BPE has), and a few long pieces.
func testVocab(r *rand.Rand) ([][]byte, []int32) {
	toks := [][]byte{nil} // 0: EOS
	for c := 0x20; c < 0x7F; c++ {
		toks = append(toks, []byte{byte(c)})
	}
	toks = append(toks, []byte("\n"), []byte("\t"), []byte("\\"), []byte(`\"`), []byte(`":`), []byte(`", "`), []byte(`"}`),
		[]byte(`{"`), []byte(`null`), []byte(`true`), []byte(` `), []byte(`  `), []byte(`- `), []byte("\n- "), []byte("= "),
		[]byte(`\u00`), []byte(`12`), []byte(`.5`), []byte(`e+`), []byte(`"a`), []byte(`]}`), []byte(`},{"`), []byte(`]`),
		[]byte("\u00e9"), []byte("\u65e5"), []byte{0xC3}, []byte{0xA9}, []byte{0xE6, 0x97}, []byte{0xA5, '"'}, []byte("\u2028"),
		[]byte{0xff})
	alphabet := []byte(`{}[]",:0123456789 -+.eEabcxyz_()=*/\n` + "\n")
	for range 300 {
		n := 1 + r.IntN(5)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		toks = append(toks, b)
	}
	toks = append(toks, nil, []byte{}) // never allowed
	return toks, []int32{0}
}

// Masks agree with a brute-force check of every token against a fresh
// automaton, along random walks through each example grammar.
func TestMaskMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	toks, eos := testVocab(r)
	v := NewVocabulary(toks, eos)
	for _, file := range []string{"json.gbnf", "arithmetic.gbnf", "list.gbnf"} {
		t.Run(file, func(t *testing.T) {
			g := mustFile(t, file)
			b := v.BindGrammar(g)
			oracle := newAutomaton(g)
			matchPrefix := func(s string) bool { return oracle.walk(oracle.start(), []byte(s)) != dead }
			match := func(s string) bool {
				x := oracle.walk(oracle.start(), []byte(s))
				return x != dead && oracle.sets[x].end
			}
			mask := make([]uint64, v.MaskWords())
			for walk := range 20 {
				m := b.Matcher()
				var prefix []byte
				for step := 0; step < 60; step++ {
					m.Allowed(mask)
					var allowed []int32
					for id := range toks {
						got := mask[id>>6]&(1<<(id&63)) != 0
						var want bool
						switch {
						case id == 0:
							want = match(string(prefix))
						case len(toks[id]) == 0:
							want = false
						default:
							want = matchPrefix(string(prefix) + string(toks[id]))
						}
						require.Equal(t, want, got, "walk %d step %d after %q: token %d %q", walk, step, prefix, id, toks[id])
						if got {
							allowed = append(allowed, int32(id))
						}
					}
					require.Equal(t, len(allowed), CountAllowed(mask))
					if len(allowed) == 0 {
						require.True(t, m.Done())
						break
					}
					tok := allowed[r.IntN(len(allowed))]
					if tok == 0 && step < 40 && len(allowed) > 1 {
						tok = allowed[1+r.IntN(len(allowed)-1)]
					}
					require.NoError(t, m.Accept(tok))
					if tok == 0 {
						require.True(t, m.Done())
						m.Allowed(mask)
						require.Zero(t, CountAllowed(mask))
						break
					}
					prefix = append(prefix, toks[tok]...)
				}
			}
		})
	}
}

func TestAcceptRefuses(t *testing.T) {
	v := NewVocabulary([][]byte{nil, []byte("a"), []byte("b"), []byte("ab"), nil}, []int32{0})
	b, err := v.Bind(`root ::= "a" "b"?`)
	require.NoError(t, err)
	m := b.Matcher()
	assert.ErrorIs(t, m.Accept(2), ErrNotAllowed)
	assert.ErrorIs(t, m.Accept(0), ErrNotAllowed, "EOS before the grammar may end")
	assert.ErrorIs(t, m.Accept(4), ErrNotAllowed, "a token without bytes")
	assert.ErrorIs(t, m.Accept(99), ErrNotAllowed, "an id out of range")
	c := m.Clone()
	require.NoError(t, m.Accept(1))
	assert.True(t, m.CanEnd())
	assert.False(t, m.Done())
	assert.False(t, c.CanEnd(), "a clone does not move with the original")
	require.NoError(t, c.Accept(3))
	assert.True(t, c.Done())
	require.NoError(t, c.Accept(0))
	assert.ErrorIs(t, c.Accept(1), ErrNotAllowed)

	b2, err := v.Bind(`root ::= "a" "b"?`)
	require.NoError(t, err)
	assert.Same(t, b, b2, "the same text binds to the cached grammar")
}

func TestRemaining(t *testing.T) {
	v := NewVocabulary([][]byte{nil, []byte("x"), []byte(`"`), []byte("{"), []byte("}")}, []int32{0})
	b, err := v.Bind(`root ::= "{" ( "\"" [x]* "\"" )? "}"`)
	require.NoError(t, err)
	m := b.Matcher()
	assert.Equal(t, 2, m.Remaining())
	require.NoError(t, m.Accept(3))
	assert.Equal(t, 1, m.Remaining())
	assert.Equal(t, 2, m.RemainingAfter(2))
	assert.Equal(t, -1, m.RemainingAfter(1))
	assert.Equal(t, 0, m.RemainingAfter(4))
}

// The grammars that ship with llama.cpp all compile, when a checkout is
// named by LLMD_LLAMA_CPP.
func TestLlamaCppGrammars(t *testing.T) {
	dir := os.Getenv("LLMD_LLAMA_CPP")
	if dir == "" {
		t.Skip("LLMD_LLAMA_CPP is not set to a llama.cpp checkout")
	}
	files, err := filepath.Glob(filepath.Join(dir, "grammars", "*.gbnf"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = Compile(string(src))
		assert.NoError(t, err, filepath.Base(f))
	}
}

// A rule that matches the empty string, repeated, reaches the stack it
// started from without consuming input: matching must still end.
func TestNullableRuleInLoop(t *testing.T) {
	g, err := Compile("root ::= r* \"b\"\nr ::= \"a\"*")
	require.NoError(t, err)
	assert.True(t, g.Match("aab"))
	assert.True(t, g.Match("b"))
	assert.False(t, g.Match("aa"))
	g, err = Compile("root ::= ( x | y )+\nx ::= \"a\"?\ny ::= \"b\"*")
	require.NoError(t, err)
	assert.True(t, g.Match("abba"))
	assert.True(t, g.Match(""))
}
