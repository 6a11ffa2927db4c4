package toolcall

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

type parseCase struct {
	text    string
	content string
	calls   []Call
}

// parseCases are model outputs per format with the content and calls
// Parse must find. Every case is also streamed in every split.
var parseCases = map[Format]map[string]parseCase{
	Hermes: {
		"single": {
			text:  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			calls: []Call{{"get_weather", `{"city": "Paris"}`}},
		},
		"parallel": {
			text: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
				"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>\n",
			calls: []Call{{"get_weather", `{"city": "Paris"}`}, {"get_time", `{"tz": "CET"}`}},
		},
		"content before a call": {
			text:    "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
			content: "Let me check.\n",
			calls:   []Call{{"f", `{"a": 1}`}},
		},
		"content after a call": {
			text:    "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone.",
			content: "\nDone.",
			calls:   []Call{{"f", `{}`}},
		},
		"no call": {
			text:    "The weather is fine. 1 < 2, <b>bold</b>, <tool_calls> and {\"name\": \"f\"}.",
			content: "The weather is fine. 1 < 2, <b>bold</b>, <tool_calls> and {\"name\": \"f\"}.",
		},
		"compact": {
			text:  `<tool_call>{"name":"f","arguments":{"x":[1,2]}}</tool_call><tool_call>{"name":"g","arguments":{}}</tool_call>`,
			calls: []Call{{"f", `{"x":[1,2]}`}, {"g", `{}`}},
		},
		"arguments before the name": {
			text:  "<tool_call>\n{\"arguments\": {\"a\": \"}\"}, \"name\": \"f\"}\n</tool_call>",
			calls: []Call{{"f", `{"a": "}"}`}},
		},
		"strings, escapes and nesting in arguments": {
			text:  `<tool_call>{"name": "f", "arguments": {"s": "a\"b}\\", "n": [1, {"x": "]"}], "u": "\u00e9"}}</tool_call>`,
			calls: []Call{{"f", `{"s": "a\"b}\\", "n": [1, {"x": "]"}], "u": "\u00e9"}`}},
		},
		"no arguments key": {
			text:  `<tool_call>{"name": "f"}</tool_call>`,
			calls: []Call{{"f", `{}`}},
		},
		"other keys are skipped": {
			text:  `<tool_call>{"id": "x", "name": "f", "type": "function", "arguments": {"a": 1}, "extra": [1, "}"], "arguments": 2}</tool_call>`,
			calls: []Call{{"f", `{"a": 1}`}},
		},
		"parameters key": {
			text:  `<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>`,
			calls: []Call{{"f", `{"a": 1}`}},
		},
		"name with escapes": {
			text:  `<tool_call>{"name": "f\u00e9\"", "arguments": {}}</tool_call>`,
			calls: []Call{{"fé\"", `{}`}},
		},
		"string and bare arguments are kept raw": {
			text:  `<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call><tool_call>{"name": "g", "arguments": -1.5e3}</tool_call>`,
			calls: []Call{{"f", `"{\"a\": 1}"`}, {"g", `-1.5e3`}},
		},
		"unicode": {
			text:    "héllo 🌍 <tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"日本\"}}</tool_call>",
			content: "héllo 🌍 ",
			calls:   []Call{{"f", `{"q": "日本"}`}},
		},
		"marker look-alike before a call": {
			text:    "<tool_cal<tool_call>{\"name\": \"f\"}</tool_call>",
			content: "<tool_cal",
			calls:   []Call{{"f", `{}`}},
		},
		"malformed: not JSON": {
			text:    "<tool_call>oops</tool_call> rest",
			content: "<tool_call>oops</tool_call> rest",
		},
		"malformed: no name": {
			text:    `<tool_call>{"arguments": {"a": 1}}</tool_call>`,
			content: `<tool_call>{"arguments": {"a": 1}}</tool_call>`,
		},
		"malformed: empty name": {
			text:    `<tool_call>{"name": "", "arguments": {}}</tool_call>`,
			content: `<tool_call>{"name": "", "arguments": {}}</tool_call>`,
		},
		"malformed: name is not a string": {
			text:    `<tool_call>{"name": 5}</tool_call>`,
			content: `<tool_call>{"name": 5}</tool_call>`,
		},
		"malformed: a second block": {
			text:    "<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>nope",
			content: "\n<tool_call>nope",
			calls:   []Call{{"a", `{}`}},
		},
		"malformed after the name": {
			text:    `<tool_call>{"name": "f", "arguments": {"a": 1} x}</tool_call>`,
			content: `x}</tool_call>`,
			calls:   []Call{{"f", `{"a": 1}`}},
		},
		"missing close tag": {
			text:    `<tool_call>{"name": "f", "arguments": {}} and then`,
			content: ` and then`,
			calls:   []Call{{"f", `{}`}},
		},
		"truncated marker": {
			text:    "Hello <tool_ca",
			content: "Hello <tool_ca",
		},
		"truncated before the name": {
			text:    "<tool_call>\n{\"name\": \"get_wea",
			content: "<tool_call>\n{\"name\": \"get_wea",
		},
		"truncated in the arguments": {
			text:  "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
			calls: []Call{{"f", `{"city": "Par`}},
		},
		"truncated in the close tag": {
			text:  "<tool_call>{\"name\": \"a\"}\n</tool_",
			calls: []Call{{"a", `{}`}},
		},
		"truncated after a call": {
			text:    "<tool_call>{\"name\": \"a\"}</tool_call>\n<tool",
			content: "\n<tool",
			calls:   []Call{{"a", `{}`}},
		},
	},
	Llama3: {
		"single": {
			text:  `{"name": "get_weather", "parameters": {"city": "Paris"}}`,
			calls: []Call{{"get_weather", `{"city": "Paris"}`}},
		},
		"python tag and whitespace": {
			text:  "\n <|python_tag|> {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n",
			calls: []Call{{"get_weather", `{"city": "Paris"}`}},
		},
		"parallel": {
			text:  `{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}`,
			calls: []Call{{"a", `{}`}, {"b", `{"x": 1}`}},
		},
		"parallel with tags and newlines": {
			text:  "<|python_tag|>{\"name\": \"a\", \"parameters\": {}};\n<|python_tag|>{\"name\": \"b\", \"parameters\": {}}\n{\"name\": \"c\", \"arguments\": {\"y\": [2]}}",
			calls: []Call{{"a", `{}`}, {"b", `{}`}, {"c", `{"y": [2]}`}},
		},
		"parameters after the name's sibling keys": {
			text:  `{"type": "function", "parameters": {"q": "x"}, "name": "search"}`,
			calls: []Call{{"search", `{"q": "x"}`}},
		},
		"bare arguments value": {
			text:  `{"name": "a", "parameters": null}`,
			calls: []Call{{"a", `null`}},
		},
		"no call": {
			text:    "The weather is {sunny}; <|python_tag|>{\"name\": \"a\"}",
			content: "The weather is {sunny}; <|python_tag|>{\"name\": \"a\"}",
		},
		"content before a call is content": {
			text:    "Sure: {\"name\": \"a\", \"parameters\": {}}",
			content: "Sure: {\"name\": \"a\", \"parameters\": {}}",
		},
		"JSON without a name": {
			text:    "  {\"answer\": 42, \"list\": [1, 2]}\nok",
			content: "  {\"answer\": 42, \"list\": [1, 2]}\nok",
		},
		"text after a call": {
			text:    `{"name": "a", "parameters": {}} Done.`,
			content: " Done.",
			calls:   []Call{{"a", `{}`}},
		},
		"trailing separators": {
			text:  "{\"name\": \"a\", \"parameters\": {}};\n",
			calls: []Call{{"a", `{}`}},
		},
		"malformed second call": {
			text:    `{"name": "a", "parameters": {}}; {"b": 1}`,
			content: `; {"b": 1}`,
			calls:   []Call{{"a", `{}`}},
		},
		"malformed tag": {
			text:    `<|python_tog|>{"name": "a"}`,
			content: `<|python_tog|>{"name": "a"}`,
		},
		"truncated in the arguments": {
			text:  `{"name": "a", "parameters": {"q": "x`,
			calls: []Call{{"a", `{"q": "x`}},
		},
		"truncated before the name": {
			text:    `<|python_tag|>{"na`,
			content: `<|python_tag|>{"na`,
		},
		"only the tag": {
			text:    "<|python_tag|>",
			content: "<|python_tag|>",
		},
		"only whitespace": {
			text:    "  \n",
			content: "  \n",
		},
	},
	Mistral: {
		"single": {
			text:  `[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]`,
			calls: []Call{{"get_weather", `{"city": "Paris"}`}},
		},
		"parallel": {
			text:  `[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}, "id": "abcdefghi"}]`,
			calls: []Call{{"a", `{}`}, {"b", `{"x": 1}`}},
		},
		"a single object": {
			text:  `[TOOL_CALLS] {"name": "a", "arguments": {"x": "y"}}`,
			calls: []Call{{"a", `{"x": "y"}`}},
		},
		"name and ARGS": {
			text:  `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}`,
			calls: []Call{{"get_weather", `{"city": "Paris"}`}},
		},
		"name and ARGS, parallel": {
			text:  `[TOOL_CALLS]a.b-c[ARGS]{}[TOOL_CALLS]d [ARGS] {"x": [1]}`,
			calls: []Call{{"a.b-c", `{}`}, {"d", `{"x": [1]}`}},
		},
		"content before a call": {
			text:    `Sure. [TOOL_CALLS][{"name": "a", "arguments": {}}]`,
			content: "Sure. ",
			calls:   []Call{{"a", `{}`}},
		},
		"arrays one after another": {
			text:  "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]\n[TOOL_CALLS][{\"name\": \"b\", \"arguments\": {}}]\n",
			calls: []Call{{"a", `{}`}, {"b", `{}`}},
		},
		"no call": {
			text:    "Use [brackets], [TOOL] and [TOOL_CALLS [x]",
			content: "Use [brackets], [TOOL] and [TOOL_CALLS [x]",
		},
		"empty array": {
			text:    "[TOOL_CALLS][]",
			content: "[TOOL_CALLS][]",
		},
		"malformed element": {
			text:    `[TOOL_CALLS][{"name": "a", "arguments": {}}, 42]`,
			content: `, 42]`,
			calls:   []Call{{"a", `{}`}},
		},
		"not JSON": {
			text:    "[TOOL_CALLS] hello world",
			content: "[TOOL_CALLS] hello world",
		},
		"name and ARGS with bad arguments": {
			text:    "[TOOL_CALLS]a[ARGS]oops",
			content: "oops",
			calls:   []Call{{"a", ""}},
		},
		"truncated in the arguments": {
			text:  `[TOOL_CALLS][{"name": "a", "arguments": {"q": "x`,
			calls: []Call{{"a", `{"q": "x`}},
		},
		"truncated before the name": {
			text:    `[TOOL_CALLS][{"name": "a`,
			content: `[TOOL_CALLS][{"name": "a`,
		},
		"truncated in the array": {
			text:  `[TOOL_CALLS][{"name": "a", "arguments": {}}, `,
			calls: []Call{{"a", `{}`}},
		},
		"truncated name": {
			text:    "[TOOL_CALLS]get_wea",
			content: "[TOOL_CALLS]get_wea",
		},
	},
}

