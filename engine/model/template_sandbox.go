package model

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// This file makes a chat template safe to hand to github.com/ardanlabs/jinja.
//
// A chat template comes from the model file, so it is untrusted input
// (CVE-2024-34359 was a GGUF chat template executing code through Jinja2).
// The library has no file, network or reflection access: it does not parse
// include, import, extends or from, and templates see only the values
// passed in. But it evaluates templates without any limits: a
// self-recursive macro or a list that contains itself overflows the
// goroutine stack, "x" * n or a slice with a large step allocates until the
// process dies, and nested loops run for hours. Go cannot recover from a
// stack overflow or an out-of-memory error, and a goroutine cannot be
// stopped from outside.
//
// So before compiling, tmplInstrument parses the template with a mirror of
// the library's scanner and expression grammar (v1.8.0), rejects what it
// cannot bound, and rewrites the rest into an equivalent template that calls
// hooks (template_hooks.go) wherever work or memory can grow:
//
//   - every loop iteration, macro call and caller() body counts a step and
//     stops the render once it is cancelled (the deadline) or over budget;
//     macro and caller() bodies also track the call depth;
//   - every text run and every {{ }} output is counted against a budget of
//     written bytes before it is written;
//   - every {% set %} value and macro argument is measured (bytes, items,
//     depth); values stored into a namespace, list or dict are deep-copied,
//     so no container can come to contain itself, and appended bytes count
//     against one budget per render;
//   - ~, +, *, join, replace, indent and str.format go through hooks that
//     check the size of the result before building it, and the inputs of
//     tojson, escape and string are measured before the library prints
//     them;
//   - slice bounds are clamped, and range() and strftime_now() are replaced
//     by bounded versions.
//
// Hooks are identity functions around complete sub-expressions or exact
// ports of the library's operations, so a template renders to the same
// bytes after instrumentation (TestTemplateInstrumentKeepsOutput checks
// this on 19 real chat templates). What remains unbounded is transient: one
// expression may hold up to tmplMaxGrowOps references to values of the
// value limit while a library filter prints them.

// Static limits on a template's source.
const (
	// tmplMaxSourceBytes bounds the template source. Real chat templates
	// are under 32 KiB.
	tmplMaxSourceBytes = 256 << 10
	// tmplMaxTags bounds the tags in a template (real ones have under
	// 1,000): the library's whitespace trimming is quadratic in them.
	tmplMaxTags = 4096
	// tmplMaxExprDepth bounds expression nesting (brackets and operators),
	// which is recursion in the library's parser and evaluator.
	tmplMaxExprDepth = 48
	// tmplMaxBlockDepth bounds nesting of {% if %}, {% for %}, {% macro %}
	// and the other block statements.
	tmplMaxBlockDepth = 64
	// tmplMaxFilterBlockDepth bounds nesting of {% filter %} blocks, each of
	// which copies its body once more.
	tmplMaxFilterBlockDepth = 1
	// tmplMaxGrowOps bounds the filters, calls and list or dict literal
	// items in one tag: the operations that can print or hold a value more
	// than once without a hook measuring the result.
	tmplMaxGrowOps = 64
	// tmplMaxJSONIndent bounds tojson(indent=N).
	tmplMaxJSONIndent = 8
)

// tmplHook is the prefix of every name the instrumented template calls. A
// template that mentions it is rejected, so it cannot shadow the hooks.
const tmplHook = "__llmd_"

func tmplUnsafef(line int, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrTemplateUnsupported, line, fmt.Sprintf(format, args...))
}

