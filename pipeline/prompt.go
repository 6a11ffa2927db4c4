package pipeline

// RenderPrompt renders req's conversation, with its tools, as model m's
// chat template renders it for a generation, and tokenizes it: the
// prompt a chat request of req's would count (Anthropic's count_tokens).
// It checks the messages and tools first; its errors are the client's.
func RenderPrompt(req *Request, m *Model) ([]int32, error) {
	if err := CheckMessages(req.Messages); err != nil {
		return nil, err
	}
	if err := validateTools(req); err != nil {
		return nil, err
	}
	in, _, err := chatInput(req, m.Text)
	if err != nil {
		return nil, err
	}
	return m.Text.ChatPrompt(in)
}
