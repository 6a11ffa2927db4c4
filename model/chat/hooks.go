package chat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"
)

// Runtime limits of one render; the byte limits scale with
// Options.MaxOutputBytes.
const (
	// tmplMaxSteps bounds loop iterations, macro calls and range() items.
	tmplMaxSteps = 1 << 20
	// tmplMaxCallDepth bounds nested macro and caller() calls.
	tmplMaxCallDepth = 100
	// tmplMaxValueDepth bounds the nesting of lists and dicts, in the
	// input and in values the template builds.
	tmplMaxValueDepth = 64
	// tmplMaxIndex clamps slice bounds, which the library loops over
	// unclamped for non-ASCII strings.
	tmplMaxIndex = 1 << 24
	// tmplMaxFilterItems bounds the lists and dicts given to filters that
	// do costly work per item in one call (sort, max, selectattr, ...).
	tmplMaxFilterItems = 16384
	// tmplNodeBytes is what one list item or dict entry counts for in
	// value sizes.
	tmplNodeBytes = 8
	// tmplValueFactor and tmplEmitFactor set the largest value a template
	// may build and the bytes it may write in all (including macro output
	// that it writes again) as multiples of MaxOutputBytes.
	tmplValueFactor = 3
	tmplEmitFactor  = 8
)

// tmplRender is the state of one render. Only the goroutine running the
// render touches it, except cancelled, which the caller sets at the
// deadline.
type tmplRender struct {
	maxSteps  int64
	maxValue  int64
	maxEmit   int64
	now       time.Time
	cancelled atomic.Bool

	steps   int64
	emitted int64
	copied  int64 // bytes stored into existing lists and dicts
	depth   int
	// err is the first error a hook returned. It is sticky: every later
	// hook returns it again, and the render fails with it even where the
	// library drops an error (it ignores errors in slice bounds).
	err error
}

func newTmplRender(maxOutput int, now time.Time) *tmplRender {
	return &tmplRender{
		maxSteps: tmplMaxSteps,
		maxValue: int64(maxOutput) * tmplValueFactor,
		maxEmit:  int64(maxOutput) * tmplEmitFactor,
		now:      now,
	}
}

type tmplFunc = func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error)

// hook wraps fn with the sticky error and the cancellation check.
func (r *tmplRender) hook(name string, fn tmplFunc) jinja.Value {
	return jinja.NewCallable(name, func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		if r.err != nil {
			return jinja.Undefined(), r.err
		}
		if r.cancelled.Load() {
			r.err = ErrTimeout
			return jinja.Undefined(), r.err
		}
		v, err := fn(args, kwargs)
		if err != nil {
			r.err = err
		}
		return v, err
	})
}

func tmplLimitf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrLimit, fmt.Sprintf(format, args...))
}

// globals returns the hooks and the bounded replacements of the library's
// range, raise_exception and strftime_now, which shadow the built-ins.
func (r *tmplRender) globals() map[string]jinja.Value {
	g := map[string]jinja.Value{
		"raise_exception": r.hook("raise_exception", r.raiseException),
		"strftime_now":    r.hook("strftime_now", r.strftimeNow),
		"range":           r.hook("range", r.rangeFn),
	}
	for name, fn := range map[string]tmplFunc{
		"txt": r.txt, "out": r.out, "tick": r.tick, "enter": r.enter, "leave": r.leave,
		"set": r.set, "copy": r.copy, "index": r.index,
		"cat": r.cat, "add": r.add, "mul": r.mul, "json": r.json, "grow": r.grow, "items": r.items,
		"join": r.join, "replace": r.replace, "indent": r.indent,
		"str_replace": r.strReplace, "str_format": r.strFormat,
	} {
		g[tmplHook+name] = r.hook(tmplHook+name, fn)
	}
	return g
}

func (r *tmplRender) step(n int64) error {
	r.steps += n
	if r.steps > r.maxSteps {
		return tmplLimitf("more than %d loop iterations and macro calls", r.maxSteps)
	}
	return nil
}

func (r *tmplRender) emit(n int64) error {
	r.emitted += n
	if r.emitted > r.maxEmit {
		return fmt.Errorf("%w: the template wrote more than %d bytes", ErrOutputTooLarge, r.maxEmit)
	}
	return nil
}

// txt counts a run of template text about to be written.
func (r *tmplRender) txt(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 1 && args[0].IsInt() {
		return jinja.NewString(""), r.emit(args[0].AsInt())
	}
	return jinja.Undefined(), errors.New("model: bad txt hook call")
}

// out counts the value of a {{ }} tag about to be written and returns it.
func (r *tmplRender) out(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("model: an output tag needs exactly one expression")
	}
	n, err := r.measure(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	return args[0], r.emit(n)
}