// tmplInstrument checks src and returns the instrumented template source.
func tmplInstrument(src string) (string, error) {
	if len(src) > tmplMaxSourceBytes {
		return "", fmt.Errorf("%w: the template is %d bytes, the limit is %d", ErrTemplateUnsupported, len(src), tmplMaxSourceBytes)
	}
	if strings.Contains(src, strings.TrimSuffix(tmplHook, "_")) {
		return "", fmt.Errorf("%w: the template mentions the reserved name %q", ErrTemplateUnsupported, tmplHook)
	}
	segs, err := tmplScan(src)
	if err != nil {
		return "", err
	}
	if tags := len(segs) - tmplCount(segs, tmplSegText); tags > tmplMaxTags {
		return "", fmt.Errorf("%w: the template has %d tags, the limit is %d", ErrTemplateUnsupported, tags, tmplMaxTags)
	}

	var (
		out         strings.Builder
		blocks      []string // open block keywords
		filterDepth int
	)
	out.Grow(len(src) + len(src)/2)
	writeHook := func(call string) {
		out.WriteString("{{ ")
		out.WriteString(call)
		out.WriteString(" }}")
	}

	for i := 0; i < len(segs); i++ {
		seg := segs[i]
		switch seg.kind {
		case tmplSegText:
			if seg.text != "" {
				writeHook(fmt.Sprintf("%stxt(%d)", tmplHook, len(seg.text)))
			}
			out.WriteString(seg.text)
			continue
		case tmplSegComment:
			seg.write(&out, seg.text)
			continue
		case tmplSegExpr:
			e, err := tmplParseExpr(seg.text, seg.line)
			if err != nil {
				return "", err
			}
			if e == nil { // {{ }} prints nothing; leave it alone
				seg.write(&out, seg.text)
				continue
			}
			inner, err := tmplRewriteRoot(e, seg.line)
			if err != nil {
				return "", err
			}
			seg.write(&out, " "+tmplHook+"out("+inner+") ")
			continue
		}

		// A statement, dispatched on its keyword as the library does.
		kw := tmplStmtKeyword(seg.text)
		body := strings.TrimSpace(seg.text)
		switch kw {
		case "if", "elif":
			e, err := tmplParseExpr(strings.TrimPrefix(body, kw), seg.line)
			if err != nil {
				return "", err
			}
			cond, err := tmplRewriteRoot(e, seg.line)
			if err != nil {
				return "", err
			}
			seg.write(&out, " "+kw+" "+cond+" ")
			if kw == "if" {
				blocks = append(blocks, kw)
			}

		case "for":
			stmt, err := tmplRewriteFor(body, seg.line)
			if err != nil {
				return "", err
			}
			seg.write(&out, stmt)
			blocks = append(blocks, kw)
			writeHook(tmplHook + "tick()")

		case "set":
			stmt, isBlock, err := tmplRewriteSet(body, seg.line)
			if err != nil {
				return "", err
			}
			seg.write(&out, stmt)
			if isBlock {
				blocks = append(blocks, kw)
			}

		case "macro":
			params, err := tmplCheckMacro(body, seg.line)
			if err != nil {
				return "", err
			}
			seg.write(&out, seg.text)
			blocks = append(blocks, kw)
			writeHook(tmplHook + "enter(" + strings.Join(params, ", ") + ")")

		case "call":
			stmt, args, err := tmplRewriteCall(body, seg.line)
			if err != nil {
				return "", err
			}
			seg.write(&out, stmt)
			blocks = append(blocks, kw)
			writeHook(tmplHook + "enter(" + strings.Join(args, ", ") + ")")

		case "filter":
			filterDepth++
			if filterDepth > tmplMaxFilterBlockDepth {
				return "", tmplUnsafef(seg.line, "{%% filter %%} blocks nested deeper than %d", tmplMaxFilterBlockDepth)
			}
			// The library applies only a bare filter name here (and
			// writes the body unfiltered otherwise).
			if name := strings.TrimSpace(strings.TrimPrefix(body, kw)); tmplIsIdent(name) && !tmplBlockFilters[name] {
				return "", tmplUnsafef(seg.line, "{%% filter %s %%} is not supported", name)
			}
			seg.write(&out, seg.text)
			blocks = append(blocks, kw)

		case "generation":
			seg.write(&out, seg.text)
			blocks = append(blocks, kw)

		case "raw":
			// The library copies everything up to endraw verbatim, so
			// count it as one text run and copy it untouched.
			j := i + 1
			for j < len(segs) && !(segs[j].kind == tmplSegStmt && tmplStmtKeyword(segs[j].text) == "endraw") {
				j++
			}
			n := 0
			for _, s := range segs[i+1 : j] {
				n += len(s.text) + 4
			}
			writeHook(fmt.Sprintf("%stxt(%d)", tmplHook, n))
			for _, s := range segs[i:min(j+1, len(segs))] {
				if s.kind == tmplSegText {
					out.WriteString(s.text)
				} else {
					s.write(&out, s.text)
				}
			}
			i = j

		case "endif", "endfor", "endset", "endmacro", "endcall", "endfilter", "endgeneration":
			open := strings.TrimPrefix(kw, "end")
			if len(blocks) > 0 && blocks[len(blocks)-1] == open {
				blocks = blocks[:len(blocks)-1]
				if open == "macro" || open == "call" {
					writeHook(tmplHook + "leave()")
				}
				if open == "filter" {
					filterDepth--
				}
			}
			seg.write(&out, seg.text)

		case "else", "break", "continue":
			seg.write(&out, seg.text)

		case "include", "import", "from", "extends":
			return "", tmplUnsafef(seg.line, "{%% %s %%} is not allowed: a chat template cannot read other files", kw)

		default:
			return "", tmplUnsafef(seg.line, "unknown statement %q", kw)
		}
		if len(blocks) > tmplMaxBlockDepth {
			return "", tmplUnsafef(seg.line, "blocks nested deeper than %d", tmplMaxBlockDepth)
		}
	}
	return out.String(), nil
}

func tmplCount(segs []tmplSeg, kind tmplSegKind) int {
	n := 0
	for _, s := range segs {
		if s.kind == kind {
			n++
		}
	}
	return n
}

// tmplRewriteFor rewrites "for VARS in ITER [if COND]", split the way the
// library splits it.
func tmplRewriteFor(body string, line int) (string, error) {
	forExpr := strings.TrimSpace(strings.TrimPrefix(body, "for"))
	inIdx := tmplFindKeyword(forExpr, "in")
	if inIdx < 0 {
		return "", tmplUnsafef(line, "for loop without 'in'")
	}
	vars := strings.TrimSpace(forExpr[:inIdx])
	for _, v := range strings.Split(vars, ",") {
		if !tmplIsIdent(strings.TrimSpace(v)) {
			return "", tmplUnsafef(line, "for loop variables %q", vars)
		}
	}
	iterPart := strings.TrimSpace(forExpr[inIdx+2:])
	if tmplFindKeyword(iterPart, "recursive") >= 0 {
		return "", tmplUnsafef(line, "recursive loops are not supported")
	}
	condPart := ""
	hasCond := false
	if ifIdx := tmplFindKeyword(iterPart, "if"); ifIdx >= 0 {
		condPart = strings.TrimSpace(iterPart[ifIdx+2:])
		iterPart = strings.TrimSpace(iterPart[:ifIdx])
		hasCond = true
	}
	iterExpr, err := tmplParseExpr(iterPart, line)
	if err != nil {
		return "", err
	}
	iter, err := tmplRewriteRoot(iterExpr, line)
	if err != nil {
		return "", err
	}
	// Parenthesize so that no keyword of the rewritten expression sits at
	// the top level, where the library looks for "in" and "if".
	stmt := " for " + vars + " in (" + iter + ")"
	if hasCond {
		condExpr, err := tmplParseExpr(condPart, line)
		if err != nil {
			return "", err
		}
		cond, err := tmplRewriteRoot(condExpr, line)
		if err != nil {
			return "", err
		}
		stmt += " if (" + cond + ")"
	}
	return stmt + " ", nil
}

