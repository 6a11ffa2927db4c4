package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"
)

// Chat template sources reported by [Template.Source] and
// [RenderResult]: the model's own Jinja template, or one of the built-in
// formats used when it is missing or fails.
const (
	SourceGGUF     = "gguf"
	FallbackLlama3 = "llama3"
	FallbackChatML = "chatml"
	FallbackPlain  = "plain"
)

// Defaults for [Options].
const (
	DefaultMaxOutputBytes = 1 << 20
	DefaultTimeout        = 2 * time.Second
)

var (
	// ErrOutputTooLarge is returned by Render when the prompt, or
	// everything the template writes while building it, is over the
	// output limit. Render does not fall back in that case: the
	// conversation is too long for the limit in any format.
	ErrOutputTooLarge = errors.New("model: chat template output exceeds the size limit")
	// ErrTimeout is the fallback reason when the model's template
	// ran past Options.Timeout.
	ErrTimeout = errors.New("model: chat template render timed out")
	// ErrLimit is the fallback reason when the model's template
	// ran into a resource limit: loop iterations, call depth or the size
	// of a value it built.
	ErrLimit = errors.New("model: chat template exceeded a resource limit")
	// ErrUnsupported is the compile error of a template that uses
	// something llmd does not render safely: include and friends, a
	// slice with a step, recursive loops, or a source over 256 KiB.
	ErrUnsupported = errors.New("model: chat template uses an unsupported construct")
	// ErrNoTemplate is the fallback reason when the model has no chat
	// template.
	ErrNoTemplate = errors.New("model: the model has no chat template")
)

// ExceptionError is returned by Render when the template called
// raise_exception, which templates use to reject a conversation they
// cannot format ("Conversation roles must alternate user/assistant...").
// It is the client's error, so Render does not fall back.
type ExceptionError struct {
	Message string
}

func (e *ExceptionError) Error() string {
	return "model: chat template rejected the conversation: " + e.Message
}

// Message is one message of a conversation.
//
// Templates see it as Hugging Face passes OpenAI messages: a dict with
// role and content (always a string, "" when there is none, as Qwen's
// template needs for an assistant message that only calls tools), plus
// tool_calls when ToolCalls is not empty, tool_call_id and name when set.
// Keys are left out, not set to none, when empty: Llama 3.1's template
// tests 'tool_calls' in message and Mistral's tests tool_calls is
// defined.
type Message struct {
	Role    string
	Content string
	// ToolCalls are the calls an assistant message made. Each is given to
	// templates as {"id", "type": "function", "function": {"name",
	// "arguments"}}, arguments as a dict when it is a JSON object (Qwen's
	// and Llama's templates apply tojson to it) and as the string
	// otherwise.
	ToolCalls []ToolCall
	// ToolCallID is the id of the call a tool message answers.
	ToolCallID string
	// Name is the name of the tool whose result a tool message carries.
	Name string
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the call's arguments as JSON text.
	Arguments string
}