// tick runs at the start of every loop iteration.
func (r *tmplRender) tick(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	return jinja.NewString(""), r.step(1)
}

// enter runs at the start of every macro and caller() body with the
// arguments it was called with.
func (r *tmplRender) enter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	r.depth++
	if r.depth > tmplMaxCallDepth {
		return jinja.Undefined(), tmplLimitf("macro calls nested deeper than %d", tmplMaxCallDepth)
	}
	if err := r.step(1); err != nil {
		return jinja.Undefined(), err
	}
	for _, a := range args {
		if _, err := r.measure(a); err != nil {
			return jinja.Undefined(), err
		}
	}
	return jinja.NewString(""), nil
}

// leave runs at the end of every macro and caller() body.
func (r *tmplRender) leave(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	r.depth--
	return jinja.NewString(""), nil
}

// set checks a value about to be assigned. With a second argument (the
// namespace it is stored into) it returns a deep copy.
func (r *tmplRender) set(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || len(args) > 2 {
		return jinja.Undefined(), errors.New("model: bad set hook call")
	}
	if _, err := r.measure(args[0]); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) == 2 {
		return tmplDeepCopy(args[0]), nil
	}
	return args[0], nil
}

// copy returns a deep copy of a value about to be stored into a list or
// dict: a copy holds no container that already exists, so storing it
// cannot make a container contain itself.
//
// Everything stored this way counts against one value limit for the whole
// render, so lists grown by append (which set does not see) stay bounded.
func (r *tmplRender) copy(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("model: bad copy hook call")
	}
	n, err := r.measure(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	if r.copied += n; r.copied > r.maxValue {
		return jinja.Undefined(), tmplLimitf("more than %d bytes appended to lists and dicts", r.maxValue)
	}
	return tmplDeepCopy(args[0]), nil
}

// cat is the library's "~" with the result size checked first.
func (r *tmplRender) cat(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 {
		return jinja.Undefined(), errors.New("model: bad cat hook call")
	}
	strs, err := r.printAll(args)
	if err != nil {
		return jinja.Undefined(), err
	}
	return r.concat(strs[0], strs[1])
}

func (r *tmplRender) concat(a, b string) (jinja.Value, error) {
	if int64(len(a))+int64(len(b)) > r.maxValue {
		return jinja.Undefined(), tmplLimitf("a string of more than %d bytes", r.maxValue)
	}
	return jinja.NewString(a + b), nil
}

// add is the library's "+" (string, list or number addition) with the
// result size checked first.
func (r *tmplRender) add(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 {
		return jinja.Undefined(), errors.New("model: bad add hook call")
	}
	a, b := args[0], args[1]
	switch {
	case a.IsString() || b.IsString():
		strs, err := r.printAll(args)
		if err != nil {
			return jinja.Undefined(), err
		}
		return r.concat(strs[0], strs[1])
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		if int64(len(x)+len(y))*tmplNodeBytes > r.maxValue {
			return jinja.Undefined(), tmplLimitf("a list of more than %d items", r.maxValue/tmplNodeBytes)
		}
		items := make([]jinja.Value, 0, len(x)+len(y))
		return jinja.NewList(append(append(items, x...), y...)), nil
	case a.IsFloat() || b.IsFloat():
		return jinja.NewFloat(tmplToFloat64(a) + tmplToFloat64(b)), nil
	}
	return jinja.NewInt(tmplToInt64(a) + tmplToInt64(b)), nil
}

// json checks a bound on the size of tojson's output for its first
// argument, printed with the indent in the second, and returns the first.
func (r *tmplRender) json(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 || !args[1].IsInt() {
		return jinja.Undefined(), errors.New("model: bad json hook call")
	}
	if _, err := r.measure(args[0]); err != nil {
		return jinja.Undefined(), err
	}
	// Each string byte becomes at most 6 (\u00XX); each value adds its
	// quotes, separators and one indented line.
	indent := args[1].AsInt()
	type item struct {
		v     jinja.Value
		depth int64
	}
	stack := []item{{args[0], 1}}
	var size int64
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		size += 8 + indent*it.depth
		switch {
		case it.v.IsString():
			size += 6 * int64(len(it.v.AsString()))
		case it.v.IsList():
			for _, x := range it.v.AsList().Items {
				stack = append(stack, item{x, it.depth + 1})
			}
		case it.v.IsDict():
			d := it.v.AsDict()
			for _, k := range d.Keys {
				size += 6 * int64(len(k))
				stack = append(stack, item{d.Data[k], it.depth + 1})
			}
		}
		if size > r.maxValue {
			return jinja.Undefined(), tmplLimitf("JSON of more than %d bytes", r.maxValue)
		}
	}
	return args[0], nil
}

