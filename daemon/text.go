package daemon

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/model/toolcall"
	"github.com/llmd/llmd/pipeline"
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
// renderChat, tools described in a system message in the Hermes format.
type plainText struct {
	Tokenizer
	vocab *lazyVocab
}

// newPlainText returns the text side of a model tokenized by tok.
func newPlainText(tok Tokenizer) plainText {
	pt := plainText{Tokenizer: tok, vocab: &lazyVocab{}}
	if src, ok := tok.(interface {
		TokenBytes() [][]byte
		EOS() int32
	}); ok {
		pt.vocab.build = func() *grammar.Vocabulary { return grammar.NewVocabulary(src.TokenBytes(), []int32{src.EOS()}) }
	}
	return pt
}

func (p plainText) ChatPrompt(in pipeline.ChatInput) ([]int32, error) {
	return p.Encode(renderChat(in.Messages, in.AddGenerationPrompt)), nil
}

func (p plainText) Prompt(text string, _ bool) []int32 { return p.Encode(text) }

func (p plainText) TokenText(t int32) string { return p.DecodeToken(t) }

func (p plainText) Vocabulary() *grammar.Vocabulary { return p.vocab.get() }

func (p plainText) ToolFormat() (toolcall.Format, bool) { return toolcall.Hermes, false }

// lazyVocab builds a model's grammar vocabulary on first use (a trie of
// every token: not free on a large vocabulary, and most models never need
// it). A nil build means the model has none.
type lazyVocab struct {
	once  sync.Once
	build func() *grammar.Vocabulary
	v     *grammar.Vocabulary
}

func (l *lazyVocab) get() *grammar.Vocabulary {
	if l == nil {
		return nil
	}
	l.once.Do(func() {
		if l.build != nil {
			l.v = l.build()
		}
	})
	return l.v
}

// renderChat renders messages with llmd's template for simulated models:
// "<|role|>\ncontent\n" per message, then "<|assistant|>\n" to cue the
// answer. The "developer" role is rendered as "system"; an assistant's
// tool calls follow its content in the Hermes format.
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
		for _, tc := range m.ToolCalls {
			sb.WriteString("\n<tool_call>\n{\"name\": ")
			name, _ := json.Marshal(tc.Function.Name)
			sb.Write(name)
			sb.WriteString(", \"arguments\": ")
			sb.WriteString(tc.Function.Arguments)
			sb.WriteString("}\n</tool_call>")
		}
		sb.WriteString("\n")
	}
	if addGenerationPrompt {
		sb.WriteString("<|assistant|>\n")
	}
	return sb.String()
}
