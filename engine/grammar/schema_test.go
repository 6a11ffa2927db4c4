package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"regexp"
	resyntax "regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validator compiles a schema with a real JSON Schema validator, formats
// asserted.
func validator(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err, schema)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("schema.json", doc))
	sch, err := c.Compile("schema.json")
	require.NoError(t, err, schema)
	return sch
}

// validate reports why instance is not valid JSON valid against sch.
func validate(sch *jsonschema.Schema, instance string) error {
	var v any
	if err := json.Unmarshal([]byte(instance), &v); err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(instance))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func mustSchema(t testing.TB, schema string) *Grammar {
	t.Helper()
	src, err := JSONSchemaGBNF([]byte(schema))
	require.NoError(t, err, schema)
	g, err := Compile(src)
	require.NoError(t, err, "%s\n%s", schema, src)
	return g
}

func TestJSONSchemaGBNF(t *testing.T) {
	tests := map[string]struct {
		schema string
		accept []string
		reject []string
		// openAPI marks schemas the validator does not read the same
		// (nullable), so accepted instances are not checked with it.
		openAPI bool
	}{
		"string": {
			schema: `{"type":"string"}`,
			accept: []string{`""`, `"abc"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u0041\uFFFF"`, "\"\u65e5\U0001F600\x7f\"", `"<&>"`},
			reject: []string{`abc`, `"a`, "\"\x01\"", "\"a\nb\"", `"\ud83d\ude00"`, `"\x41"`, `"\u00e"`, `'a'`},
		},
		"string lengths": {
			schema: `{"type":"string","minLength":2,"maxLength":3}`,
			accept: []string{`"ab"`, `"a\nb"`, `"\u0041\u0042"`, "\"\u65e5\u672c\"", "\"\U0001F600\U0001F600\U0001F600\""},
			reject: []string{`"a"`, `"abcd"`, `"\u0041"`, `"\\\\\\\\"`},
		},
		"integer range": {
			schema: `{"type":"integer","minimum":-5,"maximum":120}`,
			accept: []string{`-5`, `0`, `7`, `99`, `100`, `120`, `-1`},
			reject: []string{`-6`, `121`, `1.0`, `007`, `1e2`, `-0`, `200`, `-10`},
		},
		"integer exclusive": {
			schema: `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10}`,
			accept: []string{`1`, `9`},
			reject: []string{`0`, `10`, `-1`},
		},
		"integer fractional bounds": {
			schema: `{"type":"integer","minimum":1.5,"maximum":4.5}`,
			accept: []string{`2`, `4`},
			reject: []string{`1`, `5`},
		},
		"integer big bound": {
			schema: `{"type":"integer","minimum":12345678901234567890}`,
			accept: []string{`12345678901234567890`, `99999999999999999999`, `20000000000000000000`},
			reject: []string{`12345678901234567889`, `1`, `100000000000000000000`},
		},
		"integer digits": {
			schema: `{"type":"integer"}`,
			accept: []string{`0`, `-0`, `1234567890123456`, `-9999999999999999`},
			reject: []string{`12345678901234567`, `01`, `+1`, `1.5`},
		},
		"integer negative range": {
			schema: `{"type":"integer","minimum":-1000,"maximum":-10}`,
			accept: []string{`-1000`, `-999`, `-10`, `-55`},
			reject: []string{`-9`, `-1001`, `10`, `0`},
		},
		"number": {
			schema: `{"type":"number"}`,
			accept: []string{`0`, `-0`, `1.5`, `-2.25e10`, `1E-5`, `3e+2`, `0.0000000000000001`},
			reject: []string{`01`, `1.`, `.5`, `1e`, `1e123`, `NaN`, `0.00000000000000001`},
		},
		"number bounds": {
			schema: `{"type":"number","minimum":0,"maximum":1}`,
			accept: []string{`0`, `0.5`, `1`, `1.000`, `0.9999`},
			reject: []string{`-0.1`, `1.01`, `2`, `-1`, `1e-1`},
		},
		"number exclusive": {
			schema: `{"type":"number","exclusiveMinimum":0}`,
			accept: []string{`0.001`, `5`, `12.5`},
			reject: []string{`0`, `0.000`, `-1`, `-0.5`},
		},
		"number negative": {
			schema: `{"type":"number","minimum":-10,"exclusiveMaximum":-2}`,
			accept: []string{`-10`, `-9.99`, `-2.5`, `-3`, `-10.0`},
			reject: []string{`-2`, `-1`, `-10.5`, `0`, `-2.0`},
		},
		"number zero max": {
			schema: `{"type":"number","maximum":0}`,
			accept: []string{`0`, `-0.5`, `-7`, `0.00`},
			reject: []string{`0.1`, `1`},
		},
		"boolean and null": {
			schema: `{"type":["boolean","null"]}`,
			accept: []string{`true`, `false`, `null`, `null `},
			reject: []string{`True`, `0`, `"null"`, ` null`},
		},
		"type list": {
			schema: `{"type":["string","integer"],"maxLength":2,"maximum":5}`,
			accept: []string{`"ab"`, `5`, `-3`},
			reject: []string{`"abc"`, `6`, `1.5`},
		},
		"object": {
			schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["a"]}`,
			accept: []string{`{"a":1}`, `{"a":1,"c":true}`, `{"a":1,"b":"x","c":false}`, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}\n", `{ "a" : 1 , "c" : true }`},
			reject: []string{`{}`, `{"b":"x","a":1}`, `{"a":1,"d":2}`, `{"a":1,}`, `{"a":"1"}`, `{"a":1,"a":2}`},
		},
		"object all optional": {
			schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`,
			accept: []string{`{}`, `{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`},
			reject: []string{`{"b":2,"a":1}`, `{,}`, `{"a":1,}`},
		},
		"object all required": {
			schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["b","a"],"additionalProperties":false}`,
			accept: []string{`{"a":1,"b":2}`},
			reject: []string{`{"a":1}`, `{"b":2,"a":1}`},
		},
		"additional properties": {
			schema: `{"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
			accept: []string{`{"a":1,"b":"x"}`, `{"b":"x"}`, `{"abc":"x","aa":"y"}`, `{"":"x"}`, `{"a":1,"ab":2,"a\"":"q"}`, `{}`},
			reject: []string{`{"a":"x"}`, `{"ab":"x"}`, `{"b":1}`, `{"b":"x","a":1}`, `{"\u0061":"x"}`},
		},
		"additional true": {
			schema: `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true}`,
			accept: []string{`{"a":1,"b":[1,{"c":null}]}`, `{"x":"y"}`},
			reject: []string{`{"a":"x"}`, `{"a":1,"a":2}`},
		},
		"free object": {
			schema: `{"type":"object"}`,
			accept: []string{`{}`, `{"a":1,"b":{"c":[true,null,"x",-1.5e3]}}`},
			reject: []string{`[]`, `{"a"}`},
		},
		"required without properties": {
			schema: `{"required":["x"],"additionalProperties":{"type":"integer"}}`,
			accept: []string{`{"x":1}`, `{"x":1,"y":2}`},
			reject: []string{`{"y":2}`, `{"x":"a"}`, `{"y":2,"x":1}`},
		},
		"property false": {
			schema: `{"type":"object","properties":{"a":false,"b":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
			accept: []string{`{"b":1}`, `{"c":"x"}`},
			reject: []string{`{"a":"x"}`, `{"a":1}`},
		},
		"enum": {
			schema: `{"enum":["red","green",1,null,{"a":[1,2]},2.50,"<&>"]}`,
			accept: []string{`"red"`, `1`, `null`, `{"a":[1,2]}`, `{ "a" : [ 1 , 2 ] }`, `2.5`, `"<&>"`},
			reject: []string{`"blue"`, `2`, `1.0`, `"\u0072ed"`},
		},
		"enum filtered": {
			schema: `{"type":"string","enum":["a",1,"bb",null],"maxLength":1}`,
			accept: []string{`"a"`},
			reject: []string{`1`, `"bb"`, `null`},
		},
		"const": {
			schema: `{"const":{"x":1.50,"y":"<&>","z":[]}}`,
			accept: []string{`{"x":1.5,"y":"<&>","z":[]}`, `{"x":1.5, "y":"<&>", "z":[ ]}`},
			reject: []string{`{"x":1.50,"y":"<&>","z":[]}`, `{"y":"<&>","x":1.5,"z":[]}`},
		},
		"enum and const": {
			schema: `{"enum":[1,2,3],"const":2}`,
			accept: []string{`2`},
			reject: []string{`1`, `3`},
		},
		"anyOf": {
			schema: `{"anyOf":[{"type":"integer"},{"type":"string","maxLength":1},false]}`,
			accept: []string{`1`, `"a"`},
			reject: []string{`"ab"`, `1.5`, `null`},
		},
		"oneOf nullable": {
			schema:  `{"oneOf":[{"type":"integer"},{"type":"boolean"}],"nullable":true}`,
			accept:  []string{`1`, `true`, `null`},
			reject:  []string{`"x"`},
			openAPI: true,
		},
		"nullable": {
			schema:  `{"type":"string","nullable":true}`,
			accept:  []string{`"a"`, `null`},
			reject:  []string{`1`},
			openAPI: true,
		},
		"allOf": {
			schema: `{"allOf":[{"type":"integer","minimum":3}],"description":"x","title":"y"}`,
			accept: []string{`3`, `10`},
			reject: []string{`2`, `"3"`},
		},
		"ref defs": {
			schema: `{"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/n"}},"required":["v"]}},"$ref":"#/$defs/n"}`,
			accept: []string{`{"v":1}`, `{"v":1,"next":{"v":2,"next":{"v":3}}}`},
			reject: []string{`{"v":1,"next":{}}`, `{}`},
		},
		"ref definitions draft-07": {
			schema: `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"s":{"type":"string"}},"type":"array","items":[{"$ref":"#/definitions/s"},{"type":"integer"}],"additionalItems":{"$ref":"#/definitions/s"}}`,
			accept: []string{`[]`, `["a"]`, `["a",1]`, `["a",1,"b","c"]`},
			reject: []string{`[1]`, `["a","b"]`, `["a",1,2]`},
		},
		"ref root": {
			schema: `{"type":"array","items":{"$ref":"#"},"maxItems":2}`,
			accept: []string{`[]`, `[[],[[]]]`},
			reject: []string{`[[],[],[]]`, `[1]`},
		},
		"ref escaped pointer": {
			schema: `{"$defs":{"a/b":{"type":"integer"},"c%d":{"type":"string"}},"type":"array","prefixItems":[{"$ref":"#/$defs/a~1b"},{"$ref":"#/$defs/c%25d"}]}`,
			accept: []string{`[1,"x"]`},
			reject: []string{`["x"]`},
		},
		"array": {
			schema: `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
			accept: []string{`[1]`, `[1,2,3]`, `[ 1 , 2 ]`, "[\n  1,\n  2\n]"},
			reject: []string{`[]`, `[1,2,3,4]`, `[1,]`, `["a"]`},
		},
		"array any": {
			schema: `{"type":"array"}`,
			accept: []string{`[]`, `[1,"a",null,{"b":[]}]`},
			reject: []string{`[,]`, `{}`},
		},
		"prefixItems": {
			schema: `{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]}`,
			accept: []string{`[]`, `["a"]`, `["a",1]`},
			reject: []string{`["a",1,2]`, `[1]`},
		},
		"prefixItems and items": {
			schema: `{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":{"type":"boolean"},"minItems":2,"maxItems":4}`,
			accept: []string{`["a",1]`, `["a",1,true]`, `["a",1,true,false]`},
			reject: []string{`["a"]`, `["a",1,true,false,true]`, `["a",1,1]`},
		},
		"items false": {
			schema: `{"type":"array","prefixItems":[{"type":"integer"}],"items":false}`,
			accept: []string{`[]`, `[1]`},
			reject: []string{`[1,2]`},
		},
		"date": {
			schema: `{"type":"string","format":"date"}`,
			accept: []string{`"2024-02-29"`, `"2023-12-31"`, `"2000-02-29"`, `"0000-02-29"`, `"1999-04-30"`},
			reject: []string{`"2023-02-29"`, `"1900-02-29"`, `"2024-04-31"`, `"2024-13-01"`, `"24-01-01"`, `"2024-00-10"`, `"2024-01-00"`},
		},
		"time": {
			schema: `{"type":"string","format":"time"}`,
			accept: []string{`"12:34:56Z"`, `"23:59:59.123+05:30"`, `"00:00:00-23:59"`},
			reject: []string{`"24:00:00Z"`, `"12:60:00Z"`, `"12:00:00"`, `"12:00:60Z"`, `"12:00:00.Z"`},
		},
		"date-time": {
			schema: `{"type":"string","format":"date-time"}`,
			accept: []string{`"2024-01-01T00:00:00Z"`, `"1999-12-31T23:59:59.999999999-08:00"`},
			reject: []string{`"2024-01-01 00:00:00Z"`, `"2024-01-01T00:00Z"`},
		},
		"uuid": {
			schema: `{"type":"string","format":"uuid"}`,
			accept: []string{`"123e4567-e89b-12d3-a456-426614174000"`, `"ABCDEF00-0000-0000-0000-000000000000"`},
			reject: []string{`"123e4567e89b12d3a456426614174000"`, `"123e4567-e89b-12d3-a456-42661417400g"`},
		},
		"pattern search": {
			schema: `{"type":"string","pattern":"ab+c"}`,
			accept: []string{`"abc"`, `"xxabbbcyy"`, `"\u0078abc"`},
			// Characters in the match of a pattern are not \u-escaped.
			reject: []string{`"ac"`, `"ab"`, `""`, `"\u0061bc"`},
		},
		"pattern anchored length": {
			schema: `{"type":"string","pattern":"^[a-z]+$","maxLength":3}`,
			accept: []string{`"abc"`, `"a"`},
			reject: []string{`"abcd"`, `""`, `"aB"`},
		},
		"pattern half anchored length": {
			schema: `{"type":"string","pattern":"^x","minLength":2,"maxLength":3}`,
			accept: []string{`"xa"`, `"xab"`, `"x\n"`},
			reject: []string{`"x"`, `"xabc"`, `"ax"`},
		},
		"pattern json escapes": {
			schema: `{"type":"string","pattern":"^a\"b\\\\c/\\n\\x01$"}`,
			accept: []string{`"a\"b\\c/\n\u0001"`, `"a\"b\\c\/\u000a\u0001"`},
			reject: []string{`"a\"b\\c/\\n\u0001"`, `"ab\\c/\n\u0001"`},
		},
		"pattern alternatives anchored": {
			schema: `{"type":"string","pattern":"^ab|cd$"}`,
			accept: []string{`"ab"`, `"abx"`, `"xcd"`, `"cd"`},
			reject: []string{`"xab"`, `"cdx"`},
		},
		"long string": {
			schema: `{"type":"string","minLength":2500,"maxLength":4600}`,
			accept: []string{quote(strings.Repeat("a", 2500)), quote(strings.Repeat("\u00e9", 4600)), quote(strings.Repeat("b", 3999)), quote(strings.Repeat("c", 4000))},
			reject: []string{quote(strings.Repeat("a", 2499)), quote(strings.Repeat("a", 4601))},
		},
		"many items": {
			schema: `{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":2001,"maxItems":2100}`,
			accept: []string{"[" + strings.Repeat("1,", 2000) + "2]", "[" + strings.Repeat("3,", 2099) + "4]"},
			reject: []string{"[" + strings.Repeat("1,", 1999) + "2]", "[" + strings.Repeat("3,", 2100) + "4]"},
		},
		"ref into array": {
			schema: `{"type":"array","prefixItems":[{"type":"integer"}],"items":{"$ref":"#/prefixItems/0"}}`,
			accept: []string{`[1,2,3]`},
			reject: []string{`[1,"a"]`},
		},
		"canonical numbers": {
			schema: `{"enum":[1e2,1.50,12345678901234567890123,1e-7,-0.0]}`,
			accept: []string{`100`, `1.5`, `12345678901234567890123`, `1e-7`, `0`},
			reject: []string{`1e2`, `1.50`, `1.0e-7`, `-0.0`},
		},
		"true":     {schema: `true`, accept: []string{`1`, `"a"`, `{"a":[null]}`, `[]`}, reject: []string{`nul`, `{`}},
		"empty":    {schema: `{"description":"anything"}`, accept: []string{`1`, `false`, `[{}]`}, reject: []string{``}},
		"inferred": {schema: `{"properties":{"a":{}}}`, accept: []string{`{}`, `{"a":[1]}`}, reject: []string{`1`, `"a"`}},
		"whitespace": {
			schema: `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}}`,
			accept: []string{`{ "a" : [ 1 ] }`, "{\n\t\t\"a\": [\n    1\n  ]\n}", "{\"a\":[1]}\n" + strings.Repeat(" ", 20)},
			reject: []string{` {"a":[1]}`, `{  "a":[1]}`, "{\n" + strings.Repeat(" ", 21) + "\"a\":[1]}", "{\n\n\"a\":[1]}"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := mustSchema(t, tc.schema)
			var sch *jsonschema.Schema
			if !tc.openAPI {
				sch = validator(t, tc.schema)
			}
			for _, s := range tc.accept {
				assert.True(t, g.Match(s), "should match %s", s)
				if sch != nil {
					assert.NoError(t, validate(sch, s), "the test expects %s valid", s)
				}
			}
			for _, s := range tc.reject {
				assert.False(t, g.Match(s), "should not match %s", s)
			}
		})
	}
}