// grow checks that its first argument, printed and grown by up to the
// factor in the second (escape: 6, string: 1), stays under the value limit,
// and returns it.
func (r *tmplRender) grow(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 || !args[1].IsInt() {
		return jinja.Undefined(), errors.New("model: bad grow hook call")
	}
	n, err := r.measure(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	if n > r.maxValue/max(args[1].AsInt(), 1) {
		return jinja.Undefined(), tmplLimitf("a value of more than %d bytes once printed", r.maxValue)
	}
	return args[0], nil
}

// mul is the library's "*" with the size of a repeated string checked
// first (and a negative count giving "", as in Python, where the library
// panics).
func (r *tmplRender) mul(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 {
		return jinja.Undefined(), errors.New("model: bad mul hook call")
	}
	a, b := args[0], args[1]
	switch {
	case a.IsString() && b.IsInt():
		s, n := a.AsString(), b.AsInt()
		if n <= 0 || s == "" {
			return jinja.NewString(""), nil
		}
		if n > r.maxValue/int64(len(s)) {
			return jinja.Undefined(), tmplLimitf("a repeated string of more than %d bytes", r.maxValue)
		}
		return jinja.NewString(strings.Repeat(s, int(n))), nil
	case a.IsFloat() || b.IsFloat():
		return jinja.NewFloat(tmplToFloat64(a) * tmplToFloat64(b)), nil
	}
	return jinja.NewInt(tmplToInt64(a) * tmplToInt64(b)), nil
}

// items checks that a list or dict given to a per-item filter has at most
// tmplMaxFilterItems items, and returns it.
func (r *tmplRender) items(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("model: bad items hook call")
	}
	v := args[0]
	n := 0
	switch {
	case v.IsList():
		n = len(v.AsList().Items)
	case v.IsDict():
		n = len(v.AsDict().Keys)
	}
	if n > tmplMaxFilterItems {
		return jinja.Undefined(), tmplLimitf("a filter over %d items, the limit is %d", n, tmplMaxFilterItems)
	}
	return v, nil
}

// index converts a slice bound the way the library does and clamps it.
func (r *tmplRender) index(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), errors.New("model: bad index hook call")
	}
	return jinja.NewInt(max(-tmplMaxIndex, min(tmplMaxIndex, tmplToInt64(args[0])))), nil
}

// join is the library's join filter with the result size checked first.
func (r *tmplRender) join(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	if !args[0].IsList() {
		s, err := r.print(args[0])
		return jinja.NewString(s), err
	}
	var sep, attr string
	var err error
	if len(args) > 1 {
		if sep, err = r.print(args[1]); err != nil {
			return jinja.Undefined(), err
		}
	}
	if d, ok := kwargs["d"]; ok {
		if sep, err = r.print(d); err != nil {
			return jinja.Undefined(), err
		}
	}
	if a, ok := kwargs["attribute"]; ok {
		if attr, err = r.print(a); err != nil {
			return jinja.Undefined(), err
		}
	}
	items := args[0].AsList().Items
	total := int64(len(sep)) * int64(max(len(items)-1, 0))
	if total > r.maxValue {
		return jinja.Undefined(), tmplLimitf("a joined string of more than %d bytes", r.maxValue)
	}
	parts := make([]string, len(items))
	for i, item := range items {
		if attr != "" && item.IsDict() {
			if v, ok := item.AsDict().Get(attr); ok {
				item = v
			}
		}
		if parts[i], err = r.print(item); err != nil {
			return jinja.Undefined(), err
		}
		total += int64(len(parts[i]))
		if total > r.maxValue {
			return jinja.Undefined(), tmplLimitf("a joined string of more than %d bytes", r.maxValue)
		}
	}
	return jinja.NewString(strings.Join(parts, sep)), nil
}

// replace is the library's replace filter with the result size checked
// first.
func (r *tmplRender) replace(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 3 {
		return jinja.NewString(""), errors.New("model: replace: expected at least 3 arguments")
	}
	strs, err := r.printAll(args[:3])
	if err != nil {
		return jinja.Undefined(), err
	}
	count := -1
	if len(args) > 3 {
		count = int(tmplToInt64(args[3]))
	}
	if c, ok := kwargs["count"]; ok {
		count = int(tmplToInt64(c))
	}
	return r.replaceString(strs[0], strs[1], strs[2], count)
}

// strReplace is str.replace as a filter: the template's s.replace(a, b)
// becomes s|__llmd_str_replace(a, b).
func (r *tmplRender) strReplace(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("model: replace is a string method")
	}
	s := args[0].AsString()
	if len(args) < 3 {
		return jinja.NewString(s), nil
	}
	strs, err := r.printAll(args[1:3])
	if err != nil {
		return jinja.Undefined(), err
	}
	count := -1
	if len(args) > 3 {
		count = int(tmplToInt64(args[3]))
	}
	return r.replaceString(s, strs[0], strs[1], count)
}

