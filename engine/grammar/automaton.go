package grammar

import (
	"slices"
	"unsafe"
)

// An automaton runs a Grammar over bytes. Its configurations are sets of
// stacks; a stack is a node (a state of some rule and the node to return
// to when that rule ends), interned so that a stack is one int32 and equal
// stacks share their storage. Node 0 is the empty stack. A set holds the
// stacks whose top state has byte edges, plus whether the empty stack is
// reachable (the grammar may end there). Sets are interned too, and the
// transitions between them are memoized as they are first taken: the
// automaton is a pushdown automaton determinized lazily, one set and one
// byte at a time, as a lazy DFA is.
//
// Locking: none; the owner serializes access.
type automaton struct {
	g      *Grammar
	nodes  []node
	closes []nodeClosure
	nodeID map[uint64]int32

	sets  []dset
	setID map[string]int32

	// Scratch for closeNode.
	cwork []int32
	cseen []uint32
	cmark uint32
	// Scratch for step.
	buf  []int32
	key  []byte
	seen []uint32
	mark uint32
}

type node struct{ state, parent int32 }

type nodeClosure struct {
	ready []int32
	end   bool
	done  bool
}

// dset is an interned set of stacks.
type dset struct {
	nodes []int32 // sorted stacks whose top has byte edges
	end   bool    // the empty stack is reachable
	// trans is the memoized transition on each byte (-1: not computed),
	// allocated on the first step out of the set.
	trans []int32
	dist  int32 // fewest bytes to the end; -1 until computed
}

const (
	emptyStack = 0
	dead       = 0 // the set of no stacks: nothing matches
)

func newAutomaton(g *Grammar) *automaton {
	a := &automaton{g: g, nodeID: map[uint64]int32{}, setID: map[string]int32{}}
	a.nodes = append(a.nodes, node{state: -1, parent: -1})
	a.closes = append(a.closes, nodeClosure{done: true, end: true})
	a.internSet(nil, false) // dead = 0
	return a
}

// size is a measure of the memory the automaton holds.
func (a *automaton) size() int { return len(a.nodes) + len(a.sets) }

func (a *automaton) intern(state, parent int32) int32 {
	k := uint64(uint32(state))<<32 | uint64(uint32(parent))
	if id, ok := a.nodeID[k]; ok {
		return id
	}
	id := int32(len(a.nodes))
	a.nodes = append(a.nodes, node{state, parent})
	a.closes = append(a.closes, nodeClosure{})
	a.nodeID[k] = id
	return id
}

// closeNode returns the stacks with a byte edge on top that stack n
// reaches without consuming input (entering called rules, leaving ended
// ones), and whether it reaches the empty stack. It explores those moves
// breadth-first with a visited mark, so that a rule that matches the empty
// string inside a loop (which reaches the stack it started from) ends; a
// stack whose closure is known contributes it whole. Compile refused left
// recursion, so the stacks explored are finitely many.
func (a *automaton) closeNode(n int32) ([]int32, bool) {
	if c := &a.closes[n]; c.done {
		return c.ready, c.end
	}
	a.cmark++
	if a.cmark == 0 {
		clear(a.cseen)
		a.cmark = 1
	}
	var ready []int32
	end := false
	work := append(a.cwork[:0], n)
	for len(work) > 0 {
		x := work[len(work)-1]
		work = work[:len(work)-1]
		if int(x) >= len(a.cseen) {
			a.cseen = append(a.cseen, make([]uint32, int(x)+1-len(a.cseen)+len(a.cseen)/2)...)
		}
		if a.cseen[x] == a.cmark {
			continue
		}
		a.cseen[x] = a.cmark
		if c := &a.closes[x]; c.done {
			ready = append(ready, c.ready...)
			end = end || c.end
			continue
		}
		nd := a.nodes[x]
		sc := &a.g.closure[nd.state]
		for _, q := range sc.ready {
			ready = append(ready, a.intern(q, nd.parent))
		}
		for _, cl := range sc.calls {
			work = append(work, a.intern(a.g.ruleStart[cl.rule], a.intern(cl.ret, nd.parent)))
		}
		if sc.final {
			work = append(work, nd.parent)
		}
	}
	a.cwork = work
	slices.Sort(ready)
	ready = slices.Clip(slices.Compact(ready))
	a.closes[n] = nodeClosure{ready: ready, end: end, done: true}
	return ready, end
}

