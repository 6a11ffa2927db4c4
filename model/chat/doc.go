// Package chat renders conversations into prompts with a model's Jinja
// chat template (tokenizer.chat_template): a [Template] made by
// [NewTemplate]. The template is untrusted input: it is checked and
// instrumented (sandbox.go, hooks.go) so that loops, recursion, memory,
// output and time are bounded, rendered by github.com/ardanlabs/jinja, and
// replaced by a built-in format ([FallbackLlama3], [FallbackChatML],
// [FallbackPlain]; see [FallbackFor]) when it is missing, unsupported or
// fails. Messages carry tool calls and tool results ([Message],
// [ToolCall]) in the shape Hugging Face templates expect; reading calls
// back from the model's output is model/toolcall's job.
//
// chat imports nothing of llmd: the caller reads the template source and
// the BOS and EOS texts from the model file and its tokenizer.
package chat
