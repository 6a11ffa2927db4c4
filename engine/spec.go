package engine

import (
	"context"
	"fmt"
	"math"
)

// Speculative decoding: a drafter proposes a few tokens that follow a
// decoding sequence, the executor verifies them in one step (SeqInput.Draft)
// and the scheduler commits the accepted ones plus the target's own next
// token. The verification samples every position exactly as plain decoding
// would, so greedy output is token for token the same, and sampled output
// too for the same seed (see SeqInput.Draft).

// Drafter proposes draft tokens for speculative decoding: prompt lookup
// ([NgramDrafter]) or a small draft model (engine/cpu's DraftModel).
//
// Locking: the engine calls a Drafter from its step goroutine only.
type Drafter interface {
	// Draft fills each request's Tokens with at most Max tokens it
	// expects to follow History (none when it has no guess). An error
	// skips speculation for this step; the engine logs it.
	Draft(ctx context.Context, reqs []DraftRequest) error
	// Forget drops what the drafter keeps for the sequence: it finished
	// or was preempted. A later Draft for the same id must still work
	// (rebuilding the state).
	Forget(seqID uint64)
}

// DraftRequest asks a Drafter for the tokens after one sequence's history.
type DraftRequest struct {
	SeqID uint64
	// History is every token of the sequence: the prompt, then its output.
	// The engine owns it; read only, and only during Draft.
	History []int32
	// Seed and Generated are the sequence's sampling seed and output count
	// (a simulated drafter derives its guesses from them).
	Seed      uint64
	Generated int
	// Max is the most tokens to propose (at least 1).
	Max int
	// Tokens receives the proposal; the drafter may reuse its storage
	// (append to Tokens[:0]).
	Tokens []int32
}

// SpecConfig configures speculative decoding. The zero value is off.
type SpecConfig struct {
	// Drafter proposes the drafts; nil turns speculation off unless
	// ExecutorDrafts is set.
	Drafter Drafter
	// ExecutorDrafts makes the executor its own drafter when Drafter is
	// nil: it must implement Drafter (the simulator does, with its
	// configured acceptance rate), else New fails.
	ExecutorDrafts bool
	// MaxTokens is the most draft tokens verified per sequence and step
	// (k). Each sequence's k adapts to its measured acceptance rate
	// (specLen) up to MaxTokens. Default 8 (on the CPU executor a step
	// verifies 1+4m rows best, BENCHMARKS.md); at most MaxSpecTokens.
	MaxTokens int
	// MaxBatch is the most running sequences at which the engine still
	// speculates: above it a step verifies no drafts, because a larger
	// batch is no longer bound by reading the weights and the extra
	// tokens cost real compute. Default 4 (measured on the CPU executor,
	// BENCHMARKS.md). Below it the engine still measures, per batch size,
	// the output tokens per second of decode steps with and without drafts
	// and speculates only where it pays (specGate).
	MaxBatch int
}

// Defaults and limits of SpecConfig.
const (
	DefaultSpecTokens   = 8
	DefaultSpecMaxBatch = 4
	MaxSpecTokens       = 15
)

// withDefaults fills zero fields.
func (c SpecConfig) withDefaults() SpecConfig {
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultSpecTokens
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultSpecMaxBatch
	}
	return c
}

// Validate reports the first invalid field; zero fields take defaults.
func (c SpecConfig) Validate() error {
	switch {
	case c.MaxTokens < 0 || c.MaxTokens > MaxSpecTokens:
		return fmt.Errorf("engine: speculative tokens must be in [1, %d], got %d", MaxSpecTokens, c.MaxTokens)
	case c.MaxBatch < 0:
		return fmt.Errorf("engine: speculative max batch must not be negative, got %d", c.MaxBatch)
	}
	return nil
}

// specState is one sequence's speculation history: decayed counts of the
// draft tokens verified and accepted, from which its draft length follows.
type specState struct {
	drafted, accepted float64
	// pause is the steps left before the sequence drafts again, after its
	// acceptance fell too low to pay.
	pause int
}

