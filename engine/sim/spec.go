package sim

import (
	"context"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/hashmix"
)

// Speculative decoding in the simulator: the executor is its own drafter,
// guessing each token right with probability Config.SpecAcceptance, and
// Forward verifies drafts against the tokens it would produce anyway, so a
// simulated run gives the same tokens with and without speculation.

var _ engine.Drafter = (*Executor)(nil)

// saltDraft separates the drafter's coin flips from the text's hashes.
const saltDraft = 0xd1b54a32d192ed03

// Draft implements [engine.Drafter]: for each request, Max tokens, the
// i-th being TokenAt(Seed, Generated+i) when a coin of bias
// Config.SpecAcceptance, derived from (Seed, Generated+i), says so, else
// another token. It keeps no state.
func (e *Executor) Draft(_ context.Context, reqs []engine.DraftRequest) error {
	vocab := int32(max(e.info.VocabSize, 2))
	for i := range reqs {
		r := &reqs[i]
		r.Tokens = r.Tokens[:0]
		for j := range r.Max {
			g := r.Generated + j
			tok := e.gen.token(r.Seed, g)
			h := hashmix.Mix64(r.Seed ^ hashmix.Mix64(uint64(g)+saltDraft))
			if unit(h) > e.cfg.SpecAcceptance {
				tok = (tok + 1) % vocab
			}
			r.Tokens = append(r.Tokens, tok)
		}
	}
	return nil
}

// Forget implements [engine.Drafter]; the simulated drafter keeps nothing.
func (e *Executor) Forget(uint64) {}

// verify fills out's entry i for s, a sequence with drafts: the drafts
// equal to TokenAt at their positions are accepted, up to the first that
// is not, and the token after them is TokenAt at its position.
func (e *Executor) verify(out *engine.Output, i int, s *engine.SeqInput) {
	if out.Accepted == nil {
		out.Accepted = make([]int, len(out.Tokens))
	}
	drafts := s.Tokens[len(s.Tokens)-s.Draft:]
	acc := 0
	for acc < len(drafts) && drafts[acc] == e.gen.token(s.Seed, s.Generated+acc) {
		acc++
	}
	out.Accepted[i] = acc
	out.Tokens[i] = e.gen.token(s.Seed, s.Generated+acc)
}