// tmplRewriteSet rewrites "set TARGET = VALUE" so the value passes the set
// hook; a block set ("set NAME" ... "endset") is returned unchanged.
func tmplRewriteSet(body string, line int) (stmt string, isBlock bool, err error) {
	setExpr := strings.TrimSpace(strings.TrimPrefix(body, "set"))
	before, after, ok := strings.Cut(setExpr, "=")
	if !ok {
		if !tmplIsIdent(setExpr) {
			return "", false, tmplUnsafef(line, "set block target %q", setExpr)
		}
		return " set " + setExpr + " ", true, nil
	}
	target := strings.TrimSpace(before)
	e, err := tmplParseExpr(after, line)
	if err != nil {
		return "", false, err
	}
	if e == nil {
		e = &tmplExpr{kind: tmplLit, text: "none"}
	}
	value, err := tmplRewriteRoot(e, line)
	if err != nil {
		return "", false, err
	}
	if ns, attr, ok := strings.Cut(target, "."); ok {
		// A store into a namespace: the hook deep-copies the value so the
		// namespace can never end up containing itself.
		if !tmplIsIdent(ns) || attr == "" {
			return "", false, tmplUnsafef(line, "set target %q", target)
		}
		return " set " + target + " = " + tmplHook + "set(" + value + ", " + ns + ") ", false, nil
	}
	if !tmplIsIdent(target) {
		return "", false, tmplUnsafef(line, "set target %q", target)
	}
	return " set " + target + " = " + tmplHook + "set(" + value + ") ", false, nil
}

// tmplCheckMacro checks a macro definition and returns its parameter names.
// The tag itself is kept as written (the library splits its parameter list
// on every comma), so default values must not need rewriting.
func tmplCheckMacro(body string, line int) ([]string, error) {
	macroExpr := strings.TrimSpace(strings.TrimPrefix(body, "macro"))
	name, paramStr, ok := strings.Cut(macroExpr, "(")
	if !ok || !tmplIsIdent(strings.TrimSpace(name)) {
		return nil, tmplUnsafef(line, "macro definition %q", macroExpr)
	}
	paramStr = strings.TrimSuffix(paramStr, ")")
	var params []string
	if strings.TrimSpace(paramStr) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(paramStr, ",") {
		part = strings.TrimSpace(part)
		pname, def, hasDef := strings.Cut(part, "=")
		pname = strings.TrimSpace(pname)
		if !tmplIsIdent(pname) {
			return nil, tmplUnsafef(line, "macro parameter %q", part)
		}
		if hasDef {
			e, err := tmplParseExpr(def, line)
			if err != nil {
				return nil, err
			}
			if e != nil {
				b := &tmplBudget{}
				if _, err := tmplRewrite(e, line, b); err != nil {
					return nil, err
				}
				if b.hooked {
					return nil, tmplUnsafef(line, "macro parameter default %q needs a bounded operation", strings.TrimSpace(def))
				}
			}
		}
		params = append(params, pname)
	}
	return params, nil
}

// tmplRewriteCall rewrites "call[(ARGS)] EXPR" and returns the caller's
// parameter names.
func tmplRewriteCall(body string, line int) (string, []string, error) {
	callStr := strings.TrimSpace(strings.TrimPrefix(body, "call"))
	prefix := ""
	var args []string
	if strings.HasPrefix(callStr, "(") {
		closeIdx := strings.Index(callStr, ")")
		if closeIdx < 0 {
			return "", nil, tmplUnsafef(line, "unclosed call arguments")
		}
		for _, a := range strings.Split(callStr[1:closeIdx], ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if !tmplIsIdent(a) {
				return "", nil, tmplUnsafef(line, "call argument %q", a)
			}
			args = append(args, a)
		}
		prefix = callStr[:closeIdx+1]
		callStr = strings.TrimSpace(callStr[closeIdx+1:])
	}
	e, err := tmplParseExpr(callStr, line)
	if err != nil {
		return "", nil, err
	}
	if e == nil || e.kind != tmplCall || (e.x.kind == tmplAttr && tmplSpecialMethods[e.x.text] != "") {
		return "", nil, tmplUnsafef(line, "{%% call %%} needs a macro call")
	}
	rw, err := tmplRewriteRoot(e, line)
	if err != nil {
		return "", nil, err
	}
	return " call" + prefix + " " + rw + " ", args, nil
}

// tmplStmtKeyword returns a statement's keyword like the library does: the
// leading run of letters and underscores.
func tmplStmtKeyword(text string) string {
	text = strings.TrimSpace(text)
	for i, r := range text {
		if !unicode.IsLetter(r) && r != '_' {
			return text[:i]
		}
	}
	return text
}

// tmplFindKeyword finds kw at bracket depth 0 and outside strings, as a
// whole word; it mirrors the library's findKeyword.
func tmplFindKeyword(s, kw string) int {
	depth := 0
	var inStr byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if inStr != 0 {
			if ch == '\\' && i+1 < len(s) {
				i++
				continue
			}
			if ch == inStr {
				inStr = 0
			}
			continue
		}
		switch ch {
		case '\'', '"':
			inStr = ch
			continue
		case '(', '[', '{':
			depth++
			continue
		case ')', ']', '}':
			depth--
			continue
		}
		if depth == 0 && strings.HasPrefix(s[i:], kw) {
			before := i == 0 || !tmplIsIdentByte(s[i-1])
			after := i+len(kw) >= len(s) || !tmplIsIdentByte(s[i+len(kw)])
			if before && after {
				return i
			}
		}
	}
	return -1
}

func tmplIsIdentByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_'
}

func tmplIsIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tmplIsIdentByte(s[i]) {
			return false
		}
	}
	return true
}

// Scanner: a mirror of the library's scan.

type tmplSegKind int

const (
	tmplSegText tmplSegKind = iota
	tmplSegComment
	tmplSegExpr
	tmplSegStmt
)

// tmplSeg is one piece of template source: raw text, or the inside of a
// {# #}, {{ }} or {% %} tag without its delimiters and trim markers.
type tmplSeg struct {
	kind      tmplSegKind
	text      string
	trimLeft  bool
	trimRight bool
	line      int
}

// write writes a tag of seg's kind and trim markers around inner.
func (s tmplSeg) write(b *strings.Builder, inner string) {
	open, closer := "{%", "%}"
	switch s.kind {
	case tmplSegExpr:
		open, closer = "{{", "}}"
	case tmplSegComment:
		open, closer = "{#", "#}"
	}
	b.WriteString(open)
	if s.trimLeft {
		b.WriteByte('-')
	}
	b.WriteString(inner)
	if s.trimRight {
		b.WriteByte('-')
	}
	b.WriteString(closer)
}

