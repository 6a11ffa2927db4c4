package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/llmd/llmd/engine/kvcache"
)

// Upstream replicas: a model served by an OpenAI-compatible engine on the
// node (vLLM, SGLang, llama.cpp's server, another llmd). Its Model has a
// Target of its own, which holds the queue in front of the engine and
// relays the engine's stream; the pipeline counts the prompt's tokens
// with the model's Text (the engine's /tokenize, or an estimate) for the
// quota, and leaves the chat template, tools and structured output to
// the engine.

// UpstreamCall is the request an upstream target sends for a job: the
// OpenAI route and body. The target sets "model", "stream",
// "stream_options", "max_tokens" and "n" itself.
type UpstreamCall struct {
	Path string
	Body map[string]json.RawMessage
}

// llmdOnlyFields are request fields of llmd's own that an engine does not
// know.
var llmdOnlyFields = []string{"mode", "priority"}

// upstreamCall builds the engine's request from req.
func upstreamCall(req *Request) (*UpstreamCall, error) {
	path := "/v1/chat/completions"
	if req.Endpoint == EndpointCompletions {
		path = "/v1/completions"
	}
	body := map[string]json.RawMessage{}
	if req.Endpoint == EndpointChat {
		// The native API's body is not OpenAI's: the request's fields are.
		if req.Structured != nil || len(req.Tools) > 0 {
			return nil, InvalidParam("model", "tools and structured output through an upstream engine need /v1/chat/completions")
		}
		put := func(k string, v any) error {
			b, err := json.Marshal(v)
			body[k] = b
			return err
		}
		if err := put("messages", req.Messages); err != nil {
			return nil, err
		}
		b, err := json.Marshal(req.Sampling)
		if err != nil {
			return nil, err
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, err
		}
		for k, v := range fields {
			body[k] = v
		}
		return &UpstreamCall{Path: path, Body: body}, nil
	}
	if err := json.Unmarshal(req.Forward.Body, &body); err != nil {
		return nil, fmt.Errorf("pipeline: the request body for the upstream: %w", err)
	}
	for _, k := range llmdOnlyFields {
		delete(body, k)
	}
	return &UpstreamCall{Path: path, Body: body}, nil
}

// promptIDs returns a copy of a token-id prompt after checking every id
// against m's vocabulary.
func promptIDs(ids []int32, m *Model) ([]int32, error) {
	vocab := m.Text.VocabSize()
	for i, id := range ids {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return nil, InvalidParam("prompt", "prompt[%d] is token %d, outside the vocabulary of %s (%d tokens)", i, id, m.ID, vocab)
		}
	}
	return slices.Clone(ids), nil
}

// Estimator is a TextModel that can also estimate a prompt's tokens
// without asking anyone (an upstream engine's /tokenize costs a round
// trip). ok is false when the model counts exactly at little cost (a
// tokenizer on this node): then its count is taken instead.
type Estimator interface {
	Estimate(text string) (ids []int32, ok bool)
}

// prepareUpstream prepares j for model m, served by an upstream engine:
// the prompt counted (not rendered here), max_tokens fit into the
// context, and the engine's request. The prompt is counted exactly when
// a token limit of the tenant's depends on it or counting costs no round
// trip (a tokenizer on this node); else it is estimated, and the engine's
// own count is billed at the end.
func (p *Pipeline) prepareUpstream(req *Request, j *Job, m *Model, t Tenant) (*Job, error) {
	var estimated bool
	if req.PromptIDs != nil {
		var err error
		if j.Prompt, err = promptIDs(req.PromptIDs, m); err != nil {
			return nil, err
		}
		estimated = true // nothing to count: the ids are the tokens
	} else if est, ok := m.Text.(Estimator); ok && t.Limits.TPM == 0 && t.Limits.DailyTokens == 0 {
		j.Prompt, estimated = est.Estimate(promptText(req))
	}
	switch {
	case estimated:
	case req.Endpoint == EndpointCompletions:
		j.Prompt = m.Text.Prompt(req.Prompt, true)
	default:
		prompt, err := m.Text.ChatPrompt(ChatInput{Messages: req.Messages, AddGenerationPrompt: true})
		if err != nil {
			return nil, err
		}
		j.Prompt = prompt
	}
	var err error
	if j.MaxTokens, err = fit(m.Limit, len(j.Prompt), req.MaxTokens, req.defaultMaxTokens(), req.inputParam()); err != nil {
		return nil, err
	}
	if j.Upstream, err = upstreamCall(req); err != nil {
		return nil, err
	}
	return j, nil
}

// TextBlock is the bytes per block of an upstream model's prefix chain.
const TextBlock = 64

// TextChain is the prefix chain of an upstream request: the hashes of its
// input as the engine gets it (the messages, or the prompt, as compact
// JSON) in blocks of TextBlock bytes. Two requests share a chain's head
// exactly when they share that much of their input, whether or not their
// tokens were counted, so an upstream model's replicas (and the peers
// that gossip them) index what they were sent by it, as an approximate
// prefix cache.
func TextChain(call *UpstreamCall) []kvcache.Hash {
	if call == nil {
		return nil
	}
	in := call.Body["messages"]
	if in == nil {
		in = call.Body["prompt"]
	}
	var buf bytes.Buffer
	if json.Compact(&buf, in) == nil {
		in = buf.Bytes()
	}
	out := make([]kvcache.Hash, 0, len(in)/TextBlock)
	var h kvcache.Hash
	for i := 0; i+TextBlock <= len(in); i += TextBlock {
		v := xxh3.Hash128Seed(in[i:i+TextBlock], h.Hi^h.Lo)
		h = kvcache.Hash{Hi: v.Hi, Lo: v.Lo}
		out = append(out, h)
	}
	return out
}

// PrefixChainer is a Replica whose prefix index is not over the prompt's
// tokens (an upstream engine's, over TextChain): PrefixChain is the chain
// the router compares with the prefixes gossiped for the model.
type PrefixChainer interface {
	PrefixChain(job *Job) []kvcache.Hash
}

// remoteTextChain is the TextChain of a request for a model only peers
// serve, so a peer serving it through an upstream engine that was sent
// the same input is preferred (a peer whose model runs here on an
// executor gossips token chains, which this matches nothing of).
func remoteTextChain(req *Request) []kvcache.Hash {
	call, err := upstreamCall(req)
	if err != nil {
		return nil
	}
	return TextChain(call)
}
