package cluster

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Policy is how a node chooses the member that serves a request. Only
// PolicyPrefix is meant for production; the others exist to measure it
// against (llmd --route-policy, llmctl simulate --route).
type Policy string

// Routing policies.
const (
	// PolicyPrefix: the longest cached prefix, then the owner of the
	// conversation (or the prompt's first block) on the ring, within the
	// load bound, else the least loaded. The default.
	PolicyPrefix Policy = "prefix"
	// PolicyCost: the member with the least predicted time to first token
	// (see predictTTFT): its queued prompt tokens, the prompt tokens it
	// does not hold and a decode step of its running batch, over its
	// measured prefill rate, plus, while requests wait, the prefill it
	// would add once per request waiting on average; within the load
	// bound, ties to the longest cached prefix, then the ring.
	PolicyCost Policy = "cost"
	// PolicyAffinity: the owner of the conversation (or the prompt's first
	// block) on the ring, whatever the load.
	PolicyAffinity Policy = "affinity"
	// PolicyRoundRobin: each member in turn.
	PolicyRoundRobin Policy = "round_robin"
	// PolicyLeastLoaded: the member with the fewest running and waiting
	// sequences.
	PolicyLeastLoaded Policy = "least_loaded"
	// PolicyLocal: never forward; the local member only.
	PolicyLocal Policy = "local"
)

// Policies lists every routing policy, the default first.
var Policies = []Policy{PolicyPrefix, PolicyCost, PolicyAffinity, PolicyRoundRobin, PolicyLeastLoaded, PolicyLocal}

// ParsePolicy returns the policy named s ("" is PolicyPrefix).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyPrefix, nil
	}
	if p := Policy(s); slices.Contains(Policies, p) {
		return p, nil
	}
	return "", fmt.Errorf("cluster: unknown routing policy %q: use %s", s, PolicyNames(Policies))
}

// PolicyNames lists ps for a message or a flag's help: "prefix, affinity".
func PolicyNames(ps []Policy) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

// shape returns req as policy p routes it: which of the prefix, the
// affinity key and the load bound it looks at.
func (p Policy) shape(req RouteRequest) RouteRequest {
	switch p {
	case PolicyAffinity:
		// The conversation's owner, or the first block's, whatever the load.
		if req.AffinityKey != "" {
			req.Prefix = nil
		} else {
			req.Prefix = req.Prefix[:min(len(req.Prefix), 1)]
		}
		req.LoadBound = math.MaxFloat64
	case PolicyRoundRobin, PolicyLeastLoaded:
		req.Prefix, req.AffinityKey = nil, ""
	}
	return req
}

// rotate orders cands for the round-robin policy: by member ID, starting
// at turn (mod the count), every candidate's reason "round_robin".
func rotate(cands []Candidate, turn uint64) []Candidate {
	if len(cands) == 0 {
		return cands
	}
	slices.SortFunc(cands, func(a, b Candidate) int { return strings.Compare(a.Member.ID, b.Member.ID) })
	k := int(turn % uint64(len(cands)))
	out := append(cands[k:len(cands):len(cands)], cands[:k]...)
	for i := range out {
		out[i].Reason = ReasonRoundRobin
	}
	return out
}

// SummaryDepth rounds n, the exact count of a prompt's total blocks that
// the local cache holds, down to what the local node's gossiped summary
// would claim (keys at depths 2^k-1 and the prompt's last block), so that
// the local node competes with the peers' summaries on equal terms:
// otherwise a node holding only a shared system prompt would beat the peer
// holding the whole conversation, whose summary shows less.
func SummaryDepth(n, total int) int {
	if n <= 0 || n >= total {
		return n
	}
	d := 1
	for d*2 <= n {
		d *= 2
	}
	return d
}
