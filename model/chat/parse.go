package chat

import (
	"strings"
)

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
// equivalents (hooks.go).
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
