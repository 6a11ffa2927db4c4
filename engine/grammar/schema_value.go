package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// enum compiles enum and const: the values (those of enum equal to
// const, when both are present) that the rest of the schema accepts.
func (c *schemaCompiler) enum(v *jsonValue, path string) (string, error) {
	var values []*jsonValue
	if e := v.get("enum"); e != nil {
		if e.kind != jsonArray {
			return "", &SchemaError{At: path + "/enum", Msg: "enum must be an array"}
		}
		values = e.elems
	}
	if k := v.get("const"); k != nil {
		if v.has("enum") {
			want := canonicalJSON(k)
			values = slices.DeleteFunc(slices.Clone(values), func(x *jsonValue) bool { return canonicalJSON(x) != want })
		} else {
			values = []*jsonValue{k}
		}
	}
	seen := map[string]bool{}
	var texts []string
	var kept []*jsonValue
	for _, x := range values {
		t := canonicalJSON(x)
		if !seen[t] {
			seen[t] = true
			texts = append(texts, t)
			kept = append(kept, x)
		}
	}
	if otherConstraint(v, "enum", "const") != "" && len(kept) > 0 {
		// Keep the values the rest of the schema's grammar matches.
		rest := &jsonValue{kind: jsonObject}
		for i, k := range v.keys {
			if k != "enum" && k != "const" {
				rest.keys = append(rest.keys, k)
				rest.vals = append(rest.vals, v.vals[i])
			}
		}
		sub := newSchemaCompiler(c.doc, "")
		sub.depth = c.depth
		if _, err := sub.compileRoot(rest, path); err != nil {
			return "", err
		}
		g, err := Compile(sub.rs.text())
		if err != nil {
			return "", &SchemaError{At: path, Msg: err.Error()}
		}
		var filtered []*jsonValue
		for i, x := range kept {
			if g.Match(texts[i]) {
				filtered = append(filtered, x)
			}
		}
		kept = filtered
	}
	if len(kept) == 0 {
		return "", &SchemaError{At: path, Msg: "no value of enum or const satisfies the schema"}
	}
	alts := make([]string, len(kept))
	for i, x := range kept {
		alts[i] = c.literal(x)
	}
	return alternatives(alts), nil
}

// literal writes a value's canonical form as GBNF, with optional
// whitespace after each token.
func (c *schemaCompiler) literal(v *jsonValue) string {
	sp := c.prim("space")
	var parts []string
	switch v.kind {
	case jsonObject:
		parts = append(parts, `"{"`, sp)
		for i, k := range v.keys {
			if i > 0 {
				parts = append(parts, `","`, sp)
			}
			parts = append(parts, gbnfLiteral(quoteJSON(k)), sp, `":"`, sp, c.literal(v.vals[i]))
		}
		parts = append(parts, `"}"`, sp)
	case jsonArray:
		parts = append(parts, `"["`, sp)
		for i, e := range v.elems {
			if i > 0 {
				parts = append(parts, `","`, sp)
			}
			parts = append(parts, c.literal(e))
		}
		parts = append(parts, `"]"`, sp)
	default:
		parts = append(parts, gbnfLiteral(canonicalJSON(v)), sp)
	}
	return strings.Join(parts, " ")
}

// jsonKind is the kind of a JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

// jsonValue is a decoded JSON value that keeps its object keys in order.
type jsonValue struct {
	kind  jsonKind
	b     bool
	s     string       // a string, or a number's text
	elems []*jsonValue // an array's elements
	keys  []string     // an object's keys, in order; vals[i] is keys[i]'s value
	vals  []*jsonValue
}

func (v *jsonValue) get(key string) *jsonValue {
	if v.kind != jsonObject {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

func (v *jsonValue) has(key string) bool { return v.get(key) != nil }

// decodeJSON decodes one JSON value, keeping key order; duplicate keys
// are refused.
func decodeJSON(data []byte) (*jsonValue, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the schema")
	}
	return v, nil
}

func decodeValue(d *json.Decoder, depth int) (*jsonValue, error) {
	tok, err := d.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	switch t := tok.(type) {
	case nil:
		return &jsonValue{kind: jsonNull}, nil
	case bool:
		return &jsonValue{kind: jsonBool, b: t}, nil
	case json.Number:
		return &jsonValue{kind: jsonNumber, s: t.String()}, nil
	case string:
		return &jsonValue{kind: jsonString, s: t}, nil
	}
	if depth >= maxJSONDepth {
		return nil, fmt.Errorf("JSON nests deeper than %d", maxJSONDepth)
	}
	v := &jsonValue{kind: jsonArray}
	if tok == json.Delim('{') {
		v.kind = jsonObject
	}
	seen := map[string]bool{}
	for d.More() {
		if v.kind == jsonObject {
			kt, err := d.Token()
			if err != nil {
				return nil, fmt.Errorf("invalid JSON: %v", err)
			}
			key := kt.(string)
			if seen[key] {
				return nil, fmt.Errorf("duplicate key %q", key)
			}
			seen[key] = true
			v.keys = append(v.keys, key)
		}
		e, err := decodeValue(d, depth+1)
		if err != nil {
			return nil, err
		}
		if v.kind == jsonObject {
			v.vals = append(v.vals, e)
		} else {
			v.elems = append(v.elems, e)
		}
	}
	if _, err := d.Token(); err != nil { // the closing delimiter
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	return v, nil
}

// canonicalJSON writes v compactly, keys in order, strings as quoteJSON
// does, and numbers as canonicalNumber does.
func canonicalJSON(v *jsonValue) string {
	var b strings.Builder
	writeCanonical(&b, v)
	return b.String()
}

func writeCanonical(b *strings.Builder, v *jsonValue) {
	switch v.kind {
	case jsonNull:
		b.WriteString("null")
	case jsonBool:
		b.WriteString(strconv.FormatBool(v.b))
	case jsonNumber:
		b.WriteString(canonicalNumber(v.s))
	case jsonString:
		b.WriteString(quoteJSON(v.s))
	case jsonArray:
		b.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case jsonObject:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quoteJSON(k))
			b.WriteByte(':')
			writeCanonical(b, v.vals[i])
		}
		b.WriteByte('}')
	}
}

// quoteJSON writes s as a JSON string as json.Marshal does, but without
// escaping <, > and &.
func quoteJSON(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(buf.String(), "\n")
}

// canonicalNumber writes an integral number as an integer, another as
// json.Marshal writes it when its float64 is exact, else as written.
func canonicalNumber(s string) string {
	r := parseRat(s)
	if r == nil {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if fr := new(big.Rat).SetFloat64(f); fr != nil && fr.Cmp(r) == 0 {
			if out, err := json.Marshal(f); err == nil {
				return string(out)
			}
		}
	}
	return s
}

// parseRat parses a JSON number exactly; nil if it is not one, or its
// exponent is so large that the value would be huge.
func parseRat(s string) *big.Rat {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1000 || e < -1000 {
			return nil
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil
	}
	return r
}
