package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// GBNF returns GBNF rules (llama.cpp's dialect, one rule per line) for
// what the model must write to make a forced call in format f: one call
// (parallel false) or one or more (parallel true), where call i names
// names[i] and its arguments match the rule argRules[i], defined
// elsewhere in the same grammar. The rule named root matches the calls;
// with parallel it uses a second rule, root + "-call". root and argRules
// must be valid rule names (letters, digits and dashes). Names are written
// as JSON strings inside GBNF string literals, escaped for both. Only the
// first min(len(names), len(argRules)) pairs are used; with none GBNF
// returns "".
//
// The wrapper text is fixed to what the model's template writes for a
// call in its history (and the Parser reads):
//
//   - Hermes: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>,
//     parallel calls separated by "\n" (as Qwen's template joins them).
//   - Llama3: {"name": "NAME", "parameters": ARGS}, parallel calls
//     separated by "; ". No <|python_tag|>: the JSON-call templates do
//     not write it.
//   - Mistral: [TOOL_CALLS][{"name": "NAME", "arguments": ARGS}] with
//     ", " between parallel calls. One space is allowed after
//     [TOOL_CALLS] because Mistral 7B v0.3's template writes one there and
//     Nemo's does not. [TOOL_CALLS] is a special token: the grammar
//     matches its text.
func (f Format) GBNF(root string, names []string, argRules []string, parallel bool) string {
	n := min(len(names), len(argRules))
	if n == 0 {
		return ""
	}
	var pre, mid, post, sep string
	switch f {
	case Llama3:
		pre, mid, post, sep = `{"name": `, `, "parameters": `, `}`, "; "
	case Mistral:
		pre, mid, post, sep = `{"name": `, `, "arguments": `, `}`, ", "
	default:
		pre, mid, post, sep = hermesOpen+"\n"+`{"name": `, `, "arguments": `, "}\n"+hermesClose, "\n"
	}
	alts := make([]string, n)
	for i := range n {
		alts[i] = gbnfLiteral(pre+jsonString(names[i])+mid) + " " + argRules[i] + " " + gbnfLiteral(post)
	}
	call := strings.Join(alts, " | ")
	if f == Mistral {
		body := "( " + call + " )"
		if parallel {
			body = root + "-call ( " + gbnfLiteral(sep) + " " + root + "-call )*"
		}
		rule := fmt.Sprintf("%s ::= %s \" \"? \"[\" %s \"]\"\n", root, gbnfLiteral(mistralOpen), body)
		if parallel {
			rule += root + "-call ::= " + call + "\n"
		}
		return rule
	}
	if !parallel {
		return root + " ::= " + call + "\n"
	}
	return root + " ::= " + root + "-call ( " + gbnfLiteral(sep) + " " + root + "-call )*\n" +
		root + "-call ::= " + call + "\n"
}

// jsonString writes s as a JSON string, without the HTML escaping of
// json.Marshal (templates write names as they are).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// gbnfLiteral writes s as a GBNF string literal: quote, backslash and
// control characters escaped, other text as UTF-8.
func gbnfLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\x%02X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
