package pipeline

import (
	"strings"
	"unicode"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/model/chat"
)

// Reasoning output.
//
// A reasoning model (Qwen3, DeepSeek-R1 and its distillations, QwQ: a model
// whose chat template writes <think>...</think>, see [Reasoner]) starts its
// answer with a reasoning section. When a chat request asks for it
// (Request.Reasoning, the "reasoning_format" field), each choice's text is
// split as vLLM's reasoning parsers split it: the text of the section goes
// to the sink as reasoning ([ReasoningSink]), the rest as content, and only
// the content reaches the tool-call parser. Without the switch, or for a
// model whose template has no <think>, the text is sent as it is, tags
// included.
//
// The split: when the prompt ends inside an open <think> (templates that
// open it for the model, like DeepSeek-R1's), the answer starts in the
// section; otherwise an answer whose first non-blank text is <think> opens
// it there (the tag and the blanks before it are dropped), and any other
// answer is all content. The section ends at the first </think> (dropped);
// what follows is content, as it is (vLLM keeps the blank lines after the
// tag too). A choice that ends inside the section, with no </think>, is all
// reasoning. Nothing else is dropped.

// Reasoner is the optional side of a TextModel whose chat template writes
// a reasoning section (<think>...</think>).
type Reasoner interface {
	// Reasoning reports whether the model's template writes one.
	Reasoning() bool
}

// ReasoningSink is the optional side of a Sink that writes reasoning apart
// from content (OpenAI's reasoning_content). The codecs of the chat
// requests that take the switch implement it; a sink that does not gets
// the reasoning as text.
type ReasoningSink interface {
	// Reasoning adds reasoning text to choice i (never empty), with the
	// log-probabilities of the tokens it completes.
	Reasoning(i int, text string, lps []api.TokenLogprob) error
}

// sendReasoning passes reasoning to sink, as text when sink does not take
// it apart.
func sendReasoning(sink Sink, i int, text string, lps []api.TokenLogprob) error {
	if rs, ok := sink.(ReasoningSink); ok {
		return rs.Reasoning(i, text, lps)
	}
	return sink.Text(i, text, lps)
}

// ReasoningPlan is how a job's answers are split into reasoning and
// content.
type ReasoningPlan struct {
	// Open: the prompt ends inside an open <think>, so each answer starts
	// in its reasoning section.
	Open bool
}

// promptTailTokens is how many of the prompt's last tokens are decoded to
// see whether it leaves a <think> open.
const promptTailTokens = 32

// reasoningPlan is the split of req's answers on m, nil for none: the
// request asks for it and m's template writes reasoning sections. A
// request a peer forwarded here is not split: the entry node relays its
// text as content (its peer proxy reads no reasoning), and nothing is
// lost.
func reasoningPlan(req *Request, m *Model, prompt []int32) *ReasoningPlan {
	if !req.Reasoning || req.Forwarded() || req.Endpoint == EndpointCompletions || m == nil {
		return nil
	}
	r, ok := m.Text.(Reasoner)
	if !ok || !r.Reasoning() {
		return nil
	}
	tail := m.Text.Decode(prompt[max(0, len(prompt)-promptTailTokens):])
	return &ReasoningPlan{Open: thinkOpen(tail)}
}

// thinkOpen reports whether text leaves a reasoning section open: its last
// <think> comes after its last </think>.
func thinkOpen(text string) bool {
	open := strings.LastIndex(text, chat.ThinkOpen)
	return open >= 0 && open > strings.LastIndex(text, chat.ThinkClose)
}

// Where a choice's text is, for reasoningSplit.
const (
	splitStart     = iota // nothing but blanks yet: <think> may still open the section
	splitReasoning        // inside the section
	splitContent          // after it, or an answer without one
)

// reasoningSplit splits one choice's text into its reasoning section and
// its content as the text streams, holding back what may still turn out
// to be a tag (so a </think> split across tokens is found).
type reasoningSplit struct {
	state int
	held  string
}

func newReasoningSplit(p *ReasoningPlan) *reasoningSplit {
	if p.Open {
		return &reasoningSplit{state: splitReasoning}
	}
	return &reasoningSplit{state: splitStart}
}

// push adds text and returns the reasoning and then the content that are
// now safe to send (either may be ""), and whether the text was part of
// the reasoning section (its tags included): a token is counted as a
// reasoning token when it was.
func (s *reasoningSplit) push(text string) (reasoning, content string, inReasoning bool) {
	t := s.held + text
	s.held = ""
	if s.state == splitStart {
		rest := strings.TrimLeftFunc(t, unicode.IsSpace)
		switch {
		case strings.HasPrefix(rest, chat.ThinkOpen):
			s.state, t = splitReasoning, rest[len(chat.ThinkOpen):]
		case rest == "" || strings.HasPrefix(chat.ThinkOpen, rest):
			s.held = t
			return "", "", false
		default:
			s.state = splitContent
			return "", t, false
		}
	}
	if s.state == splitContent {
		return "", t, false
	}
	if i := strings.Index(t, chat.ThinkClose); i >= 0 {
		s.state = splitContent
		return t[:i], t[i+len(chat.ThinkClose):], true
	}
	k := overlap(t, chat.ThinkClose)
	s.held = t[len(t)-k:]
	return t[:len(t)-k], "", true
}

// flush returns what is held back, at the end of a choice: a section never
// closed is reasoning, blanks or a partial <think> content.
func (s *reasoningSplit) flush() (reasoning, content string) {
	held := s.held
	s.held = ""
	if s.state == splitReasoning {
		return held, ""
	}
	return "", held
}
