package pipeline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/chat"
	"github.com/llmd/llmd/store"
)

// Limits of the OpenAI API.
const (
	maxStopStrings = 4
	maxLogitBias   = 1024
)

// validate checks what needs no model: the sampling parameters' ranges,
// n, max_tokens and the messages' roles.
func (p *Pipeline) validate(req *Request) error {
	if v := req.MaxTokens; v != nil && *v < 1 {
		return InvalidParam(req.MaxTokensParam, "%s must be at least 1, got %d", req.MaxTokensParam, *v)
	}
	if req.Endpoint != EndpointCompletions {
		if err := CheckMessages(req.Messages); err != nil {
			return err
		}
	}
	sp := req.Sampling
	if t := sp.Temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return InvalidParam("temperature", "temperature must be between 0 and 2, got %v", *t)
	}
	if t := sp.TopP; t != nil && !(*t > 0 && *t <= 1) {
		return InvalidParam("top_p", "top_p must be greater than 0 and at most 1, got %v", *t)
	}
	if n := req.N; n != nil && (*n < 1 || *n > p.cfg.MaxN) {
		return InvalidParam("n", "n must be between 1 and %d, got %d", p.cfg.MaxN, *n)
	}
	for _, pen := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", sp.PresencePenalty}, {"frequency_penalty", sp.FrequencyPenalty}} {
		if pen.v != nil && !(*pen.v >= -2 && *pen.v <= 2) {
			return InvalidParam(pen.name, "%s must be between -2 and 2, got %v", pen.name, *pen.v)
		}
	}
	if k := sp.TopK; k != nil && *k < -1 {
		return InvalidParam("top_k", "top_k must be -1 or 0 (off) or a positive count, got %d", *k)
	}
	if m := sp.MinP; m != nil && !(*m >= 0 && *m <= 1) {
		return InvalidParam("min_p", "min_p must be between 0 and 1, got %v", *m)
	}
	if r := sp.RepetitionPenalty; r != nil && !(*r > 0 && *r <= 10) {
		return InvalidParam("repetition_penalty", "repetition_penalty must be above 0 and at most 10, got %v", *r)
	}
	if len(sp.LogitBias) > maxLogitBias {
		return InvalidParam("logit_bias", "logit_bias may hold at most %d entries, got %d", maxLogitBias, len(sp.LogitBias))
	}
	if len(sp.Stop) > maxStopStrings {
		return InvalidParam("stop", "stop may hold at most %d strings, got %d", maxStopStrings, len(sp.Stop))
	}
	for _, st := range sp.Stop {
		if st == "" {
			return InvalidParam("stop", "stop strings must not be empty")
		}
	}
	if req.MinTokens < 0 {
		return InvalidParam("min_tokens", "min_tokens must not be negative, got %d", req.MinTokens)
	}
	if v := req.MaxTokens; v != nil && req.MinTokens > *v {
		return InvalidParam("min_tokens", "min_tokens (%d) must not exceed %s (%d)", req.MinTokens, req.MaxTokensParam, *v)
	}
	if req.Endpoint == EndpointCompletions && len(req.Tools) > 0 {
		return InvalidParam("tools", "tools need a chat endpoint")
	}
	if err := chat.CheckKwargs(req.TemplateKwargs); err != nil {
		return InvalidParam("chat_template_kwargs", "%v", err)
	}
	return validateTools(req)
}

// CheckMessages validates chat messages: at least one, each with a known role.
func CheckMessages(msgs []api.Message) error {
	if len(msgs) == 0 {
		return InvalidParam("messages", "messages must hold at least one message")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool", "function":
		default:
			return InvalidParam(fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role must be one of system, developer, user, assistant, tool, function; got %q", i, m.Role)
		}
	}
	return nil
}

// choice is the choose stage's decision: the model that serves the
// request, here or (model nil) only on peers.
type choice struct {
	id    string
	model *Model
	// level is the degradation level of the model asked for.
	level engine.DegradeLevel
	// forward is the request as it came, its "model" replaced when a
	// fallback serves it.
	forward Forward
	// route and degraded are notes for the log: a fallback, a
	// degradation route.
	route, degraded string
	// peers serve the model when this node does not.
	peers []cluster.Candidate
	// decision is how the models config resolved the name asked for.
	decision *ModelChoice
}

