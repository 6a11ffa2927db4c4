package cluster

import (
	"slices"
	"sort"
	"time"
)

// DefaultDisaggMinPrompt is DisaggPolicy.MinPromptTokens's default.
const DefaultDisaggMinPrompt = 512

// Reasons DisaggPolicy.Decide gives for disaggregating a request.
const (
	// DisaggLongPrompt: the prompt tokens the decode node lacks reach
	// MinPromptTokens.
	DisaggLongPrompt = "long_prompt"
	// DisaggITLPressure: the decode node runs BusyRunning sequences or
	// more, whose next tokens would wait behind a local prefill, and the
	// prompt is at least a quarter of MinPromptTokens.
	DisaggITLPressure = "itl_pressure"
)

// DisaggPolicy decides, per request, whether a decode node pulls the
// prompt's KV blocks from a prefill node rather than computing them
// itself. Moving KV costs its bytes over the network and a round trip; it
// pays for a long prompt (whose prefill would hold up every running
// sequence's next token for as long as it runs) and when many sequences
// decode here.
type DisaggPolicy struct {
	// MinPromptTokens: a request whose prompt tokens not cached at the
	// decode node reach it is disaggregated. 0 is DefaultDisaggMinPrompt.
	MinPromptTokens int
	// BusyRunning: while the decode node runs at least this many
	// sequences, a prompt of MinPromptTokens/4 uncached tokens already
	// is (ITL pressure). 0 turns it off.
	BusyRunning int
}

// Decide reports whether a request with uncached prompt tokens not held
// at the decode node, which runs running sequences, is disaggregated, and
// why.
func (p DisaggPolicy) Decide(uncached, running int) (bool, string) {
	min := p.MinPromptTokens
	if min <= 0 {
		min = DefaultDisaggMinPrompt
	}
	switch {
	case uncached >= min:
		return true, DisaggLongPrompt
	case p.BusyRunning > 0 && running >= p.BusyRunning && uncached >= max(min/4, 1):
		return true, DisaggITLPressure
	}
	return false, ""
}

// PrefillNodes returns the alive, not draining members other than this
// one that take RolePrefill and serve model, least busy first: the fewest
// prompt tokens queued for prefill, then the fewest sequences.
func (c *Cluster) PrefillNodes(model string) []Member {
	now := time.Now()
	c.mu.RLock()
	var out []Member
	for _, e := range c.nodes {
		if e.local || e.meta == nil || e.meta.Role != RolePrefill || e.meta.APIAddr == "" ||
			!slices.Contains(e.meta.Models, model) || e.flags&flagDraining != 0 || c.statusLocked(e, now) != StatusAlive {
			continue
		}
		out = append(out, c.memberLocked(e, now))
	}
	c.mu.RUnlock()
	busy := func(m Member) (int, int) {
		l := m.State.Load[model]
		return l.QueuedPromptTokens, l.Running + l.Waiting
	}
	sort.Slice(out, func(i, j int) bool {
		qi, ri := busy(out[i])
		qj, rj := busy(out[j])
		if qi != qj {
			return qi < qj
		}
		if ri != rj {
			return ri < rj
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// withoutPrefillNodes drops the members that take RolePrefill from a route
// pool, unless no other member serves the model: prefill nodes get
// requests only as the last resort.
func withoutPrefillNodes(pool []routeMember) []routeMember {
	if !slices.ContainsFunc(pool, func(m routeMember) bool { return m.Member.Role != RolePrefill }) {
		return pool
	}
	return slices.DeleteFunc(pool, func(m routeMember) bool { return m.Member.Role == RolePrefill })
}
