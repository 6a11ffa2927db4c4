package engine

import "slices"

// allocate returns a free block for seq, preempting running sequences of
// no higher priority (lowest class first, most recently admitted first) when
// none is free: a shadow sequence only ever preempts shadow sequences, and
// is the first victim of every other class. When seq itself is the victim
// it is preempted; when nothing can be preempted and seq runs alone it ends
// with FinishLength. It reports false in both of those cases.
func (s *Scheduler) allocate(seq *sequence) (int32, bool) {
	for {
		b, err := s.pool.Allocate()
		if err == nil {
			return b, true
		}
		victim := s.victim(seq)
		if victim == nil {
			s.finishSeq(seq, FinishLength, nil)
			return -1, false
		}
		s.preempt(victim)
		if victim == seq {
			return -1, false
		}
	}
}

// victim picks the running sequence to preempt so that seq can grow: the
// lowest priority class not above seq's, most recently admitted first,
// never one swapped in during this step. It returns nil when seq is the
// only running sequence.
func (s *Scheduler) victim(seq *sequence) *sequence {
	best := seq
	for _, c := range s.running {
		if c.r.req.Priority > seq.r.req.Priority || (c.swappedIn == s.stepNo && c != seq) {
			continue
		}
		if c.r.req.Priority < best.r.req.Priority ||
			(c.r.req.Priority == best.r.req.Priority && c.admitted > best.admitted) {
			best = c
		}
	}
	if best == seq && len(s.running) == 1 {
		return nil
	}
	return best
}

// preemptShadow preempts the most recently admitted running shadow
// sequence, to make room for another class's admission; it reports false
// when no shadow sequence runs.
func (s *Scheduler) preemptShadow() bool {
	var victim *sequence
	for _, c := range s.running {
		if classOf(c) == PriorityShadow && (victim == nil || c.admitted > victim.admitted) {
			victim = c
		}
	}
	if victim == nil {
		return false
	}
	s.preempt(victim)
	return true
}

// preempt takes victim off the device: swapped to host memory when a round
// trip over the host link costs less than recomputing its tokens and the
// swap space has room, else its blocks are dropped (full ones stay cached)
// and it is queued to be recomputed from its tokens so far. A shadow
// sequence is always recomputed: a swapped-out sequence holds up every
// admission until it is back, which shadow work must never do.
func (s *Scheduler) preempt(victim *sequence) {
	s.unplan(victim)
	s.forgetDraft(victim)
	s.removeRunning(victim)
	s.stats.Preemptions++
	if s.shouldSwap(victim) {
		s.swapOut(victim)
		return
	}
	s.stats.PreemptionsRecompute++
	s.releaseBlocks(victim)
	victim.computed = 0
	s.enqueue(victim)
}

func (s *Scheduler) shouldSwap(seq *sequence) bool {
	if s.plan == nil || s.cfg.SwapCost == nil || s.cfg.RecomputeCost == nil || seq.index < 0 || seq.computed == 0 ||
		classOf(seq) == PriorityShadow {
		return false
	}
	n := s.pool.BlocksFor(seq.computed)
	if n > s.swap.NumFree() {
		return false
	}
	return 2*s.cfg.SwapCost(n) < s.cfg.RecomputeCost(seq.computed)
}

// swapOut copies the blocks holding seq's computed tokens to host slots
// (the executor does it before the step's forward pass) and frees them.
func (s *Scheduler) swapOut(seq *sequence) {
	n := s.pool.BlocksFor(seq.computed)
	for j := range n {
		slot, _ := s.swap.Allocate() // shouldSwap checked the room
		seq.host = append(seq.host, slot)
		s.plan.Batch.SwapOut = append(s.plan.Batch.SwapOut, BlockSwap{Device: seq.blocks[j], Host: slot})
	}
	s.stats.PreemptionsSwap++
	s.stats.SwapOutBlocks += uint64(n)
	s.releaseBlocks(seq)
	seq.state = stateSwapped
	s.swapped = insertOrdered(s.swapped, seq)
}

// swapIn brings a swapped-out sequence back if its blocks, one more for
// growth and the watermark fit; it reports whether it did.
func (s *Scheduler) swapIn(seq *sequence) bool {
	need := len(seq.host) + 1
	free := s.pool.NumFree() - s.projectedReserve()
	if free < need+s.cfg.WatermarkBlocks && (len(s.running) != 0 || s.pool.NumFree() < need) {
		return false
	}
	for range seq.host {
		b, err := s.pool.Allocate()
		if err != nil {
			// Cannot happen: the check above left room. Undo and wait.
			s.releaseBlocks(seq)
			return false
		}
		seq.blocks = append(seq.blocks, b)
	}
	for i, slot := range seq.host {
		s.plan.Batch.SwapIn = append(s.plan.Batch.SwapIn, BlockSwap{Device: seq.blocks[i], Host: slot})
	}
	// The slots are freed once the step is planned: the executor runs
	// swap-outs before swap-ins, so a swap-out planned later in this step
	// must not be given a slot that is still to be read.
	s.slotsRead = append(s.slotsRead, seq.host...)
	s.stats.SwapInBlocks += uint64(len(seq.host))
	seq.host = seq.host[:0]
	seq.hashed = 0 // the copies are not in the prefix index; Apply re-commits
	seq.projected = max(seq.projected, len(seq.tokens)+1)
	s.swapped = slices.Delete(s.swapped, 0, 1)
	s.startRunning(seq)
	seq.swappedIn = s.stepNo
	return true
}

// insertOrdered inserts seq into q, ordered by priority (high first), then
// arrival, then choice index.
func insertOrdered(q []*sequence, seq *sequence) []*sequence {
	p, a := seq.r.req.Priority, seq.r.arrival
	i, _ := slices.BinarySearchFunc(q, seq, func(w, _ *sequence) int {
		wp, wa := w.r.req.Priority, w.r.arrival
		if wp != p {
			if wp > p {
				return -1
			}
			return 1
		}
		if wa < a || (wa == a && w.index < seq.index) {
			return -1
		}
		return 1
	})
	return slices.Insert(q, i, seq)
}
