package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Limits on the schemas JSONSchemaGBNF accepts, and on the values its
// grammars admit. The values are bounded so that a model with random
// weights still finishes: numbers have at most 16 digits before the point
// and 16 after it and an exponent of at most 2 digits (so that every
// number fits a float64), and whitespace is at most a space, or a newline
// and 20 spaces or tabs, after each token.
const (
	maxSchemaDepth = 64
	maxJSONDepth   = 512
	// maxCount bounds minLength, maxLength, minItems and maxItems.
	maxCount = 1 << 24
	// maxBoundDigits bounds the integers in minimum and maximum.
	maxBoundDigits = 40

	maxIntDigits  = 16
	maxFracDigits = 16
)

// UnsupportedError reports a JSON Schema keyword or value, or a regular
// expression feature, that the compilers refuse because they cannot
// compile it to a grammar that enforces it.
type UnsupportedError struct {
	// Feature names what is refused: `keyword "patternProperties"`,
	// `format "email"`, `regex lookahead "(?="`.
	Feature string
	// At says where: a JSON pointer into the schema ("#/properties/a"),
	// and for a regular expression the byte offset in it ("offset 3").
	At string
}

func (e *UnsupportedError) Error() string {
	s := "grammar: " + e.Feature + " is not supported"
	if e.At != "" {
		s += " (at " + e.At + ")"
	}
	return s
}

// SchemaError reports a JSON schema that is malformed, that no value
// satisfies, or whose grammar would be too large.
type SchemaError struct {
	At  string // a JSON pointer into the schema
	Msg string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("grammar: json schema at %s: %s", e.At, e.Msg)
}

// JSONSchemaGBNF compiles a JSON Schema (draft 2020-12, or draft-07
// spellings) to a GBNF grammar whose rule "root" matches the JSON texts
// valid against the schema, written as below. Same schema text, same
// grammar text, so compiled grammars can be cached by their text.
//
// Supported: type (one or a list), properties, required,
// additionalProperties, enum, const, anyOf, oneOf, allOf with one
// subschema, $ref to a JSON pointer in the same document (#, #/$defs/x,
// #/definitions/x; recursion becomes recursive rules), items, prefixItems,
// draft-07 array items and additionalItems, minItems, maxItems, minLength,
// maxLength, pattern, format (date, time, date-time, uuid), minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, uniqueItems false, and
// OpenAPI's nullable. The boolean schemas: true (and {}) match any JSON
// value; false is refused where it would make the schema match nothing.
// Annotations are ignored: title, description, examples, example,
// default, $schema, $id, $comment, deprecated, readOnly, writeOnly, strict,
// name, $defs and definitions. Any other keyword is refused with an
// [*UnsupportedError] naming it; a malformed or unsatisfiable schema gives
// a [*SchemaError].
//
// Where the grammar admits less than the schema (never more):
//   - An object admits its declared properties in the schema's order, each
//     optional one present or not, then the extra properties that
//     additionalProperties allows. When additionalProperties is absent and
//     properties is present, no extra property is allowed (as xgrammar's
//     strict mode does, and as OpenAI's strict structured outputs require);
//     an object schema without properties admits any properties.
//     Likewise prefixItems (or draft-07 array items) without items (or
//     additionalItems) admit no further items.
//   - Without type, the keywords present decide it (properties → object,
//     minLength → string, and so on), as llama.cpp does; a schema with
//     none of them admits any value.
//   - oneOf is compiled as anyOf: that exactly one subschema matches is
//     not enforced.
//   - enum and const values are written in one canonical form, compact
//     (spaces allowed between tokens), object keys in the order given,
//     integral numbers as integers; other keywords next to enum or const
//     drop the values that they reject.
//   - Strings write characters raw, or with the escapes \" \\ \/ \b \f
//     \n \r \t \uXXXX (not surrogates: a character beyond U+FFFF is raw).
//     The characters a pattern matches use \uXXXX only for control
//     characters, extra property names not at all. Lengths count
//     characters, an escape as one.
//   - pattern is a search (unanchored unless it uses ^ and $) with the
//     syntax and meaning of [RegexGBNF]. With minLength or maxLength it
//     is refused unless the lengths can be folded into one repetition of
//     the pattern (^[a-z]+$ with maxLength 8 can; "a.*b" with maxLength 8
//     cannot).
//   - format: date and date-time check the days of each month and leap
//     years; time and date-time have 1 to 9 digits of fraction, upper-case
//     T and Z, and no leap second.
//   - Numbers are bounded as described on the limits above; with minimum
//     or maximum they have no exponent, and a bound on a "number" must be
//     an integer (exclusive or not). Integer bounds are exact.
//
// The root rule matches the value followed by optional whitespace; no
// whitespace is admitted before it. A schema that nests deeper than 64, or
// whose grammar would exceed MaxSourceBytes, is refused with a
// [*SchemaError].
func JSONSchemaGBNF(schema []byte) (string, error) {
	rules, _, err := SchemaRules(schema, "")
	return rules, err
}

// SchemaRules is JSONSchemaGBNF as rules to embed in a larger grammar:
// every rule it defines starts with prefix (made of [a-zA-Z0-9_-], e.g.
// "tool0-"), and root is the name of the rule that matches the schema's
// values (prefix+"root").
func SchemaRules(schema []byte, prefix string) (rules, root string, err error) {
	for i := 0; i < len(prefix); i++ {
		if !isNameByte(prefix[i]) {
			return "", "", fmt.Errorf("grammar: rule prefix %q: only letters, digits, - and _ are allowed", prefix)
		}
	}
	doc, err := decodeJSON(schema)
	if err != nil {
		return "", "", &SchemaError{At: "#", Msg: err.Error()}
	}
	c := newSchemaCompiler(doc, prefix)
	root, err = c.compileRoot(doc, "#")
	if err != nil {
		return "", "", err
	}
	return c.rs.text(), root, nil
}

// JSONObjectGBNF returns a grammar matching any JSON object, for
// "response_format": {"type": "json_object"}. It is JSONSchemaGBNF of
// {"type": "object"}.
func JSONObjectGBNF() string { return jsonObjectGBNF }

