package chat

import (
	"fmt"
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
// hooks (hooks.go) wherever work or memory can grow:
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
	return fmt.Errorf("%w: line %d: %s", ErrUnsupported, line, fmt.Sprintf(format, args...))
}

// tmplInstrument checks src and returns the instrumented template source.
func tmplInstrument(src string) (string, error) {
	if len(src) > tmplMaxSourceBytes {
		return "", fmt.Errorf("%w: the template is %d bytes, the limit is %d", ErrUnsupported, len(src), tmplMaxSourceBytes)
	}
	if strings.Contains(src, strings.TrimSuffix(tmplHook, "_")) {
		return "", fmt.Errorf("%w: the template mentions the reserved name %q", ErrUnsupported, tmplHook)
	}
	segs, err := tmplScan(src)
	if err != nil {
		return "", err
	}
	if tags := len(segs) - tmplCount(segs, tmplSegText); tags > tmplMaxTags {
		return "", fmt.Errorf("%w: the template has %d tags, the limit is %d", ErrUnsupported, tags, tmplMaxTags)
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
			return nil, fmt.Errorf("%w: line %d: unclosed tag", ErrUnsupported, tagLine)
		}
		textStart, textLine = i, line
	}
	if textStart < len(src) {
		segs = append(segs, tmplSeg{kind: tmplSegText, text: src[textStart:], line: textLine})
	}
	return segs, nil
}