func tmplScan(src string) ([]tmplSeg, error) {
	var segs []tmplSeg
	line := 1
	textStart, textLine := 0, 1
	i := 0
	for i < len(src) {
		if src[i] != '{' || i+1 >= len(src) {
			if src[i] == '\n' {
				line++
			}
			i++
			continue
		}
		var kind tmplSegKind
		var closer string
		switch src[i+1] {
		case '{':
			kind, closer = tmplSegExpr, "}}"
		case '%':
			kind, closer = tmplSegStmt, "%}"
		case '#':
			kind, closer = tmplSegComment, "#}"
		default:
			i++
			continue
		}
		if i > textStart {
			segs = append(segs, tmplSeg{kind: tmplSegText, text: src[textStart:i], line: textLine})
		}
		tagLine := line
		i += 2
		trimLeft := false
		if i < len(src) && src[i] == '-' {
			trimLeft = true
			i++
		}
		start := i
		found := false
		for i < len(src) {
			ch := src[i]
			if kind != tmplSegComment && (ch == '\'' || ch == '"') {
				i++
				for i < len(src) && src[i] != ch {
					if src[i] == '\\' && i+1 < len(src) {
						if src[i+1] == '\n' {
							line++
						}
						i++
					}
					if src[i] == '\n' {
						line++
					}
					i++
				}
				if i < len(src) {
					i++
				}
				continue
			}
			if ch == '-' && i+2 < len(src) && src[i+1] == closer[0] && src[i+2] == closer[1] {
				segs = append(segs, tmplSeg{kind: kind, text: src[start:i], trimLeft: trimLeft, trimRight: true, line: tagLine})
				i += 3
				found = true
				break
			}
			if i+1 < len(src) && ch == closer[0] && src[i+1] == closer[1] {
				segs = append(segs, tmplSeg{kind: kind, text: src[start:i], trimLeft: trimLeft, line: tagLine})
				i += 2
				found = true
				break
			}
			if ch == '\n' {
				line++
			}
			i++
		}
		if !found {
			return nil, fmt.Errorf("%w: line %d: unclosed tag", ErrTemplateUnsupported, tagLine)
		}
		textStart, textLine = i, line
	}
	if textStart < len(src) {
		segs = append(segs, tmplSeg{kind: tmplSegText, text: src[textStart:], line: textLine})
	}
	return segs, nil
}

// Expression tokenizer: a mirror of the library's tokenizeExpr that keeps
// each token's source text.

type tmplTokKind int

const (
	tmplTokName tmplTokKind = iota
	tmplTokInt
	tmplTokFloat
	tmplTokString
	tmplTokOp
	tmplTokComma
	tmplTokDot
	tmplTokColon
	tmplTokLParen
	tmplTokRParen
	tmplTokLBracket
	tmplTokRBracket
	tmplTokLBrace
	tmplTokRBrace
	tmplTokPipe
	tmplTokTilde
	tmplTokPower
	tmplTokFloorDiv
	tmplTokEOF
)

type tmplTok struct {
	kind tmplTokKind
	text string // source text; for strings, with quotes and escapes
}

func tmplTokenize(s string) ([]tmplTok, error) {
	var toks []tmplTok
	i := 0
	for i < len(s) {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			i++
			continue
		case ch == '\'' || ch == '"':
			start := i
			i++
			for i < len(s) && s[i] != ch {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				i++
			}
			if i >= len(s) {
				return nil, errors.New("unterminated string")
			}
			i++
			toks = append(toks, tmplTok{tmplTokString, s[start:i]})
			continue
		case ch >= '0' && ch <= '9':
			start := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			kind := tmplTokInt
			if i < len(s) && s[i] == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				kind = tmplTokFloat
				i++
				for i < len(s) && s[i] >= '0' && s[i] <= '9' {
					i++
				}
				if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
					i++
					if i < len(s) && (s[i] == '+' || s[i] == '-') {
						i++
					}
					for i < len(s) && s[i] >= '0' && s[i] <= '9' {
						i++
					}
				}
			}
			toks = append(toks, tmplTok{kind, s[start:i]})
			continue
		case ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			start := i
			for i < len(s) && tmplIsIdentByte(s[i]) {
				i++
			}
			toks = append(toks, tmplTok{tmplTokName, s[start:i]})
			continue
		}
		if i+1 < len(s) {
			switch two := s[i : i+2]; two {
			case "**":
				toks = append(toks, tmplTok{tmplTokPower, two})
				i += 2
				continue
			case "//":
				toks = append(toks, tmplTok{tmplTokFloorDiv, two})
				i += 2
				continue
			case "==", "!=", "<=", ">=":
				toks = append(toks, tmplTok{tmplTokOp, two})
				i += 2
				continue
			}
		}
		kind := tmplTokEOF // unknown characters are skipped, as in the library
		switch ch {
		case ',':
			kind = tmplTokComma
		case '.':
			kind = tmplTokDot
		case ':':
			kind = tmplTokColon
		case '(':
			kind = tmplTokLParen
		case ')':
			kind = tmplTokRParen
		case '[':
			kind = tmplTokLBracket
		case ']':
			kind = tmplTokRBracket
		case '{':
			kind = tmplTokLBrace
		case '}':
			kind = tmplTokRBrace
		case '|':
			kind = tmplTokPipe
		case '~':
			kind = tmplTokTilde
		case '+', '-', '*', '/', '%', '<', '>', '=':
			kind = tmplTokOp
		}
		if kind != tmplTokEOF {
			toks = append(toks, tmplTok{kind, string(ch)})
		}
		i++
	}
	return append(toks, tmplTok{kind: tmplTokEOF}), nil
}

// Expression parser: a mirror of the library's recursive-descent grammar
// (precedence from low to high: inline if, or, and, not, comparisons / in /
// is, ~, + -, * / // %, **, unary + -, postfix . [] () |filter).

type tmplExprKind int