const jsonObjectGBNF = `root ::= object
value ::= object | array | string | number | boolean | null
string ::= "\"" char* "\"" space
space ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )
object ::= "{" space ( string ":" space value ( "," space string ":" space value )* )? "}" space
array ::= "[" space ( value ( "," space value )* )? "]" space
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? space
boolean ::= ( "true" | "false" ) space
null ::= "null" space
`

// The keywords of a schema object: annotations (ignored), and the
// constraints compiled, with the type they imply when type is absent.
var (
	annotationKeywords = map[string]bool{
		"title": true, "description": true, "examples": true, "example": true, "default": true,
		"$schema": true, "$id": true, "$comment": true, "deprecated": true, "readOnly": true,
		"writeOnly": true, "strict": true, "name": true, "$defs": true, "definitions": true,
	}
	constraintKeywords = map[string]string{
		"type": "", "enum": "", "const": "", "anyOf": "", "oneOf": "", "allOf": "", "$ref": "", "nullable": "",
		"properties": "object", "required": "object", "additionalProperties": "object",
		"items": "array", "prefixItems": "array", "additionalItems": "array", "minItems": "array",
		"maxItems": "array", "uniqueItems": "",
		"minLength": "string", "maxLength": "string", "pattern": "string", "format": "string",
		"minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number",
	}
	jsonTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}
	// formatLengths are the fewest and most characters of each format.
	formatLengths = map[string][2]int{"date": {10, 10}, "time": {9, 24}, "date-time": {20, 35}, "uuid": {36, 36}}
)

// primitives are the shared rules, by name (before the prefix).
var primitives = map[string]string{
	"space":     `| " " | "\n" [ \t]{0,20}`,
	"char":      `[^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )`,
	"kchar":     `[^"\\\x00-\x1F] | "\\" ["\\/bfnrt]`,
	"string":    `"\"" char* "\"" space`,
	"value":     `object | array | string | number | boolean | null`,
	"object":    `"{" space ( string ":" space value ( "," space string ":" space value )* )? "}" space`,
	"array":     `"[" space ( value ( "," space value )* )? "]" space`,
	"number":    `"-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? space`,
	"integer":   `"-"? ( "0" | [1-9] [0-9]{0,15} ) space`,
	"boolean":   `( "true" | "false" ) space`,
	"null":      `"null" space`,
	"frac-nz":   fracNonZero(),
	"date":      `[0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | leap-year "-02-29"`,
	"leap-year": `[0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [048] | [2468] [048] | [13579] [26] ) "00"`,
	"time":      `( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [-+] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )`,
	"date-time": `date "T" time`,
	"uuid":      `[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}`,
}

// primitiveOrder lists the primitives so that their names are reserved
// in a fixed order.
var primitiveOrder = []string{"space", "char", "kchar", "string", "value", "object", "array", "number", "integer",
	"boolean", "null", "frac-nz", "date", "leap-year", "time", "date-time", "uuid"}

// fracNonZero is a fraction of 1 to 16 digits that are not all zeros.
func fracNonZero() string {
	alts := make([]string, maxFracDigits)
	for z := range maxFracDigits {
		s := ""
		if z > 0 {
			s = gbnfLiteral(strings.Repeat("0", z)) + " "
		}
		s += "[1-9]"
		if rest := maxFracDigits - 1 - z; rest > 0 {
			s += fmt.Sprintf(" [0-9]{0,%d}", rest)
		}
		alts[z] = s
	}
	return `"." ( ` + strings.Join(alts, " | ") + " )"
}

type schemaCompiler struct {
	doc   *jsonValue
	rs    *ruleSet
	prims map[string]string // primitive → its rule, once defined
	refs  map[string]string // JSON pointer → its rule
	// chain holds the pointers being compiled since the last { or [: a
	// $ref to one of them is left recursion.
	chain map[string]bool
	depth int
}

func newSchemaCompiler(doc *jsonValue, prefix string) *schemaCompiler {
	c := &schemaCompiler{doc: doc, rs: newRuleSet(prefix), prims: map[string]string{}, refs: map[string]string{}, chain: map[string]bool{}}
	for _, p := range primitiveOrder {
		c.rs.taken[prefix+p] = true
	}
	return c
}

// prim returns the rule of a primitive, defining it (and those it uses)
// on first use.
func (c *schemaCompiler) prim(name string) string {
	if n, ok := c.prims[name]; ok {
		return n
	}
	full := c.rs.prefix + name
	c.prims[name] = full
	c.rs.names = append(c.rs.names, full)
	body := primitives[name]
	if c.rs.prefix != "" {
		body = prefixRefs(body, c.rs.prefix)
	}
	for _, dep := range primitiveOrder {
		if dep != name && refersTo(primitives[name], dep) {
			c.prim(dep)
		}
	}
	_ = c.rs.define(full, body)
	return full
}

// refersTo reports whether GBNF body refers to rule name (outside
// literals and classes).
func refersTo(body, name string) bool {
	found := false
	scanNames(body, func(n string) string {
		found = found || n == name
		return n
	})
	return found
}

// prefixRefs puts prefix before every rule name body refers to.
func prefixRefs(body, prefix string) string {
	return scanNames(body, func(n string) string { return prefix + n })
}

