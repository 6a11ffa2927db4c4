package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// Applying a step's results, and the ends of sequences and requests.

// Apply records a step's results: it advances every planned sequence,
// commits newly full blocks to the prefix index, appends sampled tokens,
// emits events and finishes sequences that hit EOS, max tokens or the
// context limit. now stamps the events.
func (s *Scheduler) Apply(plan *Plan, out *Output, now time.Time) {
	s.stats.Steps++
	bs := s.pool.BlockSize()
	stepStart := now
	if out != nil {
		stepStart = now.Add(-out.Duration)
	}
	for i, seq := range plan.seqs {
		if seq.state != stateRunning {
			continue // preempted later in the same Step
		}
		if seq.r.scheduled.IsZero() {
			seq.r.scheduled = stepStart
		}
		in := &plan.Batch.Seqs[i]
		if in.Draft > 0 {
			s.stats.ComputedTokens += uint64(len(in.Tokens))
			s.applyDraft(seq, in, out, i, now)
			continue
		}
		seq.computed = in.Context
		s.stats.ComputedTokens += uint64(len(in.Tokens))
		s.commitBlocks(seq, bs)
		if seq.index < 0 {
			if seq.computed == s.target(seq) {
				s.fork(seq)
			}
			continue
		}
		if !in.Sample {
			continue
		}
		tok := int32(-1)
		var lp *Logprobs
		if out != nil && i < len(out.Tokens) {
			tok = out.Tokens[i]
			if i < len(out.Logprobs) {
				lp = out.Logprobs[i]
			}
		}
		s.appendToken(seq, tok, lp, now)
	}
}

// Fail ends every sequence in plan with FinishError (an executor error).
func (s *Scheduler) Fail(plan *Plan, err error) {
	s.stats.Steps++
	for _, seq := range plan.seqs {
		if seq.state == stateRunning {
			s.finishRequest(seq.r, FinishError, err)
		}
	}
}

func (s *Scheduler) commitBlocks(seq *sequence, bs int) {
	full := seq.computed / bs
	if full <= seq.hashed || s.cfg.DisablePrefixCache {
		return
	}
	if len(seq.hashes) < full {
		parent := kvcache.Hash{}
		if n := len(seq.hashes); n > 0 {
			parent = seq.hashes[n-1]
		}
		for j := len(seq.hashes); j < full; j++ {
			parent = kvcache.HashBlock(parent, seq.tokens[j*bs:(j+1)*bs])
			seq.hashes = append(seq.hashes, parent)
		}
	}
	for j := seq.hashed; j < full; j++ {
		s.pool.Commit(seq.blocks[j], seq.hashes[j])
	}
	seq.hashed = full
}

// fork turns the shared prefill of an n > 1 request into its n choices, each
// holding a reference to every prefill block. The first choice to write into
// the shared partial block copies it (copy-on-write).
func (s *Scheduler) fork(parent *sequence) {
	r := parent.r
	s.removeRunning(parent)
	r.forked = true
	r.seqs = r.seqs[:0]
	for c := range r.req.N {
		child := s.newSeq(r, parent.tokens)
		child.index = c
		child.constraint = cloneConstraint(r.req.Constraint, c)
		child.computed = parent.computed
		child.hashed = parent.hashed
		child.hashes = slices.Clone(parent.hashes)
		child.blocks = slices.Clone(parent.blocks)
		for _, b := range child.blocks {
			s.pool.Ref(b)
		}
		child.state = stateRunning
		child.admitted = parent.admitted
		child.projected = parent.projected
		r.seqs = append(r.seqs, child)
		s.running = append(s.running, child)
	}
	r.live = r.req.N
	s.releaseBlocks(parent)
	parent.state = stateFinished
}

