package cluster

import (
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/llmd/llmd/engine/kvcache"
)

// DefaultLoadBound is RouteRequest.LoadBound's default.
const DefaultLoadBound = 1.25

// DefaultLoadSlack is RouteRequest.LoadSlack's default.
const DefaultLoadSlack = 8

// Reasons a Candidate carries.
const (
	// ReasonPrefix prefixes the reason of the candidate chosen for its
	// cached prefix: "prefix:12" (12 blocks).
	ReasonPrefix = "prefix:"
	// ReasonAffinity: the owner of the affinity key on the ring.
	ReasonAffinity = "affinity"
	// ReasonLeastLoaded: the remaining candidates, least loaded first.
	ReasonLeastLoaded = "least_loaded"
	// ReasonOverloaded: a candidate over the load bound, kept at the end of
	// the list for retries only.
	ReasonOverloaded = "overloaded_skipped"
	// ReasonRoundRobin: every candidate of PolicyRoundRobin.
	ReasonRoundRobin = "round_robin"
	// ReasonCost: a candidate of PolicyCost within the load bound, by its
	// predicted time to first token.
	ReasonCost = "cost"
)

// DefaultPrefillRate stands for a member's prefill rate, in tokens per
// second, when neither it nor any other member of the pool reports one.
// Only ratios between members matter then, so its value barely does.
const DefaultPrefillRate = 10_000

// DefaultBlockTokens stands for the KV block size when neither the request
// nor a member gives one.
const DefaultBlockTokens = 16

// Candidate is one member Route proposes, in order of preference.
type Candidate struct {
	// Member is the member as of the call; its State maps are shared and
	// must not be modified.
	Member Member
	// PrefixBlocks is how many leading blocks of the request's prefix the
	// member is believed to hold: exact for the local node (localPrefix),
	// from the gossiped summary for the others.
	PrefixBlocks int
	// Reason names the rule that placed the candidate: "prefix:N",
	// "affinity", "least_loaded", "overloaded_skipped" or "round_robin".
	Reason string
	// CrossZone is set for a member outside RouteRequest.Zone.
	CrossZone bool
	// PredictedTTFT is PolicyCost's estimate of the request's time to
	// first token on the member (see predictTTFT); 0 for other policies.
	PredictedTTFT time.Duration
}

// RouteRequest describes one request to route.
type RouteRequest struct {
	// Model is the model the request needs; only members serving it are
	// candidates.
	Model string
	// Prefix holds the prompt's chained block hashes (kvcache.HashChain of
	// its tokens).
	Prefix []kvcache.Hash
	// PromptTokens is the prompt's length, for PolicyCost; 0 means
	// len(Prefix) x the block size (its full blocks).
	PromptTokens int
	// BlockTokens is the block size of Prefix, for PolicyCost; 0 means the
	// members' gossiped one, else DefaultBlockTokens.
	BlockTokens int
	// AffinityKey (a conversation id or user) keeps related requests on
	// one member; "" uses the prompt's first block hash instead.
	AffinityKey string
	// LoadBound skips, for the prefix and affinity picks, a candidate whose
	// load would exceed LoadBound x the mean load of the pool (see Route).
	// 0 means DefaultLoadBound; values below 1 count as 1.
	LoadBound float64
	// LoadSlack spares small imbalances: a member counts as over the bound
	// only if its load also exceeds the least loaded member's by at least
	// LoadSlack sequences (a batch absorbs a few more at little cost,
	// and the gossiped loads are up to a state interval old). 0 means
	// DefaultLoadSlack; negative means no slack.
	LoadSlack int
	// Policy decides which of the above the route looks at (see Policy);
	// "" is PolicyPrefix.
	Policy Policy
	// Zone is the entry node's zone: members of it come first, and others
	// only when every member of it is over the load bound or none serves
	// the model. "" ignores zones.
	Zone string
}

// routeMember is a pool member with what the router needs precomputed.
type routeMember struct {
	Member Member
	// keys holds the member's prefix keys for the request's model.
	keys map[uint64]struct{}
}

