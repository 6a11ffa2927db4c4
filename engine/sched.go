package engine

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// SchedulerConfig sizes a Scheduler.
type SchedulerConfig struct {
	// MaxBatchTokens is the most tokens processed in one step.
	MaxBatchTokens int
	// MaxRunning caps the running set.
	MaxRunning int
	// ContextLength is the most tokens one sequence may hold.
	ContextLength int
	// EOS lists the token ids that end a generation.
	EOS []int32
	// WatermarkBlocks are kept free at admission (the headroom) so running
	// sequences can grow a little before anything must be preempted.
	WatermarkBlocks int
	// DisablePrefixCache turns off prefix reuse (for comparison runs).
	DisablePrefixCache bool
	// DefaultExpectedOutput is the output length projected at admission for
	// a tenant with too little history. Zero means max_tokens.
	DefaultExpectedOutput int
	// SwapBlocks is the host swap space in blocks; zero disables swapping.
	SwapBlocks int
	// SwapCost estimates copying n blocks one way over the host link, and
	// RecomputeCost estimates prefilling n tokens again. A victim is swapped
	// when a round trip costs less than recomputing it. Both nil: always
	// recompute.
	SwapCost      func(blocks int) time.Duration
	RecomputeCost func(tokens int) time.Duration
	// Logprobs reports that the executor computes logprobs.
	Logprobs bool
	// VocabSize is the number of token ids, the width of token masks; 0
	// refuses requests that need a mask (a Constraint or MinTokens).
	VocabSize int
	// TierWeights are the weighted-fair-queuing weights of the priority
	// classes, indexed by Priority; zero entries take the defaults (shadow
	// 0.5, batch 1, free 2, paid 4, enterprise 8). The shadow class never
	// competes with the others (see Step), so its weight only orders its
	// own admissions.
	TierWeights [NumPriorities]float64
	// SpecMaxTokens is the most draft tokens a sequence verifies per step;
	// 0 turns speculation off. SpecMaxBatch is the most running sequences
	// at which DraftRequests asks for drafts.
	SpecMaxTokens int
	SpecMaxBatch  int
	// ForgetDraft, when set, is called with a sequence's id when it ends or
	// is preempted, so that the drafter can free what it keeps for it.
	ForgetDraft func(seqID uint64)
}

// Emit receives the events the scheduler produces, synchronously, in order.
type Emit func(r *Request, ev Event)

// seqState is where a sequence is in its life.
type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateSwapped
	stateFinished
)

// request is the scheduler's record of one submitted Request.
type request struct {
	req      Request
	seqs     []*sequence // one per choice once forked; one before
	forked   bool
	live     int // choices not yet finished
	cached   int // prompt tokens served from the prefix cache at first admission
	admitted bool
	output   int // tokens generated over all choices
	arrival  uint64
	// enqueued is when the request was submitted (from the engine's clock;
	// zero when the caller gave none): the queue-wait signal of the
	// degradation ladder.
	enqueued time.Time
	// scheduled is when the step that first ran the request began (Apply's
	// now less the step's duration).
	scheduled time.Time
	finished  bool
}

// sequence is one choice's token stream and its blocks.
type sequence struct {
	id     uint64
	r      *request
	index  int     // choice index; -1 for the shared prefill of n > 1
	tokens []int32 // prompt then generated tokens
	// computed is how many leading tokens have their KV in the cache.
	computed int
	blocks   []int32
	// hashed is how many leading blocks are committed to the prefix index.
	hashed    int
	hashes    []kvcache.Hash // chained hashes of the full blocks of tokens
	generated int
	state     seqState
	admitted  uint64 // admission order, for choosing a preemption victim
	planned   uint64 // the step number whose plan holds this sequence
	swappedIn uint64 // the step number that last swapped it in
	// projected is the tokens admission expects it to hold at the end.
	projected int
	// backlog is what the sequence adds to QueuedPromptTokens while it
	// waits: its tokens less those cached when it was queued.
	backlog int
	host    []int32 // swap slots holding its blocks while swapped out
	// constraint is the choice's grammar state (nil: none). It moves only
	// when a token is appended, so preemption, by swap or by recompute,
	// leaves it where the kept tokens put it.
	constraint Constraint
	// mask is the buffer of the choice's token mask, when it needs one.
	mask []uint64
	// draft holds the tokens drafted for the next step (speculative
	// decoding); spec is the sequence's acceptance record.
	draft []int32
	spec  specState
}

