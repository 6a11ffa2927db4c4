package cluster

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// reconnectBatch bounds the lost members one reconnect round dials.
const reconnectBatch = 8

// lost is a member memberlist declared dead (not left): where it was and
// when it went.
type lost struct {
	addr string
	at   time.Time
}

// reconnectLoop runs a reconnect round every ReconnectInterval, and waits
// for a round's joins before the next, until ctx ends.
func (c *Cluster) reconnectLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			round := c.reconnect(now)
			if round == nil {
				continue
			}
			select {
			case <-ctx.Done():
				// The shutdown ends the round's dials and waits for them.
				return
			case <-round:
			}
		}
	}
}

// reconnect starts one round: a memberlist Join of each target, all at
// once, each in a goroutine tracked by c.joins. The returned channel is
// closed when they are done; nil means there was nothing to do.
func (c *Cluster) reconnect(now time.Time) <-chan struct{} {
	lostAddrs, seeds := c.reconnectTargets(now)
	if len(lostAddrs)+len(seeds) == 0 {
		return nil
	}
	done := make(chan struct{})
	var round sync.WaitGroup
	join := func(addr string, seed bool) {
		round.Add(1)
		c.joins.Go(func() {
			defer round.Done()
			n, err := c.ml.Join([]string{addr})
			switch {
			case n > 0 && !seed:
				c.log.Info("reconnected to a lost member", "addr", addr)
			case n > 0:
				c.log.Debug("rejoined through a seed", "addr", addr)
			default:
				c.log.Debug("reconnect failed", "addr", addr, "seed", seed, "err", err)
			}
		})
	}
	for _, a := range lostAddrs {
		join(a, false)
	}
	for _, a := range seeds {
		join(a, true)
	}
	c.joins.Go(func() {
		round.Wait()
		close(done)
	})
	return done
}

// reconnectTargets returns the addresses of this round: up to
// reconnectBatch lost members, at random, and, while fewer members are
// alive than at the peak, the Join seeds that are neither lost members nor
// alive members (an alive seed is already in touch) nor this node. It
// forgets lost members past ReconnectTimeout, those whose last state said
// they were leaving, and those whose address an alive member now has (it
// restarted under another id); the first two also lower the peak. Once this
// node is leaving it returns nothing: a leaver rejoins no one.
func (c *Cluster) reconnectTargets(now time.Time) (lostAddrs, seeds []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leaving {
		return nil, nil
	}
	alive := make(map[string]bool)
	for _, e := range c.nodes {
		if e.meta != nil && !e.gone && e.addr != "" {
			alive[e.addr] = true
		}
	}
	for id, l := range c.lost {
		e := c.nodes[id]
		switch {
		case now.Sub(l.at) > c.cfg.ReconnectTimeout, e != nil && e.flags&flagLeaving != 0:
			delete(c.lost, id)
			c.lowerPeakLocked()
		case alive[l.addr]:
			delete(c.lost, id)
		default:
			lostAddrs = append(lostAddrs, l.addr)
		}
	}
	slices.Sort(lostAddrs)
	lostAddrs = slices.Compact(lostAddrs)
	rand.Shuffle(len(lostAddrs), func(i, j int) { lostAddrs[i], lostAddrs[j] = lostAddrs[j], lostAddrs[i] })
	if len(lostAddrs) > reconnectBatch {
		lostAddrs = lostAddrs[:reconnectBatch]
	}
	if int(c.numLive.Load()) < c.peak {
		for _, s := range c.cfg.Join {
			if !alive[s] && !slices.Contains(lostAddrs, s) && !slices.Contains(seeds, s) && !c.isSelf(s) {
				seeds = append(seeds, s)
			}
		}
	}
	return lostAddrs, seeds
}

// lowerPeakLocked lowers the peak by one member that is gone for good (it
// left, or was lost too long ago), never below the live count.
func (c *Cluster) lowerPeakLocked() {
	c.peak = max(c.peak-1, int(c.numLive.Load()))
}

// isSelf reports whether addr is one of this node's own addresses.
func (c *Cluster) isSelf(addr string) bool {
	return addr == c.cfg.BindAddr || addr == c.cfg.AdvertiseAddr || addr == c.addr
}