// scanNames rewrites the rule names in a GBNF body with f, leaving
// literals and classes alone.
func scanNames(body string, f func(string) string) string {
	var b strings.Builder
	for i := 0; i < len(body); {
		switch c := body[i]; {
		case c == '"' || c == '[':
			end := byte('"')
			if c == '[' {
				end = ']'
			}
			j := i + 1
			for j < len(body) && body[j] != end {
				if body[j] == '\\' {
					j++
				}
				j++
			}
			b.WriteString(body[i : j+1])
			i = j + 1
		case isNameByte(c) && (c < '0' || c > '9'):
			j := i
			for j < len(body) && isNameByte(body[j]) {
				j++
			}
			b.WriteString(f(body[i:j]))
			i = j
		case c == '{': // a repetition count
			j := strings.IndexByte(body[i:], '}')
			b.WriteString(body[i : i+j+1])
			i += j + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// compileRoot compiles node (the document or a part of it) to a rule
// named prefix+"root".
func (c *schemaCompiler) compileRoot(node *jsonValue, path string) (string, error) {
	name := c.rs.reserve("root")
	if node == c.doc {
		c.refs["#"] = name
		c.chain["#"] = true
	}
	expr, err := c.schema(node, path, "root")
	if err != nil {
		return "", err
	}
	if err := c.rs.define(name, expr); err != nil {
		return "", &SchemaError{At: path, Msg: err.Error()}
	}
	if err := c.rs.err(); err != nil {
		return "", &SchemaError{At: path, Msg: err.Error()}
	}
	return name, nil
}

// schema compiles a schema to a GBNF expression matching its values, each
// followed by optional whitespace.
func (c *schemaCompiler) schema(v *jsonValue, path, hint string) (string, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxSchemaDepth {
		return "", &SchemaError{At: path, Msg: fmt.Sprintf("schemas nest deeper than %d", maxSchemaDepth)}
	}
	if err := c.rs.err(); err != nil {
		return "", &SchemaError{At: path, Msg: err.Error()}
	}
	switch v.kind {
	case jsonBool:
		if v.b {
			return c.prim("value"), nil
		}
		return "", &SchemaError{At: path, Msg: "the schema false matches nothing"}
	case jsonObject:
	default:
		return "", &SchemaError{At: path, Msg: "a schema must be an object or a boolean"}
	}
	if err := checkKeywords(v, path); err != nil {
		return "", err
	}
	nullable := false
	if n := v.get("nullable"); n != nil {
		if n.kind != jsonBool {
			return "", &SchemaError{At: path + "/nullable", Msg: "nullable must be a boolean"}
		}
		nullable = n.b
	}
	var expr string
	var err error
	switch {
	case v.has("$ref"):
		expr, err = c.ref(v, path)
	case v.has("allOf"):
		expr, err = c.allOf(v, path, hint)
	case v.has("anyOf") || v.has("oneOf"):
		expr, err = c.anyOf(v, path, hint)
	case v.has("enum") || v.has("const"):
		return c.enum(v, path)
	default:
		return c.typed(v, path, hint, nullable)
	}
	if err != nil || !nullable {
		return expr, err
	}
	return "( " + expr + " | " + c.prim("null") + " )", nil
}

// checkKeywords refuses the keywords not compiled.
func checkKeywords(v *jsonValue, path string) error {
	for i, k := range v.keys {
		if annotationKeywords[k] {
			continue
		}
		if _, ok := constraintKeywords[k]; !ok {
			return &UnsupportedError{Feature: fmt.Sprintf("keyword %q", k), At: path}
		}
		val := v.vals[i]
		switch k {
		case "uniqueItems":
			if val.kind != jsonBool {
				return &SchemaError{At: path + "/" + k, Msg: "uniqueItems must be a boolean"}
			}
			if val.b {
				return &UnsupportedError{Feature: `keyword "uniqueItems" with true`, At: path}
			}
		case "exclusiveMinimum", "exclusiveMaximum":
			if val.kind == jsonBool {
				return &UnsupportedError{Feature: fmt.Sprintf("draft-04 boolean %q", k), At: path}
			}
		}
	}
	return nil
}

// otherConstraint returns the first keyword of v that constrains values,
// other than those allowed; "" if none.
func otherConstraint(v *jsonValue, allowed ...string) string {
	for _, k := range v.keys {
		if _, ok := constraintKeywords[k]; ok && !slices.Contains(allowed, k) {
			return k
		}
	}
	return ""
}

func (c *schemaCompiler) ref(v *jsonValue, path string) (string, error) {
	if k := otherConstraint(v, "$ref", "nullable"); k != "" {
		return "", &UnsupportedError{Feature: fmt.Sprintf(`keyword "$ref" together with %q`, k), At: path}
	}
	r := v.get("$ref")
	if r.kind != jsonString {
		return "", &SchemaError{At: path + "/$ref", Msg: "$ref must be a string"}
	}
	ptr := r.s
	switch {
	case !strings.HasPrefix(ptr, "#"):
		return "", &UnsupportedError{Feature: fmt.Sprintf("$ref %q to another document", ptr), At: path}
	case ptr != "#" && !strings.HasPrefix(ptr, "#/"):
		return "", &UnsupportedError{Feature: fmt.Sprintf("$ref %q to an anchor", ptr), At: path}
	}
	if name, ok := c.refs[ptr]; ok {
		if c.chain[ptr] {
			return "", &SchemaError{At: path, Msg: fmt.Sprintf("$ref %q refers back to itself with no object or array between", ptr)}
		}
		return name, nil
	}
	target, hint, err := c.resolve(ptr)
	if err != nil {
		return "", &SchemaError{At: path + "/$ref", Msg: err.Error()}
	}
	name := c.rs.reserve(hint)
	c.refs[ptr] = name
	c.chain[ptr] = true
	expr, err := c.schema(target, ptr, hint)
	delete(c.chain, ptr)
	if err != nil {
		return "", err
	}
	_ = c.rs.define(name, expr)
	return name, nil
}

// resolve finds the schema a local JSON pointer ("#/$defs/a") names, and
// a rule name hint for it.
func (c *schemaCompiler) resolve(ptr string) (*jsonValue, string, error) {
	frag, err := url.PathUnescape(ptr[1:])
	if err != nil {
		return nil, "", fmt.Errorf("$ref %q: %v", ptr, err)
	}
	v, hint := c.doc, "root"
	if frag == "" {
		return v, hint, nil
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		hint = tok
		switch v.kind {
		case jsonObject:
			v = v.get(tok)
		case jsonArray:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v.elems) {
				v = nil
			} else {
				v = v.elems[i]
			}
		default:
			v = nil
		}
		if v == nil {
			return nil, "", fmt.Errorf("$ref %q: no such schema", ptr)
		}
	}
	return v, hint, nil
}

func (c *schemaCompiler) allOf(v *jsonValue, path, hint string) (string, error) {
	all := v.get("allOf")
	if all.kind != jsonArray {
		return "", &SchemaError{At: path + "/allOf", Msg: "allOf must be an array"}
	}
	if len(all.elems) != 1 {
		return "", &UnsupportedError{Feature: fmt.Sprintf(`keyword "allOf" with %d subschemas`, len(all.elems)), At: path}
	}
	if k := otherConstraint(v, "allOf", "nullable"); k != "" {
		return "", &UnsupportedError{Feature: fmt.Sprintf(`keyword "allOf" together with %q`, k), At: path}
	}
	return c.schema(all.elems[0], path+"/allOf/0", hint)
}

func (c *schemaCompiler) anyOf(v *jsonValue, path, hint string) (string, error) {
	key := "anyOf"
	if v.has("oneOf") {
		if v.has("anyOf") {
			return "", &UnsupportedError{Feature: `keywords "anyOf" and "oneOf" together`, At: path}
		}
		key = "oneOf"
	}
	if k := otherConstraint(v, key, "nullable"); k != "" {
		return "", &UnsupportedError{Feature: fmt.Sprintf("keyword %q together with %q", key, k), At: path}
	}
	list := v.get(key)
	if list.kind != jsonArray || len(list.elems) == 0 {
		return "", &SchemaError{At: path + "/" + key, Msg: key + " must be a non-empty array"}
	}
	var alts []string
	for i, s := range list.elems {
		if s.kind == jsonBool && !s.b {
			continue
		}
		e, err := c.schema(s, fmt.Sprintf("%s/%s/%d", path, key, i), fmt.Sprintf("%s-%d", hint, i))
		if err != nil {
			return "", err
		}
		alts = append(alts, c.item(e, fmt.Sprintf("%s-%d", hint, i)))
	}
	if len(alts) == 0 {
		return "", &SchemaError{At: path + "/" + key, Msg: "no subschema can match"}
	}
	return alternatives(alts), nil
}

// item returns expr as one item: itself if it is a rule name, else a new
// rule. Values nested in objects and arrays are items, so that the
// grammar's parentheses do not nest with the schema.
func (c *schemaCompiler) item(expr, hint string) string {
	for i := 0; i < len(expr); i++ {
		if !isNameByte(expr[i]) {
			return c.rs.add(hint, expr)
		}
	}
	return expr
}

func alternatives(alts []string) string {
	if len(alts) == 1 {
		return alts[0]
	}
	return "( " + strings.Join(alts, " | ") + " )"
}

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

// schemaTypes returns the types a schema admits, in the order given, with
// integer dropped when number is there; explicit is false when they were
// inferred from the keywords present.
func schemaTypes(v *jsonValue, path string) (types []string, explicit bool, err error) {
	t := v.get("type")
	if t == nil {
		for _, want := range []string{"object", "array", "string", "number"} {
			for _, k := range v.keys {
				if constraintKeywords[k] == want && !slices.Contains(types, want) {
					types = append(types, want)
				}
			}
		}
		return types, false, nil
	}
	var names []*jsonValue
	switch t.kind {
	case jsonString:
		names = []*jsonValue{t}
	case jsonArray:
		names = t.elems
	}
	if len(names) == 0 {
		return nil, true, &SchemaError{At: path + "/type", Msg: "type must be a type name or a non-empty array of them"}
	}
	for _, n := range names {
		if n.kind != jsonString || !slices.Contains(jsonTypes, n.s) {
			return nil, true, &SchemaError{At: path + "/type", Msg: fmt.Sprintf("unknown type %s", canonicalJSON(n))}
		}
		if !slices.Contains(types, n.s) {
			types = append(types, n.s)
		}
	}
	if slices.Contains(types, "number") {
		types = slices.DeleteFunc(types, func(s string) bool { return s == "integer" })
	}
	return types, true, nil
}

// typed compiles a schema by its types and their keywords.
func (c *schemaCompiler) typed(v *jsonValue, path, hint string, nullable bool) (string, error) {
	types, explicit, err := schemaTypes(v, path)
	if err != nil {
		return "", err
	}
	if !explicit && len(types) == 0 {
		return c.prim("value"), nil
	}
	if nullable && !slices.Contains(types, "null") {
		types = append(types, "null")
	}
	var alts []string
	for _, t := range types {
		var e string
		var err error
		switch t {
		case "null", "boolean":
			e = c.prim(t)
		case "integer", "number":
			e, err = c.numeric(v, path, t == "integer")
		case "string":
			e, err = c.str(v, path, hint)
		case "object":
			e, err = c.object(v, path, hint)
		case "array":
			e, err = c.array(v, path, hint)
		}
		if err != nil {
			return "", err
		}
		alts = append(alts, e)
	}
	return alternatives(alts), nil
}

// count reads a count keyword (minLength and the like): absent gives def.
func count(v *jsonValue, key, path string, def int) (int, error) {
	x := v.get(key)
	if x == nil {
		return def, nil
	}
	r := parseRat(x.s)
	if x.kind != jsonNumber || r == nil || !r.IsInt() || r.Sign() < 0 {
		return 0, &SchemaError{At: path + "/" + key, Msg: key + " must be a non-negative integer"}
	}
	if r.Cmp(big.NewRat(maxCount, 1)) > 0 {
		return 0, &SchemaError{At: path + "/" + key, Msg: fmt.Sprintf("%s %s is over the limit of %d", key, x.s, maxCount)}
	}
	return int(r.Num().Int64()), nil
}

func (c *schemaCompiler) str(v *jsonValue, path, hint string) (string, error) {
	lo, err := count(v, "minLength", path, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(v, "maxLength", path, unbounded)
	if err != nil {
		return "", err
	}
	if hi != unbounded && hi < lo {
		return "", &SchemaError{At: path, Msg: "maxLength is below minLength"}
	}
	pattern, format := v.get("pattern"), v.get("format")
	if pattern != nil && pattern.kind != jsonString || format != nil && format.kind != jsonString {
		return "", &SchemaError{At: path, Msg: "pattern and format must be strings"}
	}
	quote, sp := `"\""`, c.prim("space")
	switch {
	case pattern != nil && format != nil:
		return "", &UnsupportedError{Feature: `keyword "pattern" together with "format"`, At: path}
	case format != nil:
		f := format.s
		fl, ok := formatLengths[f]
		if !ok {
			return "", &UnsupportedError{Feature: fmt.Sprintf("format %q", f), At: path}
		}
		if lo > fl[0] || hi != unbounded && hi < fl[1] {
			return "", &UnsupportedError{Feature: fmt.Sprintf(`format %q together with "minLength" or "maxLength"`, f), At: path}
		}
		return quote + " " + c.prim(f) + " " + quote + " " + sp, nil
	case pattern != nil:
		body, err := c.pattern(pattern.s, lo, hi, path, hint)
		if err != nil {
			return "", err
		}
		return quote + " " + body + " " + quote + " " + sp, nil
	case lo == 0 && hi == unbounded:
		return c.prim("string"), nil
	}
	return quote + " " + c.rs.repeat(c.prim("char"), lo, hi, hint+"-chars") + " " + quote + " " + sp, nil
}

// pattern compiles the contents of a string in which the regular
// expression finds a match, lo to hi characters long.
func (c *schemaCompiler) pattern(pattern string, lo, hi int, path, hint string) (string, error) {
	at := path + "/pattern"
	branches, err := parseRegex(pattern)
	if err != nil {
		var ue *UnsupportedError
		if errors.As(err, &ue) {
			return "", &UnsupportedError{Feature: ue.Feature, At: at + " " + ue.At}
		}
		return "", &SchemaError{At: at, Msg: err.Error()}
	}
	anything := &reNode{op: reRepeat, subs: []*reNode{{op: reChars, ranges: anyChar}}, min: 0, max: unbounded}
	var alts []*reNode
	for _, b := range branches {
		parts := []*reNode{b.node}
		if b.node.op == reEmpty && !b.start && !b.end {
			parts = nil // a search for "" finds it in anything
		}
		if !b.start {
			parts = append([]*reNode{anything}, parts...)
		}
		if !b.end {
			parts = append(parts, anything)
		}
		n := newConcat(parts)
		if lo > 0 || hi != unbounded {
			var ok bool
			if n, ok = restrictLength(n, lo, hi); !ok {
				return "", &UnsupportedError{Feature: `keyword "pattern" with "minLength" or "maxLength" that do not fold into one repetition of the pattern`, At: path}
			}
		}
		if _, _, ok := n.lengths(); ok {
			alts = append(alts, n)
		}
	}
	if len(alts) == 0 {
		return "", &SchemaError{At: at, Msg: "no string matches the pattern within minLength and maxLength"}
	}
	e := &reEmitter{rs: c.rs, hint: hint + "-pattern", json: true, char: c.prim("char")}
	return e.emit(newAlt(alts)).text, nil
}

// numeric compiles integer or number with their bounds.
func (c *schemaCompiler) numeric(v *jsonValue, path string, integer bool) (string, error) {
	lo, loEx, loKey, err := bound(v, "minimum", "exclusiveMinimum", path, 1)
	if err != nil {
		return "", err
	}
	hi, hiEx, hiKey, err := bound(v, "maximum", "exclusiveMaximum", path, -1)
	if err != nil {
		return "", err
	}
	if lo == nil && hi == nil {
		if integer {
			return c.prim("integer"), nil
		}
		return c.prim("number"), nil
	}
	sp := c.prim("space")
	var loI, hiI *big.Int
	if integer {
		// The integers within: round the bounds inwards.
		if lo != nil {
			loI = ceilRat(lo)
			if loEx && lo.IsInt() {
				loI.Add(loI, big.NewInt(1))
			}
		}
		if hi != nil {
			hiI = floorRat(hi)
			if hiEx && hi.IsInt() {
				hiI.Sub(hiI, big.NewInt(1))
			}
		}
		loEx, hiEx = false, false
	} else {
		for _, b := range []struct {
			r   *big.Rat
			key string
		}{{lo, loKey}, {hi, hiKey}} {
			if b.r != nil && !b.r.IsInt() {
				return "", &UnsupportedError{Feature: fmt.Sprintf(`keyword %q with the fractional value %s on a number`, b.key, b.r.FloatString(6)), At: path}
			}
		}
		if lo != nil {
			loI = new(big.Int).Set(lo.Num())
		}
		if hi != nil {
			hiI = new(big.Int).Set(hi.Num())
		}
	}
	for _, b := range []*big.Int{loI, hiI} {
		if b != nil && len(new(big.Int).Abs(b).String()) > maxBoundDigits {
			return "", &SchemaError{At: path, Msg: fmt.Sprintf("a bound of over %d digits", maxBoundDigits)}
		}
	}
	zero := new(big.Int)
	var alts []string
	// x ≥ 0: magnitudes from max(lo, 0) to hi.
	if hiI == nil || hiI.Sign() > 0 || hiI.Sign() == 0 && !hiEx {
		a, aEx := zero, false
		if loI != nil && loI.Sign() >= 0 {
			a, aEx = loI, loEx
		}
		if m := magnitudes(a, aEx, hiI, hiEx, integer); m != "" {
			alts = append(alts, m)
		}
	}
	// x < 0: magnitudes from max(-hi, 0) (excluded if 0) to -lo.
	if loI == nil || loI.Sign() < 0 {
		a, aEx := zero, true
		if hiI != nil && hiI.Sign() < 0 {
			a, aEx = new(big.Int).Neg(hiI), hiEx
		}
		var b *big.Int
		if loI != nil {
			b = new(big.Int).Neg(loI)
		}
		if integer && aEx { // magnitudes above 0
			a, aEx = new(big.Int).Add(a, big.NewInt(1)), false
		}
		if m := magnitudes(a, aEx, b, loEx, integer); m != "" {
			alts = append(alts, `"-" `+wrap(m))
		}
	}
	if len(alts) == 0 {
		return "", &SchemaError{At: path, Msg: "no number lies within the bounds"}
	}
	m := alternatives(alts)
	if refersTo(m, "frac-nz") {
		c.prim("frac-nz")
	}
	if len(alts) == 1 {
		m = wrap(m)
	}
	return prefixRefs(m, c.rs.prefix) + " " + sp, nil
}

// wrap parenthesizes an expression unless it is one item already.
func wrap(e string) string {
	if isItem(e) {
		return e
	}
	return "( " + e + " )"
}

// isItem reports whether GBNF expression e is one item: a name, literal,
// class or group, without a repetition suffix.
func isItem(e string) bool {
	depth := 0
	for i := 0; i < len(e); i++ {
		c := e[i]
		switch c {
		case '"', '[':
			end := byte('"')
			if c == '[' {
				end = ']'
			}
			for i++; i < len(e) && e[i] != end; i++ {
				if e[i] == '\\' {
					i++
				}
			}
		case '(':
			depth++
		case ')':
			depth--
		case ' ', '|', '?', '*', '+', '{':
			if depth == 0 {
				return false
			}
		}
		if depth == 0 && i < len(e)-1 && (c == ')' || c == '"' || c == ']') {
			return false
		}
	}
	return true
}

// bound reads a lower (dir 1) or upper (dir -1) bound: the tighter of the
// inclusive and exclusive keywords, and the keyword it came from.
func bound(v *jsonValue, incKey, exKey, path string, dir int) (*big.Rat, bool, string, error) {
	var r *big.Rat
	ex := false
	key := ""
	for _, k := range []string{incKey, exKey} {
		x := v.get(k)
		if x == nil {
			continue
		}
		b := parseRat(x.s)
		if x.kind != jsonNumber || b == nil {
			return nil, false, "", &SchemaError{At: path + "/" + k, Msg: k + " must be a number"}
		}
		if r == nil || b.Cmp(r)*dir > 0 || b.Cmp(r) == 0 && k == exKey {
			r, ex, key = b, k == exKey, k
		}
	}
	return r, ex, key, nil
}

func floorRat(r *big.Rat) *big.Int { return new(big.Int).Div(r.Num(), r.Denom()) }

func ceilRat(r *big.Rat) *big.Int {
	f := floorRat(r)
	if !r.IsInt() {
		f.Add(f, big.NewInt(1))
	}
	return f
}

// magnitudes writes unsigned decimals from a to b (nil: no bound), each
// end excluded or not, integers only or with a fraction; "" if there are
// none. The integer part has at most 16 digits, or as many as a has.
func magnitudes(a *big.Int, aEx bool, b *big.Int, bEx bool, integer bool) string {
	digits := max(maxIntDigits, len(a.String()))
	top := new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(digits)), nil), big.NewInt(1))
	if b != nil && b.Cmp(top) > 0 {
		b, bEx = nil, false
	}
	one := big.NewInt(1)
	if integer {
		hi := top
		if b != nil {
			hi = b
		}
		if a.Cmp(hi) > 0 {
			return ""
		}
		return uintRange(a, hi)
	}
	const (
		fracAny  = `( "." [0-9]{1,16} )?`
		fracZero = `( "." "0"{1,16} )?`
		fracNZ   = `frac-nz`
	)
	var alts []string
	plus1 := new(big.Int).Add(a, one)
	switch {
	case b == nil:
		if !aEx {
			alts = append(alts, wrap(uintRange(a, top))+" "+fracAny)
			break
		}
		alts = append(alts, gbnfLiteral(a.String())+" "+fracNZ)
		if plus1.Cmp(top) <= 0 {
			alts = append(alts, wrap(uintRange(plus1, top))+" "+fracAny)
		}
	case a.Cmp(b) > 0:
		return ""
	case a.Cmp(b) == 0:
		if aEx || bEx {
			return ""
		}
		alts = append(alts, gbnfLiteral(a.String())+" "+fracZero)
	default:
		below := new(big.Int).Sub(b, one)
		if !aEx {
			alts = append(alts, wrap(uintRange(a, below))+" "+fracAny)
		} else {
			alts = append(alts, gbnfLiteral(a.String())+" "+fracNZ)
			if plus1.Cmp(below) <= 0 {
				alts = append(alts, wrap(uintRange(plus1, below))+" "+fracAny)
			}
		}
		if !bEx {
			alts = append(alts, gbnfLiteral(b.String())+" "+fracZero)
		}
	}
	return alternatives(alts)
}

