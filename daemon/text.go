package daemon

import (
	"strings"

	"github.com/llmd/llmd/api"
)

// Tokenizer turns text into a model's token ids and back. The sim
// tokenizer implements it.
type Tokenizer interface {
	Encode(text string) []int32
	Decode(tokens []int32) string
	// DecodeToken returns one token's text. For byte-level vocabularies a
	// token may be part of a UTF-8 sequence; the daemon joins such pieces.
	DecodeToken(token int32) string
	// VocabSize is the number of token ids: valid ids are [0, VocabSize).
	VocabSize() int
}

// plainText is the pipeline.TextModel of a model whose tokenizer has no special
// tokens or template (the simulated models): messages are rendered with
// renderChat.
type plainText struct{ Tokenizer }

func (p plainText) ChatPrompt(msgs []api.Message, addGenerationPrompt bool) ([]int32, error) {
	return p.Encode(renderChat(msgs, addGenerationPrompt)), nil
}

func (p plainText) Prompt(text string, _ bool) []int32 { return p.Encode(text) }

func (p plainText) TokenText(t int32) string { return p.DecodeToken(t) }

// renderChat renders messages with llmd's template for simulated models:
// "<|role|>\ncontent\n" per message, then "<|assistant|>\n" to cue the
// answer. The "developer" role is rendered as "system".
func renderChat(msgs []api.Message, addGenerationPrompt bool) string {
	var sb strings.Builder
	for _, m := range msgs {
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		sb.WriteString("<|")
		sb.WriteString(role)
		sb.WriteString("|>\n")
		sb.WriteString(string(m.Content))
		sb.WriteString("\n")
	}
	if addGenerationPrompt {
		sb.WriteString("<|assistant|>\n")
	}
	return sb.String()
}