// internSet returns the id of the set of the sorted, distinct nodes plus
// end.
func (a *automaton) internSet(nodes []int32, end bool) int32 {
	if len(nodes) == 0 && !end && len(a.sets) > 0 {
		return dead
	}
	a.key = a.key[:0]
	if len(nodes) > 0 {
		a.key = append(a.key, unsafe.Slice((*byte)(unsafe.Pointer(&nodes[0])), 4*len(nodes))...)
	}
	if end {
		a.key = append(a.key, 1)
	}
	if id, ok := a.setID[string(a.key)]; ok {
		return id
	}
	id := int32(len(a.sets))
	a.sets = append(a.sets, dset{nodes: slices.Clone(nodes), end: end, dist: -1})
	a.setID[string(a.key)] = id
	return id
}

// start returns the set a new match of the root rule begins in.
func (a *automaton) start() int32 {
	n := a.intern(a.g.ruleStart[a.g.root], emptyStack)
	r, end := a.closeNode(n)
	return a.internSet(r, end)
}

// startAt returns the set of the one stack [state], as if state were
// reached at the top level: what the context-independent precomputation
// starts from.
func (a *automaton) startAt(state int32) int32 {
	r, end := a.closeNode(a.intern(state, emptyStack))
	return a.internSet(r, end)
}

// step returns the set after consuming byte b from set s (dead if no stack
// takes it).
func (a *automaton) step(s int32, b byte) int32 {
	if t := a.sets[s].trans; t != nil {
		if next := t[b]; next >= 0 {
			return next
		}
	} else {
		t = make([]int32, 256)
		for i := range t {
			t[i] = -1
		}
		a.sets[s].trans = t
	}
	next := a.computeStep(s, b)
	a.sets[s].trans[b] = next
	return next
}

func (a *automaton) computeStep(s int32, b byte) int32 {
	a.mark++
	if a.mark == 0 {
		clear(a.seen)
		a.mark = 1
	}
	buf := a.buf[:0]
	end := false
	for _, n := range a.sets[s].nodes {
		nd := a.nodes[n]
		for _, e := range a.g.states[nd.state].edges {
			if b < e.lo || b > e.hi {
				continue
			}
			r, ends := a.closeNode(a.intern(e.next, nd.parent))
			end = end || ends
			for _, x := range r {
				if int(x) >= len(a.seen) {
					a.seen = append(a.seen, make([]uint32, int(x)+1-len(a.seen)+len(a.seen)/2)...)
				}
				if a.seen[x] != a.mark {
					a.seen[x] = a.mark
					buf = append(buf, x)
				}
			}
		}
	}
	slices.Sort(buf)
	a.buf = buf
	return a.internSet(buf, end)
}

// walk runs the bytes p from set s; dead if they do not match.
func (a *automaton) walk(s int32, p []byte) int32 {
	for _, b := range p {
		if s = a.step(s, b); s == dead {
			return dead
		}
	}
	return s
}

// nodeDist is the fewest bytes that empty stack n.
func (a *automaton) nodeDist(n int32) int32 {
	d := int32(0)
	for ; n != emptyStack; n = a.nodes[n].parent {
		d = min(d+a.g.dist[a.nodes[n].state], infDist)
	}
	return d
}

// setDist is the fewest bytes that end a match from set s.
func (a *automaton) setDist(s int32) int32 {
	ds := &a.sets[s]
	if ds.dist >= 0 {
		return ds.dist
	}
	d := int32(infDist)
	if ds.end {
		d = 0
	}
	for _, n := range ds.nodes {
		d = min(d, a.nodeDist(n))
	}
	a.sets[s].dist = d
	return d
}
