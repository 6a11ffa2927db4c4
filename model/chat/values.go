package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// measure returns the size of v (string bytes plus tmplNodeBytes for every
// value) and fails if it is over the value limit or nested too deeply. The
// walk stops at the limit, so it also ends on a cyclic value.
func (r *tmplRender) measure(v jinja.Value) (int64, error) {
	type item struct {
		v     jinja.Value
		depth int
	}
	stack := []item{{v, 1}}
	var size int64
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		size += tmplNodeBytes
		switch {
		case it.v.IsString():
			size += int64(len(it.v.AsString()))
		case it.v.IsList(), it.v.IsDict():
			if it.depth >= tmplMaxValueDepth {
				return 0, tmplLimitf("lists and dicts nested deeper than %d", tmplMaxValueDepth)
			}
			if it.v.IsList() {
				items := it.v.AsList().Items
				if size += int64(len(items)) * tmplNodeBytes; size > r.maxValue {
					break
				}
				for _, x := range items {
					stack = append(stack, item{x, it.depth + 1})
				}
				break
			}
			d := it.v.AsDict()
			if size += int64(len(d.Keys)) * tmplNodeBytes; size > r.maxValue {
				break
			}
			for _, k := range d.Keys {
				size += int64(len(k))
				stack = append(stack, item{d.Data[k], it.depth + 1})
			}
		}
		if size > r.maxValue {
			return 0, tmplLimitf("a value of more than %d bytes", r.maxValue)
		}
	}
	return size, nil
}

// print is the library's printValue for a value that passed measure.
func (r *tmplRender) print(v jinja.Value) (string, error) {
	switch {
	case v.IsUndefined(), v.IsNone(), v.IsCallable():
		return "", nil
	case v.IsString():
		return v.AsString(), nil
	case v.IsBool():
		if v.AsBool() {
			return "True", nil
		}
		return "False", nil
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10), nil
	case v.IsFloat():
		return fmt.Sprintf("%g", v.AsFloat()), nil
	}
	if _, err := r.measure(v); err != nil {
		return "", err
	}
	return v.String(), nil
}

func (r *tmplRender) printAll(vs []jinja.Value) ([]string, error) {
	out := make([]string, len(vs))
	for i, v := range vs {
		s, err := r.print(v)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// tmplDeepCopy copies lists and dicts; callers measure v first, which
// bounds its depth.
func tmplDeepCopy(v jinja.Value) jinja.Value {
	switch {
	case v.IsList():
		items := v.AsList().Items
		out := make([]jinja.Value, len(items))
		for i, x := range items {
			out[i] = tmplDeepCopy(x)
		}
		return jinja.NewList(out)
	case v.IsDict():
		d := v.AsDict()
		out := jinja.NewDict()
		od := out.AsDict()
		for _, k := range d.Keys {
			od.Set(k, tmplDeepCopy(d.Data[k]))
		}
		return out
	}
	return v
}

// tmplToInt64 and tmplToFloat64 convert values to numbers as the library's
// arithmetic does.
func tmplToInt64(v jinja.Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		return int64(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
	case v.IsString():
		var n int64
		_, _ = fmt.Sscanf(v.AsString(), "%d", &n)
		return n
	}
	return 0
}

func tmplToFloat64(v jinja.Value) float64 {
	switch {
	case v.IsFloat():
		return v.AsFloat()
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
	case v.IsString():
		var f float64
		_, _ = fmt.Sscanf(v.AsString(), "%f", &f)
		return f
	}
	return 0
}

// tmplToolsValue decodes a JSON array of tools, keeping the key order of
// objects (tojson prints keys in order) and integers as integers.
func tmplToolsValue(raw json.RawMessage) (jinja.Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return jinja.None(), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := tmplDecodeJSON(dec, 1)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("model: tools: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("model: tools: trailing data after the JSON value")
	}
	if !v.IsList() && !v.IsNone() {
		return jinja.Undefined(), errors.New("model: tools must be a JSON array")
	}
	return v, nil
}

func tmplDecodeJSON(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > tmplMaxValueDepth {
		return jinja.Undefined(), fmt.Errorf("nested deeper than %d", tmplMaxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		if n, err := t.Int64(); err == nil {
			return jinja.NewInt(n), nil
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewFloat(f), nil
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				item, err := tmplDecodeJSON(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, item)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			obj := jinja.NewDict()
			d := obj.AsDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), errors.New("object key is not a string")
				}
				v, err := tmplDecodeJSON(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return obj, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// tmplStrftime formats t with the C strftime verbs templates use: %a %A %b
// %B %d %e %H %I %j %m %M %p %S %y %Y %z %Z %%, and the glibc "-" flag that
// drops padding (%-d). Other verbs are copied as written.
func tmplStrftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		start := i
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if !noPad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch format[i] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if len(s) < 2 && !noPad {
				s = " " + s
			}
			b.WriteString(s)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'm':
			num(int(t.Month()), 2)
		case 'M':
			num(t.Minute(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'S':
			num(t.Second(), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			num(t.Year(), 4)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteString(format[start : i+1])
		}
	}
	return b.String()
}

// tmplMessagesValue converts messages to the list of dicts templates
// iterate over (see [Message]).
func tmplMessagesValue(msgs []Message) jinja.Value {
	items := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		v := jinja.NewDict()
		d := v.AsDict()
		d.Set("role", jinja.NewString(m.Role))
		d.Set("content", jinja.NewString(m.Content))
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				fn := jinja.NewDict()
				fn.AsDict().Set("name", jinja.NewString(tc.Name))
				fn.AsDict().Set("arguments", tmplArgumentsValue(tc.Arguments))
				call := jinja.NewDict()
				call.AsDict().Set("id", jinja.NewString(tc.ID))
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", fn)
				calls[j] = call
			}
			d.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
		}
		if m.Name != "" {
			d.Set("name", jinja.NewString(m.Name))
		}
		items[i] = v
	}
	return jinja.NewList(items)
}

// tmplArgumentsValue is a tool call's arguments as templates get them: a
// dict when the text is a JSON object (key order kept), else the text.
func tmplArgumentsValue(args string) jinja.Value {
	if t := strings.TrimSpace(args); strings.HasPrefix(t, "{") {
		dec := json.NewDecoder(strings.NewReader(t))
		dec.UseNumber()
		// The arguments sit five levels down in messages: count them, so
		// that the whole list stays within tmplMaxValueDepth.
		if v, err := tmplDecodeJSON(dec, 6); err == nil && v.IsDict() {
			if _, err := dec.Token(); err == io.EOF {
				return v
			}
		}
	}
	return jinja.NewString(args)
}
