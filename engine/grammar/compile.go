package grammar

import (
	"fmt"
	"math"
)

// A Grammar is a compiled grammar: a recursive transition network over
// bytes. Each rule is a small automaton whose states have byte edges (a
// range of byte values), epsilon edges and call edges (match another rule,
// then continue at a return state); a rule ends at its final state.
// Character classes are compiled to their UTF-8 byte sequences, so a token
// may end in the middle of a character and the next one finish it.
//
// A Grammar is immutable and safe for concurrent use.
type Grammar struct {
	states    []state
	ruleStart []int32
	ruleNames []string
	root      int32
	// closure is each state's epsilon closure within its rule.
	closure []stateClosure
	// dist is, per state, the fewest bytes that take it to its rule's end;
	// minRule is a rule's shortest match.
	dist    []int32
	minRule []int32
	src     string
}

type state struct {
	edges []edge
	eps   []int32
	calls []call
	final bool
	rule  int32
}

// edge matches one byte in [lo, hi] and moves to next.
type edge struct {
	lo, hi byte
	next   int32
}

// call matches rule, then continues at ret.
type call struct{ rule, ret int32 }

// stateClosure is what a state reaches without consuming a byte inside its
// rule: states with byte edges, the calls it may make, and whether it may
// end the rule.
type stateClosure struct {
	ready []int32
	calls []call
	final bool
}

const infDist = math.MaxInt32 / 4

// Compile parses GBNF text (see parse) and compiles it. It refuses a
// grammar with an undefined rule, no root rule, left recursion (a rule
// that can reach itself without consuming input, which no top-down
// matcher terminates on), or one that would compile to more than
// 262,144 states.
func Compile(src string) (*Grammar, error) {
	syn, err := parse(src)
	if err != nil {
		return nil, err
	}
	c := &compiler{g: &Grammar{src: src}, syn: syn, index: map[string]int32{}}
	for i, name := range syn.names {
		c.index[name] = int32(i)
	}
	c.g.ruleNames = syn.names
	c.g.ruleStart = make([]int32, len(syn.names))
	for i, name := range syn.names {
		start, err := c.newState(int32(i))
		if err != nil {
			return nil, err
		}
		c.g.ruleStart[i] = start
		end, err := c.choice(syn.rules[name], start, int32(i))
		if err != nil {
			return nil, err
		}
		c.g.states[end].final = true
	}
	c.g.root = c.index["root"]
	g := c.g
	g.buildClosures()
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	g.buildDistances()
	return g, nil
}

// Source returns the grammar's text.
func (g *Grammar) Source() string { return g.src }

// NumStates is the size of the compiled automaton.
func (g *Grammar) NumStates() int { return len(g.states) }

type compiler struct {
	g     *Grammar
	syn   *syntax
	index map[string]int32
}

func (c *compiler) newState(rule int32) (int32, error) {
	if len(c.g.states) >= maxStates {
		return 0, fmt.Errorf("grammar: the grammar compiles to more than %d states", maxStates)
	}
	c.g.states = append(c.g.states, state{rule: rule})
	return int32(len(c.g.states) - 1), nil
}

func (c *compiler) eps(from, to int32) { c.g.states[from].eps = append(c.g.states[from].eps, to) }

// choice compiles alternatives starting at from and returns the state they
// all end in.
func (c *compiler) choice(ch choice, from, rule int32) (int32, error) {
	if len(ch) == 1 {
		return c.sequence(ch[0], from, rule)
	}
	end, err := c.newState(rule)
	if err != nil {
		return 0, err
	}
	for _, s := range ch {
		start, err := c.newState(rule)
		if err != nil {
			return 0, err
		}
		c.eps(from, start)
		e, err := c.sequence(s, start, rule)
		if err != nil {
			return 0, err
		}
		c.eps(e, end)
	}
	return end, nil
}

func (c *compiler) sequence(s sequence, from, rule int32) (int32, error) {
	cur := from
	for _, it := range s {
		var err error
		if cur, err = c.repeat(it, cur, rule); err != nil {
			return 0, err
		}
	}
	return cur, nil
}

// repeat compiles it with its repetition: min copies, then either a loop
// (unbounded) or max-min nested optional copies.
func (c *compiler) repeat(it item, from, rule int32) (int32, error) {
	cur := from
	var err error
	for range it.min {
		if cur, err = c.one(it, cur, rule); err != nil {
			return 0, err
		}
	}
	switch {
	case it.max < 0:
		loop, err := c.newState(rule)
		if err != nil {
			return 0, err
		}
		c.eps(cur, loop)
		e, err := c.one(it, loop, rule)
		if err != nil {
			return 0, err
		}
		c.eps(e, loop)
		return loop, nil
	case it.max > it.min:
		end, err := c.newState(rule)
		if err != nil {
			return 0, err
		}
		for range it.max - it.min {
			c.eps(cur, end)
			if cur, err = c.one(it, cur, rule); err != nil {
				return 0, err
			}
		}
		c.eps(cur, end)
		return end, nil
	}
	return cur, nil
}