// choose picks the model that serves req: the models config's choice for
// an alias, a router or a pinned version (loading a model it names on
// demand), else the model req names; for a free-tier tenant, the model's
// smaller replacement while its degradation ladder is at limit_free; in a
// cluster, a model only peers serve, or, when no alive node serves it,
// its configured fallback.
func (p *Pipeline) choose(ctx context.Context, req *Request, t Tenant) (choice, error) {
	c := choice{id: req.Model, forward: req.Forward}
	name := req.Model
	if p.catalog != nil && name != "" && !req.Forwarded() {
		d, ok, err := p.resolve(ctx, req, t)
		if err != nil {
			return c, err
		}
		if ok {
			c.decision, name, c.id = &d, d.Model, d.Model
			if name != req.Model && len(req.Forward.Body) > 0 {
				if body, err := withModel(req.Forward.Body, name); err == nil {
					c.forward.Body = body
				}
			}
		}
	}
	m, err := p.lookup(ctx, name)
	if err != nil {
		c, err = p.chooseElsewhere(req, name, c, err)
		if err != nil && c.decision != nil && len(c.decision.Fallbacks) > 0 {
			// The version chosen is served nowhere (or is unloading): the
			// config's fallbacks.
			if fb, ok := fallback(p, c.decision, req); ok {
				fb.route = fmt.Sprintf("%s unavailable; fallback %s", name, fb.id)
				return fb, nil
			}
		}
		var pe *Error
		if errors.As(err, &pe) && pe.Code == CodeModelNotFound && name != "" && p.router != nil {
			// The cluster's names, not this node's alone.
			others := p.router.Models()
			if p.catalog != nil {
				others = append(others, p.catalog.Names()...)
			}
			err = p.models.NotFound(name, others)
		}
		return c, err
	}
	c.model, c.level = m, m.Replica.Stats().Degrade
	to, ok := p.cfg.DegradeRoutes[m.ID]
	// From shed_free on, the request is shed (admit), not routed.
	if small := p.models.Get(to); ok && small != nil && t.Tier == store.TierFree &&
		c.level >= engine.DegradeLimitFree && c.level < engine.DegradeShedFree {
		c.model, c.id = small, small.ID
		c.degraded = "routed from " + m.ID
	}
	c.id = c.model.ID
	return c, nil
}

// lookup finds the model with id served here, loading it first when the
// models config names it but it is not resident. An unknown name's 404
// lists the names a caller may use.
func (p *Pipeline) lookup(ctx context.Context, id string) (*Model, error) {
	m, err := p.models.Lookup(id)
	var pe *Error
	if err == nil || !errors.As(err, &pe) || pe.Code != CodeModelNotFound || p.catalog == nil {
		return m, err
	}
	if p.loader != nil && p.catalog.Knows(id) {
		return p.loader(ctx, id)
	}
	return nil, p.models.NotFound(id, p.catalog.Names())
}

// chooseElsewhere handles a model this node does not serve (notFound): in
// a cluster, the peers that serve it, else its fallback (here or on
// peers). A forwarded request is never sent on.
func (p *Pipeline) chooseElsewhere(req *Request, name string, c choice, notFound error) (choice, error) {
	var pe *Error
	// An embeddings request is sent on as its decoded inputs (EmbedTarget),
	// not as its body.
	forwardable := len(c.forward.Body) > 0 || req.Endpoint == EndpointEmbeddings
	if p.router == nil || req.Forwarded() || name == "" || !forwardable ||
		!errors.As(notFound, &pe) || pe.Code != CodeModelNotFound {
		return c, notFound
	}
	if c.peers = p.peersServing(req, name); len(c.peers) > 0 {
		return c, nil
	}
	fb := p.cfg.Fallback[name]
	if fb == "" {
		return c, notFound
	}
	if len(c.forward.Body) > 0 {
		body, err := withModel(c.forward.Body, fb)
		if err != nil {
			return c, notFound
		}
		c.forward.Body = body
	}
	c.id = fb
	c.route = "fallback from " + name
	p.log.Info("no node serves the model; using its fallback", "request_id", req.ID, "model", name, "fallback", fb)
	if m := p.models.Get(fb); m != nil {
		c.model, c.level = m, m.Replica.Stats().Degrade
		return c, nil
	}
	if c.peers = p.peersServing(req, fb); len(c.peers) > 0 {
		return c, nil
	}
	return c, notFound
}

