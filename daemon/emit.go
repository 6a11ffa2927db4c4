package daemon

import (
	"net/http"
	"strings"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
)

var doneData = []byte("[DONE]")

func openaiUsage(u engine.Usage) *api.Usage {
	return &api.Usage{
		PromptTokens:            u.InputTokens,
		CompletionTokens:        u.OutputTokens,
		TotalTokens:             u.InputTokens + u.OutputTokens,
		PromptTokensDetails:     &api.PromptTokensDetails{CachedTokens: u.CachedTokens},
		CompletionTokensDetails: &api.CompletionTokensDetails{},
	}
}

func nativeUsage(u engine.Usage) api.NativeUsage {
	return api.NativeUsage{InputTokens: u.InputTokens, CachedTokens: u.CachedTokens, OutputTokens: u.OutputTokens}
}

// chatStream writes a chat completion as OpenAI chunks: a role chunk per
// choice, content chunks, a finish chunk per choice, the usage chunk when
// asked for, then [DONE]. No id or event lines (the SDKs want none).
type chatStream struct {
	sw           *sseWriter
	id, model    string
	created      int64
	n            int
	includeUsage bool
	// lps are logprobs waiting for the next chunk of their choice.
	lps map[int][]api.TokenLogprob
}

func (c *chatStream) addLogprob(i int, lp api.TokenLogprob) {
	if c.lps == nil {
		c.lps = map[int][]api.TokenLogprob{}
	}
	c.lps[i] = append(c.lps[i], lp)
}

// takeLogprobs returns choice i's waiting logprobs, nil if none.
func (c *chatStream) takeLogprobs(i int) *api.ChoiceLogprobs {
	lps := c.lps[i]
	if len(lps) == 0 {
		return nil
	}
	delete(c.lps, i)
	return &api.ChoiceLogprobs{Content: lps}
}

func (c *chatStream) sse() *sseWriter { return c.sw }

func (c *chatStream) chunk(choices []api.ChunkChoice, u *api.Usage) error {
	return c.sw.data("", api.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created,
		Model: c.model, Choices: choices, Usage: u})
}

