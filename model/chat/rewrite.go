package chat

import (
	"strconv"
	"strings"
)

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