// uintRange writes the decimal numerals (no sign, no leading zeros) of the
// integers from a to b, 0 ≤ a ≤ b, as llama.cpp's converter does: by
// number of digits, then digit by digit.
func uintRange(a, b *big.Int) string {
	as, bs := a.String(), b.String()
	var alts []string
	for n := len(as); n <= len(bs); {
		lo, hi := "1"+strings.Repeat("0", n-1), strings.Repeat("9", n)
		if n == 1 {
			lo = "0"
		}
		if n == len(as) {
			lo = as
		}
		if n == len(bs) {
			hi = bs
		}
		// Lengths whose every numeral is in range share one item.
		full := n > 1 && lo == "1"+strings.Repeat("0", n-1) && hi == strings.Repeat("9", n)
		if !full {
			alts = append(alts, sameLength(lo, hi))
			n++
			continue
		}
		m := n
		for m+1 < len(bs) || m+1 == len(bs) && bs == strings.Repeat("9", m+1) {
			m++
		}
		switch {
		case m == n && n == 2:
			alts = append(alts, "[1-9] [0-9]")
		case m == n:
			alts = append(alts, fmt.Sprintf("[1-9] [0-9]{%d}", n-1))
		default:
			alts = append(alts, fmt.Sprintf("[1-9] [0-9]{%d,%d}", n-1, m-1))
		}
		n = m + 1
	}
	return alternatives(alts)
}

