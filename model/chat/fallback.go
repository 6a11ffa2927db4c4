package chat

import (
	"bytes"
	"encoding/json"
	"strings"
)

// tmplFallback renders msgs in a built-in format, without Jinja.
//
//   - llama3: <|begin_of_text|> then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//     per message (content trimmed, as Meta's templates do); the generation
//     prompt is <|start_header_id|>assistant<|end_header_id|>\n\n.
//   - chatml: <|im_start|>ROLE\nCONTENT<|im_end|>\n per message; the
//     generation prompt is <|im_start|>assistant\n.
//   - plain: "ROLE: CONTENT\n" per message; the generation prompt is
//     "assistant:".
//
// An assistant message's tool calls are written after its content in the
// Hermes form Qwen's template uses, so that they are not lost:
// <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, one block
// per call, "\n" before each block but a first one with no content. A
// tool result is a message with its own role ("tool") and the result as
// content; its call id and name are not written.
func tmplFallback(format string, msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	switch format {
	case FallbackLlama3:
		b.WriteString("<|begin_of_text|>")
		for _, m := range msgs {
			b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n")
			b.WriteString(tmplFallbackContent(strings.TrimSpace(m.Content), m.ToolCalls))
			b.WriteString("<|eot_id|>")
		}
		if addGenerationPrompt {
			b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
	case FallbackChatML:
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n")
			b.WriteString(tmplFallbackContent(m.Content, m.ToolCalls))
			b.WriteString("<|im_end|>\n")
		}
		if addGenerationPrompt {
			b.WriteString("<|im_start|>assistant\n")
		}
	default:
		for _, m := range msgs {
			b.WriteString(m.Role + ": " + tmplFallbackContent(m.Content, m.ToolCalls) + "\n")
		}
		if addGenerationPrompt {
			b.WriteString("assistant:")
		}
	}
	return b.String()
}

// tmplFallbackContent is content followed by calls in the Hermes form.
func tmplFallbackContent(content string, calls []ToolCall) string {
	if len(calls) == 0 {
		return content
	}
	var b strings.Builder
	b.WriteString(content)
	for i, tc := range calls {
		if i > 0 || content != "" {
			b.WriteString("\n")
		}
		args := strings.TrimSpace(tc.Arguments)
		if args == "" {
			args = "{}"
		}
		b.WriteString("<tool_call>\n{\"name\": ")
		b.WriteString(tmplJSONString(tc.Name))
		b.WriteString(", \"arguments\": " + args + "}\n</tool_call>")
	}
	return b.String()
}

// tmplJSONString writes s as a JSON string, without json.Marshal's HTML
// escaping (templates write names as they are).
func tmplJSONString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
