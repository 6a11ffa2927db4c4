package daemon

import (
	"strings"
	"unicode/utf8"

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

// textModel is a model's side of text: chat rendering, tokenization and
// detokenization.
type textModel interface {
	// ChatPrompt renders messages with the model's chat template and
	// tokenizes the result. An error is the template refusing the
	// conversation (a 400).
	ChatPrompt(msgs []api.Message, addGenerationPrompt bool) ([]int32, error)
	// Prompt tokenizes raw text, adding the model's BOS/EOS when addSpecial.
	Prompt(text string, addSpecial bool) []int32
	Decode(tokens []int32) string
	// DecodeToken is a generated token's text as shown (special tokens
	// hidden); TokenText is its text in the vocabulary (for logprobs).
	DecodeToken(token int32) string
	TokenText(token int32) string
	VocabSize() int
}

// plainText is the textModel of a model whose tokenizer has no special
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

// textStream turns one choice's tokens into text to send, holding back what
// may still turn out to be the start of a stop string or an incomplete UTF-8
// sequence. Stop text is never sent.
type textStream struct {
	stops   []string
	pending string
	stopped bool
}

// push adds a token's text. It returns the text that is now safe to send
// and whether a stop string matched (the choice is then over; later pushes
// return nothing).
func (t *textStream) push(piece string) (out string, stopped bool) {
	if t.stopped {
		return "", true
	}
	t.pending += piece
	cut := -1
	for _, s := range t.stops {
		if i := strings.Index(t.pending, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		out = t.pending[:cut]
		t.pending = ""
		t.stopped = true
		return out, true
	}
	keep := 0
	for _, s := range t.stops {
		if k := overlap(t.pending, s); k > keep {
			keep = k
		}
	}
	if k := partialRune(t.pending); k > keep {
		keep = k
	}
	out = t.pending[:len(t.pending)-keep]
	t.pending = t.pending[len(t.pending)-keep:]
	return out, false
}

// flush returns whatever is held back, at the end of a choice.
func (t *textStream) flush() string {
	out := t.pending
	t.pending = ""
	return out
}

// overlap returns the length of the longest proper prefix of stop that is a
// suffix of s.
func overlap(s, stop string) int {
	n := min(len(s), len(stop)-1)
	for k := n; k > 0; k-- {
		if strings.HasSuffix(s, stop[:k]) {
			return k
		}
	}
	return 0
}

// partialRune returns the number of bytes at the end of s that start a
// UTF-8 sequence not yet complete.
func partialRune(s string) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(s); k++ {
		b := s[len(s)-k]
		if utf8.RuneStart(b) {
			if b >= utf8.RuneSelf && !utf8.FullRuneInString(s[len(s)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
