// Package grammar constrains generation to a formal grammar: GBNF as
// llama.cpp defines it, and compilers from JSON Schema, a regular
// expression subset and a list of choices to it.
//
// A grammar is compiled ([Compile]) into a recursive transition network
// over bytes, bound to a model's vocabulary ([Vocabulary.Bind], cached by
// the grammar's text), and run by a [Matcher] per sequence: Allowed writes
// the mask of the tokens the grammar allows next, Accept advances over the
// token sampled. Tokens are matched by their bytes, so a token may span
// grammar elements and end inside a UTF-8 character. How the mask stays
// cheap on a 150,000-token vocabulary is described on [Bound].
package grammar