const (
	tmplLit    tmplExprKind = iota // text: source of a literal
	tmplName                       // text: identifier
	tmplUnary                      // text: "not", "-" or "+"; x
	tmplBinary                     // text: operator; x, y
	tmplCond                       // x if y [else z]
	tmplAttr                       // x.text
	tmplCall                       // x(args, kwargs)
	tmplItem                       // x[y]
	tmplSlice                      // x[y:z:w], any of y, z, w may be nil
	tmplFilter                     // x|text(args, kwargs)
	tmplTest                       // x is [not] text(args)
	tmplList                       // [args] and (a, b) tuples
	tmplDict                       // {args[0]: args[1], ...}
)

type tmplKwarg struct {
	name  string
	value *tmplExpr
}

type tmplExpr struct {
	kind       tmplExprKind
	text       string
	x, y, z, w *tmplExpr
	args       []*tmplExpr
	kwargs     []tmplKwarg
	negated    bool // a test written "is not"
	paren      bool // a filter or test written with an argument list
}

type tmplParser struct {
	toks  []tmplTok
	pos   int
	depth int
	line  int
}

// tmplParseExpr parses one expression; it returns nil for an empty one.
func tmplParseExpr(s string, line int) (*tmplExpr, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	toks, err := tmplTokenize(s)
	if err != nil {
		return nil, tmplUnsafef(line, "%v", err)
	}
	p := &tmplParser{toks: toks, line: line}
	e, err := p.expression()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tmplTokEOF {
		return nil, p.errorf("unexpected %q after expression", p.peek().text)
	}
	return e, nil
}

func (p *tmplParser) errorf(format string, args ...any) error {
	return tmplUnsafef(p.line, format, args...)
}

func (p *tmplParser) peek() tmplTok {
	if p.pos >= len(p.toks) {
		return tmplTok{kind: tmplTokEOF}
	}
	return p.toks[p.pos]
}

func (p *tmplParser) peekName(name string) bool {
	t := p.peek()
	return t.kind == tmplTokName && t.text == name
}

func (p *tmplParser) advance() tmplTok {
	t := p.peek()
	p.pos++
	return t
}

func (p *tmplParser) expect(kind tmplTokKind, what string) error {
	if t := p.advance(); t.kind != kind {
		return p.errorf("expected %q, got %q", what, t.text)
	}
	return nil
}

// enter bounds recursion: every nested expression goes through it.
func (p *tmplParser) enter() error {
	p.depth++
	if p.depth > tmplMaxExprDepth {
		return p.errorf("expression nested deeper than %d", tmplMaxExprDepth)
	}
	return nil
}

func (p *tmplParser) expression() (*tmplExpr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.peekName("if") {
		p.advance()
		cond, err := p.or()
		if err != nil {
			return nil, err
		}
		c := &tmplExpr{kind: tmplCond, x: e, y: cond}
		if p.peekName("else") {
			p.advance()
			if c.z, err = p.expression(); err != nil {
				return nil, err
			}
		}
		return c, nil
	}
	return e, nil
}

// binaryLoop parses left-associative operators of one precedence level.
func (p *tmplParser) binaryLoop(next func() (*tmplExpr, error), match func(tmplTok) (string, bool)) (*tmplExpr, error) {
	left, err := next()
	if err != nil {
		return nil, err
	}
	for {
		op, ok := match(p.peek())
		if !ok {
			return left, nil
		}
		p.advance()
		right, err := next()
		if err != nil {
			return nil, err
		}
		left = &tmplExpr{kind: tmplBinary, text: op, x: left, y: right}
	}
}

func (p *tmplParser) or() (*tmplExpr, error) {
	return p.binaryLoop(p.and, func(t tmplTok) (string, bool) {
		return "or", t.kind == tmplTokName && t.text == "or"
	})
}

func (p *tmplParser) and() (*tmplExpr, error) {
	return p.binaryLoop(p.not, func(t tmplTok) (string, bool) {
		return "and", t.kind == tmplTokName && t.text == "and"
	})
}

func (p *tmplParser) not() (*tmplExpr, error) {
	if p.peekName("not") {
		p.advance()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		operand, err := p.not()
		if err != nil {
			return nil, err
		}
		return &tmplExpr{kind: tmplUnary, text: "not", x: operand}, nil
	}
	return p.comparison()
}

func (p *tmplParser) comparison() (*tmplExpr, error) {
	left, err := p.concat()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		switch {
		case t.kind == tmplTokOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">="),
			t.kind == tmplTokName && t.text == "in":
			p.advance()
			right, err := p.concat()
			if err != nil {
				return nil, err
			}
			left = &tmplExpr{kind: tmplBinary, text: t.text, x: left, y: right}
		case t.kind == tmplTokName && t.text == "not" && p.pos+1 < len(p.toks) &&
			p.toks[p.pos+1].kind == tmplTokName && p.toks[p.pos+1].text == "in":
			p.advance()
			p.advance()
			right, err := p.concat()
			if err != nil {
				return nil, err
			}
			left = &tmplExpr{kind: tmplBinary, text: "not in", x: left, y: right}
		case t.kind == tmplTokName && t.text == "is":
			p.advance()
			test := &tmplExpr{kind: tmplTest, x: left}
			if p.peekName("not") {
				p.advance()
				test.negated = true
			}
			name := p.advance()
			if name.kind != tmplTokName {
				return nil, p.errorf("expected a test name after 'is', got %q", name.text)
			}
			test.text = name.text
			if p.peek().kind == tmplTokLParen {
				p.advance()
				test.paren = true
				for p.peek().kind != tmplTokRParen && p.peek().kind != tmplTokEOF {
					arg, err := p.expression()
					if err != nil {
						return nil, err
					}
					test.args = append(test.args, arg)
					if p.peek().kind == tmplTokComma {
						p.advance()
					}
				}
				if err := p.expect(tmplTokRParen, ")"); err != nil {
					return nil, err
				}
			}
			left = test
		default:
			return left, nil
		}
	}
}

func (p *tmplParser) concat() (*tmplExpr, error) {
	return p.binaryLoop(p.addSub, func(t tmplTok) (string, bool) {
		return "~", t.kind == tmplTokTilde
	})
}

