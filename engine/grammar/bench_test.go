package grammar_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/engine/sample"
	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/tokenizer"
)

// qwenVocab is the 151,936-token Qwen2 vocabulary of the qwen2 fixture
// (the vocabulary of the 0.5B shape), and its tokenizer.
func qwenVocab(b testing.TB) (*grammar.Vocabulary, *tokenizer.Tokenizer) {
	b.Helper()
	f, err := gguf.Open(filepath.Join(fixtures.Dir(b), "qwen2-d64-q8_0.gguf"))
	require.NoError(b, err)
	tk, err := tokenizer.New(f)
	require.NoError(b, f.Close())
	require.NoError(b, err)
	return grammar.NewVocabulary(tk.TokenBytes(), tk.EndOfGeneration()), tk
}

// benchSchemaGrammar is the grammar of a typical structured-output schema:
// an object with strings, an enum, numbers, a nested object and an array.
const benchSchemaGrammar = `root ::= "{" sp "\"name\"" sp ":" sp str "," sp "\"age\"" sp ":" sp int "," sp "\"role\"" sp ":" sp role "," sp "\"address\"" sp ":" sp addr "," sp "\"tags\"" sp ":" sp tags sp "}"
addr ::= "{" sp "\"city\"" sp ":" sp str "," sp "\"zip\"" sp ":" sp str sp "}"
tags ::= "[" sp ( str ( "," sp str )* )? sp "]"
role ::= "\"admin\"" | "\"user\"" | "\"guest\""
str  ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
int  ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} )
sp   ::= | " " | "\n" [ \t]{0,20}`

const benchAnswer = `{"name": "Ada Lovelace", "age": 36, "role": "admin", "address": {"city": "London", "zip": "W1 2AB"}, "tags": ["mathematics", "poetry", "engines of analysis", "notes on the \"engine\""]}`

// BenchmarkMask measures the mask of one decode step on the 151,936-token
// vocabulary, along a realistic answer: warm is the steady state (every
// position's token classes cached, as after the first request with a
// schema), cold includes computing them (the first request).
func BenchmarkMask(b *testing.B) {
	v, tk := qwenVocab(b)
	answer := tk.Encode(benchAnswer, false)
	mask := make([]uint64, v.MaskWords())
	run := func(b *testing.B, bound *grammar.Bound) {
		m := bound.Matcher()
		for _, tok := range answer {
			m.Allowed(mask)
			require.NotZero(b, mask[tok>>6]&(1<<(tok&63)), "token %d %q", tok, tk.DecodeToken(tok))
			require.NoError(b, m.Accept(tok))
		}
	}
	b.Run("warm", func(b *testing.B) {
		bound, err := v.Bind(benchSchemaGrammar)
		require.NoError(b, err)
		run(b, bound) // fill the caches
		b.ResetTimer()
		for b.Loop() {
			run(b, bound)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(answer)), "ns/mask")
	})
	// What the engine adds to a decode step per constrained sequence: the
	// mask, then its application to the logits before sampling.
	b.Run("warm+apply", func(b *testing.B) {
		bound, err := v.Bind(benchSchemaGrammar)
		require.NoError(b, err)
		run(b, bound)
		logits := make([]float32, v.Size())
		b.ResetTimer()
		for b.Loop() {
			m := bound.Matcher()
			for _, tok := range answer {
				m.Allowed(mask)
				sample.ApplyMask(logits, mask)
				require.NoError(b, m.Accept(tok))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(answer)), "ns/mask")
	})
	b.Run("cold", func(b *testing.B) {
		g, err := grammar.Compile(benchSchemaGrammar)
		require.NoError(b, err)
		for b.Loop() {
			run(b, v.BindGrammar(g))
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(answer)), "ns/mask")
	})
}

// benchToolList is a schema the size of a typical tool list: five
// functions' calls, each {"name": const, "arguments": its parameters}.
const benchToolList = `{"anyOf": [
 {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object", "properties": {
   "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}, "required": ["name", "arguments"]},
 {"type": "object", "properties": {"name": {"const": "search_web"}, "arguments": {"type": "object", "properties": {
   "query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50}}, "required": ["query"]}}, "required": ["name", "arguments"]},
 {"type": "object", "properties": {"name": {"const": "send_email"}, "arguments": {"type": "object", "properties": {
   "to": {"type": "array", "items": {"type": "string"}, "minItems": 1}, "subject": {"type": "string"}, "body": {"type": "string"},
   "urgent": {"type": "boolean"}}, "required": ["to", "subject", "body"]}}, "required": ["name", "arguments"]},
 {"type": "object", "properties": {"name": {"const": "create_event"}, "arguments": {"type": "object", "properties": {
   "title": {"type": "string"}, "start": {"type": "string", "format": "date-time"}, "minutes": {"type": "integer", "minimum": 5},
   "attendees": {"type": "array", "items": {"type": "string"}}}, "required": ["title", "start"]}}, "required": ["name", "arguments"]},
 {"type": "object", "properties": {"name": {"const": "lookup_order"}, "arguments": {"type": "object", "properties": {
   "order_id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{6}$"}, "include_items": {"type": "boolean"}}, "required": ["order_id"]}},
   "required": ["name", "arguments"]}]}`

// BenchmarkCompile measures what a request with a new schema waits for
// before its first token: the schema compiled to GBNF, the grammar
// compiled and bound to the 151,936-token vocabulary, and the first mask
// (its position's token classes computed). "cached" is a request whose
// schema was seen before: Bind finds the compiled grammar by its text.
func BenchmarkCompile(b *testing.B) {
	v, _ := qwenVocab(b)
	mask := make([]uint64, v.MaskWords())
	src, err := grammar.JSONSchemaGBNF([]byte(benchToolList))
	require.NoError(b, err)
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			src, err := grammar.JSONSchemaGBNF([]byte(benchToolList))
			require.NoError(b, err)
			g, err := grammar.Compile(src)
			require.NoError(b, err)
			v.BindGrammar(g).Matcher().Allowed(mask)
		}
	})
	b.Run("cached", func(b *testing.B) {
		_, err := v.Bind(src)
		require.NoError(b, err)
		for b.Loop() {
			src, err := grammar.JSONSchemaGBNF([]byte(benchToolList))
			require.NoError(b, err)
			bound, err := v.Bind(src)
			require.NoError(b, err)
			bound.Matcher().Allowed(mask)
		}
	})
}