// route orders pool for req; see Cluster.Route. pool holds only eligible
// members (alive, not draining, serving req.Model). r may be nil (no
// affinity ordering beyond the least-loaded order).
func route(pool []routeMember, r *ring, req RouteRequest, localPrefix func([]kvcache.Hash) int) []Candidate {
	if req.Policy == PolicyLocal {
		pool = slices.DeleteFunc(pool, func(m routeMember) bool { return !m.Member.Local })
	}
	req = req.Policy.shape(req)
	n := len(pool)
	if n == 0 {
		return nil
	}
	bound := req.LoadBound
	if bound == 0 || math.IsNaN(bound) {
		bound = DefaultLoadBound
	}
	bound = max(bound, 1)

	loads := make([]int, n)
	kv := make([]float64, n)
	blocks := make([]int, n)
	total := 0
	match := prefixMatcher{prefix: req.Prefix}
	for i, m := range pool {
		l := m.Member.State.Load[req.Model]
		loads[i] = max(l.Running, 0) + max(l.Waiting, 0)
		kv[i] = l.KVUsage
		total += loads[i]
		if m.Member.Local && localPrefix != nil && len(req.Prefix) > 0 {
			blocks[i] = min(max(localPrefix(req.Prefix), 0), len(req.Prefix))
		} else {
			blocks[i] = match.blocks(m.keys)
		}
	}
	// Bounded load (consistent hashing with bounded loads): a member may
	// take the request while its load stays under ceil(bound x mean),
	// the mean counting the request itself. The least loaded member is
	// always under it, so the pool is never all overloaded.
	capacity := int(math.Ceil(bound * float64(total+1) / float64(n)))
	slack := req.LoadSlack
	switch {
	case slack == 0:
		slack = DefaultLoadSlack
	case slack < 0:
		slack = 0
	}
	least := slices.Min(loads)
	over := make([]bool, n)
	for i := range pool {
		over[i] = loads[i] >= capacity && loads[i]-least >= slack
	}
	var ttft []costEstimate
	if req.Policy == PolicyCost {
		ttft = predictTTFT(pool, req, blocks)
	}

	if req.Zone == "" {
		return order(pool, r, req, loads, kv, blocks, over, ttft)
	}
	// Zones: the entry node's zone first; out of it only when every member
	// there is over the bound (or none serves the model). The bound is the
	// whole pool's, so a busy zone does spill.
	var in, out []int
	for i, m := range pool {
		if m.Member.Zone == req.Zone {
			in = append(in, i)
		} else {
			out = append(out, i)
		}
	}
	pick := func(idx []int) []Candidate {
		sub := make([]routeMember, len(idx))
		l, k, b, o := make([]int, len(idx)), make([]float64, len(idx)), make([]int, len(idx)), make([]bool, len(idx))
		var c []costEstimate
		if ttft != nil {
			c = make([]costEstimate, len(idx))
		}
		for j, i := range idx {
			sub[j], l[j], k[j], b[j], o[j] = pool[i], loads[i], kv[i], blocks[i], over[i]
			if c != nil {
				c[j] = ttft[i]
			}
		}
		return order(sub, r, req, l, k, b, o, c)
	}
	home, away := pick(in), pick(out)
	for i := range away {
		away[i].CrossZone = true
	}
	if len(home) > 0 && home[0].Reason != ReasonOverloaded {
		return append(home, away...)
	}
	// Leave the zone: the other zones' members under the bound, then the
	// zone's own, then the others' overloaded ones, for retries.
	res := make([]Candidate, 0, n)
	for _, c := range away {
		if c.Reason != ReasonOverloaded {
			res = append(res, c)
		}
	}
	res = append(res, home...)
	for _, c := range away {
		if c.Reason == ReasonOverloaded {
			res = append(res, c)
		}
	}
	return res
}