func (p *tmplParser) addSub() (*tmplExpr, error) {
	return p.binaryLoop(p.mulDiv, func(t tmplTok) (string, bool) {
		return t.text, t.kind == tmplTokOp && (t.text == "+" || t.text == "-")
	})
}

func (p *tmplParser) mulDiv() (*tmplExpr, error) {
	return p.binaryLoop(p.power, func(t tmplTok) (string, bool) {
		return t.text, t.kind == tmplTokOp && (t.text == "*" || t.text == "/" || t.text == "%") || t.kind == tmplTokFloorDiv
	})
}

func (p *tmplParser) power() (*tmplExpr, error) {
	base, err := p.unary()
	if err != nil {
		return nil, err
	}
	if p.peek().kind == tmplTokPower {
		p.advance()
		exp, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &tmplExpr{kind: tmplBinary, text: "**", x: base, y: exp}, nil
	}
	return base, nil
}

func (p *tmplParser) unary() (*tmplExpr, error) {
	if t := p.peek(); t.kind == tmplTokOp && (t.text == "-" || t.text == "+") {
		p.advance()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		operand, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &tmplExpr{kind: tmplUnary, text: t.text, x: operand}, nil
	}
	return p.postfix()
}

func (p *tmplParser) postfix() (*tmplExpr, error) {
	e, err := p.atom()
	if err != nil {
		return nil, err
	}
	for steps := 0; ; steps++ {
		if steps > tmplMaxExprDepth {
			return nil, p.errorf("postfix chain longer than %d", tmplMaxExprDepth)
		}
		switch p.peek().kind {
		case tmplTokDot:
			p.advance()
			attr := p.advance()
			if attr.kind != tmplTokName && attr.kind != tmplTokInt {
				return nil, p.errorf("expected an attribute name after '.', got %q", attr.text)
			}
			e = &tmplExpr{kind: tmplAttr, text: attr.text, x: e}
			if p.peek().kind == tmplTokLParen {
				p.advance()
				call := &tmplExpr{kind: tmplCall, x: e}
				if call.args, call.kwargs, err = p.callArgs(); err != nil {
					return nil, err
				}
				e = call
			}
		case tmplTokLBracket:
			p.advance()
			var start, stop, step *tmplExpr
			isSlice := p.peek().kind == tmplTokColon
			if !isSlice {
				if start, err = p.expression(); err != nil {
					return nil, err
				}
				isSlice = p.peek().kind == tmplTokColon
			}
			if !isSlice {
				if err := p.expect(tmplTokRBracket, "]"); err != nil {
					return nil, err
				}
				e = &tmplExpr{kind: tmplItem, x: e, y: start}
				continue
			}
			p.advance() // the first ':'
			if k := p.peek().kind; k != tmplTokRBracket && k != tmplTokColon {
				if stop, err = p.expression(); err != nil {
					return nil, err
				}
			}
			if p.peek().kind == tmplTokColon {
				p.advance()
				if p.peek().kind != tmplTokRBracket {
					if step, err = p.expression(); err != nil {
						return nil, err
					}
				}
			}
			if err := p.expect(tmplTokRBracket, "]"); err != nil {
				return nil, err
			}
			e = &tmplExpr{kind: tmplSlice, x: e, y: start, z: stop, w: step}
		case tmplTokLParen:
			p.advance()
			call := &tmplExpr{kind: tmplCall, x: e}
			if call.args, call.kwargs, err = p.callArgs(); err != nil {
				return nil, err
			}
			e = call
		case tmplTokPipe:
			p.advance()
			name := p.advance()
			if name.kind != tmplTokName {
				return nil, p.errorf("expected a filter name after '|', got %q", name.text)
			}
			f := &tmplExpr{kind: tmplFilter, text: name.text, x: e}
			if p.peek().kind == tmplTokLParen {
				p.advance()
				f.paren = true
				if f.args, f.kwargs, err = p.callArgs(); err != nil {
					return nil, err
				}
			}
			e = f
		default:
			return e, nil
		}
	}
}

func (p *tmplParser) callArgs() ([]*tmplExpr, []tmplKwarg, error) {
	var args []*tmplExpr
	var kwargs []tmplKwarg
	for p.peek().kind != tmplTokRParen && p.peek().kind != tmplTokEOF {
		if p.peek().kind == tmplTokName && p.pos+1 < len(p.toks) &&
			p.toks[p.pos+1].kind == tmplTokOp && p.toks[p.pos+1].text == "=" {
			name := p.advance().text
			p.advance()
			v, err := p.expression()
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, tmplKwarg{name, v})
		} else {
			v, err := p.expression()
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		if p.peek().kind == tmplTokComma {
			p.advance()
		}
	}
	if err := p.expect(tmplTokRParen, ")"); err != nil {
		return nil, nil, err
	}
	return args, kwargs, nil
}

