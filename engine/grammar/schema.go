package grammar

import (
	"fmt"
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
