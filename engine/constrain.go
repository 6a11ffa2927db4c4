package engine

import "slices"

// The scheduler's side of decoding constraints and of the controls that
// decide which tokens end a choice (min_tokens, ignore_eos, stop token
// ids): the mask a choice samples under each step, and whether a token
// stops it. The Constraint interface is in executor.go.

// isStop reports whether tok ends r's choice: an end-of-generation token
// (unless r ignores them) or one of r's stop tokens.
func (s *Scheduler) isStop(r *request, tok int32) bool {
	return s.eos[tok] && !r.req.IgnoreEOS || slices.Contains(r.req.StopTokens, tok)
}

// maskFor returns the token mask seq samples under this step, nil if every
// token is allowed: its constraint's, less the end-of-generation and stop
// tokens while it has fewer than MinTokens.
func (s *Scheduler) maskFor(seq *sequence) []uint64 {
	req := &seq.r.req
	early := seq.generated < req.MinTokens
	if seq.constraint == nil && !early {
		return nil
	}
	if seq.mask == nil {
		seq.mask = make([]uint64, MaskWords(s.cfg.VocabSize))
	}
	m := seq.mask
	if seq.constraint != nil {
		seq.constraint.Allowed(m)
	} else {
		for i := range m {
			m[i] = ^uint64(0)
		}
	}
	if early || req.IgnoreEOS && seq.constraint != nil && !seq.constraint.Done() {
		for t := range s.eos {
			clearBit(m, t)
		}
	}
	if early {
		for _, t := range req.StopTokens {
			clearBit(m, t)
		}
	}
	return m
}

func clearBit(m []uint64, t int32) {
	if t >= 0 && int(t>>6) < len(m) {
		m[t>>6] &^= 1 << (t & 63)
	}
}

func maskEmpty(m []uint64) bool {
	for _, w := range m {
		if w != 0 {
			return false
		}
	}
	return true
}

// cloneConstraint returns c for choice 0 and a clone for the others.
func cloneConstraint(c Constraint, choice int) Constraint {
	if c == nil || choice == 0 {
		return c
	}
	return c.Clone()
}