// one compiles a single occurrence of it, starting at from.
func (c *compiler) one(it item, from, rule int32) (int32, error) {
	switch it.kind {
	case itemLiteral:
		cur := from
		for i := 0; i < len(it.text); i++ {
			next, err := c.newState(rule)
			if err != nil {
				return 0, err
			}
			b := it.text[i]
			c.g.states[cur].edges = append(c.g.states[cur].edges, edge{b, b, next})
			cur = next
		}
		return cur, nil
	case itemClass:
		end, err := c.newState(rule)
		if err != nil {
			return 0, err
		}
		var seqs [][]byteRange
		for _, r := range it.ranges {
			seqs = utf8Sequences(r.lo, r.hi, seqs)
		}
		for _, s := range seqs {
			cur := from
			for i, br := range s {
				next := end
				if i < len(s)-1 {
					if next, err = c.newState(rule); err != nil {
						return 0, err
					}
				}
				c.g.states[cur].edges = append(c.g.states[cur].edges, edge{br.lo, br.hi, next})
				cur = next
			}
		}
		return end, nil
	case itemRef:
		end, err := c.newState(rule)
		if err != nil {
			return 0, err
		}
		c.g.states[from].calls = append(c.g.states[from].calls, call{c.index[it.name], end})
		return end, nil
	default: // itemGroup
		return c.choice(it.group, from, rule)
	}
}

// buildClosures computes every state's epsilon closure within its rule.
func (g *Grammar) buildClosures() {
	g.closure = make([]stateClosure, len(g.states))
	seen := make([]int32, len(g.states)) // mark: 1 + the state whose closure visited it
	var stack []int32
	for s := range g.states {
		mark := int32(s) + 1
		var c stateClosure
		stack = append(stack[:0], int32(s))
		seen[s] = mark
		for len(stack) > 0 {
			q := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			st := &g.states[q]
			if len(st.edges) > 0 {
				c.ready = append(c.ready, q)
			}
			c.calls = append(c.calls, st.calls...)
			c.final = c.final || st.final
			for _, e := range st.eps {
				if seen[e] != mark {
					seen[e] = mark
					stack = append(stack, e)
				}
			}
		}
		g.closure[s] = c
	}
}

// nullable reports, per rule, whether it matches the empty string.
func (g *Grammar) nullable() []bool {
	null := make([]bool, len(g.ruleStart))
	for changed := true; changed; {
		changed = false
		for r, start := range g.ruleStart {
			if !null[r] && g.reachesEnd(start, null, nil) {
				null[r] = true
				changed = true
			}
		}
	}
	return null
}

// reachesEnd reports whether from reaches its rule's end without consuming
// input, through epsilon edges and calls of nullable rules. visit, when
// set, is called with each rule called on the way.
func (g *Grammar) reachesEnd(from int32, null []bool, visit func(rule int32)) bool {
	seen := map[int32]bool{from: true}
	stack := []int32{from}
	end := false
	for len(stack) > 0 {
		q := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		c := &g.closure[q]
		end = end || c.final
		push := func(s int32) {
			if !seen[s] {
				seen[s] = true
				stack = append(stack, s)
			}
		}
		for _, r := range c.ready {
			push(r)
		}
		for _, cl := range c.calls {
			if visit != nil {
				visit(cl.rule)
			}
			if null[cl.rule] {
				push(cl.ret)
			}
		}
	}
	return end
}

// checkLeftRecursion refuses a rule that can call itself, directly or
// through others, before consuming a byte.
func (g *Grammar) checkLeftRecursion() error {
	null := g.nullable()
	left := make([][]int32, len(g.ruleStart))
	for r, start := range g.ruleStart {
		g.reachesEnd(start, null, func(callee int32) { left[r] = append(left[r], callee) })
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(left))
	var visit func(r int32) error
	visit = func(r int32) error {
		color[r] = grey
		for _, c := range left[r] {
			switch color[c] {
			case grey:
				return fmt.Errorf("grammar: rule %q is left-recursive (it can reach itself through %q without consuming input)",
					g.ruleNames[c], g.ruleNames[r])
			case white:
				if err := visit(c); err != nil {
					return err
				}
			}
		}
		color[r] = black
		return nil
	}
	for r := range left {
		if color[r] == white {
			if err := visit(int32(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildDistances computes, per state, the fewest bytes to its rule's end
// (infDist if it cannot end), by relaxing until nothing changes.
func (g *Grammar) buildDistances() {
	g.dist = make([]int32, len(g.states))
	g.minRule = make([]int32, len(g.ruleStart))
	for i := range g.dist {
		g.dist[i] = infDist
	}
	for i := range g.minRule {
		g.minRule[i] = infDist
	}
	for changed := true; changed; {
		changed = false
		for s := len(g.states) - 1; s >= 0; s-- {
			st := &g.states[s]
			d := g.dist[s]
			if st.final {
				d = 0
			}
			for _, e := range st.edges {
				d = min(d, 1+g.dist[e.next])
			}
			for _, e := range st.eps {
				d = min(d, g.dist[e])
			}
			for _, c := range st.calls {
				d = min(d, g.minRule[c.rule]+g.dist[c.ret])
			}
			d = min(d, infDist)
			if d < g.dist[s] {
				g.dist[s] = d
				changed = true
			}
		}
		for r, start := range g.ruleStart {
			if g.dist[start] < g.minRule[r] {
				g.minRule[r] = g.dist[start]
				changed = true
			}
		}
	}
}

// Match reports whether the grammar matches all of s. It builds a fresh
// automaton each call: for tests and one-off checks, not for decoding.
func (g *Grammar) Match(s string) bool {
	a := newAutomaton(g)
	set := a.walk(a.start(), []byte(s))
	return set != dead && a.sets[set].end
}

// MatchPrefix reports whether s is the start of some match of g.
func (g *Grammar) MatchPrefix(s string) bool {
	a := newAutomaton(g)
	return a.walk(a.start(), []byte(s)) != dead
}