// sameLength writes the numerals from lo to hi, strings of equal length.
func sameLength(lo, hi string) string {
	n := len(lo)
	if lo == hi {
		return gbnfLiteral(lo)
	}
	digit := func(a, b byte) string {
		if a == b {
			return gbnfLiteral(string(a))
		}
		return "[" + string(a) + "-" + string(b) + "]"
	}
	if n == 1 {
		return digit(lo[0], hi[0])
	}
	if lo[0] == hi[0] {
		return gbnfLiteral(lo[:1]) + " " + sameLength(lo[1:], hi[1:])
	}
	zeros, nines := strings.Repeat("0", n-1), strings.Repeat("9", n-1)
	var alts []string
	start, end := lo[0], hi[0]
	if lo[1:] != zeros {
		alts = append(alts, gbnfLiteral(lo[:1])+" "+sameLength(lo[1:], nines))
		start++
	}
	if hi[1:] != nines {
		end--
	}
	if start <= end {
		rest := "[0-9]"
		if n > 2 {
			rest = fmt.Sprintf("[0-9]{%d}", n-1)
		}
		alts = append(alts, digit(start, end)+" "+rest)
	}
	if hi[1:] != nines {
		alts = append(alts, gbnfLiteral(hi[:1])+" "+sameLength(zeros, hi[1:]))
	}
	return alternatives(alts)
}

