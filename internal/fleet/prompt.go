package fleet

import (
	"github.com/llmd/llmd/engine/hashmix"
	"github.com/llmd/llmd/internal/workload"
)

// prompts makes the token ids of a workload's prompts without any text:
// the same shared system prompt always gives the same ids, and each user
// message gets ids of its own from its seed, so prompts share exactly the
// leading tokens a real client's would (a system prompt, a conversation's
// history) and nothing else.
type prompts struct {
	spec  workload.Spec
	vocab uint64 // ids are drawn from 1..vocab-1; 0 is the sim's EOS
	// system caches the shared system prompts by index.
	system map[int][]int32
}

func newPrompts(spec workload.Spec, vocab int) *prompts {
	return &prompts{spec: spec, vocab: uint64(max(vocab, 2)), system: make(map[int][]int32)}
}

// systemTokens returns shared system prompt i (the caller must not modify
// it).
func (p *prompts) systemTokens(i, n int) []int32 {
	if s, ok := p.system[i]; ok {
		return s
	}
	s := p.fill(make([]int32, 0, n), n, hashmix.Mix64(p.spec.Seed^0x5b7e_c0de^hashmix.Mix64(uint64(i))))
	p.system[i] = s
	return s
}

// first returns the prompt of a conversation's first turn: its system
// prompt, if any, then the user message.
func (p *prompts) first(it workload.Item) []int32 {
	sys := 0
	if it.System >= 0 {
		sys = it.SystemTokens
	}
	out := make([]int32, 0, sys+it.InputTokens)
	if it.System >= 0 {
		out = append(out, p.systemTokens(it.System, it.SystemTokens)...)
	}
	return p.user(out, it)
}

// user appends the user message of it to dst.
func (p *prompts) user(dst []int32, it workload.Item) []int32 {
	return p.fill(dst, it.InputTokens, hashmix.Mix64(it.Seed^0x75_73_65_72))
}

// fill appends n ids drawn from the splitmix64 sequence of seed.
func (p *prompts) fill(dst []int32, n int, seed uint64) []int32 {
	x := seed
	for range n {
		x += 0x9e3779b97f4a7c15
		dst = append(dst, int32(1+hashmix.Mix64(x)%(p.vocab-1)))
	}
	return dst
}