// Plan is one step's decision: the batch plus the sequences behind it.
type Plan struct {
	Batch Batch
	seqs  []*sequence
}

// Empty reports whether the plan has no work.
func (p *Plan) Empty() bool { return len(p.Batch.Seqs) == 0 && len(p.Batch.Copies) == 0 }

// Scheduler is the engine's synchronous core: it decides admissions,
// preemptions and each step's batch, and applies each step's results. It
// starts no goroutines, reads no clock and does no I/O.
//
// Locking: none; one goroutine owns a Scheduler.
type Scheduler struct {
	cfg  SchedulerConfig
	pool *kvcache.Pool
	emit Emit
	// dir, when set, learns the prompts admitted (the engine's prefix
	// directory); nil for a bare scheduler.
	dir *prefixDir

	waiting *fairQueue
	swapped []*sequence // swapped out, by priority then arrival
	running []*sequence // in admission order
	swap    *kvcache.SwapSpace
	est     *outputEstimator
	byID    map[string]*request
	eos     map[int32]bool

	nextSeq     uint64
	nextArrival uint64
	nextAdmit   uint64

	stats SchedStats

	// planBuf is the plan Step returns, reused every step.
	planBuf Plan
	stepNo  uint64
	// Valid during Step only.
	plan     *Plan
	budget   int
	snapshot []*sequence
	// slotsRead are swap slots being swapped in this step.
	slotsRead []int32
	// tokScratch backs the batch's token slices; reused every step.
	tokScratch []int32
	// drafting are the sequences of the last DraftRequests, in order.
	drafting []*sequence
	draftReq []DraftRequest
}

// SchedStats are the scheduler's counters since it started.
type SchedStats struct {
	Steps uint64
	// StepTokens is the number of tokens in the last step's batch.
	StepTokens int
	// Completed counts requests that have finished (any reason).
	Completed uint64
	// GeneratedTokens counts output tokens.
	GeneratedTokens uint64
	// ComputedTokens counts tokens run through the executor (prefill
	// chunks, recomputation and decode).
	ComputedTokens uint64
	// CachedTokens counts prompt tokens served from the prefix cache.
	CachedTokens uint64
	// PrefixQueryTokens counts prompt tokens looked up in the prefix cache
	// at first admission; PrefixHitTokens those found.
	PrefixQueryTokens uint64
	PrefixHitTokens   uint64
	// Preemptions counts every preemption, by swap or by recompute.
	Preemptions          uint64
	PreemptionsSwap      uint64
	PreemptionsRecompute uint64
	// SwapOutBlocks and SwapInBlocks count blocks moved over the host link.
	SwapOutBlocks uint64
	SwapInBlocks  uint64
	// SpecDrafts counts verifications of drafts (one per sequence and
	// step with a draft), SpecDraftTokens the draft tokens verified and
	// SpecAcceptedTokens those accepted (vLLM's spec_decode counters).
	SpecDrafts         uint64
	SpecDraftTokens    uint64
	SpecAcceptedTokens uint64
}

// NewScheduler returns a scheduler over pool that reports events to emit.
func NewScheduler(cfg SchedulerConfig, pool *kvcache.Pool, emit Emit) (*Scheduler, error) {
	if cfg.MaxBatchTokens < 1 {
		return nil, fmt.Errorf("engine: max batch tokens must be positive, got %d", cfg.MaxBatchTokens)
	}
	if cfg.MaxRunning < 1 {
		return nil, fmt.Errorf("engine: max running must be positive, got %d", cfg.MaxRunning)
	}
	if cfg.ContextLength < 2 {
		return nil, fmt.Errorf("engine: context length must be at least 2, got %d", cfg.ContextLength)
	}
	if emit == nil {
		emit = func(*Request, Event) {}
	}
	swap, err := kvcache.NewSwapSpace(cfg.SwapBlocks)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg: cfg, pool: pool, emit: emit, swap: swap,
		est:  newOutputEstimator(cfg.DefaultExpectedOutput),
		byID: make(map[string]*request), eos: make(map[int32]bool),
	}
	s.waiting = newFairQueue(cfg.TierWeights, s.admissionCost)
	s.emit = s.waiting.resv.trackDelivery(s.emit) // reserved tenants' delivered rate
	for _, t := range cfg.EOS {
		s.eos[t] = true
	}
	return s, nil
}

