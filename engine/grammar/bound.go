package grammar

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
)

// ErrNotAllowed is returned by Matcher.Accept for a token the grammar does
// not allow where the matcher is.
var ErrNotAllowed = errors.New("grammar: token not allowed here")

// A Bound is a grammar bound to a vocabulary: it computes, for a matcher's
// state, the mask of the tokens the grammar allows next.
//
// The mask is built the way xgrammar builds it. For each automaton state
// with byte edges (a position in a rule) the tokens fall in three kinds,
// computed once, on first use, by walking the vocabulary trie from that
// position alone: accepted (the token's bytes match without leaving the
// rule), rejected (they fail inside the rule), and uncertain (a match
// leaves the rule with bytes left over, so the rest of the stack decides).
// The uncertain tokens are kept as the trie nodes below which they lie.
// At a step, the mask is the union of the accepted tokens of the positions
// on top of the matcher's stacks, plus the uncertain ones that match when
// the trie below their nodes is walked with the whole stacks. Walking uses
// the automaton's memoized transitions, so a walk that was taken before
// costs a table lookup per trie node.
//
// Locking: safe for concurrent use; one mutex guards the automaton and the
// caches, so matchers of one Bound compute their masks one at a time.
type Bound struct {
	g *Grammar
	v *Vocabulary

	mu     sync.Mutex
	a      *automaton
	pos    map[int32]*posCache
	levels []int32
	pbuf   []byte
	regs   []int32
	seen   map[int32]bool
}

// posCache is what a position's tokens are, independent of the stack
// below it.
type posCache struct {
	// The accepted tokens: a bitset when there are many, else a list.
	bits []uint64
	ids  []int32
	// regions are trie nodes whose strict descendants are uncertain.
	regions []int32
}

// sparseLimit is the most accepted tokens a position keeps as a list.
const sparseLimit = 2048

// Grammar returns the compiled grammar.
func (b *Bound) Grammar() *Grammar { return b.g }

// Vocabulary returns the vocabulary.
func (b *Bound) Vocabulary() *Vocabulary { return b.v }

func (b *Bound) big() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.a.size() > maxAutomaton
}

// Matcher returns a matcher at the start of the grammar.
func (b *Bound) Matcher() *Matcher {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &Matcher{b: b, set: b.a.start()}
}

// position returns the cache of state p, computing it on first use.
func (b *Bound) position(p int32) *posCache {
	if pc := b.pos[p]; pc != nil {
		return pc
	}
	a, t := b.a, &b.v.trie
	pc := &posCache{}
	var acc []int32
	s0 := a.startAt(p)
	if a.sets[s0].end {
		pc.regions = append(pc.regions, 0)
	}
	levels := b.levelsFor()
	levels[0] = s0
	for i := int32(1); i < int32(len(t.byt)); {
		d := t.depth[i]
		s := a.step(levels[d-1], t.byt[i])
		if s == dead {
			i = t.end[i]
			continue
		}
		acc = append(acc, t.tokens(i)...)
		ds := &a.sets[s]
		if ds.end && t.end[i] > i+1 {
			pc.regions = append(pc.regions, i)
		}
		if len(ds.nodes) == 0 {
			i = t.end[i]
			continue
		}
		levels[d] = s
		i++
	}
	if len(acc) > sparseLimit {
		pc.bits = make([]uint64, b.v.words)
		for _, id := range acc {
			pc.bits[id>>6] |= 1 << (id & 63)
		}
	} else {
		pc.ids = slices.Clip(acc)
	}
	b.pos[p] = pc
	return pc
}

func (b *Bound) levelsFor() []int32 {
	if n := maxTokenBytes + 1; len(b.levels) < n {
		b.levels = make([]int32, n)
	}
	return b.levels
}