// size is what m counts for in the conversation size limit.
func (m *Message) size() int {
	n := len(m.Role) + len(m.Content) + len(m.ToolCallID) + len(m.Name)
	for _, tc := range m.ToolCalls {
		n += len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	return n
}

// Request is what a chat template renders.
type Request struct {
	Messages []Message
	// Tools is a JSON array of tool definitions (OpenAI format), passed to
	// the template as tools with its key order kept; nil passes none. The
	// built-in formats ignore it.
	Tools json.RawMessage
	// AddGenerationPrompt ends the prompt with the header of an assistant
	// turn.
	AddGenerationPrompt bool
	// Kwargs is a JSON object of extra variables for the template (the
	// request's chat_template_kwargs, e.g. {"enable_thinking": false} for
	// Qwen3), passed as Hugging Face's apply_chat_template passes its
	// keyword arguments; nil passes none. See [CheckKwargs] for the names
	// it may not use. The built-in formats ignore it.
	Kwargs json.RawMessage
}

// RenderResult is a rendered prompt and how it was made.
type RenderResult struct {
	Prompt string
	// Source is SourceGGUF or the fallback format used.
	Source string
	// FallbackReason says why the model's template was not used; nil
	// when Source is SourceGGUF. Render logs nothing: the caller decides.
	FallbackReason error
}

// Options configures [NewTemplate].
type Options struct {
	// BOS and EOS are the vocabulary's bos_token and eos_token texts.
	BOS, EOS string
	// Fallback is the built-in format used when the model's template is
	// missing or fails: FallbackLlama3, FallbackChatML or FallbackPlain
	// (the default). [FallbackFor] picks it from the vocabulary.
	Fallback string
	// MaxOutputBytes bounds the prompt (default 1 MiB). Values a template
	// builds may be at most three times this, and all it writes, macro
	// output included, eight times this.
	MaxOutputBytes int
	// Timeout bounds one render of the model's template (default 2s).
	Timeout time.Duration
	// Now is the clock for strftime_now (default time.Now).
	Now func() time.Time
}

// Template renders conversations into prompts with a model's Jinja
// chat template (tokenizer.chat_template), falling back to a built-in
// format when the template is missing, unsupported or fails to render.
//
// The template is untrusted input. It is rendered by
// github.com/ardanlabs/jinja, which has no file, network or reflection
// access (include, import and extends are rejected), after being
// instrumented so that loops, recursion, memory and output are bounded
// (see sandbox.go). Each render runs in its own goroutine with a
// deadline; at the deadline the render stops at its next loop iteration,
// macro call or output, and Render falls back without waiting for it.
//
// The prompt may start with the BOS text (Llama 3 templates write it):
// tokenize it without adding another BOS.
//
// A Template is safe for concurrent use.
type Template struct {
	opts       Options
	compiled   *jinja.Template // nil when the model's template is not used
	compileErr error           // why compiled is nil
	reasoning  bool            // the template writes <think>...</think>
	maxSteps   int64           // tmplMaxSteps; tests lower it

	// renders tracks render goroutines, including those Render stopped
	// waiting for, so that tests can wait for them to end.
	renders sync.WaitGroup
}

// NewTemplate prepares src, the model's chat template ("" if it has
// none). A template that does not compile or is unsupported is not an
// error: Render then uses the fallback format and reports why (see
// [Template.Err]). It returns an error only for invalid options.
func NewTemplate(src string, opts Options) (*Template, error) {
	switch opts.Fallback {
	case "":
		opts.Fallback = FallbackPlain
	case FallbackLlama3, FallbackChatML, FallbackPlain:
	default:
		return nil, fmt.Errorf("model: unknown chat template fallback %q (want %q, %q or %q)",
			opts.Fallback, FallbackLlama3, FallbackChatML, FallbackPlain)
	}
	if opts.MaxOutputBytes < 0 || opts.Timeout < 0 {
		return nil, errors.New("model: chat template limits must not be negative")
	}
	if opts.MaxOutputBytes == 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := &Template{opts: opts, maxSteps: tmplMaxSteps, reasoning: tmplReasoning(src)}
	if src == "" {
		t.compileErr = ErrNoTemplate
		return t, nil
	}
	instrumented, err := tmplInstrument(src)
	if err != nil {
		t.compileErr = err
		return t, nil
	}
	compiled, err := jinja.Compile(instrumented)
	if err != nil {
		t.compileErr = fmt.Errorf("model: compile chat template: %w", err)
		return t, nil
	}
	t.compiled = compiled
	return t, nil
}

// Source reports the format Render tries first: SourceGGUF when the
// model's template compiled, otherwise the fallback format.
func (t *Template) Source() string {
	if t.compiled != nil {
		return SourceGGUF
	}
	return t.opts.Fallback
}

// Err reports why the model's template is not used (ErrNoTemplate,
// ErrUnsupported or a compile error), or nil when it is.
func (t *Template) Err() error {
	return t.compileErr
}

// Reasoning reports whether the model's template writes a reasoning
// section, ThinkOpen ... ThinkClose, as the templates of reasoning models
// (Qwen3, DeepSeek-R1 and its distillations, QwQ) do: the model's answers
// then start with, or continue, such a section. It is read from the
// template's text, whether or not the template compiled.
func (t *Template) Reasoning() bool {
	return t.reasoning
}

// The tags of a reasoning section.
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
)

func tmplReasoning(src string) bool {
	return strings.Contains(src, ThinkOpen) && strings.Contains(src, ThinkClose)
}

// Render renders msgs and returns the prompt; see [Template.RenderRequest].
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	res, err := t.RenderRequest(Request{Messages: msgs, AddGenerationPrompt: addGenerationPrompt})
	return res.Prompt, err
}