// order ranks pool (with each member's load, KV use, prefix blocks,
// whether it is over the bound and, for PolicyCost, its predicted TTFT in
// seconds, computed by route) by the policy's rules.
func order(pool []routeMember, r *ring, req RouteRequest, loads []int, kv []float64, blocks []int, over []bool, ttft []costEstimate) []Candidate {
	n := len(pool)
	if n == 0 {
		return nil
	}
	// Ring order from the affinity key, or the first block's hash.
	rank := make([]int, n)
	for i := range rank {
		rank[i] = math.MaxInt
	}
	hasKey := req.AffinityKey != "" || len(req.Prefix) > 0
	if hasKey && r != nil {
		key := uint64(0)
		if req.AffinityKey != "" {
			key = xxh3.HashString(req.AffinityKey)
		} else {
			key = prefixKey(req.Prefix[0])
		}
		index := make(map[string]int, n)
		for i, m := range pool {
			index[m.Member.ID] = i
		}
		next, left := 0, n
		r.walk(key, func(id string) bool {
			if i, ok := index[id]; ok {
				rank[i] = next
				next++
				left--
			}
			return left > 0
		})
	}
	lessLoaded := func(i, j int) bool {
		if loads[i] != loads[j] {
			return loads[i] < loads[j]
		}
		if kv[i] != kv[j] {
			return kv[i] < kv[j]
		}
		return pool[i].Member.ID < pool[j].Member.ID
	}
	// Ring order, members off the ring after, least loaded among them.
	lessRank := func(i, j int) bool {
		if rank[i] != rank[j] {
			return rank[i] < rank[j]
		}
		return lessLoaded(i, j)
	}

	if ttft != nil {
		return orderByCost(pool, blocks, over, ttft, lessRank)
	}

	out := make([]Candidate, 0, n)
	used := make([]bool, n)
	add := func(i int, reason string) {
		used[i] = true
		out = append(out, Candidate{Member: pool[i].Member, PrefixBlocks: blocks[i], Reason: reason})
	}

	// 1. The longest cached prefix, ties to the ring order.
	best := -1
	for i := range pool {
		if over[i] || blocks[i] == 0 {
			continue
		}
		if best < 0 || blocks[i] > blocks[best] || (blocks[i] == blocks[best] && lessRank(i, best)) {
			best = i
		}
	}
	if best >= 0 {
		add(best, ReasonPrefix+strconv.Itoa(blocks[best]))
	}
	// 2. The owner of the key on the ring, skipping overloaded members.
	if hasKey && r != nil {
		aff := -1
		for i := range pool {
			if used[i] || over[i] || rank[i] == math.MaxInt {
				continue
			}
			if aff < 0 || rank[i] < rank[aff] {
				aff = i
			}
		}
		if aff >= 0 {
			add(aff, ReasonAffinity)
		}
	}
	// 3. The rest, least loaded first; the overloaded last.
	rest := make([]int, 0, n)
	for i := range pool {
		if !used[i] {
			rest = append(rest, i)
		}
	}
	sort.Slice(rest, func(a, b int) bool {
		i, j := rest[a], rest[b]
		if over[i] != over[j] {
			return !over[i]
		}
		return lessLoaded(i, j)
	})
	for _, i := range rest {
		if over[i] {
			add(i, ReasonOverloaded)
		} else {
			add(i, ReasonLeastLoaded)
		}
	}
	return out
}

// costEstimate is PolicyCost's view of one member: the request's predicted
// time to first token there, and the score it is ranked by (both seconds).
type costEstimate struct {
	ttft, score float64
}

// predictTTFT returns, for each member of pool, PolicyCost's prediction of
// the request's time to first token there, in seconds:
//
//	ttft = (queued + fresh + running) / rate, fresh = max(prompt - cached, 1)
//
// where, from the member's gossiped ModelLoad for req.Model:
//   - queued is QueuedPromptTokens, the prompt tokens it must prefill
//     before (or along with) this one; a node that does not report them
//     (0 while Waiting > 0) counts each waiting request as long as this
//     prompt;
//   - prompt is req.PromptTokens (or its full blocks) and cached the
//     member's prefix blocks (blocks) x the block size: fresh is the
//     tokens it would prefill (at least the last, which always runs);
//   - running is Running, one decode token for each running sequence: the
//     decode step that the prefill shares with the running batch;
//   - rate is PrefillTokensPerSecond, the member's measured cost of a
//     batch token; unknown, the median of the rates the pool reports,
//     else DefaultPrefillRate.
//
// This is the load-aware routing of NVIDIA Dynamo's KV router in other
// units: a cached prefix is worth the prefill it saves, a queue the
// prefill it adds, both in time on that member. It leaves out the fixed
// cost of a step (the same on like members) and the decode tokens of
// later steps when the prefill spans several (a few percent under load).
//
// The score adds what the choice costs the requests that come after:
//
//	score = ttft + w x fresh / rate, w = the pool's mean Waiting
//
// A prefill that a member holding the prefix would have skipped delays
// each request that queues behind it, and how many do is, in a steady
// state, about as many as wait now. Idle, w is 0 and the score is the
// TTFT; saturated, where every queue is long and the shortest wins only by
// noise, the prefill a miss adds dominates, and the conversations stay on
// the members that hold them (ranking by TTFT alone scattered them there:
// hit rate no better than round robin's, and a worse TTFT).
func predictTTFT(pool []routeMember, req RouteRequest, blocks []int) []costEstimate {
	bt := req.BlockTokens
	var rates []float64
	waiting := 0
	for _, m := range pool {
		l := m.Member.State.Load[req.Model]
		if l.PrefillTokensPerSecond > 0 {
			rates = append(rates, l.PrefillTokensPerSecond)
		}
		if bt <= 0 {
			bt = l.BlockTokens
		}
		waiting += max(l.Waiting, 0)
	}
	if bt <= 0 {
		bt = DefaultBlockTokens
	}
	fallback := float64(DefaultPrefillRate)
	if len(rates) > 0 {
		slices.Sort(rates)
		fallback = rates[len(rates)/2]
	}
	prompt := req.PromptTokens
	if prompt <= 0 {
		prompt = len(req.Prefix) * bt
	}
	prompt = max(prompt, 1)
	w := 0.0
	if len(pool) > 0 {
		w = float64(waiting) / float64(len(pool))
	}
	out := make([]costEstimate, len(pool))
	for i, m := range pool {
		l := m.Member.State.Load[req.Model]
		queued := max(l.QueuedPromptTokens, 0)
		if queued == 0 && l.Waiting > 0 {
			queued = l.Waiting * prompt
		}
		fresh := max(prompt-blocks[i]*bt, 1)
		rate := l.PrefillTokensPerSecond
		if !(rate > 0) || math.IsInf(rate, 0) {
			rate = fallback
		}
		ttft := float64(queued+fresh+max(l.Running, 0)) / rate
		out[i] = costEstimate{ttft: ttft, score: ttft + w*float64(fresh)/rate}
	}
	return out
}

