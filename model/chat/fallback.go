package chat

import "strings"

// tmplFallback renders msgs in a built-in format, without Jinja.
//
//   - llama3: <|begin_of_text|> then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//     per message (content trimmed, as Meta's templates do); the generation
//     prompt is <|start_header_id|>assistant<|end_header_id|>\n\n.
//   - chatml: <|im_start|>ROLE\nCONTENT<|im_end|>\n per message; the
//     generation prompt is <|im_start|>assistant\n.
//   - plain: "ROLE: CONTENT\n" per message; the generation prompt is
//     "assistant:".
func tmplFallback(format string, msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	switch format {
	case FallbackLlama3:
		b.WriteString("<|begin_of_text|>")
		for _, m := range msgs {
			b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n")
			b.WriteString(strings.TrimSpace(m.Content))
			b.WriteString("<|eot_id|>")
		}
		if addGenerationPrompt {
			b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
	case FallbackChatML:
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n")
			b.WriteString(m.Content)
			b.WriteString("<|im_end|>\n")
		}
		if addGenerationPrompt {
			b.WriteString("<|im_start|>assistant\n")
		}
	default:
		for _, m := range msgs {
			b.WriteString(m.Role + ": " + m.Content + "\n")
		}
		if addGenerationPrompt {
			b.WriteString("assistant:")
		}
	}
	return b.String()
}