// peersServing are the alive peers serving model for req: the one that
// was sent the longest part of its input (peers serving the model through
// an upstream engine gossip what they sent; this node cannot tokenize for
// a model it does not hold), then by affinity and load.
func (p *Pipeline) peersServing(req *Request, model string) []cluster.Candidate {
	cands := p.router.Route(cluster.RouteRequest{Model: model, Prefix: remoteTextChain(req), AffinityKey: req.AffinityKey, Zone: p.cfg.Zone,
		LoadBound: p.cfg.LoadBound, LoadSlack: p.cfg.LoadSlack}, nil)
	return slices.DeleteFunc(cands, func(c cluster.Candidate) bool { return c.Member.Local || c.Member.APIAddr == "" })
}

// withModel returns a JSON request body with its "model" replaced.
func withModel(body []byte, model string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	m["model"] = b
	return json.Marshal(m)
}

// remoteEstimateMaxTokens stands for max_tokens in the reservation of a
// request only peers serve when it does not set it.
const remoteEstimateMaxTokens = 1024

// prepare builds the Job: the prompt rendered and tokenized, the sampling
// parameters checked against the model, max_tokens fit into the context. A
// job only peers serve keeps the request's numbers: this node cannot
// tokenize for a model it does not hold.
func (p *Pipeline) prepare(req *Request, t Tenant, c choice) (*Job, error) {
	j := &Job{ID: req.ID, Endpoint: req.Endpoint, Stream: req.Stream, Principal: req.Principal, Tier: t.Tier, Model: c.model, ModelID: c.id, N: 1,
		AffinityKey: req.AffinityKey, Forward: c.forward, Logprobs: req.Logprobs, TopLogprobs: req.TopLogprobs,
		OnStopString: req.OnStopString}
	if req.N != nil {
		j.N = *req.N
	}
	if req.Priority != nil {
		j.Priority = *req.Priority
	}
	m := c.model
	if m == nil {
		j.MaxTokens = remoteEstimateMaxTokens
		if req.MaxTokens != nil {
			j.MaxTokens = *req.MaxTokens
		}
		return j, nil
	}
	if m.Embed != nil {
		return nil, errNotGenerative(m.ID)
	}
	if m.Target != nil {
		return p.prepareUpstream(req, j, m, t)
	}
	var err error
	if req.PromptIDs != nil {
		if j.Prompt, err = promptIDs(req.PromptIDs, m); err != nil {
			return nil, err
		}
		if req.Echo {
			j.Echo = m.Text.Decode(j.Prompt)
		}
	} else if req.Endpoint == EndpointCompletions {
		j.Prompt = m.Text.Prompt(req.Prompt, true)
		if len(j.Prompt) == 0 {
			return nil, InvalidParam("prompt", "prompt must not be empty")
		}
		if req.Echo {
			j.Echo = req.Prompt
		}
	} else {
		in, tp, err := chatInput(req, m.Text)
		if err != nil {
			return nil, err
		}
		if j.Prompt, err = m.Text.ChatPrompt(in); err != nil {
			return nil, err
		}
		j.Tools = tp
		j.Reasoning = reasoningPlan(req, m, j.Prompt)
	}
	src, err := grammarSource(req, j.Tools)
	if err != nil {
		return nil, err
	}
	if src != "" {
		if j.Grammar, err = bindGrammar(m, src, grammarParam(req)); err != nil {
			return nil, err
		}
	}
	for _, t := range req.StopTokenIDs {
		if t < 0 || int(t) >= m.Text.VocabSize() {
			return nil, InvalidParam("stop_token_ids", "stop_token_ids holds %d, not a token id of this model (0 to %d)", t, m.Text.VocabSize()-1)
		}
	}
	j.MinTokens, j.IgnoreEOS, j.StopTokens = req.MinTokens, req.IgnoreEOS, slices.Clone(req.StopTokenIDs)
	// A tool call's markers may be special tokens (<|python_tag|>).
	j.ShowSpecial = req.ShowSpecial || j.Tools != nil
	if j.Sampling, err = samplingParams(req.Sampling, m.Text.VocabSize()); err != nil {
		return nil, err
	}
	j.Stops = slices.Clone(req.Sampling.Stop)
	if s := req.Sampling.Seed; s != nil {
		j.Seed = uint64(*s)
	} else {
		j.Seed = PromptSeed(j.Prompt)
	}
	if j.Logprobs && !m.Info.Logprobs {
		return nil, InvalidParam("logprobs", "model %s does not report logprobs (simulated models have no probabilities)", m.ID)
	}
	if j.MaxTokens, err = fit(m.Limit, len(j.Prompt), req.MaxTokens, req.defaultMaxTokens(), req.inputParam()); err != nil {
		return nil, err
	}
	if j.MinTokens > j.MaxTokens {
		return nil, InvalidParam("min_tokens", "min_tokens (%d) exceeds the %d tokens left for the answer", j.MinTokens, j.MaxTokens)
	}
	return j, nil
}