// Pool returns the scheduler's block pool.
func (s *Scheduler) Pool() *kvcache.Pool { return s.pool }

// Stats returns the counters.
func (s *Scheduler) Stats() SchedStats { return s.stats }

// NumRunning is the number of running sequences.
func (s *Scheduler) NumRunning() int { return len(s.running) }

// NumWaiting is the number of waiting sequences.
func (s *Scheduler) NumWaiting() int { return s.waiting.Len() }

// QueuedPromptTokens is the prompt tokens still to prefill: every waiting
// sequence's tokens (a recomputed sequence's output included) less those
// the prefix cache held when it was queued, plus what the running
// sequences still have to prefill. O(running).
func (s *Scheduler) QueuedPromptTokens() int {
	n := s.waiting.Tokens()
	for _, seq := range s.running {
		if need := s.need(seq); need > 1 {
			n += need
		}
	}
	return n
}

// NumSwapped is the number of sequences swapped out to host memory.
func (s *Scheduler) NumSwapped() int { return len(s.swapped) }

// Swap returns the host swap space.
func (s *Scheduler) Swap() *kvcache.SwapSpace { return s.swap }

// WaitingByPriority counts waiting and swapped sequences per priority class.
func (s *Scheduler) WaitingByPriority() [NumPriorities]int {
	var n [NumPriorities]int
	for p := range n {
		n[p] = s.waiting.ClassLen(Priority(p))
	}
	for _, seq := range s.swapped {
		n[classOf(seq)]++
	}
	return n
}

// OldestWaiting returns when the longest-waiting queued request of
// priority min or higher was submitted (AddAt), or the zero time when none
// waits. A preempted sequence counts from its request's submission.
func (s *Scheduler) OldestWaiting(min Priority) time.Time {
	return s.waiting.oldest(min)
}

// SetClassPaused stops (or resumes) admitting waiting sequences of class
// p; they stay queued, and running ones go on. The degradation ladder
// pauses the shadow and batch classes.
func (s *Scheduler) SetClassPaused(p Priority, paused bool) {
	s.waiting.paused[p] = paused
}

// RequestState is where one live request is, for inspection (llmctl top).
type RequestState struct {
	ID     string
	Tenant string
	// State is "queued" (waiting, or preempted by recompute and waiting
	// again), "prefill" (running, prompt not all computed), "decode" or
	// "swapped".
	State     string
	Prompt    int
	Cached    int
	Generated int
	// Submitted is when it was submitted (zero if unknown).
	Submitted time.Time
}

// RequestStates returns up to limit live requests, the most recently
// submitted first.
func (s *Scheduler) RequestStates(limit int) []RequestState {
	out := make([]RequestState, 0, min(limit, len(s.byID)))
	reqs := make([]*request, 0, len(s.byID))
	for _, r := range s.byID {
		reqs = append(reqs, r)
	}
	slices.SortFunc(reqs, func(a, b *request) int { return cmp.Compare(b.arrival, a.arrival) })
	for _, r := range reqs[:min(limit, len(reqs))] {
		out = append(out, RequestState{ID: r.req.ID, Tenant: r.req.Tenant, State: requestState(r),
			Prompt: len(r.req.Prompt), Cached: r.cached, Generated: r.output, Submitted: r.enqueued})
	}
	return out
}

// requestState summarises a request's sequences: the most advanced one
// wins (decode over prefill over swapped over queued).
func requestState(r *request) string {
	state := "queued"
	for _, seq := range r.seqs {
		switch seq.state {
		case stateRunning:
			if seq.computed >= len(r.req.Prompt) || seq.generated > 0 {
				return "decode"
			}
			state = "prefill"
		case stateSwapped:
			if state == "queued" {
				state = "swapped"
			}
		}
	}
	return state
}

// Live reports whether a request with this id is queued or running.
func (s *Scheduler) Live(id string) bool { _, ok := s.byID[id]; return ok }

// MaxSeqTokens is the most tokens one sequence can ever hold: the lesser of
// the context length and the whole pool.
func (s *Scheduler) MaxSeqTokens() int {
	return min(s.cfg.ContextLength, s.pool.NumBlocks()*s.pool.BlockSize())
}

// Add queues a request. It fails with *ContextLengthError when the request
// could never fit and *InvalidRequestError when it is malformed.
func (s *Scheduler) Add(req Request) error { return s.AddAt(req, time.Time{}) }

