package engine

import (
	"time"
)

// The scheduler's side of speculative decoding (spec.go): which sequences
// draft, and committing what the target accepted.

// DraftRequests returns a request for each running sequence that may
// speculate in the next step, with its adaptive draft length as Max: a
// decoding choice with no constraint, no min_tokens still to reach, no
// logprobs, room for at least two more tokens within max_tokens and the
// context, and not paused for low acceptance. It returns none while more
// than SpecMaxBatch sequences run, and while a sequence waits or prefills:
// a step that prefills is bound by compute, so the drafts it would verify
// cost their full price, and a draft model would first have to catch up
// with the new prompt (at 8 streams starting together that cost more than
// speculation saved while the others were still prefilling). The slice is
// reused by the next call; pass it, filled, to SetDrafts before the next
// Step.
func (s *Scheduler) DraftRequests() []DraftRequest {
	s.drafting = s.drafting[:0]
	s.draftReq = s.draftReq[:0]
	if s.cfg.SpecMaxTokens <= 0 || len(s.running) > s.cfg.SpecMaxBatch || s.waiting.Len() > 0 {
		return nil
	}
	for _, seq := range s.running {
		if s.need(seq) > 1 {
			return nil
		}
	}
	limit := s.MaxSeqTokens()
	for _, seq := range s.running {
		req := &seq.r.req
		if seq.index < 0 || s.need(seq) != 1 || seq.constraint != nil || req.Logprobs ||
			seq.generated < req.MinTokens {
			continue
		}
		if seq.spec.pause > 0 {
			seq.spec.pause--
			continue
		}
		// A step emits at most k+1 tokens, and writes K/V up to position
		// len(tokens)+k-1.
		k := min(specLen(seq.spec.rate(), s.cfg.SpecMaxTokens), req.MaxTokens-seq.generated-1,
			limit-len(seq.tokens)-1)
		if k < 1 {
			continue
		}
		var buf []int32
		if i := len(s.drafting); i < cap(s.draftReq) {
			buf = s.draftReq[:i+1][i].Tokens[:0]
		}
		s.drafting = append(s.drafting, seq)
		s.draftReq = append(s.draftReq, DraftRequest{
			SeqID: seq.id, History: seq.tokens, Seed: seq.r.req.Seed + uint64(seq.index),
			Generated: seq.generated, Max: k, Tokens: buf,
		})
	}
	return s.draftReq
}

// SetDrafts records the drafts of the requests DraftRequests returned
// (filled by a Drafter) for the next Step. A proposal is cut at Max tokens
// and at its first token outside the vocabulary.
func (s *Scheduler) SetDrafts(reqs []DraftRequest) {
	for i, r := range reqs {
		if i >= len(s.drafting) {
			break
		}
		seq := s.drafting[i]
		toks := r.Tokens[:min(len(r.Tokens), r.Max)]
		for j, t := range toks {
			if t < 0 || s.cfg.VocabSize > 0 && int(t) >= s.cfg.VocabSize {
				toks = toks[:j]
				break
			}
		}
		seq.draft = append(seq.draft[:0], toks...)
	}
}

// applyDraft commits a verification step of seq (in.Draft > 0): the
// accepted drafts then the target's token, each through appendToken, so
// that stop tokens, max_tokens and the context limit end the sequence
// where plain decoding would. Only positions holding committed tokens
// count as computed; blocks past them (allocated for rejected drafts) go
// back to the pool, and the prefix index sees committed tokens only.
func (s *Scheduler) applyDraft(seq *sequence, in *SeqInput, out *Output, i int, now time.Time) {
	acc := 0
	tok := int32(-1)
	if out != nil && i < len(out.Tokens) {
		tok = out.Tokens[i]
		if i < len(out.Accepted) {
			acc = min(max(out.Accepted[i], 0), in.Draft)
		}
	}
	s.stats.SpecDrafts++
	s.stats.SpecDraftTokens += uint64(in.Draft)
	s.stats.SpecAcceptedTokens += uint64(acc)
	seq.spec.observe(in.Draft, acc)
	drafts := in.Tokens[len(in.Tokens)-in.Draft:]
	seq.computed = in.Pos + len(in.Tokens) - in.Draft
	for _, d := range drafts[:acc] {
		s.appendToken(seq, d, nil, now)
		if seq.state != stateRunning {
			return
		}
		seq.computed++
	}
	s.appendToken(seq, tok, nil, now)
	if seq.state != stateRunning {
		return
	}
	s.commitBlocks(seq, s.pool.BlockSize())
	for n := s.pool.BlocksFor(seq.computed); len(seq.blocks) > n; {
		last := len(seq.blocks) - 1
		s.pool.Release(seq.blocks[last])
		seq.blocks = seq.blocks[:last]
	}
}

// forgetDraft tells the drafter that seq's state is stale.
func (s *Scheduler) forgetDraft(seq *sequence) {
	seq.draft = seq.draft[:0]
	if s.cfg.ForgetDraft != nil && seq.index >= 0 {
		s.cfg.ForgetDraft(seq.id)
	}
}
