package fleet

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/internal/workload"
	"github.com/llmd/llmd/quota"
)

// arrive handles a workload item's arrival: a later turn waits for the
// previous one to finish.
func (d *driver) arrive(ctx context.Context, it workload.Item) error {
	if it.Turn > 0 {
		if c := d.convs[it.Conversation]; c != nil {
			switch {
			case c.busy:
				c.pending = append(c.pending, it)
				if f := c.flight; f != nil && !f.done && !f.watched {
					f.watched = true
					f.node.watched++
				}
				return nil
			case c.doneAt.After(d.now):
				// The previous turn ends in a step already run.
				d.deferTurn(c, c.doneAt, it)
				return nil
			}
		}
	}
	return d.issue(ctx, it)
}

// issue sends one turn now: quota, routing, submission.
func (d *driver) issue(ctx context.Context, it workload.Item) error {
	var conv *conversation
	if it.Turns > 1 {
		conv = d.convs[it.Conversation]
		if conv == nil {
			conv = &conversation{}
			d.convs[it.Conversation] = conv
		}
		conv.busy, conv.flight = true, nil
	}
	var prompt []int32
	if conv != nil && it.Turn > 0 && len(conv.history) > 0 {
		prompt = make([]int32, 0, len(conv.history)+it.InputTokens)
		prompt = d.prompts.user(append(prompt, conv.history...), it)
	} else {
		prompt = d.prompts.first(it)
	}
	inWindow := d.inWindow(d.now)
	if inWindow {
		d.arrived++
		d.offered += int64(it.OutputTokens)
	}
	d.seq++
	f := &flight{id: "r" + strconv.Itoa(d.seq), tenant: d.tenants[it.Tenant%len(d.tenants)], item: it,
		arrival: d.now, keep: conv != nil && it.Turn < it.Turns-1}
	if f.keep {
		f.prompt = prompt
	}
	if d.limiter != nil {
		dec, err := d.limiter.Reserve(ctx, quota.Request{ID: f.id, Tenant: f.tenant, Limits: *d.cfg.Quota,
			Tokens: int64(len(prompt) + it.OutputTokens)})
		if err != nil {
			return fmt.Errorf("fleet: quota: %w", err)
		}
		if !dec.Allowed {
			d.refuse("quota", inWindow)
			d.turnDone(f, d.now)
			return nil
		}
	}
	n, cached, err := d.route(prompt, it)
	if err != nil {
		return err
	}
	if origin := originZone(it.Conversation, d.cfg.Zones); n.zone != origin {
		f.crossZone = true
		if inWindow {
			d.crossZone++
		}
	}
	// Submit stamps the request with its node's clock: now, even if the
	// node's clock has run ahead to the end of the step in flight.
	ahead := n.clock.now
	n.clock.now = d.now
	st, err := n.eng.Submit(context.Background(), engine.Request{ID: f.id, Tenant: f.tenant, Prompt: prompt,
		MaxTokens: it.OutputTokens, N: 1, Priority: engine.PriorityPaid, Seed: it.Seed})
	n.clock.now = ahead
	var cle *engine.ContextLengthError
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		d.refuse("queue_full", inWindow)
	case errors.As(err, &cle):
		d.refuse("context_length", inWindow)
	case err != nil:
		return fmt.Errorf("fleet: %s: %w", n.id, err)
	}
	if err != nil {
		d.reconcile(f, 0)
		d.turnDone(f, d.now)
		return nil
	}
	f.node, f.stream = n, st
	if conv != nil {
		conv.flight = f
		if len(conv.pending) > 0 {
			f.watched = true
			n.watched++
		}
	}
	n.queued = append(n.queued, f)
	if it.Cancel {
		f.urgent = true
		n.urgent = append(n.urgent, f)
	}
	n.sinceView++
	n.inStep++
	// The router's belief: the prompt less the prefix it counted there.
	n.sinceTokens += len(prompt) - cached
	n.inStepTokens += len(prompt) - cached
	if inWindow {
		n.requests++
	}
	if !n.busy {
		d.startStep(ctx, n, d.now)
		return n.err
	}
	return nil
}