// property is one declared property of an object schema.
type property struct {
	key      string
	expr     string
	required bool
}

func (c *schemaCompiler) object(v *jsonValue, path, hint string) (string, error) {
	saved := c.chain
	c.chain = map[string]bool{}
	defer func() { c.chain = saved }()

	props := v.get("properties")
	if props != nil && props.kind != jsonObject {
		return "", &SchemaError{At: path + "/properties", Msg: "properties must be an object"}
	}
	var reqOrder []string
	req := map[string]bool{}
	if r := v.get("required"); r != nil {
		if r.kind != jsonArray {
			return "", &SchemaError{At: path + "/required", Msg: "required must be an array of strings"}
		}
		for _, e := range r.elems {
			if e.kind != jsonString {
				return "", &SchemaError{At: path + "/required", Msg: "required must be an array of strings"}
			}
			if !req[e.s] {
				req[e.s] = true
				reqOrder = append(reqOrder, e.s)
			}
		}
	}
	// extra is the schema of properties not declared; "" allows none.
	var extra string
	switch addl := v.get("additionalProperties"); {
	case addl == nil && props == nil:
		extra = c.prim("value")
	case addl == nil || addl.kind == jsonBool && !addl.b:
	default:
		e, err := c.schema(addl, path+"/additionalProperties", hint+"-additional")
		if err != nil {
			return "", err
		}
		extra = c.item(e, hint+"-additional")
	}
	var decl []property
	var names []string
	if props != nil {
		for i, key := range props.keys {
			names = append(names, key)
			s := props.vals[i]
			if s.kind == jsonBool && !s.b {
				if req[key] {
					return "", &SchemaError{At: path + "/required", Msg: fmt.Sprintf("property %q is required but its schema is false", key)}
				}
				continue
			}
			e, err := c.schema(s, path+"/properties/"+pointerEscape(key), hint+"-"+key)
			if err != nil {
				return "", err
			}
			decl = append(decl, property{key, c.item(e, hint+"-"+key), req[key]})
		}
	}
	if props == nil && len(reqOrder) == 0 && extra == c.prims["value"] {
		return c.prim("object"), nil
	}
	for _, key := range reqOrder {
		if slices.Contains(names, key) {
			continue
		}
		if extra == "" {
			return "", &SchemaError{At: path + "/required", Msg: fmt.Sprintf("property %q is required but not allowed: it is not in properties, and additionalProperties is false or absent", key)}
		}
		decl = append(decl, property{key, extra, true})
		names = append(names, key)
	}
	return c.objectBody(decl, names, extra, hint), nil
}