func (c *chatStream) begin() error {
	if err := c.sw.start(); err != nil {
		return err
	}
	empty := ""
	for i := range c.n {
		if err := c.chunk([]api.ChunkChoice{{Index: i, Delta: api.ChunkDelta{Role: "assistant", Content: &empty}}}, nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *chatStream) text(i int, s string) error {
	return c.chunk([]api.ChunkChoice{{Index: i, Delta: api.ChunkDelta{Content: &s}, Logprobs: c.takeLogprobs(i)}}, nil)
}

func (c *chatStream) finish(i int, reason string) error {
	return c.chunk([]api.ChunkChoice{{Index: i, FinishReason: &reason, Logprobs: c.takeLogprobs(i)}}, nil)
}

func (c *chatStream) end(u engine.Usage) error {
	if c.includeUsage {
		if err := c.chunk([]api.ChunkChoice{}, openaiUsage(u)); err != nil {
			return err
		}
	}
	return c.sw.final("", doneData)
}

func (c *chatStream) fail(err error) error { return streamError(c.sw, c.id, err) }

// streamError ends an OpenAI stream with an in-band error and [DONE].
func streamError(sw *sseWriter, id string, err error) error {
	if werr := sw.data("", api.ErrorBody{Error: apiErrorFor(err, id).Detail}); werr != nil {
		return werr
	}
	return sw.final("", doneData)
}

// completionStream writes a text completion as OpenAI "text_completion"
// chunks, the usage chunk when asked for, then [DONE].
type completionStream struct {
	sw           *sseWriter
	id, model    string
	created      int64
	includeUsage bool
	// lps are logprobs waiting for the next chunk of their choice;
	// offsets are each choice's text offset so far (legacy text_offset).
	lps     map[int][]api.TokenLogprob
	offsets map[int]int
}

func (c *completionStream) addLogprob(i int, lp api.TokenLogprob) {
	if c.lps == nil {
		c.lps, c.offsets = map[int][]api.TokenLogprob{}, map[int]int{}
	}
	c.lps[i] = append(c.lps[i], lp)
}

// takeLogprobs returns choice i's waiting logprobs in the legacy format,
// nil if none.
func (c *completionStream) takeLogprobs(i int) *api.CompletionLogprobs {
	lps := c.lps[i]
	if len(lps) == 0 {
		return nil
	}
	delete(c.lps, i)
	off := c.offsets[i]
	out := legacyLogprobs(lps, &off)
	c.offsets[i] = off
	return out
}

// legacyLogprobs converts logprobs to the /v1/completions format; offset is
// the choice's text offset before them and is advanced past them.
func legacyLogprobs(lps []api.TokenLogprob, offset *int) *api.CompletionLogprobs {
	out := &api.CompletionLogprobs{Tokens: make([]string, len(lps)), TokenLogprobs: make([]float64, len(lps)),
		TopLogprobs: make([]map[string]float64, len(lps)), TextOffset: make([]int, len(lps))}
	for k, lp := range lps {
		out.Tokens[k], out.TokenLogprobs[k], out.TextOffset[k] = lp.Token, float64(lp.Logprob), *offset
		*offset += len(lp.Token)
		top := make(map[string]float64, len(lp.TopLogprobs))
		for _, t := range lp.TopLogprobs {
			if _, dup := top[t.Token]; !dup {
				top[t.Token] = float64(t.Logprob)
			}
		}
		out.TopLogprobs[k] = top
	}
	return out
}

func (c *completionStream) sse() *sseWriter { return c.sw }

func (c *completionStream) chunk(choices []api.CompletionChoice, u *api.Usage) error {
	return c.sw.data("", api.Completion{ID: c.id, Object: "text_completion", Created: c.created,
		Model: c.model, Choices: choices, Usage: u})
}

func (c *completionStream) begin() error { return c.sw.start() }

func (c *completionStream) text(i int, s string) error {
	return c.chunk([]api.CompletionChoice{{Index: i, Text: s, Logprobs: c.takeLogprobs(i)}}, nil)
}

func (c *completionStream) finish(i int, reason string) error {
	return c.chunk([]api.CompletionChoice{{Index: i, FinishReason: &reason, Logprobs: c.takeLogprobs(i)}}, nil)
}

func (c *completionStream) end(u engine.Usage) error {
	if c.includeUsage {
		if err := c.chunk([]api.CompletionChoice{}, openaiUsage(u)); err != nil {
			return err
		}
	}
	return c.sw.final("", doneData)
}

func (c *completionStream) fail(err error) error { return streamError(c.sw, c.id, err) }

// nativeStream writes llmd's native stream: "id: N" and a delta per piece of
// text, then "event: done" with the usage (or "event: error"). Its writer
// numbers every event.
type nativeStream struct {
	sw        *sseWriter
	id, model string
	reason    string
}

func (c *nativeStream) sse() *sseWriter { return c.sw }

func (c *nativeStream) event(name string, v any) error { return c.sw.data(name, v) }

func (c *nativeStream) begin() error { return c.sw.start() }

func (c *nativeStream) text(i int, s string) error {
	return c.event("", api.NativeDelta{Delta: s, Index: i})
}

func (c *nativeStream) finish(i int, reason string) error {
	if i == 0 {
		c.reason = reason
	}
	return nil
}

func (c *nativeStream) end(u engine.Usage) error {
	return c.sw.final("done", api.NativeDone{ID: c.id, Model: c.model, FinishReason: c.reason, Usage: nativeUsage(u)})
}

func (c *nativeStream) fail(err error) error {
	return c.sw.final("error", api.NativeError{Error: apiErrorFor(err, c.id).Detail})
}

// collector gathers a whole answer for a JSON (non-streamed) response.
type collector struct {
	w       http.ResponseWriter
	rl      *reqLog
	texts   []strings.Builder
	reasons []string
	lps     [][]api.TokenLogprob
	// body builds the response from each choice's text and finish reason.
	body func(texts, reasons []string, u engine.Usage) any
}

func newCollector(w http.ResponseWriter, rl *reqLog, n int, body func(texts, reasons []string, u engine.Usage) any) *collector {
	return &collector{w: w, rl: rl, texts: make([]strings.Builder, n), reasons: make([]string, n), body: body}
}

func (c *collector) sse() *sseWriter { return nil }

func (c *collector) addLogprob(i int, lp api.TokenLogprob) {
	if c.lps == nil {
		c.lps = make([][]api.TokenLogprob, len(c.texts))
	}
	c.lps[i] = append(c.lps[i], lp)
}

// takeLogprobs returns choice i's logprobs (never nil, for the JSON body).
func (c *collector) takeLogprobs(i int) []api.TokenLogprob {
	if i < len(c.lps) && c.lps[i] != nil {
		return c.lps[i]
	}
	return []api.TokenLogprob{}
}
func (c *collector) begin() error { return nil }

func (c *collector) text(i int, s string) error {
	c.texts[i].WriteString(s)
	return nil
}

func (c *collector) finish(i int, reason string) error {
	c.reasons[i] = reason
	return nil
}

func (c *collector) end(u engine.Usage) error {
	texts := make([]string, len(c.texts))
	for i := range c.texts {
		texts[i] = c.texts[i].String()
	}
	writeJSON(c.w, http.StatusOK, c.body(texts, c.reasons, u))
	return nil
}

func (c *collector) fail(err error) error {
	writeError(c.w, c.rl.id, err)
	return nil
}