func (d *driver) refuse(reason string, inWindow bool) {
	if inWindow {
		d.refused[reason]++
	}
}

// route picks the node for a prompt by the configured policy, and returns
// the prompt tokens the router believes it holds.
func (d *driver) route(prompt []int32, it workload.Item) (*node, int, error) {
	if d.cfg.Route == cluster.PolicyRoundRobin {
		n := d.nodes[d.rr%len(d.nodes)]
		d.rr++
		d.count(cluster.ReasonRoundRobin)
		return n, 0, nil
	}
	for _, n := range d.nodes {
		if !n.busy && d.now.Sub(n.summaryAt) >= d.interval {
			n.takeSummary(d.now)
		}
		if n.fresh {
			d.pool.SetPrefixes(n.id, d.model, n.summary)
			n.fresh = false
		}
		d.pool.SetLoad(n.id, d.model, cluster.ModelLoad{
			Running:                n.view.Running,
			Waiting:                n.view.Waiting + n.view.Swapped + n.sinceView,
			KVUsage:                usage(n.view),
			QueuedPromptTokens:     n.view.QueuedPromptTokens + n.sinceTokens,
			PrefillTokensPerSecond: n.view.PrefillTokensPerSecond,
			BlockTokens:            n.view.BlockSize,
		})
	}
	bs := d.nodes[0].eng.BlockSize()
	req := cluster.RouteRequest{Model: d.model, LoadBound: d.cfg.LoadBound, LoadSlack: d.cfg.LoadSlack, Policy: d.cfg.Route,
		PromptTokens: len(prompt), BlockTokens: bs, Zone: originZone(it.Conversation, d.cfg.Zones)}
	if it.Turns > 1 {
		req.AffinityKey = "conversation-" + strconv.Itoa(it.Conversation)
	}
	switch d.cfg.Route {
	case cluster.PolicyPrefix, cluster.PolicyAffinity, cluster.PolicyCost:
		req.Prefix = kvcache.HashChain(prompt, bs)
	}
	cands := d.pool.Route(req, nil)
	if len(cands) == 0 {
		return nil, 0, errors.New("fleet: the router found no node")
	}
	c := cands[0]
	reason := c.Reason
	switch {
	case strings.HasPrefix(reason, cluster.ReasonPrefix):
		reason = "prefix"
	case reason == cluster.ReasonCost && c.PrefixBlocks > 0:
		reason = costPrefix
	}
	d.count(reason)
	for _, n := range d.nodes {
		if n.id == c.Member.ID {
			return n, min(c.PrefixBlocks*bs, len(prompt)), nil
		}
	}
	return nil, 0, fmt.Errorf("fleet: the router chose an unknown node %q", c.Member.ID)
}

// costPrefix counts the cost policy's choices of a member holding part
// of the prompt.
const costPrefix = "cost_prefix"

func (d *driver) count(reason string) {
	if d.inWindow(d.now) {
		d.routed[reason]++
	}
}

func usage(st engine.Stats) float64 {
	if st.BlocksTotal == 0 {
		return 0
	}
	return float64(st.BlocksUsed) / float64(st.BlocksTotal)
}

// turnDone moves f's conversation on at t, when the turn ended: its
// history grows by the turn, and the next turn, if it has already arrived,
// is due at t.
func (d *driver) turnDone(f *flight, t time.Time) {
	it := f.item
	if it.Turns <= 1 {
		return
	}
	c := d.convs[it.Conversation]
	if c == nil {
		return
	}
	c.busy, c.flight, c.doneAt = false, nil, t
	if it.Turn >= it.Turns-1 {
		delete(d.convs, it.Conversation)
		return
	}
	if f.prompt != nil {
		c.history = append(f.prompt, f.out...)
	}
	if len(c.pending) > 0 {
		next := c.pending[0]
		c.pending = c.pending[1:]
		d.deferTurn(c, t, next)
	}
}

// deferTurn schedules the next turn of c at t.
func (d *driver) deferTurn(c *conversation, t time.Time, it workload.Item) {
	c.busy = true
	d.pushes++
	heap.Push(&d.deferred, queued[workload.Item]{at: t, seq: d.pushes, v: it})
}