func (s *Scheduler) appendToken(seq *sequence, tok int32, lp *Logprobs, now time.Time) {
	r := seq.r
	if tok < 0 {
		s.finishSeq(seq, FinishError, fmt.Errorf("engine: executor returned no token for sequence %d", seq.id))
		return
	}
	stop := s.isStop(r, tok)
	if seq.constraint != nil && (!stop || s.eos[tok]) {
		if err := seq.constraint.Accept(tok); err != nil {
			if seq.mask != nil && maskEmpty(seq.mask) {
				err = errors.New("engine: the grammar allows no token of this vocabulary here")
			} else {
				err = fmt.Errorf("engine: token %d breaks the grammar: %w", tok, err)
			}
			s.finishSeq(seq, FinishError, err)
			return
		}
	}
	if stop {
		s.finishSeq(seq, FinishStop, nil)
		return
	}
	seq.tokens = append(seq.tokens, tok)
	seq.generated++
	r.output++
	s.stats.GeneratedTokens++
	s.emit(&r.req, Event{Kind: EventToken, Index: seq.index, Token: tok, Time: now, Logprobs: lp})
	switch {
	case seq.constraint != nil && seq.constraint.Done():
		s.finishSeq(seq, FinishStop, nil)
	case seq.generated >= r.req.MaxTokens:
		s.finishSeq(seq, FinishLength, nil)
	case len(seq.tokens) >= s.cfg.ContextLength:
		s.finishSeq(seq, FinishLength, nil)
	}
}

// finishSeq ends one choice; the request ends with its last choice.
func (s *Scheduler) finishSeq(seq *sequence, reason FinishReason, err error) {
	if seq.state == stateFinished {
		return
	}
	s.dropSeq(seq)
	r := seq.r
	if seq.index < 0 {
		// The shared prefill failed: every choice fails with it.
		s.finishRequest(r, reason, err)
		return
	}
	s.emit(&r.req, Event{Kind: EventFinish, Index: seq.index, Finish: reason, Err: err})
	if (reason == FinishStop || reason == FinishLength) && classOf(seq) != PriorityShadow {
		// A shadow copy's answer (another model's, often) must not move
		// the estimate that admits its tenant's real requests.
		s.est.observe(r.req.Tenant, seq.generated)
	}
	r.live--
	if r.live == 0 {
		s.closeRequest(r)
	}
}

func (s *Scheduler) dropSeq(seq *sequence) {
	s.unplan(seq)
	s.forgetDraft(seq)
	switch seq.state {
	case stateRunning:
		s.removeRunning(seq)
	case stateWaiting:
		s.waiting.remove(seq)
	case stateSwapped:
		if i := slices.Index(s.swapped, seq); i >= 0 {
			s.swapped = slices.Delete(s.swapped, i, i+1)
		}
		for _, slot := range seq.host {
			s.swap.Release(slot)
		}
		seq.host = seq.host[:0]
	}
	s.releaseBlocks(seq)
	seq.state = stateFinished
}

// finishRequest ends every live choice of r with reason.
func (s *Scheduler) finishRequest(r *request, reason FinishReason, err error) {
	if r.finished {
		return
	}
	if !r.forked {
		// Before the fork there is one sequence; report each choice.
		s.dropSeq(r.seqs[0])
		for c := range r.req.N {
			s.emit(&r.req, Event{Kind: EventFinish, Index: c, Finish: reason, Err: err})
		}
		s.closeRequest(r)
		return
	}
	for _, seq := range r.seqs {
		if seq.state != stateFinished {
			s.dropSeq(seq)
			s.emit(&r.req, Event{Kind: EventFinish, Index: seq.index, Finish: reason, Err: err})
		}
	}
	s.closeRequest(r)
}

func (s *Scheduler) closeRequest(r *request) {
	r.finished = true
	delete(s.byID, r.req.ID)
	s.stats.Completed++
	var queued time.Duration
	if !r.enqueued.IsZero() && !r.scheduled.IsZero() {
		queued = max(0, r.scheduled.Sub(r.enqueued))
	}
	s.emit(&r.req, Event{Kind: EventFinish, Index: -1, Queued: queued, Usage: Usage{
		InputTokens:  len(r.req.Prompt),
		CachedTokens: r.cached,
		OutputTokens: r.output,
	}})
}

// CheckIdle returns an error unless the scheduler is drained: nothing
// waiting or running and every block free or cached.
func (s *Scheduler) CheckIdle() error {
	if len(s.running) != 0 || s.waiting.Len() != 0 || len(s.swapped) != 0 || len(s.byID) != 0 {
		return fmt.Errorf("engine: not idle: %d running, %d waiting, %d swapped, %d live requests",
			len(s.running), s.waiting.Len(), len(s.swapped), len(s.byID))
	}
	if n := s.swap.NumUsed(); n != 0 {
		return fmt.Errorf("engine: not idle: %d swap slots in use", n)
	}
	return s.pool.CheckIdle()
}