func TestSchemaUnsupported(t *testing.T) {
	tests := map[string]struct{ schema, feature string }{
		"patternProperties":     {`{"type":"object","patternProperties":{"^a":{}}}`, `keyword "patternProperties"`},
		"propertyNames":         {`{"propertyNames":{"maxLength":3}}`, `keyword "propertyNames"`},
		"dependentRequired":     {`{"dependentRequired":{"a":["b"]}}`, `keyword "dependentRequired"`},
		"dependentSchemas":      {`{"dependentSchemas":{"a":{}}}`, `keyword "dependentSchemas"`},
		"if":                    {`{"if":{},"then":{},"else":{}}`, `keyword "if"`},
		"not":                   {`{"not":{"type":"string"}}`, `keyword "not"`},
		"uniqueItems":           {`{"type":"array","uniqueItems":true}`, `keyword "uniqueItems" with true`},
		"contains":              {`{"type":"array","contains":{"type":"integer"}}`, `keyword "contains"`},
		"multipleOf":            {`{"type":"integer","multipleOf":2}`, `keyword "multipleOf"`},
		"minProperties":         {`{"type":"object","minProperties":1}`, `keyword "minProperties"`},
		"maxProperties":         {`{"type":"object","maxProperties":1}`, `keyword "maxProperties"`},
		"unevaluatedProperties": {`{"unevaluatedProperties":false}`, `keyword "unevaluatedProperties"`},
		"unevaluatedItems":      {`{"unevaluatedItems":false}`, `keyword "unevaluatedItems"`},
		"contentMediaType":      {`{"type":"string","contentMediaType":"text/html"}`, `keyword "contentMediaType"`},
		"anchor":                {`{"$anchor":"x"}`, `keyword "$anchor"`},
		"nested":                {`{"type":"object","properties":{"a":{"type":"array","items":{"not":{}}}}}`, `keyword "not"`},
		"remote ref":            {`{"$ref":"http://example.com/s.json"}`, `to another document`},
		"anchor ref":            {`{"$ref":"#foo"}`, `to an anchor`},
		"format":                {`{"type":"string","format":"email"}`, `format "email"`},
		"allOf two":             {`{"allOf":[{},{}]}`, `keyword "allOf" with 2 subschemas`},
		"allOf sibling":         {`{"allOf":[{}],"type":"string"}`, `keyword "allOf" together with "type"`},
		"anyOf sibling":         {`{"anyOf":[{}],"type":"string"}`, `keyword "anyOf" together with "type"`},
		"anyOf and oneOf":       {`{"anyOf":[{}],"oneOf":[{}]}`, `keywords "anyOf" and "oneOf" together`},
		"ref sibling":           {`{"$defs":{"a":{}},"$ref":"#/$defs/a","maxLength":2}`, `keyword "$ref" together with "maxLength"`},
		"draft-04 exclusive":    {`{"type":"number","minimum":0,"exclusiveMinimum":true}`, `draft-04 boolean "exclusiveMinimum"`},
		"fractional bound":      {`{"type":"number","minimum":0.5}`, `keyword "minimum" with the fractional value 0.500000 on a number`},
		"regex lookahead":       {`{"type":"string","pattern":"a(?=b)"}`, `regex lookahead`},
		"pattern and length":    {`{"type":"string","pattern":"a.*b","maxLength":5}`, `keyword "pattern" with "minLength" or "maxLength"`},
		"pattern and format":    {`{"type":"string","pattern":"a","format":"date"}`, `keyword "pattern" together with "format"`},
		"format and length":     {`{"type":"string","format":"date-time","maxLength":20}`, `format "date-time" together with`},
		"additionalItems":       {`{"type":"array","items":{},"additionalItems":false}`, `keyword "additionalItems" without an array "items"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := JSONSchemaGBNF([]byte(tc.schema))
			var ue *UnsupportedError
			require.ErrorAs(t, err, &ue)
			assert.Contains(t, ue.Feature, tc.feature)
			assert.Contains(t, err.Error(), ue.Feature+" is not supported")
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	deep := strings.Repeat(`{"type":"array","items":`, 70) + `{}` + strings.Repeat(`}`, 70)
	var big strings.Builder
	big.WriteString(`{"enum":[`)
	for i := range 20000 {
		if i > 0 {
			big.WriteByte(',')
		}
		fmt.Fprintf(&big, `"%060d"`, i)
	}
	big.WriteString(`]}`)
	tests := map[string]struct{ schema, msg string }{
		"not json":          {`{"type":`, "invalid JSON"},
		"trailing data":     {`{} {}`, "data after the schema"},
		"duplicate key":     {`{"type":"string","type":"integer"}`, `duplicate key "type"`},
		"false":             {`false`, "matches nothing"},
		"not a schema":      {`[]`, "must be an object or a boolean"},
		"bad type":          {`{"type":"text"}`, "unknown type"},
		"min over max":      {`{"type":"integer","minimum":5,"maximum":4}`, "no number lies within the bounds"},
		"lengths":           {`{"type":"string","minLength":5,"maxLength":4}`, "maxLength is below minLength"},
		"negative length":   {`{"type":"string","minLength":-1}`, "non-negative integer"},
		"huge length":       {`{"type":"string","maxLength":1e12}`, "over the limit"},
		"items":             {`{"type":"array","prefixItems":[{}],"minItems":2}`, "as many items as minItems"},
		"required":          {`{"type":"object","properties":{"a":{}},"required":["b"]}`, `property "b" is required but not allowed`},
		"required false":    {`{"properties":{"a":false},"required":["a"]}`, `property "a" is required but its schema is false`},
		"missing ref":       {`{"$ref":"#/$defs/nope"}`, "no such schema"},
		"ref cycle":         {`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"null"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "refers back to itself"},
		"root cycle":        {`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, "refers back to itself"},
		"empty enum":        {`{"enum":[]}`, "no value of enum"},
		"enum filtered out": {`{"type":"string","enum":[1,2]}`, "no value of enum"},
		"depth":             {deep, "nest deeper than 64"},
		"too large":         {big.String(), "over 1048576 bytes"},
		"bad pattern":       {`{"type":"string","pattern":"a("}`, "missing )"},
		"pattern length":    {`{"type":"string","pattern":"^abc$","maxLength":2}`, "no string matches the pattern"},
		"anyOf false":       {`{"anyOf":[false]}`, "no subschema can match"},
		"huge bound":        {`{"type":"integer","minimum":1e50}`, "over 40 digits"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := JSONSchemaGBNF([]byte(tc.schema))
			var se *SchemaError
			require.ErrorAs(t, err, &se)
			assert.Contains(t, se.Msg, tc.msg)
		})
	}
}

// Counts beyond the GBNF parser's 2,000 are split into blocks of rules.
func TestSchemaHugeCounts(t *testing.T) {
	for _, n := range []int{2001, 4000, 4001, 123456, 5000000, maxCount} {
		src, err := JSONSchemaGBNF([]byte(fmt.Sprintf(`{"type":"string","maxLength":%d,"minLength":%d}`, n, n/3)))
		require.NoError(t, err)
		_, err = Compile(src)
		require.NoError(t, err, "%d:\n%s", n, src)
	}
	src, err := JSONSchemaGBNF([]byte(`{"type":"array","maxItems":4200,"minItems":2100}`))
	require.NoError(t, err)
	g, err := Compile(src)
	require.NoError(t, err, src)
	match := matcher(g)
	for n, want := range map[int]bool{2099: false, 2100: true, 4001: true, 4200: true, 4201: false} {
		assert.Equal(t, want, match("["+strings.Repeat("0,", n-1)+"0]"), n)
	}
}

func TestSchemaRules(t *testing.T) {
	schema := []byte(`{"$defs":{"p":{"type":"object","properties":{"name":{"type":"string","pattern":"^[A-Z]"},"kids":{"type":"array","items":{"$ref":"#/$defs/p"}}},"required":["name"]}},"$ref":"#/$defs/p"}`)
	rules, root, err := SchemaRules(schema, "tool0-")
	require.NoError(t, err)
	assert.Equal(t, "tool0-root", root)
	for _, line := range strings.Split(strings.TrimSpace(rules), "\n") {
		assert.True(t, strings.HasPrefix(line, "tool0-"), line)
	}
	// Two tools in one grammar, each its own rules.
	rules1, root1, err := SchemaRules([]byte(`{"type":"integer","minimum":0}`), "tool1-")
	require.NoError(t, err)
	src := `root ::= "<call>" ( "p" ` + root + ` | "i" ` + root1 + ` ) "</call>"` + "\n" + rules + rules1
	g, err := Compile(src)
	require.NoError(t, err, src)
	assert.True(t, g.Match(`<call>p{"name": "Ann", "kids": [{"name":"Bob"}]}</call>`))
	assert.True(t, g.Match(`<call>i42</call>`))
	assert.False(t, g.Match(`<call>i-1</call>`))
	assert.False(t, g.Match(`<call>p{"name":"ann"}</call>`))

	_, _, err = SchemaRules(schema, "bad prefix ")
	require.Error(t, err)
}

func TestSchemaDeterministic(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"z":{"type":"integer"},"a":{"enum":["x","y"]},"m":{"anyOf":[{"type":"string","format":"uuid"},{"type":"null"}]}},"additionalProperties":{"type":"number","minimum":0}}`)
	first, err := JSONSchemaGBNF(schema)
	require.NoError(t, err)
	for range 5 {
		again, err := JSONSchemaGBNF(schema)
		require.NoError(t, err)
		require.Equal(t, first, again)
	}
	// Properties keep the schema's order.
	assert.Less(t, strings.Index(first, `"\"z\""`), strings.Index(first, `"\"a\""`))

	obj, err := JSONSchemaGBNF([]byte(`{"type":"object"}`))
	require.NoError(t, err)
	assert.Equal(t, obj, JSONObjectGBNF())
	g, err := Compile(JSONObjectGBNF())
	require.NoError(t, err)
	assert.True(t, g.Match(`{"a": [1, {"b": null}]}`))
	assert.False(t, g.Match(`[1]`))
}

// byteVocab is a byte-level vocabulary: EOS (id 0), the 256 single bytes,
// and some multi-byte pieces, as a byte-level BPE tokenizer has.
func byteVocab() *Vocabulary {
	toks := [][]byte{nil}
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, p := range []string{
		`{"`, `":`, `": `, `", "`, `"}`, `"]`, `null`, `true`, `false`, "\n  ", "\n\t", `\u00`, `\"`, `\\`, `\n`,
		`12`, `.5`, `e+`, `E-`, `]}`, `},{"`, `[]`, `{}`, `, `, "\u00e9", "\u65e5\u672c", "\U0001F600", "-0", "T",
		":00", `Z"`, `00`, `-01-`, `2024`, `abc`, `aa`, `ab`, `a"`, `"a`, `0000`, `-`, `"x`, `\u2028`,
	} {
		toks = append(toks, []byte(p))
	}
	return NewVocabulary(toks, []int32{0})
}

// walk generates a random output of b's grammar: random allowed tokens,
// then, past maxLen bytes, the ones that finish soonest.
func walk(t testing.TB, b *Bound, r *rand.Rand, maxLen int) string {
	t.Helper()
	m := b.Matcher()
	mask := make([]uint64, b.Vocabulary().MaskWords())
	var out []byte
	for range 100000 {
		m.Allowed(mask)
		var allowed []int32
		for w, word := range mask {
			for word != 0 {
				bit := word & -word
				allowed = append(allowed, int32(w*64+bits.TrailingZeros64(bit)))
				word ^= bit
			}
		}
		require.NotEmpty(t, allowed, "no token allowed after %q", out)
		var tok int32
		switch {
		case len(out) > maxLen:
			best := -1
			var bests []int32
			for _, a := range allowed {
				d := m.RemainingAfter(a)
				require.GreaterOrEqual(t, d, 0)
				if best < 0 || d < best {
					best, bests = d, bests[:0]
				}
				if d == best {
					bests = append(bests, a)
				}
			}
			tok = bests[r.IntN(len(bests))]
		case allowed[0] == 0 && (len(allowed) == 1 || r.IntN(3) == 0):
			tok = 0
		default:
			tok = allowed[r.IntN(len(allowed))]
		}
		require.NoError(t, m.Accept(tok))
		if tok == 0 {
			return string(out)
		}
		out = append(out, b.Vocabulary().Token(tok)...)
	}
	t.Fatalf("no end after %q", out)
	return ""
}

// A genSchema is a random schema and a generator of its valid instances
// (compact, properties in the schema's order).
type genSchema struct {
	text string
	inst func(depth int) string
}

// schemaGen makes random schemas of the supported keywords, bounded so
// that their instances stay small.
type schemaGen struct {
	r      *rand.Rand
	draft7 bool
	defs   []string
	defGen map[string]func(int) string
}

func (g *schemaGen) pick(n int) int { return g.r.IntN(n) }

// quote writes s as JSON without escaping <, > and &, as the grammar
// writes property names.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSpace(b.String())
}

func marshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (g *schemaGen) annotate(text string) string {
	if g.pick(4) != 0 || !strings.HasPrefix(text, "{") {
		return text
	}
	sep := ","
	if text == "{}" {
		sep = ""
	}
	return `{"description":"d"` + sep + text[1:]
}

func (g *schemaGen) schema(depth int) genSchema {
	kinds := []func() genSchema{g.str, g.format, g.pattern, g.integer, g.number, g.boolNull, g.enum, g.constant, g.untyped}
	if depth > 0 {
		d := depth - 1
		kinds = append(kinds,
			func() genSchema { return g.object(d) }, func() genSchema { return g.object(d) },
			func() genSchema { return g.array(d) }, func() genSchema { return g.tuple(d) },
			func() genSchema { return g.anyOf(d) }, func() genSchema { return g.oneOf(d) },
			func() genSchema { return g.allOf(d) }, func() genSchema { return g.ref(d) },
			g.tree, g.anything, g.typeList)
	}
	s := kinds[g.pick(len(kinds))]()
	s.text = g.annotate(s.text)
	return s
}

var strRunes = []rune{'a', 'Z', ' ', '"', '\\', '/', '\n', '\t', '\x01', '\x7f', '\u00e9', '\u65e5', '\U0001F600', '<', '\u2028'}

func (g *schemaGen) randString(lo, hi int) string {
	rs := make([]rune, lo+g.pick(hi-lo+1))
	for i := range rs {
		rs[i] = strRunes[g.pick(len(strRunes))]
	}
	return string(rs)
}

func (g *schemaGen) str() genSchema {
	lo, hi := g.pick(3), 0
	hi = lo + g.pick(5)
	text := fmt.Sprintf(`{"type":"string","minLength":%d,"maxLength":%d}`, lo, hi)
	if g.pick(4) == 0 {
		lo, hi = 0, 6
		text = `{"type":"string"}`
	}
	return genSchema{text, func(int) string { return marshal(g.randString(lo, hi)) }}
}

func (g *schemaGen) format() genSchema {
	date := func() string {
		y, m := g.pick(10000), 1+g.pick(12)
		days := []int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[m-1]
		if m == 2 && y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			days = 29
		}
		return fmt.Sprintf("%04d-%02d-%02d", y, m, 1+g.pick(days))
	}
	tm := func() string {
		s := fmt.Sprintf("%02d:%02d:%02d", g.pick(24), g.pick(60), g.pick(60))
		if g.pick(2) == 0 {
			s += "." + strconv.Itoa(g.pick(1000000))
		}
		if g.pick(2) == 0 {
			return s + "Z"
		}
		return s + fmt.Sprintf("%c%02d:%02d", "+-"[g.pick(2)], g.pick(24), g.pick(60))
	}
	switch g.pick(4) {
	case 0:
		return genSchema{`{"type":"string","format":"date"}`, func(int) string { return quote(date()) }}
	case 1:
		return genSchema{`{"type":"string","format":"time"}`, func(int) string { return quote(tm()) }}
	case 2:
		return genSchema{`{"format":"date-time"}`, func(int) string { return quote(date() + "T" + tm()) }}
	}
	return genSchema{`{"type":"string","format":"uuid","maxLength":36}`, func(int) string {
		const hex = "0123456789abcdefABCDEF"
		b := []byte("xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
		for i := range b {
			if b[i] == 'x' {
				b[i] = hex[g.pick(len(hex))]
			}
		}
		return quote(string(b))
	}}
}

// fixedPatterns are anchored patterns with length limits the compiler
// folds in.
var fixedPatterns = []struct {
	pattern string
	lo, hi  int
}{
	{`^[a-z]+$`, 0, 4}, {`^\d{3}-[A-Z]*$`, 3, 6}, {`^x`, 2, 3}, {`^(ab|cd)$`, 2, 2}, {`^"\\?$`, 1, 3}, {`^.{2,}$`, 0, 5},
}

func (g *schemaGen) pattern() genSchema {
	var pattern string
	lo, hi := 0, -1
	if g.pick(3) == 0 {
		f := fixedPatterns[g.pick(len(fixedPatterns))]
		pattern, lo, hi = f.pattern, f.lo, f.hi
	} else {
		for {
			pattern = randomPattern(g.r, 1)
			if _, err := parseRegex(pattern); err == nil {
				if _, err := regexp.Compile(pattern); err == nil {
					break
				}
			}
		}
	}
	re := regexp.MustCompile(pattern)
	syn, _ := resyntax.Parse(pattern, resyntax.Perl)
	text := fmt.Sprintf(`{"type":"string","pattern":%s}`, quote(pattern))
	if hi >= 0 {
		text = fmt.Sprintf(`{"type":"string","pattern":%s,"minLength":%d,"maxLength":%d}`, quote(pattern), lo, hi)
	}
	return genSchema{text, func(int) string {
		for range 50 {
			var b strings.Builder
			if !genMatch(syn, g.r, &b) {
				continue
			}
			s := b.String()
			if !strings.HasPrefix(pattern, "^") && g.pick(2) == 0 {
				s = g.randString(0, 2) + s
			}
			if !strings.HasSuffix(pattern, "$") && g.pick(2) == 0 {
				s += g.randString(0, 2)
			}
			if n := len([]rune(s)); re.MatchString(s) && n >= lo && (hi < 0 || n <= hi) {
				return quote(s) // characters matched by a pattern are written raw
			}
		}
		return "" // none found: no instance
	}}
}

func (g *schemaGen) integer() genSchema {
	lo, hi := int64(-1e15), int64(1e15)
	var keys []string
	if g.pick(3) > 0 {
		lo = int64(g.pick(2001) - 1000)
		if g.pick(2) == 0 {
			keys = append(keys, fmt.Sprintf(`"minimum":%d`, lo))
		} else {
			keys = append(keys, fmt.Sprintf(`"exclusiveMinimum":%d`, lo))
			lo++
		}
	}
	if g.pick(3) > 0 {
		h := lo + int64(g.pick(3000))
		if lo == -1e15 {
			h = int64(g.pick(2001) - 1000)
		}
		switch g.pick(3) {
		case 0:
			keys, hi = append(keys, fmt.Sprintf(`"maximum":%d`, h)), h
		case 1:
			keys, hi = append(keys, fmt.Sprintf(`"exclusiveMaximum":%d`, h+1)), h
		default:
			keys, hi = append(keys, `"maximum":`+new(big.Rat).Add(big.NewRat(h, 1), big.NewRat(1, 2)).FloatString(1)), h
		}
	}
	text := `{"type":"integer"` + strings.Join(append([]string{""}, keys...), ",") + "}"
	return genSchema{text, func(int) string {
		if g.pick(3) == 0 {
			return strconv.FormatInt([]int64{lo, hi}[g.pick(2)], 10)
		}
		return strconv.FormatInt(lo+g.r.Int64N(hi-lo+1), 10)
	}}
}

func (g *schemaGen) number() genSchema {
	if g.pick(3) == 0 {
		return genSchema{`{"type":"number"}`, func(int) string {
			return []string{"0", "-0", "1.5", "-2.25e10", "1E-5", "3e+2", "123456.789", "-0.001"}[g.pick(8)]
		}}
	}
	lo, hi := int64(-20), int64(20)
	loEx, hiEx := false, false
	var keys []string
	if g.pick(4) > 0 {
		lo = int64(g.pick(21) - 10)
		loEx = g.pick(2) == 0
		keys = append(keys, fmt.Sprintf(`"%s":%d`, map[bool]string{false: "minimum", true: "exclusiveMinimum"}[loEx], lo))
	}
	if g.pick(4) > 0 {
		hi = lo + int64(g.pick(10))
		hiEx = g.pick(2) == 0 && hi > lo
		if hi == lo && loEx {
			hi++
		}
		keys = append(keys, fmt.Sprintf(`"%s":%d`, map[bool]string{false: "maximum", true: "exclusiveMaximum"}[hiEx], hi))
	}
	text := `{"type":"number"` + strings.Join(append([]string{""}, keys...), ",") + "}"
	if len(keys) > 0 && g.pick(4) == 0 {
		text = `{` + strings.Join(keys, ",") + "}" // number inferred
	}
	return genSchema{text, func(int) string {
		for range 100 {
			x := big.NewRat(lo+g.r.Int64N(hi-lo+1), 1)
			if g.pick(2) == 0 {
				x.Add(x, big.NewRat(int64(g.pick(1999)-999), 1000))
			}
			if c := x.Cmp(big.NewRat(lo, 1)); c < 0 || c == 0 && loEx {
				continue
			}
			if c := x.Cmp(big.NewRat(hi, 1)); c > 0 || c == 0 && hiEx {
				continue
			}
			if x.IsInt() {
				return x.Num().String()
			}
			return x.FloatString(3)
		}
		return ""
	}}
}

func (g *schemaGen) boolNull() genSchema {
	if g.pick(2) == 0 {
		return genSchema{`{"type":"boolean"}`, func(int) string { return []string{"true", "false"}[g.pick(2)] }}
	}
	return genSchema{`{"type":"null"}`, func(int) string { return "null" }}
}

var enumValues = []string{`"red"`, `"a\"b"`, `""`, `"<&>"`, `1`, `-2`, `2.5`, `null`, `true`, `{"k":[1,"x"]}`, `[]`, `{}`, "\"\u00e9\""}

func (g *schemaGen) enum() genSchema {
	var vals []string
	for range 1 + g.pick(4) {
		v := enumValues[g.pick(len(enumValues))]
		if !slices.Contains(vals, v) {
			vals = append(vals, v)
		}
	}
	text := `{"enum":[` + strings.Join(vals, ",") + `]}`
	valid := vals
	if g.pick(3) == 0 { // other keywords drop some values
		text = `{"enum":[` + strings.Join(vals, ",") + `],"type":"string","maxLength":3}`
		valid = nil
		for _, v := range vals {
			var s string
			if strings.HasPrefix(v, `"`) && json.Unmarshal([]byte(v), &s) == nil && len([]rune(s)) <= 3 {
				valid = append(valid, v)
			}
		}
		if len(valid) == 0 {
			text = `{"enum":[` + strings.Join(vals, ",") + `,"ok"],"type":"string","maxLength":3}`
			valid = []string{`"ok"`}
		}
	}
	return genSchema{text, func(int) string { return valid[g.pick(len(valid))] }}
}

func (g *schemaGen) constant() genSchema {
	v := enumValues[g.pick(len(enumValues))]
	return genSchema{`{"const":` + v + `}`, func(int) string { return v }}
}

func (g *schemaGen) untyped() genSchema {
	if g.pick(2) == 0 {
		return genSchema{`{"maxLength":3}`, func(int) string { return marshal(g.randString(0, 3)) }}
	}
	return genSchema{`{"minimum":0,"maximum":3}`, func(int) string { return strconv.Itoa(g.pick(4)) }}
}

// property names, some prefixes of others and some that need escapes.
var propNames = []string{"a", "b", "ab", "name", "x y", "\u00e9", `q"`, "a/b", "", "aa", "<"}

func (g *schemaGen) object(depth int) genSchema {
	var names []string
	var props []genSchema
	var req []bool
	for range g.pick(4) {
		n := propNames[g.pick(len(propNames))]
		if slices.Contains(names, n) {
			continue
		}
		names = append(names, n)
		props = append(props, g.schema(depth))
		req = append(req, g.pick(2) == 0)
	}
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	var required []string
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(quote(n) + ":" + props[i].text)
		if req[i] {
			required = append(required, quote(n))
		}
	}
	b.WriteString("}")
	if len(required) > 0 {
		b.WriteString(`,"required":[` + strings.Join(required, ",") + "]")
	}
	var extra *genSchema
	switch g.pick(4) {
	case 0:
		b.WriteString(`,"additionalProperties":false`)
	case 1:
		s := g.schema(0)
		extra = &s
		b.WriteString(`,"additionalProperties":` + s.text)
	case 2:
		s := genSchema{"true", func(int) string { return "1" }}
		extra = &s
		b.WriteString(`,"additionalProperties":true`)
	}
	b.WriteString("}")
	return genSchema{b.String(), func(d int) string {
		var parts []string
		for i, n := range names {
			if req[i] || g.pick(2) == 0 {
				if v := props[i].inst(d); v != "" {
					parts = append(parts, quote(n)+":"+v)
				} else if req[i] {
					return ""
				}
			}
		}
		if extra != nil {
			for range g.pick(3) {
				n := []string{"zz", "abc", "a b", "na", "\u00e9\u00e9", "q", `"`, "\\", "\n"}[g.pick(9)]
				if v := extra.inst(d); v != "" && !slices.Contains(names, n) {
					parts = append(parts, quote(n)+":"+v)
				}
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}}
}

func (g *schemaGen) array(depth int) genSchema {
	item := g.schema(depth)
	lo := g.pick(2)
	hi := lo + g.pick(3)
	return genSchema{fmt.Sprintf(`{"type":"array","items":%s,"minItems":%d,"maxItems":%d}`, item.text, lo, hi), func(d int) string {
		parts := make([]string, lo+g.pick(hi-lo+1))
		for i := range parts {
			if parts[i] = item.inst(d); parts[i] == "" {
				return ""
			}
		}
		return "[" + strings.Join(parts, ",") + "]"
	}}
}

func (g *schemaGen) tuple(depth int) genSchema {
	k := 1 + g.pick(3)
	prefix := make([]genSchema, k)
	texts := make([]string, k)
	for i := range prefix {
		prefix[i] = g.schema(depth)
		texts[i] = prefix[i].text
	}
	var rest *genSchema
	restText := ""
	switch g.pick(3) {
	case 0:
		s := g.schema(0)
		rest, restText = &s, s.text
	case 1:
		restText = "false"
	}
	lo := g.pick(k + 1)
	var text string
	if g.draft7 {
		text = fmt.Sprintf(`{"type":"array","items":[%s],"minItems":%d`, strings.Join(texts, ","), lo)
		if restText != "" {
			text += `,"additionalItems":` + restText
		}
	} else {
		text = fmt.Sprintf(`{"type":"array","prefixItems":[%s],"minItems":%d`, strings.Join(texts, ","), lo)
		if restText != "" {
			text += `,"items":` + restText
		}
	}
	text += "}"
	return genSchema{text, func(d int) string {
		n := lo + g.pick(k-lo+1)
		var parts []string
		for i := range n {
			parts = append(parts, prefix[i].inst(d))
		}
		if rest != nil && n == k {
			for range g.pick(3) {
				parts = append(parts, rest.inst(d))
			}
		}
		if slices.Contains(parts, "") {
			return ""
		}
		return "[" + strings.Join(parts, ",") + "]"
	}}
}

func (g *schemaGen) anyOf(depth int) genSchema {
	branches := make([]genSchema, 2+g.pick(2))
	texts := make([]string, len(branches))
	for i := range branches {
		branches[i] = g.schema(depth)
		texts[i] = branches[i].text
	}
	return genSchema{`{"anyOf":[` + strings.Join(texts, ",") + "]}", func(d int) string {
		return branches[g.pick(len(branches))].inst(d)
	}}
}

// oneOf uses branches of different types, so that exactly one matches.
func (g *schemaGen) oneOf(depth int) genSchema {
	families := []func() genSchema{
		g.str, g.integer, g.boolNull,
		func() genSchema { return g.object(depth) }, func() genSchema { return g.array(depth) },
	}
	var branches []genSchema
	var texts []string
	for _, i := range g.r.Perm(len(families))[:2] {
		b := families[i]()
		branches = append(branches, b)
		texts = append(texts, b.text)
	}
	return genSchema{`{"oneOf":[` + strings.Join(texts, ",") + "]}", func(d int) string {
		return branches[g.pick(len(branches))].inst(d)
	}}
}

func (g *schemaGen) allOf(depth int) genSchema {
	s := g.schema(depth)
	return genSchema{`{"allOf":[` + s.text + `],"title":"t"}`, s.inst}
}

func (g *schemaGen) defsKey() string {
	if g.draft7 {
		return "definitions"
	}
	return "$defs"
}

func (g *schemaGen) ref(depth int) genSchema {
	i := len(g.defs)
	name := fmt.Sprintf("d%d", i)
	g.defs = append(g.defs, "")
	s := g.schema(depth)
	g.defs[i] = quote(name) + ":" + s.text
	return genSchema{fmt.Sprintf(`{"$ref":"#/%s/%s"}`, g.defsKey(), name), s.inst}
}

// tree is a recursive definition.
func (g *schemaGen) tree() genSchema {
	name := fmt.Sprintf("d%d", len(g.defs))
	leaf := g.schema(0)
	g.defs = append(g.defs, fmt.Sprintf(`%s:{"type":"object","properties":{"v":%s,"kids":{"type":"array","items":{"$ref":"#/%s/%s"},"maxItems":2}},"required":["v"]}`,
		quote(name), leaf.text, g.defsKey(), name))
	var inst func(d int) string
	inst = func(d int) string {
		v := leaf.inst(d)
		if v == "" {
			return ""
		}
		if d <= 0 || g.pick(2) == 0 {
			return `{"v":` + v + "}"
		}
		var kids []string
		for range g.pick(3) {
			if k := inst(d - 1); k != "" {
				kids = append(kids, k)
			}
		}
		return `{"v":` + v + `,"kids":[` + strings.Join(kids, ",") + "]}"
	}
	return genSchema{fmt.Sprintf(`{"$ref":"#/%s/%s"}`, g.defsKey(), name), inst}
}

func (g *schemaGen) anything() genSchema {
	values := []string{`1`, `"x\ny"`, `null`, `[true,{"a":-1.5e3}]`, `{"":{}}`, `"\u00e9"`}
	return genSchema{[]string{"true", "{}"}[g.pick(2)], func(int) string { return values[g.pick(len(values))] }}
}

func (g *schemaGen) typeList() genSchema {
	return genSchema{`{"type":["string","null"],"maxLength":2}`, func(int) string {
		if g.pick(2) == 0 {
			return "null"
		}
		return marshal(g.randString(0, 2))
	}}
}

// document returns a whole schema: the root and its definitions.
func (g *schemaGen) document() genSchema {
	root := g.schema(3)
	if len(g.defs) == 0 && !g.draft7 {
		return root
	}
	var b strings.Builder
	b.WriteString("{")
	if g.draft7 {
		b.WriteString(`"$schema":"http://json-schema.org/draft-07/schema#",`)
	}
	fmt.Fprintf(&b, `"%s":{%s},"allOf":[%s]}`, g.defsKey(), strings.Join(g.defs, ","), root.text)
	return genSchema{b.String(), root.inst}
}

// Random schemas compile; random outputs of their grammars (walked
// token by token with a byte-level vocabulary) are valid JSON that a
// real validator accepts; valid instances from the generator, compact or
// indented, match; and mutations of them that match are valid too.
func TestSchemaProperty(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	v := byteVocab()
	mutations := []rune(`{}[]",:0123456789.-e \ntfnul\abxyz` + "\u00e9")
	for i := range n {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(i), 99))
			g := &schemaGen{r: r, draft7: i%5 == 4}
			doc := g.document()
			src, err := JSONSchemaGBNF([]byte(doc.text))
			require.NoError(t, err, doc.text)
			gr, err := Compile(src)
			require.NoError(t, err, "%s\n%s", doc.text, src)
			sch := validator(t, doc.text)
			match := matcher(gr)
			for range 6 {
				inst := doc.inst(2)
				if inst == "" {
					continue
				}
				require.NoError(t, validate(sch, inst), "generator: %s\n%s", inst, doc.text)
				require.True(t, match(inst), "should match %s\n%s\n%s", inst, doc.text, src)
				var ind bytes.Buffer
				require.NoError(t, json.Indent(&ind, []byte(inst), "", " "))
				require.True(t, match(ind.String()), "should match %s\n%s\n%s", ind.String(), doc.text, src)
				for range 10 {
					m := mutate(r, inst, mutations)
					if match(m) {
						require.NoError(t, validate(sch, m), "mutation %s of %s matches\n%s\n%s", m, inst, doc.text, src)
					}
				}
			}
			b := v.BindGrammar(gr)
			for range 4 {
				out := walk(t, b, r, 48)
				require.True(t, match(out))
				require.NoError(t, validate(sch, out), "output %q\n%s\n%s", out, doc.text, src)
			}
		})
	}
}