// samplingParams is s as the engine takes it; validate has checked the
// ranges, and this checks logit_bias's token ids against a vocabulary of
// vocab tokens.
func samplingParams(s api.Sampling, vocab int) (engine.SamplingParams, error) {
	sp := engine.SamplingParams{Temperature: 1, TopP: 1}
	if s.Temperature != nil {
		sp.Temperature = *s.Temperature
	}
	if s.TopP != nil {
		sp.TopP = *s.TopP
	}
	if s.PresencePenalty != nil {
		sp.PresencePenalty = *s.PresencePenalty
	}
	if s.FrequencyPenalty != nil {
		sp.FrequencyPenalty = *s.FrequencyPenalty
	}
	if s.TopK != nil {
		sp.TopK = max(*s.TopK, 0)
	}
	if s.MinP != nil {
		sp.MinP = *s.MinP
	}
	if s.RepetitionPenalty != nil {
		sp.RepetitionPenalty = *s.RepetitionPenalty
	}
	for k, v := range s.LogitBias {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || (vocab > 0 && int(id) >= vocab) {
			return sp, InvalidParam("logit_bias", "logit_bias key %q is not a token id of this model (0 to %d)", k, vocab-1)
		}
		if !(v >= -100 && v <= 100) {
			return sp, InvalidParam("logit_bias", "logit_bias values must be between -100 and 100, got %v for token %s", v, k)
		}
		if sp.LogitBias == nil {
			sp.LogitBias = make(map[int32]float32, len(s.LogitBias))
		}
		sp.LogitBias[int32(id)] = float32(v)
	}
	return sp, nil
}

// fit returns max_tokens: the requested count if the prompt plus it fit
// limit, else a context_length_exceeded error; with none requested, def
// (capped at the room left), or the whole room left when def is 0.
func fit(limit, prompt int, requested *int, def int, param string) (int, error) {
	room := limit - prompt
	if requested != nil {
		if *requested > room { // not prompt+requested: it may overflow
			return 0, &Error{Status: 400, Type: TypeInvalidRequest, Param: param, Code: CodeContextLength,
				Message: ContextLengthMessage(limit, prompt, *requested)}
		}
		return *requested, nil
	}
	if room < 1 {
		return 0, &Error{Status: 400, Type: TypeInvalidRequest, Param: param, Code: CodeContextLength,
			Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your %s resulted in %d tokens, "+
				"which leaves no room for the completion. Please reduce the length of the %s.", limit, param, prompt, param)}
	}
	if def > 0 {
		return min(def, room), nil
	}
	return room, nil
}

// PromptSeed derives a seed from the prompt, so that a request without a
// seed still gets output that depends only on its prompt.
func PromptSeed(prompt []int32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}
