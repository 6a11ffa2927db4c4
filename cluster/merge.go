package cluster

import (
	"maps"
	"slices"
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// mergeLocked merges a decoded record about another node and reports
// whether it was news.
func (c *Cluster) mergeLocked(r *record, now time.Time) bool {
	if r.Node == c.id {
		c.seeSelfLocked(r.Version)
		return false
	}
	e := c.nodes[r.Node]
	if e == nil {
		if len(c.nodes) >= maxNodes {
			return false
		}
		e = &entry{id: r.Node, created: now}
		c.nodes[r.Node] = e
	}
	switch r.Kind {
	case kindState:
		if !r.Version.newer(e.stateVer) {
			return false
		}
		e.stateVer = r.Version
		e.flags = r.Flags
		e.heard = now
		e.load = make(map[string]ModelLoad, len(r.Models))
		e.hot = make(map[string][]uint64, len(r.Models))
		for _, m := range r.Models {
			e.load[m.Name] = m.Load
			if len(m.Keys) > 0 {
				e.hot[m.Name] = m.Keys
			}
		}
	case kindSummary:
		if !r.Version.newer(e.sumVer) {
			return false
		}
		e.sumVer = r.Version
		e.full = make(map[string][]uint64, len(r.Models))
		for _, m := range r.Models {
			if len(m.Keys) > 0 {
				e.full[m.Name] = m.Keys
			}
		}
		// A summary newer than the gossiped keys supersedes them.
		if !e.stateVer.newer(e.sumVer) {
			e.hot = nil
		}
	default:
		return false
	}
	e.derive()
	return true
}

// seeSelfLocked handles a record about this node: one newer than the
// current version (from this node's previous life, restarted with a clock
// behind) makes the next publication jump past it, like memberlist's
// refute.
func (c *Cluster) seeSelfLocked(v version) {
	// Equal is this node's own message relayed back: nothing to refute.
	if v.newer(c.ver) && v.Epoch >= c.refuteEpoch {
		c.refuteEpoch = v.Epoch + 1
	}
}

// stateRecordsLocked returns the push/pull records: for every node with a
// state, its state record and its summary record.
func (c *Cluster) stateRecordsLocked() []*record {
	ids := slices.Sorted(maps.Keys(c.nodes))
	recs := make([]*record, 0, 2*len(ids))
	// This node first, so a size cap never leaves it out.
	if i := slices.Index(ids, c.id); i > 0 {
		ids[0], ids[i] = ids[i], ids[0]
	}
	for _, id := range ids {
		e := c.nodes[id]
		if !e.stateVer.IsZero() {
			r := &record{Kind: kindState, Node: id, Version: e.stateVer, Flags: e.flags}
			for _, name := range slices.Sorted(maps.Keys(e.load)) {
				r.Models = append(r.Models, modelRecord{Name: name, Load: e.load[name], Keys: e.hot[name]})
			}
			recs = append(recs, r)
		}
		if !e.sumVer.IsZero() {
			r := &record{Kind: kindSummary, Node: id, Version: e.sumVer}
			for _, name := range slices.Sorted(maps.Keys(e.full)) {
				r.Models = append(r.Models, modelRecord{Name: name, Keys: e.full[name]})
			}
			recs = append(recs, r)
		}
	}
	return recs
}

// sameState reports whether a and b would publish the same records.
func sameState(a, b State) bool {
	if a.Draining != b.Draining || !maps.Equal(a.Load, b.Load) || len(a.Prefixes) != len(b.Prefixes) {
		return false
	}
	for k, v := range a.Prefixes {
		w, ok := b.Prefixes[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

func cloneState(s State) State {
	out := State{Draining: s.Draining, Load: maps.Clone(s.Load)}
	if s.Prefixes != nil {
		out.Prefixes = make(map[string][]kvcache.Hash, len(s.Prefixes))
		for k, v := range s.Prefixes {
			out.Prefixes[k] = slices.Clone(v)
		}
	}
	return out
}
