package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/model/toolcall"
	"github.com/llmd/llmd/pipeline"
)

// kvScale is how many "blocks" the engine's KV-cache use is reported in:
// the Set reports the engine's fraction as BlocksUsed of kvScale.
const kvScale = 1000

// The Set as the model's pipeline.Replica: what the engines report, for
// the snapshot, /metrics and the gossip. Its requests never reach an
// engine.Engine: they go through the Set as a Target.

// Submit implements pipeline.Replica; upstream models run through Start.
func (s *Set) Submit(context.Context, engine.Request) (pipeline.EventStream, error) {
	return nil, errors.New("upstream: jobs of an upstream model run through its target")
}

// Info implements pipeline.Replica.
func (s *Set) Info() engine.ExecutorInfo {
	return engine.ExecutorInfo{Model: s.cfg.Model, NumBlocks: kvScale, BlockSize: prefixBlock, ContextLength: s.ctx,
		Logprobs: true}
}

// MaxSeqTokens implements pipeline.Replica.
func (s *Set) MaxSeqTokens() int { return s.ctx }

// Stats implements pipeline.Replica: llmd's queue (by class), the
// requests in flight on the engines, and their mean KV-cache use.
func (s *Set) Stats() engine.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := engine.Stats{Model: s.cfg.Model, BlockSize: prefixBlock, BlocksTotal: kvScale, Waiting: s.queue.n,
		WaitingByPriority: s.queue.byPriority(), Degrade: s.level}
	var kv float64
	n := 0
	for _, r := range s.replicas {
		st.Running += r.inflight
		if r.load.KVUsage >= 0 {
			kv += r.load.KVUsage
			n++
		}
	}
	if n > 0 {
		st.BlocksUsed = int(kv / float64(n) * kvScale)
	}
	return st
}

// Requests implements pipeline.Replica: the requests waiting in llmd's
// queue (the engines' own are theirs).
func (s *Set) Requests(context.Context) ([]engine.RequestState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []engine.RequestState
	s.queue.each(func(w *waiter) {
		out = append(out, engine.RequestState{ID: w.id, Tenant: w.tenant, State: "queued", Prompt: len(w.prefix) * prefixBlock,
			Submitted: w.since})
	})
	return out, nil
}

// BlockSize implements pipeline.Replica.
func (s *Set) BlockSize() int { return prefixBlock }

// CachedPrefix implements pipeline.Replica: the longest part of the hash
// chain that any replica's approximate index holds.
func (s *Set) CachedPrefix(hashes []kvcache.Hash) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := 0
	for _, r := range s.replicas {
		n := 0
		for _, h := range hashes {
			if _, ok := r.prefixes[h]; !ok {
				break
			}
			n++
		}
		best = max(best, n)
	}
	return best
}

// PrefixChain implements pipeline.PrefixChainer: the chain of the job's
// input, which the replicas' indexes and the gossip hold.
func (s *Set) PrefixChain(job *pipeline.Job) []kvcache.Hash { return pipeline.TextChain(job.Upstream) }

// RecentPrefixes implements pipeline.Replica: the most recently sent
// blocks, newest first.
func (s *Set) RecentPrefixes(limit int) []kvcache.Hash {
	s.mu.Lock()
	defer s.mu.Unlock()
	type entry struct {
		h  kvcache.Hash
		at time.Time
	}
	var all []entry
	for _, r := range s.replicas {
		for h, at := range r.prefixes {
			all = append(all, entry{h, at})
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return b.at.Compare(a.at) })
	out := make([]kvcache.Hash, 0, min(limit, len(all)))
	for i := 0; i < len(all) && i < limit; i++ {
		out = append(out, all[i].h)
	}
	return out
}

// The Set as the model's pipeline.TextModel: it counts prompts (for the
// quota and the prefix index) and renders nothing; the engine applies its
// own chat template, tools and structured output.

// Tokenizer counts prompts with a model's tokenizer and chat template on
// this node (the part of pipeline.TextModel that does).
type Tokenizer interface {
	ChatPrompt(in pipeline.ChatInput) ([]int32, error)
	Prompt(text string, addSpecial bool) []int32
}