// Adaptive control constants.
const (
	// specDecay weighs the past of the acceptance estimate per step.
	specDecay = 0.8
	// specPriorAccepted and specPriorDrafted are the prior of the
	// estimate: 0.75 until evidence arrives.
	specPriorAccepted = 1.5
	specPriorDrafted  = 2
	// specLastOdds is the least probability the last draft token of a
	// proposal should have of being accepted.
	specLastOdds = 0.25
	// specMinRate and specPauseSteps: a sequence whose estimate falls
	// below the rate (after specMinDrafted tokens) stops drafting for
	// that many steps, then starts over from the prior.
	specMinRate    = 0.15
	specMinDrafted = 8
	specPauseSteps = 16
)

// rate is the estimated probability that a draft token is accepted.
func (st *specState) rate() float64 {
	return (st.accepted + specPriorAccepted) / (st.drafted + specPriorDrafted)
}

// observe folds one verification (drafted tokens, accepted of them) into
// the estimate and pauses the sequence when drafting stopped paying.
func (st *specState) observe(drafted, accepted int) {
	st.drafted = specDecay*st.drafted + float64(drafted)
	st.accepted = specDecay*st.accepted + float64(accepted)
	if st.drafted >= specMinDrafted && st.rate() < specMinRate {
		*st = specState{pause: specPauseSteps}
	}
}

// specLen is the draft length for a sequence whose draft tokens are each
// accepted with probability alpha (independently, as an estimate): the
// longest k whose last token still has specLastOdds of being reached and
// accepted (alpha^k >= specLastOdds), between 1 and maxK.
func specLen(alpha float64, maxK int) int {
	switch {
	case alpha >= 1:
		return maxK
	case !(alpha > 0):
		return 1
	}
	k := int(math.Log(specLastOdds) / math.Log(alpha))
	return max(1, min(maxK, k))
}

// NgramDrafter is prompt-lookup drafting (vLLM's "ngram" method, llama.cpp's
// lookup decoding): it finds the latest earlier occurrence of the last n
// tokens of the history, for n from MaxN down to MinN, and proposes the
// tokens that followed it. It needs no model and keeps no state; it pays
// where the output repeats its input (code editing, summaries quoting the
// text, extraction).
type NgramDrafter struct {
	// MinN and MaxN bound the length of the suffix matched; defaults 2 and
	// 4.
	MinN, MaxN int
}

// Draft implements [Drafter].
func (d NgramDrafter) Draft(_ context.Context, reqs []DraftRequest) error {
	lo, hi := d.MinN, d.MaxN
	if lo <= 0 {
		lo = 2
	}
	if hi < lo {
		hi = max(lo, 4)
	}
	for i := range reqs {
		r := &reqs[i]
		r.Tokens = NgramDraft(r.History, lo, hi, r.Max, r.Tokens[:0])
	}
	return nil
}

// Forget implements [Drafter]; the n-gram drafter keeps nothing.
func (NgramDrafter) Forget(uint64) {}

// NgramDraft appends to dst up to max tokens proposed to follow h: for n
// from maxN down to minN, the latest i with h[i:i+n] equal to the last n
// tokens (i+n < len(h)) gives the proposal h[i+n], h[i+n+1], ...; where the
// proposal runs past the end of h it continues over its own tokens, so a
// period shorter than max repeats. It returns dst unchanged when no n
// matches.
func NgramDraft(h []int32, minN, maxN, max int, dst []int32) []int32 {
	L := len(h)
	for n := min(maxN, L-1); n >= minN && n >= 1; n-- {
		suffix := h[L-n:]
		for i := L - n - 1; i >= 0; i-- {
			if !equalTokens(h[i:i+n], suffix) {
				continue
			}
			start := len(dst)
			for j := 0; j < max; j++ {
				src := i + n + j
				if src < L {
					dst = append(dst, h[src])
				} else {
					dst = append(dst, dst[start+src-L])
				}
			}
			return dst
		}
	}
	return dst
}

func equalTokens(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