// objectBody writes an object with the declared properties in order,
// optional ones present or not, then extra properties (not named in
// names) with values matching extra, if extra is set.
func (c *schemaCompiler) objectBody(decl []property, names []string, extra, hint string) string {
	sp := c.prim("space")
	open, close, comma := `"{" `+sp, `"}" `+sp, `"," `+sp
	kv := func(key, value string) string {
		return key + ` ":" ` + sp + " " + value
	}
	var xkv string
	if extra != "" {
		key := c.prim("string")
		if len(names) > 0 {
			key = `"\"" ` + c.notKeys(newKeyTrie(names), hint+"-key") + ` "\"" ` + sp
		}
		xkv = c.rs.add(hint+"-extra-kv", kv(key, extra))
	}
	more := "" // the extras after a property
	if xkv != "" {
		more = "( " + comma + " " + xkv + " )*"
	}
	if len(decl) == 0 {
		if xkv == "" {
			return open + " " + close
		}
		return open + " ( " + xkv + " " + more + " )? " + close
	}
	allRequired := true
	for _, p := range decl {
		allRequired = allRequired && p.required
	}
	if allRequired {
		parts := []string{open}
		for i, p := range decl {
			if i > 0 {
				parts = append(parts, comma)
			}
			parts = append(parts, kv(gbnfLiteral(quoteJSON(p.key))+" "+sp, p.expr))
		}
		if more != "" {
			parts = append(parts, more)
		}
		return strings.Join(append(parts, close), " ")
	}
	kvs := make([]string, len(decl))
	for i, p := range decl {
		kvs[i] = c.rs.add(hint+"-"+p.key+"-kv", kv(gbnfLiteral(quoteJSON(p.key))+" "+sp, p.expr))
	}
	// rest(i) is the properties from i on, after one was written.
	restRules := map[int]string{}
	var rest func(i int) string
	rest = func(i int) string {
		if i == len(decl) {
			return more
		}
		if r, ok := restRules[i]; ok {
			return r
		}
		name := c.rs.reserve(fmt.Sprintf("%s-rest-%d", hint, i))
		restRules[i] = name
		item := comma + " " + kvs[i]
		if !decl[i].required {
			item = "( " + item + " )?"
		}
		_ = c.rs.define(name, strings.TrimSpace(item+" "+rest(i+1)))
		return name
	}
	var alts []string
	for j, p := range decl {
		alts = append(alts, strings.TrimSpace(kvs[j]+" "+rest(j+1)))
		if p.required {
			break
		}
	}
	group := "( " + strings.Join(alts, " | ") + " )"
	if !decl[len(alts)-1].required { // all optional
		if xkv != "" {
			group = "( " + strings.Join(append(alts, xkv+" "+more), " | ") + " )"
		}
		group += "?"
	}
	return open + " " + group + " " + close
}