func (p *tmplParser) atom() (*tmplExpr, error) {
	t := p.peek()
	switch t.kind {
	case tmplTokInt, tmplTokFloat, tmplTokString:
		p.advance()
		return &tmplExpr{kind: tmplLit, text: t.text}, nil
	case tmplTokName:
		p.advance()
		switch t.text {
		case "None", "none", "null", "True", "true", "False", "false":
			return &tmplExpr{kind: tmplLit, text: t.text}, nil
		}
		return &tmplExpr{kind: tmplName, text: t.text}, nil
	case tmplTokLParen:
		p.advance()
		if p.peek().kind == tmplTokRParen {
			p.advance()
			return &tmplExpr{kind: tmplList}, nil
		}
		e, err := p.expression()
		if err != nil {
			return nil, err
		}
		if p.peek().kind == tmplTokComma {
			list := &tmplExpr{kind: tmplList, args: []*tmplExpr{e}}
			for p.peek().kind == tmplTokComma {
				p.advance()
				if p.peek().kind == tmplTokRParen {
					break
				}
				item, err := p.expression()
				if err != nil {
					return nil, err
				}
				list.args = append(list.args, item)
			}
			if err := p.expect(tmplTokRParen, ")"); err != nil {
				return nil, err
			}
			return list, nil
		}
		if err := p.expect(tmplTokRParen, ")"); err != nil {
			return nil, err
		}
		return e, nil
	case tmplTokLBracket:
		p.advance()
		list := &tmplExpr{kind: tmplList}
		for p.peek().kind != tmplTokRBracket && p.peek().kind != tmplTokEOF {
			item, err := p.expression()
			if err != nil {
				return nil, err
			}
			list.args = append(list.args, item)
			if p.peek().kind == tmplTokComma {
				p.advance()
			}
		}
		if err := p.expect(tmplTokRBracket, "]"); err != nil {
			return nil, err
		}
		return list, nil
	case tmplTokLBrace:
		p.advance()
		dict := &tmplExpr{kind: tmplDict}
		for p.peek().kind != tmplTokRBrace && p.peek().kind != tmplTokEOF {
			key, err := p.expression()
			if err != nil {
				return nil, err
			}
			if err := p.expect(tmplTokColon, ":"); err != nil {
				return nil, err
			}
			value, err := p.expression()
			if err != nil {
				return nil, err
			}
			dict.args = append(dict.args, key, value)
			if p.peek().kind == tmplTokComma {
				p.advance()
			}
		}
		if err := p.expect(tmplTokRBrace, "}"); err != nil {
			return nil, err
		}
		return dict, nil
	case tmplTokOp:
		if t.text == "-" {
			p.advance()
			operand, err := p.atom()
			if err != nil {
				return nil, err
			}
			return &tmplExpr{kind: tmplUnary, text: "-", x: operand}, nil
		}
	}
	return nil, p.errorf("unexpected %q", t.text)
}

// Rewriting and printing.

// tmplSpecialFilters maps filters that can build large strings to bounded
// equivalents (template_hooks.go).
var tmplSpecialFilters = map[string]string{
	"join":    tmplHook + "join",
	"replace": tmplHook + "replace",
	"indent":  tmplHook + "indent",
}

// tmplBinaryHooks maps operators that can build large values to hooks
// with the library's semantics and a size check.
var tmplBinaryHooks = map[string]string{
	"~": tmplHook + "cat",
	"+": tmplHook + "add",
	"*": tmplHook + "mul",
}

// tmplPrintingFilters are filters that print their input into a string up
// to this many times its size; their input passes a hook that checks it.
var tmplPrintingFilters = map[string]int{"string": 1, "escape": 6, "e": 6}

// tmplCountingFilters do costly work per item (comparisons that parse
// strings as numbers, sorting) in one uninterruptible call; their input
// passes a hook that bounds its length.
var tmplCountingFilters = map[string]bool{
	"sort": true, "dictsort": true, "max": true, "min": true, "sum": true, "unique": true,
	"select": true, "reject": true, "selectattr": true, "rejectattr": true,
}

// tmplBlockFilters are the filters allowed in {% filter %} blocks: ones
// whose result is no larger than the block's text.
var tmplBlockFilters = map[string]bool{"upper": true, "lower": true, "trim": true, "title": true, "capitalize": true, "safe": true}

// tmplSpecialMethods maps string methods that can build large strings to
// bounded filters that behave the same on strings.
var tmplSpecialMethods = map[string]string{
	"replace": tmplHook + "str_replace",
	"format":  tmplHook + "str_format",
}

// tmplMutators are the list and dict methods that store values into an
// existing container; their arguments are deep-copied.
var tmplMutators = map[string]bool{"append": true, "insert": true, "update": true}

// tmplBudget counts growth operations in one tag and notes whether any
// sub-expression was routed through a hook.
type tmplBudget struct {
	growOps int
	hooked  bool
}

// tmplRewriteRoot rewrites the expression of one tag.
func tmplRewriteRoot(e *tmplExpr, line int) (string, error) {
	if e == nil { // an empty expression, which the library reads as none
		return "none", nil
	}
	return tmplRewrite(e, line, &tmplBudget{})
}