func TestParse(t *testing.T) {
	t.Parallel()
	for f, cases := range parseCases {
		for name, tc := range cases {
			t.Run(string(f)+"/"+name, func(t *testing.T) {
				t.Parallel()
				content, calls := Parse(f, tc.text)
				require.Equal(t, tc.content, content)
				require.Equal(t, tc.calls, calls)
			})
		}
	}
}

// Streaming gives what Parse gives, however the text is split: at every
// byte position, byte by byte, and in random chunks.
func TestParserStreamsLikeParse(t *testing.T) {
	t.Parallel()
	for f, cases := range parseCases {
		for name, tc := range cases {
			t.Run(string(f)+"/"+name, func(t *testing.T) {
				t.Parallel()
				content, calls := Parse(f, tc.text)
				for k := 0; k <= len(tc.text); k++ {
					requireStreams(t, f, []string{tc.text[:k], tc.text[k:]}, content, calls)
				}
				requireStreams(t, f, chunks(tc.text, func(int) int { return 1 }), content, calls)
				rng := rand.New(rand.NewPCG(1, uint64(len(tc.text))))
				for range 50 {
					requireStreams(t, f, chunks(tc.text, func(rest int) int { return 1 + rng.IntN(min(rest, 8)) }), content, calls)
				}
			})
		}
	}
}