// setCounting chooses how prompts are counted: the configured tokenizer;
// else the engine's /tokenize; else a tokenizer read from root, where the
// engine says it loaded the model from, when that is on this node; else
// an estimate.
func (s *Set) setCounting(root string) {
	switch {
	case s.cfg.Tokenizer != nil:
		s.tok, s.counting = s.cfg.Tokenizer, "tokenizer "+s.cfg.TokenizerFrom
	case s.tokenize:
		s.counting = "engine /tokenize"
	case root != "" && s.cfg.LoadTokenizer != nil:
		tok, err := s.cfg.LoadTokenizer(root)
		if err == nil {
			s.tok, s.counting = tok, "tokenizer "+root
			return
		}
		s.log.Warn("upstream: no tokenizer from the engine's model path; prompts are estimated until the engine reports usage",
			"path", root, "err", err)
		s.counting = "estimated"
	default:
		s.counting = "estimated"
	}
}

// Counting says how prompts are counted for the quota: "tokenizer PATH",
// "engine /tokenize" or "estimated".
func (s *Set) Counting() string { return s.counting }

// ChatPrompt implements pipeline.TextModel: the token ids of the rendered
// conversation from the tokenizer on this node or the engine's /tokenize,
// else an estimate.
func (s *Set) ChatPrompt(in pipeline.ChatInput) ([]int32, error) {
	if s.tok != nil {
		if ids, err := s.tok.ChatPrompt(in); err == nil {
			return ids, nil
		}
		// A conversation the template refuses is the engine's to judge.
	}
	if s.tokenize {
		if ids, err := s.tokenizeCall(map[string]any{"model": s.name, "messages": in.Messages,
			"add_generation_prompt": in.AddGenerationPrompt}); err == nil {
			return ids, nil
		}
	}
	var n int
	for _, m := range in.Messages {
		n += len(m.Content) + 8 // the template's markers, roughly
	}
	return estimate(n), nil
}

// Prompt implements pipeline.TextModel.
func (s *Set) Prompt(text string, addSpecial bool) []int32 {
	if s.tok != nil {
		return s.tok.Prompt(text, addSpecial)
	}
	if s.tokenize {
		if ids, err := s.tokenizeCall(map[string]any{"model": s.name, "prompt": text, "add_special_tokens": addSpecial}); err == nil {
			return ids
		}
	}
	return estimate(len(text))
}

// Estimate implements pipeline.Estimator: text's tokens estimated without
// a round trip to the engine; none with a tokenizer on this node, which
// counts exactly at little cost.
func (s *Set) Estimate(text string) ([]int32, bool) {
	if s.tok != nil {
		return nil, false
	}
	return estimate(len(text) + 16), true
}

// estimate stands for the tokens of n bytes of text: one per four bytes
// (the usual rule of thumb), ids unknown.
func estimate(n int) []int32 { return make([]int32, max((n+3)/4, 1)) }

// tokenizeTimeout bounds a /tokenize call.
const tokenizeTimeout = 5 * time.Second

// tokenizeCall asks the first healthy replica's /tokenize (vLLM's shape,
// which llmd and SGLang share).
func (s *Set) tokenizeCall(body map[string]any) ([]int32, error) {
	s.mu.Lock()
	var url string
	for _, r := range s.replicas {
		if r.healthy {
			url = r.url
			break
		}
	}
	s.mu.Unlock()
	if url == "" {
		return nil, errNoReplica
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), tokenizeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/tokenize", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("upstream: %s/tokenize answered %s", url, resp.Status)
	}
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// Vocabulary implements pipeline.TextModel: none (the engine constrains).
func (s *Set) Vocabulary() *grammar.Vocabulary { return nil }

// ToolFormat implements pipeline.TextModel: the engine renders tools.
func (s *Set) ToolFormat() (toolcall.Format, bool) { return toolcall.Format(""), true }

// Decode, DecodeToken and TokenText implement pipeline.TextModel; the
// engine's text is relayed as it comes, never decoded here.
func (s *Set) Decode([]int32) string    { return "" }
func (s *Set) DecodeToken(int32) string { return "" }
func (s *Set) TokenText(int32) string   { return "" }
func (s *Set) VocabSize() int           { return 0 }

var _ pipeline.TextModel = (*Set)(nil)
var _ pipeline.Replica = (*Set)(nil)
var _ pipeline.Target = (*Set)(nil)
