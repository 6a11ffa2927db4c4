// Package toolcall handles the text side of OpenAI-style tool calling for
// the models llmd serves: which tool-call [Format] a model was trained on
// (recognised from its chat template by [Detect]), the [Parser] that turns
// the model's generated text into plain content and tool calls as it
// streams (and [Parse], the same over a whole text), the fallback
// instructions a caller adds when the template ignores tools
// ([SystemPrompt]), and GBNF rules for the call wrapper so a constrained
// decoder can force a well-formed call ([Format.GBNF]).
//
// It does not render prompts (model/chat does, given the tools and the
// messages with their tool calls), assign call ids, validate arguments
// against the tools' JSON schemas, or strip reasoning text: the caller
// gives the Parser only the text after any <think> block.
//
// toolcall imports nothing of llmd (scripts/check-imports.sh).
package toolcall