// orderByCost ranks pool for PolicyCost: the members within the bound by
// score, except that the first is, of those within costTie of the least,
// the one with the longest cached prefix, then first in the ring order
// (lessRank, which ends with the least loaded); the members over the bound
// last, by score, for retries.
func orderByCost(pool []routeMember, blocks []int, over []bool, cost []costEstimate, lessRank func(i, j int) bool) []Candidate {
	idx := make([]int, len(pool))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		if over[i] != over[j] {
			return !over[i]
		}
		if cost[i].score != cost[j].score {
			return cost[i].score < cost[j].score
		}
		if blocks[i] != blocks[j] {
			return blocks[i] > blocks[j]
		}
		return lessRank(i, j)
	})
	if len(idx) > 0 && !over[idx[0]] {
		limit := cost[idx[0]].score * (1 + costTie)
		best := 0
		for k := 1; k < len(idx) && !over[idx[k]] && cost[idx[k]].score <= limit; k++ {
			i, b := idx[k], idx[best]
			if blocks[i] > blocks[b] || (blocks[i] == blocks[b] && lessRank(i, b)) {
				best = k
			}
		}
		first := idx[best]
		copy(idx[1:best+1], idx[:best])
		idx[0] = first
	}
	out := make([]Candidate, len(idx))
	for k, i := range idx {
		reason := ReasonCost
		if over[i] {
			reason = ReasonOverloaded
		}
		out[k] = Candidate{Member: pool[i].Member, PrefixBlocks: blocks[i], Reason: reason,
			PredictedTTFT: time.Duration(min(cost[i].ttft, maxPredicted.Seconds()) * float64(time.Second))}
	}
	return out
}

// maxPredicted caps Candidate.PredictedTTFT.
const maxPredicted = 24 * time.Hour

// costTie is the relative difference under which a predicted TTFT counts
// as the least: the inputs are estimates, and a near tie is better broken
// toward the cached prefix and the conversation's ring owner, which keep
// later turns together.
const costTie = 0.02

// prefixMatcher finds how many leading blocks of a prefix a summary holds:
// the deepest block whose key the summary has (chained hashes: holding
// block i means holding blocks 0..i).
type prefixMatcher struct {
	prefix []kvcache.Hash
	// index maps a block's key to its depth (1-based), built on first use
	// for summaries smaller than the prefix.
	index map[uint64]int
}

func (p *prefixMatcher) blocks(keys map[uint64]struct{}) int {
	if len(p.prefix) == 0 || len(keys) == 0 {
		return 0
	}
	// Scan whichever side is shorter: a long prompt against a small
	// summary looks the summary's keys up in the prompt's index.
	if len(keys) < len(p.prefix) {
		if p.index == nil {
			p.index = make(map[uint64]int, len(p.prefix))
			for i, h := range p.prefix {
				p.index[prefixKey(h)] = i + 1
			}
		}
		best := 0
		for k := range keys {
			best = max(best, p.index[k])
		}
		return best
	}
	for i := len(p.prefix) - 1; i >= 0; i-- {
		if _, ok := keys[prefixKey(p.prefix[i])]; ok {
			return i + 1
		}
	}
	return 0
}

