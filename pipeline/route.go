package pipeline

import (
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine/kvcache"
)

// route decides where job may run, in order of preference, and notes the
// decision: the peers the router prefers to this node, then this node's
// engine; or, for a model only peers serve, those peers (the choose
// stage's). A forwarded request, a node alone and the local policy serve
// it here.
func (p *Pipeline) route(job *Job, peers []cluster.Candidate) ([]Target, string) {
	if job.Model == nil {
		targets := make([]Target, len(peers))
		for i, c := range peers {
			targets[i] = p.peer(c)
		}
		p.observeRoute(true, peers[0].CrossZone)
		return targets, peers[0].Member.ID + " " + peers[0].Reason + crossZoneNote(peers[0])
	}
	here := p.local
	if job.Model.Target != nil {
		here = job.Model.Target
	}
	if p.router == nil {
		return []Target{here}, ""
	}
	// Run here, the prompt's KV pulled from a prefill node first when
	// that pays (see disagg.go).
	if plan := p.planDisagg(job); plan != nil {
		here = &disaggTarget{p: p, local: here, plan: plan}
	}
	if job.Principal.Peer != "" || p.cfg.RoutePolicy == cluster.PolicyLocal {
		return []Target{here}, ""
	}
	m := job.Model
	var prefix []kvcache.Hash
	if pc, ok := m.Replica.(PrefixChainer); ok {
		prefix = pc.PrefixChain(job)
	} else {
		prefix = kvcache.HashChain(job.Prompt, m.Replica.BlockSize())
	}
	req := cluster.RouteRequest{Model: m.ID, Prefix: prefix, Zone: p.cfg.Zone,
		AffinityKey: job.AffinityKey, LoadBound: p.cfg.LoadBound, LoadSlack: p.cfg.LoadSlack, Policy: p.cfg.RoutePolicy}
	cands := p.router.Route(req, func(h []kvcache.Hash) int {
		return cluster.SummaryDepth(m.Replica.CachedPrefix(h), len(h))
	})
	var targets []Target
	note := ""
	for _, c := range cands {
		if c.Member.Local {
			if len(targets) == 0 {
				note = "local " + c.Reason
				p.observeRoute(false, false)
			}
			break
		}
		if c.Member.APIAddr == "" {
			continue
		}
		if len(targets) == 0 {
			note = c.Member.ID + " " + c.Reason + crossZoneNote(c)
			p.observeRoute(true, c.CrossZone)
		}
		targets = append(targets, p.peer(c))
	}
	return append(targets, here), note
}

// crossZoneNote marks a route to a node outside this node's zone in the
// usage row's route ("b prefix:12 cross_zone").
func crossZoneNote(c cluster.Candidate) string {
	if c.CrossZone {
		return " cross_zone"
	}
	return ""
}

// observeRoute counts a cluster route in the metrics.
func (p *Pipeline) observeRoute(peer, crossZone bool) {
	if p.metrics != nil {
		p.metrics.ObserveRoute(peer, crossZone)
	}
}
