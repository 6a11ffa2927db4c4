package cluster

import (
	"bytes"
	"time"

	"github.com/hashicorp/memberlist"
)

// The delegates are thin adapters: they decode, copy, and merge under
// Cluster.mu (queueing a relay in the TransmitLimitedQueue, which takes
// only its own lock); they never block or do I/O.
var (
	_ memberlist.Delegate       = (*delegate)(nil)
	_ memberlist.EventDelegate  = (*eventDelegate)(nil)
	_ memberlist.NamedBroadcast = (*broadcast)(nil)
	_ memberlist.Broadcast      = (*broadcast)(nil)
)

type delegate struct{ c *Cluster }

// NodeMeta returns the metadata checked by New; never more than limit.
func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.c.meta) > limit {
		return nil
	}
	return d.c.meta
}

// NotifyMsg merges a gossiped state record and queues it for relay when
// it is news. buf is reused by memberlist, so the relay gets a copy.
func (d *delegate) NotifyMsg(buf []byte) {
	c := d.c
	if len(buf) > 0 && buf[0] == kindControl {
		r, err := decodeControlMsg(buf)
		if err != nil {
			c.badMsgs.Add(1)
			return
		}
		c.receiveControl([]ControlRecord{r})
		return
	}
	kind, node, v, ok := peekHeader(buf)
	if !ok || kind != kindState {
		c.badMsgs.Add(1)
		return
	}
	// Cheap drop of what is not newer, before a full decode.
	c.mu.RLock()
	e := c.nodes[node]
	stale := node != c.id && e != nil && !v.newer(e.stateVer)
	c.mu.RUnlock()
	if stale {
		return
	}
	r, err := decodeGossip(buf)
	if err != nil {
		c.badMsgs.Add(1)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Relay news about live nodes; queued under mu so that relays about
	// one node are queued in version order.
	if c.mergeLocked(r, time.Now()) && !c.nodes[node].gone {
		c.queue.QueueBroadcast(&broadcast{node: node, msg: bytes.Clone(buf)})
	}
}

// GetBroadcasts hands memberlist the queued state messages that fit.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.c.queue.GetBroadcasts(overhead, limit)
}

// LocalState returns the push/pull state: every known node's state and
// summary records, then a page of control records.
func (d *delegate) LocalState(join bool) []byte {
	d.c.mu.RLock()
	recs := d.c.stateRecordsLocked()
	d.c.mu.RUnlock()
	n, page := d.c.controlPage()
	return encodePushPullV2(encodePushPull(recs), n, page)
}

// MergeRemoteState merges a peer's push/pull state and queues its control
// records for the store.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	c := d.c
	state, ctl, err := decodePushPullV2(buf)
	if err != nil {
		c.badMsgs.Add(1)
		return
	}
	recs, err := decodePushPull(state)
	if err != nil {
		c.badMsgs.Add(1)
		return
	}
	c.receiveControl(ctl)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		c.mergeLocked(r, now)
	}
}

type eventDelegate struct{ c *Cluster }

func (d *eventDelegate) NotifyJoin(n *memberlist.Node)   { d.c.handleJoin(n) }
func (d *eventDelegate) NotifyUpdate(n *memberlist.Node) { d.c.handleJoin(n) }
func (d *eventDelegate) NotifyLeave(n *memberlist.Node)  { d.c.handleLeave(n) }

// broadcast is one node's state message in the TransmitLimitedQueue; a
// newer one about the same node replaces it.
type broadcast struct {
	node   string
	msg    []byte
	notify chan struct{} // nil, or signalled (without blocking) when done
}

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(memberlist.NamedBroadcast)
	return ok && o.Name() == b.node
}

func (b *broadcast) Name() string    { return b.node }
func (b *broadcast) Message() []byte { return b.msg }

func (b *broadcast) Finished() {
	if b.notify != nil {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}