// AddAt is Add for a request submitted at now (the caller's clock), which
// OldestWaiting reports.
func (s *Scheduler) AddAt(req Request, now time.Time) error {
	if err := s.check(req); err != nil {
		return err
	}
	if _, ok := s.byID[req.ID]; ok {
		return ErrDuplicateID
	}
	r := &request{req: req, arrival: s.nextArrival, enqueued: now}
	s.nextArrival++
	s.byID[req.ID] = r
	if req.N > 1 && len(req.Prompt) == 1 {
		// Nothing to share: queue the choices directly.
		r.forked = true
		for c := range req.N {
			seq := s.newSeq(r, req.Prompt)
			seq.index = c
			seq.constraint = cloneConstraint(req.Constraint, c)
			r.seqs = append(r.seqs, seq)
			s.enqueue(seq)
		}
		r.live = req.N
		return nil
	}
	seq := s.newSeq(r, req.Prompt)
	if req.N > 1 {
		seq.index = -1 // shared prefill, forked into the choices
	} else {
		seq.constraint = req.Constraint
	}
	r.seqs = []*sequence{seq}
	r.live = 1
	s.enqueue(seq)
	return nil
}

func (s *Scheduler) check(req Request) error {
	switch {
	case req.ID == "":
		return &InvalidRequestError{Reason: "empty request id"}
	case len(req.Prompt) == 0:
		return &InvalidRequestError{Reason: "empty prompt"}
	case req.MaxTokens < 1:
		return &InvalidRequestError{Reason: "max tokens must be at least 1"}
	case req.N < 1:
		return &InvalidRequestError{Reason: "n must be at least 1"}
	case req.TopLogprobs < 0:
		return &InvalidRequestError{Reason: "top logprobs must not be negative"}
	case req.Logprobs && !s.cfg.Logprobs:
		return &InvalidRequestError{Reason: "this model's executor does not compute logprobs"}
	case req.MinTokens < 0:
		return &InvalidRequestError{Reason: "min tokens must not be negative"}
	case req.MinTokens > req.MaxTokens:
		return &InvalidRequestError{Reason: "min tokens must not exceed max tokens"}
	case (req.Constraint != nil || req.MinTokens > 0) && s.cfg.VocabSize <= 0:
		return &InvalidRequestError{Reason: "this model's executor does not take token masks"}
	}
	if limit := s.MaxSeqTokens(); len(req.Prompt)+req.MaxTokens > limit {
		return &ContextLengthError{PromptTokens: len(req.Prompt), MaxTokens: req.MaxTokens, Limit: limit}
	}
	return nil
}

func (s *Scheduler) newSeq(r *request, tokens []int32) *sequence {
	s.nextSeq++
	return &sequence{
		id:     s.nextSeq,
		r:      r,
		tokens: slices.Clone(tokens),
		state:  stateWaiting,
	}
}

// enqueue inserts seq into the waiting queue behind every sequence of its
// priority or higher that arrived before it.
func (s *Scheduler) enqueue(seq *sequence) {
	seq.state = stateWaiting
	seq.backlog = len(seq.tokens) - s.cachedNow(seq)
	s.waiting.push(seq)
}

// cachedNow is how many of seq's leading tokens the prefix cache holds now
// (admission looks again: blocks may be evicted or filled meanwhile). It
// computes seq's block hashes, which admission would.
func (s *Scheduler) cachedNow(seq *sequence) int {
	if s.cfg.DisablePrefixCache {
		return 0
	}
	bs := s.pool.BlockSize()
	if len(seq.hashes) < len(seq.tokens)/bs {
		seq.hashes = kvcache.HashChain(seq.tokens, bs)
	}
	maxHit := (s.target(seq) - 1) / bs
	hits := 0
	for hits < maxHit && hits < len(seq.hashes) {
		if found, _ := s.pool.Probe(seq.hashes[hits]); !found {
			break
		}
		hits++
	}
	return hits * bs
}

// Cancel ends a live request with FinishCancelled and frees its blocks. It
// reports whether the request was live.
func (s *Scheduler) Cancel(id string) bool {
	r, ok := s.byID[id]
	if !ok {
		return false
	}
	s.finishRequest(r, FinishCancelled, nil)
	return true
}

// CancelAll cancels every live request.
func (s *Scheduler) CancelAll() {
	for _, r := range s.liveRequests() {
		s.finishRequest(r, FinishCancelled, nil)
	}
}