// chunks splits s into pieces of the sizes size returns (given what is
// left).
func chunks(s string, size func(rest int) int) []string {
	var out []string
	for len(s) > 0 {
		n := min(size(len(s)), len(s))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// stream feeds pieces to a Parser and checks the events' invariants: one
// group set per event, a Name before the Args of its call, indices in
// order, Calls in step, fragments on rune boundaries when the text is
// valid UTF-8.
func stream(t testing.TB, f Format, pieces []string) (content string, calls []Call) {
	p := NewParser(f)
	var b strings.Builder
	validUTF8 := utf8.ValidString(strings.Join(pieces, ""))
	check := func(evs []Event) {
		for _, ev := range evs {
			set := 0
			for _, s := range []string{ev.Content, ev.Name, ev.Args} {
				if s != "" {
					set++
				}
			}
			require.Equal(t, 1, set, "event %+v", ev)
			switch {
			case ev.Name != "":
				require.Equal(t, len(calls), ev.Index, "calls are numbered in order")
				calls = append(calls, Call{Name: ev.Name})
			case ev.Args != "":
				require.Equal(t, len(calls)-1, ev.Index, "Args belong to the last call started")
				calls[ev.Index].Arguments += ev.Args
			default:
				require.Zero(t, ev.Index)
				b.WriteString(ev.Content)
			}
			if validUTF8 {
				require.True(t, utf8.ValidString(ev.Content+ev.Args), "event %+v splits a rune", ev)
			}
		}
		require.Equal(t, len(calls), p.Calls())
	}
	for _, piece := range pieces {
		check(p.Push(piece))
	}
	check(p.Finish())
	return b.String(), calls
}

func requireStreams(t testing.TB, f Format, pieces []string, content string, calls []Call) {
	t.Helper()
	gotContent, gotCalls := stream(t, f, pieces)
	require.Equal(t, content, gotContent, "pieces %q", pieces)
	require.Equal(t, calls, gotCalls, "pieces %q", pieces)
}

// Content goes out as soon as it cannot be a marker, a call starts as soon
// as its name is complete, and arguments stream as they come.
func TestParserIsIncremental(t *testing.T) {
	t.Parallel()
	type step struct {
		push string
		want []Event
	}
	tests := map[string]struct {
		f     Format
		steps []step
		final []Event
	}{
		"hermes": {f: Hermes, steps: []step{
			{"Hello <to", []Event{{Content: "Hello "}}},
			{"y> <tool_", []Event{{Content: "<toy> "}}},
			{"call>\n{\"name\": \"get_", nil},
			{"weather\", \"arguments\": {\"ci", []Event{{Name: "get_weather"}, {Args: `{"ci`}}},
			{"ty\": \"Paris\"}}\n</tool_call>\n", []Event{{Args: `ty": "Paris"}`}}},
			{"<tool_call>{\"arguments\": {\"a\": 1}, ", nil},
			{"\"name\": \"f\"", []Event{{Index: 1, Name: "f"}, {Index: 1, Args: `{"a": 1}`}}},
			{"}</tool_call>\n", nil},
		}},
		"llama3": {f: Llama3, steps: []step{
			{"  ", nil},
			{"{\"name\": \"a\", \"parameters\": {\"q\"", []Event{{Name: "a"}, {Args: `{"q"`}}},
			{": 1}}", []Event{{Args: `: 1}`}}},
			{"; ", nil},
			{"{\"name\": \"b\"}", []Event{{Index: 1, Name: "b"}, {Index: 1, Args: `{}`}}},
		}},
		"llama3 content": {f: Llama3, steps: []step{
			{" \n", nil},
			{"Hi {", []Event{{Content: " \nHi {"}}},
			{"x}", []Event{{Content: "x}"}}},
		}},
		"mistral": {f: Mistral, steps: []step{
			{"[TOOL_CALLS][{\"name\": \"a\", \"argum", []Event{{Name: "a"}}},
			{"ents\": [1, ", []Event{{Args: "[1, "}}},
			{"2]}, {\"name\": \"b\"", []Event{{Args: "2]"}, {Index: 1, Name: "b"}}},
			{"}]", []Event{{Index: 1, Args: "{}"}}},
		}},
		"runes are not split": {f: Hermes, steps: []step{
			{"h\xc3", []Event{{Content: "h"}}},
			{"\xa9\xe6\x97", []Event{{Content: "é"}}},
			{"\xa5 <tool_call>{\"name\": \"f\", \"arguments\": \"\xf0\x9f", []Event{{Content: "日 "}, {Name: "f"}, {Args: `"`}}},
			{"\x8c", nil},
		}, final: []Event{{Args: "\xf0\x9f\x8c"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := NewParser(tc.f)
			for i, s := range tc.steps {
				require.Equal(t, s.want, p.Push(s.push), "step %d: %q", i, s.push)
			}
			require.Equal(t, tc.final, p.Finish())
			require.Nil(t, p.Finish(), "a second Finish")
			require.Equal(t, []Event{{Content: "late"}}, p.Push("late"), "Push after Finish")
		})
	}
}

// The Parser reads back the calls each format's template writes into the
// prompt for an assistant turn (model/chat's testdata, rendered with
// Python's jinja2), and the GBNF wrapper describes the same text.
func TestParserReadsTemplateCalls(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		f    Format
		text string
	}{
		"qwen3": {Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>"},
		"llama 3.1": {Llama3, `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}`},
		"mistral v3": {Mistral, `[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "id": "call0abcd"}, ` +
			`{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "call1efgh"}]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			content, calls := Parse(tc.f, tc.text)
			require.Empty(t, content)
			want := []Call{{"get_weather", `{"city": "Paris", "unit": "celsius"}`}, {"get_weather", `{"city": "Lyon"}`}}
			require.Equal(t, want[:len(calls)], calls)
			require.NotEmpty(t, calls)
		})
	}
}

func FuzzParser(f *testing.F) {
	for _, cases := range parseCases {
		for _, tc := range cases {
			f.Add(tc.text, []byte{3, 1, 7})
		}
	}
	f.Add("\xff<tool_call>\xc3{\"name\":\"\xe6\"}", []byte{1})
	f.Fuzz(func(t *testing.T, text string, cuts []byte) {
		for _, format := range []Format{Hermes, Llama3, Mistral} {
			content, calls := Parse(format, text)
			i := 0
			pieces := chunks(text, func(int) int {
				if len(cuts) == 0 {
					return len(text)
				}
				i++
				return int(cuts[i%len(cuts)]%16) + 1
			})
			requireStreams(t, format, pieces, content, calls)
			if len(calls) == 0 {
				require.Equal(t, text, content, "%s: text without calls comes back whole", format)
			}
			require.True(t, isSubsequence(content, text), "%s: content %q is not from the text", format, content)
			for _, c := range calls {
				require.NotEmpty(t, c.Name)
				if c.Arguments != "{}" { // the default for a call without arguments
					require.Contains(t, text, c.Arguments, "%s: arguments are raw text", format)
				}
			}
		}
	})
}

// isSubsequence reports whether the bytes of a appear in b in order.
func isSubsequence(a, b string) bool {
	j := 0
	for i := 0; i < len(b) && j < len(a); i++ {
		if a[j] == b[i] {
			j++
		}
	}
	return j == len(a)
}

func BenchmarkParser(b *testing.B) {
	out := strings.Repeat("Some text before the call, with <b>tags</b> and [brackets]. ", 8) +
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2, 3], \"note\": \"" +
		strings.Repeat("x", 200) + "\"}}\n</tool_call>"
	for _, size := range []int{4, 64} {
		b.Run(fmt.Sprintf("push=%dB", size), func(b *testing.B) {
			pieces := chunks(out, func(int) int { return size })
			b.ReportAllocs()
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				p := NewParser(Hermes)
				for _, s := range pieces {
					p.Push(s)
				}
				p.Finish()
			}
		})
	}
}
