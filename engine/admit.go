package engine

import "github.com/llmd/llmd/engine/kvcache"

// admit moves seq from waiting to running if its projected memory fits:
// the blocks for its remaining prompt (after prefix-cache hits) plus its
// expected output, above the watermark. Prefix-cache hits take references.
func (s *Scheduler) admit(seq *sequence) bool {
	bs := s.pool.BlockSize()
	if len(seq.hashes) < len(seq.tokens)/bs {
		seq.hashes = kvcache.HashChain(seq.tokens, bs)
	}
	// Never take the whole sequence from the cache: the last token must be
	// computed to produce the next one.
	maxHit := (s.target(seq) - 1) / bs
	if s.cfg.DisablePrefixCache {
		maxHit = 0
	}
	hits, cachedHits := 0, 0
	for hits < maxHit && hits < len(seq.hashes) {
		found, cached := s.pool.Probe(seq.hashes[hits])
		if !found {
			break
		}
		if cached {
			cachedHits++
		}
		hits++
	}
	r := seq.r
	projected := s.projectedTokens(seq)
	needBlocks := s.pool.BlocksFor(projected) - hits
	free := s.pool.NumFree() - cachedHits - s.projectedReserve()
	if free < needBlocks+s.cfg.WatermarkBlocks {
		// When nothing runs, nothing else will free memory: admit if the
		// prompt itself fits and let preemption handle the output.
		idle := len(s.running) == 0 && s.pool.NumFree()-cachedHits >= s.pool.BlocksFor(len(seq.tokens)+1)-hits
		if !idle {
			return false
		}
	}
	for i := range hits {
		b, _ := s.pool.Lookup(seq.hashes[i])
		seq.blocks = append(seq.blocks, b)
	}
	seq.computed = hits * bs
	seq.hashed = hits
	seq.projected = projected
	if !r.admitted {
		r.admitted = true
		r.cached = seq.computed
		s.stats.CachedTokens += uint64(seq.computed)
		s.stats.PrefixQueryTokens += uint64(len(seq.tokens))
		s.stats.PrefixHitTokens += uint64(seq.computed)
		if s.dir != nil && !s.cfg.DisablePrefixCache {
			s.dir.notePrompt(seq.hashes[:min(len(seq.hashes), len(r.req.Prompt)/bs)])
		}
	}
	s.waiting.pop(seq)
	s.startRunning(seq)
	return true
}

// projectedTokens is the tokens seq is expected to hold when it finishes:
// its tokens so far plus its expected remaining output.
func (s *Scheduler) projectedTokens(seq *sequence) int {
	remaining := max(1, seq.r.req.MaxTokens-seq.generated)
	expected := remaining
	if s.cfg.DefaultExpectedOutput > 0 {
		expected = s.est.expected(seq.r.req.Tenant, remaining)
	}
	return min(len(seq.tokens)+expected, s.MaxSeqTokens())
}

// admissionCost is the tokens a sequence is charged by fair queuing when it
// is admitted: what it is expected to process.
func (s *Scheduler) admissionCost(seq *sequence) int {
	return max(1, s.projectedTokens(seq)-seq.computed)
}

func (s *Scheduler) startRunning(seq *sequence) {
	seq.state = stateRunning
	seq.admitted = s.nextAdmit
	s.nextAdmit++
	s.running = append(s.running, seq)
}

// projectedReserve is the number of blocks running sequences are still
// expected to need (the rest of their prompts and their expected output),
// so admission does not promise the same memory twice.
func (s *Scheduler) projectedReserve() int {
	n := 0
	for _, seq := range s.running {
		n += max(0, s.pool.BlocksFor(seq.projected)-len(seq.blocks))
	}
	return n
}