func (s *Scheduler) liveRequests() []*request {
	rs := make([]*request, 0, len(s.byID))
	for _, r := range s.byID {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *request) int { return int(a.arrival) - int(b.arrival) })
	return rs
}

// Step decides the next batch: decode tokens for running sequences first,
// then prefill chunks, then admissions, within the token budget and the
// free blocks. It preempts when a running sequence needs a block and none
// is free. The plan is reused: it is valid until the next call to Step.
//
// Shadow sequences get only what is left: they are planned after every
// other class, and only when, once the others are planned, no sequence of
// another class is still waiting in an unpaused class or swapped out; a
// waiting shadow sequence is admitted only when no sequence of another
// class waits at all. A sequence of another class that finds the running
// set full or too little free memory, to be admitted or swapped in,
// preempts running shadow sequences, most recently admitted first, until
// it fits or none is left.
func (s *Scheduler) Step() *Plan {
	plan := &s.planBuf
	plan.Batch.Seqs = plan.Batch.Seqs[:0]
	plan.Batch.Copies = plan.Batch.Copies[:0]
	plan.Batch.SwapIn = plan.Batch.SwapIn[:0]
	plan.Batch.SwapOut = plan.Batch.SwapOut[:0]
	plan.seqs = plan.seqs[:0]
	s.stepNo++
	s.plan = plan
	s.budget = s.cfg.MaxBatchTokens
	s.tokScratch = s.tokScratch[:0]

	// Decode first, then prefill chunks, each in admission order. Iterate
	// over a snapshot: reserving may preempt sequences anywhere in the list.
	s.snapshot = append(s.snapshot[:0], s.running...)
	s.planRunning(false)

	// Bring swapped-out sequences back before admitting new work; while
	// any is still out, admit nothing new. (Shadow sequences are never
	// swapped out: each one here may make room by preempting them.)
	for len(s.swapped) > 0 && s.budget > 0 {
		seq := s.swapped[0]
		if len(s.running) >= s.cfg.MaxRunning || !s.swapIn(seq) {
			if !s.preemptShadow() {
				break
			}
			continue
		}
		s.reserve(seq, min(s.need(seq), s.budget))
	}

	s.admitWaiting(false)
	// Shadow work runs on what is left, and only while nothing else could
	// use it. (A paused class cannot: running shadow sequences go on then,
	// as running batch ones do, and free their memory when done.)
	if len(s.swapped) == 0 && !s.waiting.othersReady() {
		s.planRunning(true)
		s.admitWaiting(true)
	}
	for i, seq := range plan.seqs {
		in := &plan.Batch.Seqs[i]
		in.Blocks = seq.blocks
		if in.Sample {
			in.Mask = s.maskFor(seq)
		}
	}
	s.stats.StepTokens = s.cfg.MaxBatchTokens - s.budget
	for _, slot := range s.slotsRead {
		s.swap.Release(slot)
	}
	s.slotsRead = s.slotsRead[:0]
	s.plan = nil
	clear(s.snapshot)
	// A draft not planned this step (preempted, out of budget) is stale
	// by the next.
	for _, seq := range s.drafting {
		seq.draft = seq.draft[:0]
	}
	clear(s.drafting)
	s.drafting = s.drafting[:0]
	return plan
}

// planRunning reserves this step's tokens for the running sequences of the
// snapshot, decodes first, then prefill chunks, each in admission order:
// the shadow sequences if shadow, else all the others.
func (s *Scheduler) planRunning(shadow bool) {
	for _, decode := range [...]bool{true, false} {
		for _, seq := range s.snapshot {
			if s.budget == 0 {
				return
			}
			need := s.need(seq)
			if seq.state != stateRunning || (classOf(seq) == PriorityShadow) != shadow ||
				need == 0 || (need == 1) != decode || seq.planned == s.stepNo {
				continue
			}
			s.reserve(seq, min(need, s.budget))
		}
	}
}

// admitWaiting admits waiting sequences while the budget, the running cap
// and the free blocks allow: the shadow ones if shadow, else the others
// (stopping at the first shadow sequence the queue offers). A sequence of
// another class that does not fit makes room by preempting running shadow
// sequences.
func (s *Scheduler) admitWaiting(shadow bool) {
	for len(s.swapped) == 0 && s.waiting.Len() > 0 && s.budget > 0 {
		seq := s.waiting.peek()
		if seq == nil || (classOf(seq) == PriorityShadow) != shadow {
			return
		}
		if len(s.running) >= s.cfg.MaxRunning || !s.admit(seq) {
			if shadow || !s.preemptShadow() {
				return
			}
			continue
		}
		if !s.reserve(seq, min(s.need(seq), s.budget)) {
			return
		}
	}
}