// tmplRewrite prints e with bounded operations substituted. Every
// sub-expression is printed fully parenthesized unless it is atomic, so the
// library parses the output into the same tree.
func tmplRewrite(e *tmplExpr, line int, b *tmplBudget) (string, error) {
	rw := func(x *tmplExpr) (string, error) { return tmplRewrite(x, line, b) }
	grow := func() error {
		b.growOps++
		if b.growOps > tmplMaxGrowOps {
			return tmplUnsafef(line, "more than %d operations in one tag", tmplMaxGrowOps)
		}
		return nil
	}
	// postfix prints x as the object of a postfix operation.
	postfix := func(x *tmplExpr) (string, error) {
		s, err := rw(x)
		if err != nil {
			return "", err
		}
		switch x.kind {
		case tmplLit, tmplName, tmplAttr, tmplCall, tmplItem, tmplSlice, tmplFilter, tmplList, tmplDict:
			return s, nil
		}
		return "(" + s + ")", nil
	}
	paren := func(x *tmplExpr) (string, error) {
		s, err := rw(x)
		if err != nil {
			return "", err
		}
		if x.kind == tmplLit || x.kind == tmplName {
			return s, nil
		}
		return "(" + s + ")", nil
	}

	switch e.kind {
	case tmplLit, tmplName:
		return e.text, nil

	case tmplUnary:
		x, err := paren(e.x)
		if err != nil {
			return "", err
		}
		if e.text == "not" {
			return "not " + x, nil
		}
		return e.text + x, nil

	case tmplBinary:
		x, err := paren(e.x)
		if err != nil {
			return "", err
		}
		y, err := paren(e.y)
		if err != nil {
			return "", err
		}
		// The operators that build strings and lists go through hooks that
		// check the size of the result before building it.
		if hook := tmplBinaryHooks[e.text]; hook != "" {
			b.hooked = true
			return hook + "(" + x + ", " + y + ")", nil
		}
		return x + " " + e.text + " " + y, nil

	case tmplCond:
		x, err := paren(e.x)
		if err != nil {
			return "", err
		}
		y, err := paren(e.y)
		if err != nil {
			return "", err
		}
		s := x + " if " + y
		if e.z != nil {
			z, err := paren(e.z)
			if err != nil {
				return "", err
			}
			s += " else " + z
		}
		return s, nil

	case tmplAttr:
		x, err := postfix(e.x)
		if err != nil {
			return "", err
		}
		return x + "." + e.text, nil

	case tmplCall:
		if err := grow(); err != nil {
			return "", err
		}
		fn := e.x
		args, err := tmplRewriteArgs(e.args, e.kwargs, line, b, fn.kind == tmplAttr && tmplMutators[fn.text])
		if err != nil {
			return "", err
		}
		if fn.kind == tmplAttr {
			if hook := tmplSpecialMethods[fn.text]; hook != "" {
				b.hooked = true
				obj, err := postfix(fn.x)
				if err != nil {
					return "", err
				}
				return obj + "|" + hook + "(" + args + ")", nil
			}
		}
		f, err := postfix(fn)
		if err != nil {
			return "", err
		}
		return f + "(" + args + ")", nil

	case tmplItem:
		x, err := postfix(e.x)
		if err != nil {
			return "", err
		}
		key, err := rw(e.y)
		if err != nil {
			return "", err
		}
		return x + "[" + key + "]", nil

	case tmplSlice:
		x, err := postfix(e.x)
		if err != nil {
			return "", err
		}
		if e.w != nil {
			// The library allocates and loops over unclamped bounds when
			// the step is not 1, so only s[::1] and s[::-1] are allowed.
			step := tmplUnitStep(e.w)
			if e.y != nil || e.z != nil || step == "" {
				return "", tmplUnsafef(line, "slices with a step other than [::1] or [::-1]")
			}
			return x + "[::" + step + "]", nil
		}
		s := x + "["
		for i, bound := range []*tmplExpr{e.y, e.z} {
			if i == 1 {
				s += ":"
			}
			if bound == nil {
				continue
			}
			v, err := rw(bound)
			if err != nil {
				return "", err
			}
			s += tmplHook + "index(" + v + ")"
			b.hooked = true
		}
		return s + "]", nil

	case tmplFilter:
		if err := grow(); err != nil {
			return "", err
		}
		x, err := postfix(e.x)
		if err != nil {
			return "", err
		}
		name := e.text
		switch {
		case tmplSpecialFilters[name] != "":
			name = tmplSpecialFilters[name]
			b.hooked = true
		case name == "tojson":
			// The hook checks a bound on the JSON size of its argument and
			// returns it unchanged.
			indent := 0
			for _, kw := range e.kwargs {
				if kw.name != "indent" {
					continue
				}
				v := kw.value
				n, err := strconv.Atoi(v.text)
				isNone := v.kind == tmplLit && (v.text == "none" || v.text == "None")
				if !isNone && (v.kind != tmplLit || err != nil || n < 0 || n > tmplMaxJSONIndent) {
					return "", tmplUnsafef(line, "tojson indent must be a number from 0 to %d", tmplMaxJSONIndent)
				}
				indent = n
			}
			x = tmplHook + "json(" + x + ", " + strconv.Itoa(indent) + ")"
			b.hooked = true
		case tmplPrintingFilters[name] > 0:
			x = tmplHook + "grow(" + x + ", " + strconv.Itoa(tmplPrintingFilters[name]) + ")"
			b.hooked = true
		case tmplCountingFilters[name]:
			x = tmplHook + "items(" + x + ")"
			b.hooked = true
		}
		s := x + "|" + name
		if e.paren {
			args, err := tmplRewriteArgs(e.args, e.kwargs, line, b, false)
			if err != nil {
				return "", err
			}
			s += "(" + args + ")"
		}
		return s, nil

	case tmplTest:
		x, err := paren(e.x)
		if err != nil {
			return "", err
		}
		s := x + " is "
		if e.negated {
			s += "not "
		}
		s += e.text
		if e.paren {
			args, err := tmplRewriteArgs(e.args, nil, line, b, false)
			if err != nil {
				return "", err
			}
			s += "(" + args + ")"
		}
		return s, nil

	case tmplList:
		// Items are references: a literal repeating a large value is as
		// large as all of them when printed.
		for range e.args {
			if err := grow(); err != nil {
				return "", err
			}
		}
		args, err := tmplRewriteArgs(e.args, nil, line, b, false)
		if err != nil {
			return "", err
		}
		return "[" + args + "]", nil

	case tmplDict:
		parts := make([]string, 0, len(e.args)/2)
		for i := 0; i+1 < len(e.args); i += 2 {
			if err := grow(); err != nil {
				return "", err
			}
			k, err := rw(e.args[i])
			if err != nil {
				return "", err
			}
			v, err := rw(e.args[i+1])
			if err != nil {
				return "", err
			}
			parts = append(parts, k+": "+v)
		}
		return "{" + strings.Join(parts, ", ") + "}", nil
	}
	return "", tmplUnsafef(line, "unknown expression")
}

// tmplRewriteArgs prints call arguments; with copy, each value is wrapped
// in the deep-copy hook.
func tmplRewriteArgs(args []*tmplExpr, kwargs []tmplKwarg, line int, b *tmplBudget, copyArgs bool) (string, error) {
	parts := make([]string, 0, len(args)+len(kwargs))
	wrap := func(s string) string {
		if copyArgs {
			b.hooked = true
			return tmplHook + "copy(" + s + ")"
		}
		return s
	}
	for _, a := range args {
		s, err := tmplRewrite(a, line, b)
		if err != nil {
			return "", err
		}
		parts = append(parts, wrap(s))
	}
	for _, kw := range kwargs {
		s, err := tmplRewrite(kw.value, line, b)
		if err != nil {
			return "", err
		}
		parts = append(parts, kw.name+"="+wrap(s))
	}
	return strings.Join(parts, ", "), nil
}

// tmplUnitStep returns "1" or "-1" when e is that literal, else "".
func tmplUnitStep(e *tmplExpr) string {
	switch {
	case e.kind == tmplLit && e.text == "1":
		return "1"
	case e.kind == tmplUnary && e.text == "-" && e.x.kind == tmplLit && e.x.text == "1":
		return "-1"
	}
	return ""
}