// keyTrie holds property names, to write the names that are none of
// them.
type keyTrie struct {
	next map[rune]*keyTrie
	end  bool
}

func newKeyTrie(names []string) *keyTrie {
	root := &keyTrie{next: map[rune]*keyTrie{}}
	for _, n := range names {
		t := root
		for _, r := range n {
			if t.next[r] == nil {
				t.next[r] = &keyTrie{next: map[rune]*keyTrie{}}
			}
			t = t.next[r]
		}
		t.end = true
	}
	return root
}

// notKeys returns a rule matching the contents of a JSON string (without
// \u escapes) that, after the characters leading to t, spell none of the
// names in the trie.
func (c *schemaCompiler) notKeys(t *keyTrie, hint string) string {
	kchar := c.prim("kchar")
	var children []rune
	for r := range t.next {
		children = append(children, r)
	}
	slices.Sort(children)
	var cs []rng
	for _, r := range children {
		cs = append(cs, rng{r, r})
	}
	var alts []string
	if !t.end {
		alts = append(alts, `""`)
	}
	// Any other character, then anything.
	var other []string
	if raw := subtract(jsonRaw, cs); len(raw) > 0 {
		other = append(other, gbnfClass(raw))
	}
	var esc []rng
	for _, r := range escapeOrder {
		if !slices.Contains(children, r) {
			e := rune(shortEscapes[r])
			esc = append(esc, rng{e, e})
		}
	}
	if len(esc) > 0 {
		other = append(other, `"\\" `+gbnfClass(normalize(esc)))
	}
	if len(other) > 0 {
		alts = append(alts, alternatives(other)+" "+kchar+"*")
	}
	// One of the names' next characters, then not the rest of a name.
	for _, r := range children {
		var encs []string
		if contains(jsonRaw, r) {
			encs = append(encs, gbnfLiteral(string(r)))
		}
		if e, ok := shortEscapes[r]; ok {
			encs = append(encs, gbnfLiteral(`\`+string(e)))
		}
		if len(encs) == 0 {
			continue // a control character without a short escape: not written
		}
		alts = append(alts, alternatives(encs)+" "+c.notKeys(t.next[r], hint))
	}
	return c.rs.shared(hint, strings.Join(alts, " | "))
}

func (c *schemaCompiler) array(v *jsonValue, path, hint string) (string, error) {
	saved := c.chain
	c.chain = map[string]bool{}
	defer func() { c.chain = saved }()

	items, prefixItems, additional := v.get("items"), v.get("prefixItems"), v.get("additionalItems")
	var prefix []*jsonValue
	var rest *jsonValue // nil: no items after the prefix
	prefixKey, restKey := "prefixItems", "items"
	switch {
	case items != nil && items.kind == jsonArray:
		if prefixItems != nil {
			return "", &SchemaError{At: path, Msg: "items as an array and prefixItems together"}
		}
		prefix, rest = items.elems, additional
		prefixKey, restKey = "items", "additionalItems"
	case additional != nil:
		return "", &UnsupportedError{Feature: `keyword "additionalItems" without an array "items"`, At: path}
	case prefixItems != nil:
		if prefixItems.kind != jsonArray {
			return "", &SchemaError{At: path + "/prefixItems", Msg: "prefixItems must be an array"}
		}
		prefix, rest = prefixItems.elems, items
	default:
		rest = items
		if rest == nil {
			rest = &jsonValue{kind: jsonBool, b: true}
		}
	}
	lo, err := count(v, "minItems", path, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(v, "maxItems", path, unbounded)
	if err != nil {
		return "", err
	}
	// A prefix item false ends the array before it.
	for i, p := range prefix {
		if p.kind == jsonBool && !p.b {
			prefix, rest = prefix[:i], nil
			break
		}
	}
	var prefixExprs []string
	for i, p := range prefix {
		e, err := c.schema(p, fmt.Sprintf("%s/%s/%d", path, prefixKey, i), fmt.Sprintf("%s-%d", hint, i))
		if err != nil {
			return "", err
		}
		prefixExprs = append(prefixExprs, c.item(e, fmt.Sprintf("%s-%d", hint, i)))
	}
	var restExpr string
	if rest != nil && !(rest.kind == jsonBool && !rest.b) {
		e, err := c.schema(rest, path+"/"+restKey, hint+"-item")
		if err != nil {
			return "", err
		}
		restExpr = c.item(e, hint+"-item")
	}
	k := len(prefix)
	if restExpr == "" && (hi == unbounded || hi > k) {
		hi = k
	}
	if hi != unbounded && lo > hi {
		return "", &SchemaError{At: path, Msg: "no array has as many items as minItems requires"}
	}
	sp := c.prim("space")
	comma := `"," ` + sp
	var elems func(i int) string
	elems = func(i int) string {
		if i == hi {
			return ""
		}
		if i < k {
			it := prefixExprs[i]
			if i > 0 {
				it = comma + " " + it
			}
			next := elems(i + 1)
			if next != "" && i%8 == 7 { // keep the grammar's parentheses shallow
				next = c.rs.add(hint+"-tail", next)
			}
			it = strings.TrimSpace(it + " " + next)
			if i < lo {
				return it
			}
			return "( " + it + " )?"
		}
		a, b := max(lo-k, 0), unbounded
		if hi != unbounded {
			b = hi - k
		}
		more := "( " + comma + " " + restExpr + " )"
		if k > 0 {
			return c.rs.repeat(more, a, b, hint+"-items")
		}
		bm := unbounded
		if b != unbounded {
			bm = b - 1
		}
		seq := strings.TrimSpace(restExpr + " " + c.rs.repeat(more, max(a-1, 0), bm, hint+"-items"))
		if a == 0 {
			return "( " + seq + " )?"
		}
		return seq
	}
	return strings.Join(slices.DeleteFunc([]string{`"[" ` + sp, elems(0), `"]" ` + sp}, func(s string) bool { return s == "" }), " "), nil
}

// pointerEscape escapes a key for a JSON pointer.
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
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