// RenderRequest renders req with the model's template, or with the
// fallback format if the template is missing, unsupported, fails, runs
// into a resource limit or times out. It returns an *ExceptionError
// when the template rejects the conversation with raise_exception, a
// *KwargsError for kwargs it may not pass and ErrOutputTooLarge when the
// prompt is over the size limit; none of them falls back.
func (t *Template) RenderRequest(req Request) (RenderResult, error) {
	if err := CheckKwargs(req.Kwargs); err != nil {
		return RenderResult{}, err
	}
	size := len(req.Tools) + len(req.Kwargs)
	for i := range req.Messages {
		size += req.Messages[i].size()
	}
	if size > t.opts.MaxOutputBytes {
		return RenderResult{}, fmt.Errorf("%w: the conversation is %d bytes, the limit is %d",
			ErrOutputTooLarge, size, t.opts.MaxOutputBytes)
	}

	reason := t.compileErr
	if t.compiled != nil {
		prompt, err := t.renderTemplate(req)
		var exc *ExceptionError
		switch {
		case err == nil:
			if len(prompt) > t.opts.MaxOutputBytes {
				return RenderResult{}, t.tooLarge(len(prompt))
			}
			return RenderResult{Prompt: prompt, Source: SourceGGUF}, nil
		case errors.As(err, &exc), errors.Is(err, ErrOutputTooLarge):
			return RenderResult{}, err
		}
		reason = err
	}

	prompt := tmplFallback(t.opts.Fallback, req.Messages, req.AddGenerationPrompt)
	if len(prompt) > t.opts.MaxOutputBytes {
		return RenderResult{}, t.tooLarge(len(prompt))
	}
	return RenderResult{Prompt: prompt, Source: t.opts.Fallback, FallbackReason: reason}, nil
}

func (t *Template) tooLarge(n int) error {
	return fmt.Errorf("%w: the prompt is %d bytes, the limit is %d", ErrOutputTooLarge, n, t.opts.MaxOutputBytes)
}

// renderTemplate runs the compiled template in a goroutine and waits for
// it until the timeout.
func (t *Template) renderTemplate(req Request) (string, error) {
	r := newTmplRender(t.opts.MaxOutputBytes, t.opts.Now())
	r.maxSteps = t.maxSteps
	tools, err := tmplToolsValue(req.Tools)
	if err != nil {
		return "", err
	}
	kwargs, err := tmplKwargsValue(req.Kwargs)
	if err != nil {
		return "", err
	}
	data := r.globals()
	if kwargs.IsDict() {
		d := kwargs.AsDict()
		for _, k := range d.Keys {
			data[k] = d.Data[k]
		}
	}
	data["messages"] = tmplMessagesValue(req.Messages)
	data["tools"] = tools
	data["add_generation_prompt"] = jinja.NewBool(req.AddGenerationPrompt)
	data["bos_token"] = jinja.NewString(t.opts.BOS)
	data["eos_token"] = jinja.NewString(t.opts.EOS)

	type result struct {
		prompt string
		err    error
	}
	done := make(chan result, 1) // buffered: the goroutine never blocks on a caller that left
	t.renders.Add(1)
	go func() {
		defer t.renders.Done()
		var res result
		defer func() {
			if p := recover(); p != nil {
				res = result{err: fmt.Errorf("model: chat template render panicked: %v", p)}
			}
			// Read r.err here, in the goroutine that owns it.
			if r.err != nil {
				res = result{err: r.err}
			}
			done <- res
		}()
		res.prompt, res.err = t.compiled.RenderValues(data)
		if res.err != nil {
			res.err = fmt.Errorf("model: render chat template: %w", res.err)
		}
	}()

	timer := time.NewTimer(t.opts.Timeout)
	defer timer.Stop()
	select {
	case res := <-done:
		return res.prompt, res.err
	case <-timer.C:
		r.cancelled.Store(true)
		return "", fmt.Errorf("%w after %v", ErrTimeout, t.opts.Timeout)
	}
}

// FallbackFor picks the built-in format for a vocabulary: FallbackLlama3
// when it has <|start_header_id|> and <|eot_id|>, FallbackChatML when it has
// <|im_start|> and <|im_end|>, else FallbackPlain. tokenPresent reports
// whether a piece is a token of the vocabulary.
func FallbackFor(tokenPresent func(piece string) bool) string {
	switch {
	case tokenPresent("<|start_header_id|>") && tokenPresent("<|eot_id|>"):
		return FallbackLlama3
	case tokenPresent("<|im_start|>") && tokenPresent("<|im_end|>"):
		return FallbackChatML
	}
	return FallbackPlain
}