// target is the number of tokens seq must hold computed before it samples.
func (s *Scheduler) target(seq *sequence) int {
	if seq.index < 0 {
		return len(seq.tokens) - 1 // shared prefill stops short of the last prompt token
	}
	return len(seq.tokens)
}

// need is the number of tokens seq still has to compute.
func (s *Scheduler) need(seq *sequence) int { return s.target(seq) - seq.computed }

// reserve makes seq ready to process n more tokens this step: it allocates
// the blocks they need (preempting others if it must), copies a shared block
// before writing into it, and adds seq to the plan. It reports false when
// seq could not be scheduled (preempted or finished instead).
func (s *Scheduler) reserve(seq *sequence, n int) bool {
	plan := s.plan
	bs := s.pool.BlockSize()
	// A decode step carries the sequence's draft, as far as the budget
	// goes: its tokens count against the budget and get blocks.
	extra := 0
	if n == 1 && s.need(seq) == 1 && seq.index >= 0 {
		extra = min(len(seq.draft), s.budget-1)
	}
	end := seq.computed + n + extra
	// Copy on write: the block that receives position computed must be ours.
	if seq.computed%bs != 0 {
		j := seq.computed / bs
		if j < len(seq.blocks) && s.pool.RefCount(seq.blocks[j]) > 1 {
			dst, ok := s.allocate(seq)
			if !ok {
				return false
			}
			plan.Batch.Copies = append(plan.Batch.Copies, BlockCopy{Src: seq.blocks[j], Dst: dst})
			s.pool.Release(seq.blocks[j])
			seq.blocks[j] = dst
		}
	}
	for len(seq.blocks) < s.pool.BlocksFor(end) {
		b, ok := s.allocate(seq)
		if !ok {
			return false
		}
		seq.blocks = append(seq.blocks, b)
	}
	start := len(s.tokScratch)
	s.tokScratch = append(s.tokScratch, seq.tokens[seq.computed:end-extra]...)
	s.tokScratch = append(s.tokScratch, seq.draft[:extra]...)
	seq.draft = seq.draft[:0]
	plan.Batch.Seqs = append(plan.Batch.Seqs, SeqInput{
		SeqID:       seq.id,
		Tokens:      s.tokScratch[start:len(s.tokScratch):len(s.tokScratch)],
		Pos:         seq.computed,
		Context:     end,
		Draft:       extra,
		Sample:      end-extra == len(seq.tokens) && seq.index >= 0,
		Generated:   seq.generated,
		History:     seq.tokens,
		Seed:        seq.r.req.Seed + uint64(max(seq.index, 0)),
		Sampling:    seq.r.req.Sampling,
		Logprobs:    seq.r.req.Logprobs,
		TopLogprobs: seq.r.req.TopLogprobs,
	})
	plan.seqs = append(plan.seqs, seq)
	seq.planned = s.stepNo
	s.budget -= n + extra
	return true
}

// unplan takes seq out of the plan being built, returning its tokens to the
// budget, so no batch entry points at blocks it no longer owns.
func (s *Scheduler) unplan(seq *sequence) {
	if s.plan == nil || seq.planned != s.stepNo {
		return
	}
	i := slices.Index(s.plan.seqs, seq)
	if i < 0 {
		return
	}
	s.budget += len(s.plan.Batch.Seqs[i].Tokens)
	seq.planned = 0
	s.plan.seqs = slices.Delete(s.plan.seqs, i, i+1)
	s.plan.Batch.Seqs = slices.Delete(s.plan.Batch.Seqs, i, i+1)
}

func (s *Scheduler) releaseBlocks(seq *sequence) {
	for i := len(seq.blocks) - 1; i >= 0; i-- {
		s.pool.Release(seq.blocks[i])
	}
	seq.blocks = seq.blocks[:0]
	seq.hashed = 0
}

func (s *Scheduler) removeRunning(seq *sequence) {
	if i := slices.Index(s.running, seq); i >= 0 {
		s.running = slices.Delete(s.running, i, i+1)
	}
}