// RouteMembers orders members for req as Cluster.Route orders a cluster's
// members, for a router that keeps its own member list (a fleet simulator,
// a test). The candidates are the members that serve req.Model, are not
// draining and whose Status is alive or unset; a member's prefix summary is
// its State.Prefixes[req.Model] (only each hash's Hi counts, as in a
// gossiped summary); the ring holds every member's ID. localPrefix, when
// not nil, counts the blocks the Local member holds exactly. It builds the
// ring and the summaries' key sets on every call: to route many requests,
// keep a RoutePool instead.
func RouteMembers(members []Member, req RouteRequest, localPrefix func([]kvcache.Hash) int) []Candidate {
	return NewRoutePool(members).Route(req, localPrefix)
}

// RoutePool is a member list prepared for routing many requests: the ring
// over the members' IDs and the key sets of their prefix summaries are
// built once, and SetLoad and SetPrefixes update one member at a time. It
// routes as RouteMembers does.
//
// Locking: none; one goroutine owns a RoutePool.
type RoutePool struct {
	members []Member // sorted by ID, without duplicates
	// keys holds each member's summary keys per model.
	keys []map[string]map[uint64]struct{}
	ring *ring
	// scratch is the pool handed to route, reused.
	scratch []routeMember
	// turn counts PolicyRoundRobin routes.
	turn uint64
}

// NewRoutePool prepares members for routing. Of members sharing an ID the
// first is kept. The pool copies the list, not the members' State maps,
// which it never modifies.
func NewRoutePool(members []Member) *RoutePool {
	ms := slices.Clone(members)
	slices.SortStableFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	ms = slices.CompactFunc(ms, func(a, b Member) bool { return a.ID == b.ID })
	p := &RoutePool{members: ms, keys: make([]map[string]map[uint64]struct{}, len(ms))}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
		p.keys[i] = make(map[string]map[uint64]struct{}, len(m.State.Prefixes))
		for model, hs := range m.State.Prefixes {
			p.keys[i][model] = keySet(hs)
		}
	}
	p.ring = newRing(ids)
	return p
}

func keySet(hs []kvcache.Hash) map[uint64]struct{} {
	set := make(map[uint64]struct{}, len(hs))
	for _, h := range hs {
		set[prefixKey(h)] = struct{}{}
	}
	return set
}

func (p *RoutePool) index(id string) int {
	i, ok := slices.BinarySearchFunc(p.members, id, func(m Member, id string) int { return strings.Compare(m.ID, id) })
	if !ok {
		return -1
	}
	return i
}

// SetLoad sets member id's load for model, and reports whether the pool
// has that member. The member's Load map is replaced, not modified, so
// Candidates returned before keep the load they had.
func (p *RoutePool) SetLoad(id, model string, l ModelLoad) bool {
	i := p.index(id)
	if i < 0 {
		return false
	}
	st := &p.members[i].State
	load := make(map[string]ModelLoad, max(len(st.Load), 1))
	maps.Copy(load, st.Load)
	load[model] = l
	st.Load = load
	return true
}

// SetPrefixes sets member id's prefix summary for model (see
// State.Prefixes), and reports whether the pool has that member. The
// member's Prefixes map is replaced, not modified; the pool keeps
// prefixes, which the caller must not modify afterwards.
func (p *RoutePool) SetPrefixes(id, model string, prefixes []kvcache.Hash) bool {
	i := p.index(id)
	if i < 0 {
		return false
	}
	st := &p.members[i].State
	pre := make(map[string][]kvcache.Hash, max(len(st.Prefixes), 1))
	maps.Copy(pre, st.Prefixes)
	pre[model] = prefixes
	st.Prefixes = pre
	p.keys[i][model] = keySet(prefixes)
	return true
}

// Route orders the pool's members for req, as RouteMembers does.
func (p *RoutePool) Route(req RouteRequest, localPrefix func([]kvcache.Hash) int) []Candidate {
	pool := p.scratch[:0]
	for i, m := range p.members {
		if !slices.Contains(m.Models, req.Model) || m.State.Draining || m.Status != "" && m.Status != StatusAlive {
			continue
		}
		pool = append(pool, routeMember{Member: m, keys: p.keys[i][req.Model]})
	}
	out := route(pool, p.ring, req, localPrefix)
	clear(pool)
	p.scratch = pool[:0]
	if req.Policy == PolicyRoundRobin {
		p.turn++
		out = rotate(out, p.turn)
	}
	return out
}