// fill writes the tokens allowed from set s into mask.
func (b *Bound) fill(s int32, mask []uint64) {
	clear(mask)
	a, t := b.a, &b.v.trie
	ds := a.sets[s]
	if b.seen == nil {
		b.seen = map[int32]bool{}
	}
	clear(b.seen)
	regs := b.regs[:0]
	for _, n := range ds.nodes {
		p := a.nodes[n].state
		if b.seen[p] {
			continue
		}
		b.seen[p] = true
		pc := b.position(p)
		if pc.bits != nil {
			for i, w := range pc.bits {
				mask[i] |= w
			}
		}
		for _, id := range pc.ids {
			mask[id>>6] |= 1 << (id & 63)
		}
		regs = append(regs, pc.regions...)
	}
	if len(regs) > 0 {
		slices.Sort(regs)
		regs = slices.Compact(regs)
		levels := b.levelsFor()
		covered := int32(0)
		for _, r := range regs {
			if r != 0 && r < covered {
				continue // inside a subtree already walked
			}
			b.pbuf = t.prefix(b.pbuf[:0], r)
			rs := a.walk(s, b.pbuf)
			if rs == dead || len(a.sets[rs].nodes) == 0 {
				continue
			}
			base := t.depth[r]
			levels[base] = rs
			for i := r + 1; i < t.end[r]; {
				d := t.depth[i]
				x := a.step(levels[d-1], t.byt[i])
				if x == dead {
					i = t.end[i]
					continue
				}
				for _, id := range t.tokens(i) {
					mask[id>>6] |= 1 << (id & 63)
				}
				if len(a.sets[x].nodes) == 0 {
					i = t.end[i]
					continue
				}
				levels[d] = x
				i++
			}
			covered = t.end[r]
		}
	}
	b.regs = regs[:0]
	if ds.end {
		for _, e := range b.v.eos {
			if e >= 0 && int(e) < len(b.v.tokens) {
				mask[e>>6] |= 1 << (e & 63)
			}
		}
	}
}

// A Matcher is a position in a grammar: the prefix of a match consumed so
// far. Clone copies it in O(1), for sequences that fork.
//
// Locking: a Matcher is not safe for concurrent use; its Bound is.
type Matcher struct {
	b   *Bound
	set int32
	// ended is set once an end-of-generation token was accepted.
	ended bool
}

// Bound returns the grammar and vocabulary the matcher runs on.
func (m *Matcher) Bound() *Bound { return m.b }

// Clone returns an independent copy of m.
func (m *Matcher) Clone() *Matcher { c := *m; return &c }

// Allowed writes into mask (Vocabulary.MaskWords words) the tokens the
// grammar allows next: bit t%64 of word t/64 is set for an allowed token
// t. The end-of-generation tokens are allowed exactly where the grammar
// may end. Once Done, the mask is empty.
func (m *Matcher) Allowed(mask []uint64) {
	if len(mask) < m.b.v.words {
		panic(fmt.Sprintf("grammar: mask of %d words for a vocabulary of %d tokens", len(mask), len(m.b.v.tokens)))
	}
	if m.ended {
		clear(mask)
		return
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.b.fill(m.set, mask)
}

// Accept advances the matcher over token t. It returns ErrNotAllowed,
// and stays where it was, if the grammar does not allow t here.
func (m *Matcher) Accept(t int32) error {
	if m.ended {
		return ErrNotAllowed
	}
	b := m.b
	if b.v.isEOS(t) {
		if !m.CanEnd() {
			return ErrNotAllowed
		}
		m.ended = true
		return nil
	}
	tok := b.v.Token(t)
	if len(tok) == 0 || len(tok) > maxTokenBytes {
		return ErrNotAllowed
	}
	b.mu.Lock()
	s := b.a.walk(m.set, tok)
	b.mu.Unlock()
	if s == dead {
		return ErrNotAllowed
	}
	m.set = s
	return nil
}

// AcceptString advances the matcher over the bytes of s, as if a token
// held them; it reports false, and stays where it was, if they do not
// match.
func (m *Matcher) AcceptString(s string) bool {
	if m.ended {
		return false
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	next := m.set
	for i := 0; i < len(s); i++ {
		if next = m.b.a.step(next, s[i]); next == dead {
			return false
		}
	}
	m.set = next
	return true
}

// CanEnd reports whether the grammar may end here.
func (m *Matcher) CanEnd() bool {
	if m.ended {
		return true
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.a.sets[m.set].end
}

// Done reports whether nothing but the end can follow: the grammar is
// complete and no byte continues it (or an end token was accepted).
func (m *Matcher) Done() bool {
	if m.ended {
		return true
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return len(m.b.a.sets[m.set].nodes) == 0
}

// Remaining is the fewest bytes that complete the match from here (0 if
// it may end now); a steering hint for generators that must finish.
func (m *Matcher) Remaining() int {
	if m.ended {
		return 0
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return int(m.b.a.setDist(m.set))
}

// RemainingAfter is Remaining after token t, and -1 if t is not allowed.
func (m *Matcher) RemainingAfter(t int32) int {
	if m.ended {
		return -1
	}
	if m.b.v.isEOS(t) {
		if m.CanEnd() {
			return 0
		}
		return -1
	}
	tok := m.b.v.Token(t)
	if len(tok) == 0 || len(tok) > maxTokenBytes {
		return -1
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	s := m.b.a.walk(m.set, tok)
	if s == dead {
		return -1
	}
	return int(m.b.a.setDist(s))
}

// CountAllowed is the number of set bits of a mask.
func CountAllowed(mask []uint64) int {
	n := 0
	for _, w := range mask {
		n += bits.OnesCount64(w)
	}
	return n
}