func (r *tmplRender) replaceString(s, old, repl string, count int) (jinja.Value, error) {
	n := strings.Count(s, old) // for old == "", the rune count + 1
	if count >= 0 && count < n {
		n = count
	}
	if size := int64(len(s)) + int64(n)*int64(len(repl)-len(old)); size > r.maxValue {
		return jinja.Undefined(), tmplLimitf("a replaced string of more than %d bytes", r.maxValue)
	}
	return jinja.NewString(strings.Replace(s, old, repl, count)), nil
}

// strFormat is the library's str.format ({0}, {1}, ... and {} in order) as
// a filter, with each step's size checked first.
func (r *tmplRender) strFormat(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("model: format is a string method")
	}
	result := args[0].AsString()
	for i, arg := range args[1:] {
		v, err := r.print(arg)
		if err != nil {
			return jinja.Undefined(), err
		}
		placeholder := "{" + strconv.Itoa(i) + "}"
		n := strings.Count(result, placeholder)
		if int64(len(result))+int64(n)*int64(len(v))+int64(len(v)) > r.maxValue {
			return jinja.Undefined(), tmplLimitf("a formatted string of more than %d bytes", r.maxValue)
		}
		result = strings.ReplaceAll(result, placeholder, v)
		result = strings.Replace(result, "{}", v, 1)
	}
	return jinja.NewString(result), nil
}

// indent is the library's indent filter with the result size checked
// first (and a negative width meaning no indent, where the library panics).
func (r *tmplRender) indent(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	s, err := r.print(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	width := int64(4)
	if len(args) > 1 {
		width = tmplToInt64(args[1])
	}
	if w, ok := kwargs["width"]; ok {
		width = tmplToInt64(w)
	}
	first := len(args) > 2 && args[2].IsTruthy()
	if f, ok := kwargs["first"]; ok {
		first = f.IsTruthy()
	}
	width = max(width, 0)
	lines := strings.Split(s, "\n")
	if width > r.maxValue || int64(len(s))+int64(len(lines))*width > r.maxValue {
		return jinja.Undefined(), tmplLimitf("an indented string of more than %d bytes", r.maxValue)
	}
	pad := strings.Repeat(" ", int(width))
	for i, line := range lines {
		if (i > 0 || first) && line != "" {
			lines[i] = pad + line
		}
	}
	return jinja.NewString(strings.Join(lines, "\n")), nil
}

// rangeFn is range() with the number of items bounded; each item counts as
// a step.
func (r *tmplRender) rangeFn(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var start, stop, step int64 = 0, 0, 1
	switch len(args) {
	case 1:
		stop = tmplToInt64(args[0])
	case 2:
		start, stop = tmplToInt64(args[0]), tmplToInt64(args[1])
	case 3:
		start, stop, step = tmplToInt64(args[0]), tmplToInt64(args[1]), tmplToInt64(args[2])
	default:
		return jinja.Undefined(), fmt.Errorf("model: range: expected 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("model: range: step must not be zero")
	}
	// The item count, computed in float64 so that extreme bounds cannot
	// overflow.
	n := (float64(stop) - float64(start)) / float64(step)
	if n <= 0 {
		return jinja.NewList(nil), nil
	}
	if n > float64(r.maxSteps-r.steps) {
		return jinja.Undefined(), tmplLimitf("range() of more than %d items", r.maxSteps-r.steps)
	}
	count := int64(n)
	if float64(count) < n {
		count++
	}
	if err := r.step(count); err != nil {
		return jinja.Undefined(), err
	}
	items := make([]jinja.Value, 0, count)
	for i := range count {
		items = append(items, jinja.NewInt(start+i*step))
	}
	return jinja.NewList(items), nil
}

// raiseException fails the render with the template's message.
func (r *tmplRender) raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called without a message"
	if len(args) > 0 {
		s, err := r.print(args[0])
		if err != nil {
			return jinja.Undefined(), err
		}
		msg = s
	}
	if len(msg) > 1024 {
		msg = msg[:1024] + "..."
	}
	return jinja.Undefined(), &ExceptionError{Message: msg}
}

// strftimeNow formats the render's start time.
func (r *tmplRender) strftimeNow(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	format := "%Y-%m-%d"
	if len(args) > 0 {
		s, err := r.print(args[0])
		if err != nil {
			return jinja.Undefined(), err
		}
		format = s
	}
	if len(format) > 256 {
		return jinja.Undefined(), tmplLimitf("a strftime format longer than 256 bytes")
	}
	return jinja.NewString(tmplStrftime(r.now, format)), nil
}
