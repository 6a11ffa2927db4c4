package cluster

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// partition cuts the nodes of each group off from those of every other
// group, both ways, through the transport's test hook: packets to them
// vanish and dials to them hang, as behind a dropping firewall.
func partition(groups ...[]*Cluster) {
	for i, g := range groups {
		var others []string
		for j, h := range groups {
			if j != i {
				for _, c := range h {
					others = append(others, c.Addr())
				}
			}
		}
		for _, c := range g {
			c.tr.block(others...)
		}
	}
}

// heal lifts every block.
func heal(nodes ...*Cluster) {
	for _, c := range nodes {
		c.tr.block()
	}
}

// allAlive reports whether every node lists exactly the ids in want, all
// alive.
func allAlive(nodes []*Cluster, want int) bool {
	for _, c := range nodes {
		ms := c.Members()
		if len(ms) != want {
			return false
		}
		for _, m := range ms {
			if m.Status != StatusAlive {
				return false
			}
		}
	}
	return true
}

// TestHealAfterPartition is CL-3 in process: five nodes split {a,b} /
// {c,d,e} by the transport hook see each other dead, then forgotten by the
// table, and after the heal the reconnect loop brings all five back alive
// everywhere within 5 s.
func TestHealAfterPartition(t *testing.T) {
	var nodes []*Cluster
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		var join []string
		if len(nodes) > 0 {
			join = []string{nodes[0].Addr()}
		}
		nodes = append(nodes, startNode(t, testConfig(id, join...)))
	}
	eventually(t, func() bool { return allAlive(nodes, 5) }, 5*time.Second, "five nodes converge")

	left, right := nodes[:2], nodes[2:]
	start := time.Now()
	partition(left, right)
	sees := func(c *Cluster, ids []*Cluster, ok func(Member, bool) bool) bool {
		for _, o := range ids {
			if !ok(member(c, o.ID())) {
				return false
			}
		}
		return true
	}
	dead := func(m Member, ok bool) bool { return ok && m.Status == StatusDead }
	eventually(t, func() bool {
		for _, c := range left {
			if !sees(c, right, dead) {
				return false
			}
		}
		for _, c := range right {
			if !sees(c, left, dead) {
				return false
			}
		}
		return true
	}, 5*time.Second, "each side sees the other dead")
	t.Logf("CL-3 (in process): each side saw the other dead %v after the partition", time.Since(start))
	for _, c := range nodes {
		assert.Equal(t, map[bool]int{true: 2, false: 3}[slices.Contains(left, c)], c.NumAlive(), "%s", c.ID())
	}
	// Long enough for memberlist to reap the dead and the table to forget
	// them: only the lost-member list remembers where they were.
	gone := func(m Member, ok bool) bool { return !ok }
	eventually(t, func() bool { return sees(left[0], right, gone) && sees(right[0], left, gone) },
		10*time.Second, "the dead are pruned from the tables")
	// Heal halfway through a round of reconnect dials, which hang for
	// TCPTimeout (2 s) while the partition lasts: the next round heals.
	time.Sleep(time.Second)

	healed := time.Now()
	heal(nodes...)
	eventually(t, func() bool { return allAlive(nodes, 5) }, 5*time.Second, "all five alive everywhere after the heal")
	t.Logf("CL-3 (in process): partitioned for %v; all 5 alive on all 5 nodes %v after the heal",
		healed.Sub(start).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
}

// TestReconnectToRestartedNode: a node that failed and comes back on the
// same address without joining anyone is found by the reconnect loop of
// the node that lost it.
func TestReconnectToRestartedNode(t *testing.T) {
	na := startNode(t, testConfig("a"))
	bcfg := testConfig("b", na.Addr())
	nb := startNode(t, bcfg)
	eventually(t, func() bool { return allAlive([]*Cluster{na, nb}, 2) }, 5*time.Second, "a and b see each other")

	require.NoError(t, nb.Kill())
	eventually(t, func() bool { m, _ := member(na, "b"); return m.Status == StatusDead }, 5*time.Second, "a sees b dead")
	bcfg.BindAddr, bcfg.Join = nb.Addr(), nil
	start := time.Now()
	nb = startNode(t, bcfg)
	eventually(t, func() bool { return allAlive([]*Cluster{na, nb}, 2) }, 5*time.Second, "a reconnects to the restarted b")
	t.Logf("restarted b rejoined by a's reconnect loop after %v", time.Since(start))
}

// TestNoReconnectToLeaver: a node that left is not lost: nobody dials it
// again (it still runs memberlist here, so a join would bring it back),
// and the peak drops with it, so no seed is tried either.
func TestNoReconnectToLeaver(t *testing.T) {
	na := startNode(t, testConfig("a"))
	nb := startNode(t, testConfig("b", na.Addr()))
	nc, stopC := runNode(t, testConfig("c", na.Addr()))
	eventually(t, func() bool { return allAlive([]*Cluster{na, nb, nc}, 3) }, 5*time.Second, "three nodes converge")

	// leave, not the end of Run: c leaves but keeps memberlist running.
	require.NoError(t, nc.leave(time.Second))
	for _, c := range []*Cluster{na, nb} {
		eventually(t, func() bool { m, _ := member(c, "c"); return m.Status == StatusLeft }, 5*time.Second, "%s sees c left", c.ID())
	}
	deadline := time.Now().Add(3 * na.cfg.ReconnectInterval)
	for time.Now().Before(deadline) {
		for _, c := range []*Cluster{na, nb} {
			lost, seeds := c.reconnectTargets(time.Now())
			require.Empty(t, lost, "%s lost nobody", c.ID())
			require.Empty(t, seeds, "%s tries no seed", c.ID())
			m, ok := member(c, "c")
			require.True(t, !ok || m.Status == StatusLeft, "%s sees c %s", c.ID(), m.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, stopC())
}

// TestReconnectTargets checks the bookkeeping without memberlist: who is
// lost, who is given up, and when the seeds are tried.
func TestReconnectTargets(t *testing.T) {
	cfg := testConfig("self", "10.0.0.1:7946", "seed.example:7946", "10.0.0.9:7946")
	cfg.setDefaults()
	cfg.AdvertiseAddr = "10.0.0.9:7946" // this node: never its own seed
	c := newCluster(cfg, nil)
	node := func(id string, last byte) *memberlist.Node {
		meta := nodeMeta{ID: id, Models: []string{"m"}}
		return &memberlist.Node{Name: id, Addr: net.IPv4(10, 0, 0, last), Port: 7946, Meta: meta.encode()}
	}
	for i, id := range []string{"a", "b", "c", "d"} {
		c.handleJoin(node(id, byte(i+1)))
	}
	now := time.Now()
	lost, seeds := c.reconnectTargets(now)
	assert.Empty(t, lost)
	assert.Empty(t, seeds, "at the peak")
	assert.Equal(t, 5, c.peak)

	// b fails; c fails after saying it was leaving (it left); d fails.
	c.handleLeave(node("b", 2))
	c.mu.Lock()
	c.nodes["c"].flags |= flagLeaving
	c.mu.Unlock()
	c.handleLeave(node("c", 3))
	c.handleLeave(node("d", 4))
	lost, seeds = c.reconnectTargets(now)
	assert.ElementsMatch(t, []string{"10.0.0.2:7946", "10.0.0.4:7946"}, lost, "b and d are lost, c left")
	assert.Equal(t, []string{"seed.example:7946"}, seeds, "2 alive of a peak of 4: seeds that are neither alive members nor this node")
	assert.Equal(t, 4, c.peak, "c's leave lowered the peak")

	// d's leaving state arrives late: d is given up.
	c.mu.Lock()
	c.nodes["d"].flags |= flagLeaving
	c.mu.Unlock()
	lost, _ = c.reconnectTargets(now)
	assert.Equal(t, []string{"10.0.0.2:7946"}, lost)
	assert.Equal(t, 3, c.peak)

	// b comes back: nothing lost, at the peak again.
	c.handleJoin(node("b", 2))
	lost, seeds = c.reconnectTargets(now)
	assert.Empty(t, lost)
	assert.Empty(t, seeds)

	// b fails again and a newcomer takes its address: b is dropped.
	c.handleLeave(node("b", 2))
	c.handleJoin(node("b2", 2))
	lost, _ = c.reconnectTargets(now)
	assert.Empty(t, lost, "another member answers at b's address")

	// a fails and stays away past ReconnectTimeout: given up.
	c.handleLeave(node("a", 1))
	lost, _ = c.reconnectTargets(now)
	assert.Equal(t, []string{"10.0.0.1:7946"}, lost)
	lost, seeds = c.reconnectTargets(now.Add(cfg.ReconnectTimeout + time.Second))
	assert.Empty(t, lost)
	assert.Empty(t, seeds, "the peak fell with a")
	assert.Equal(t, 2, c.peak)

	// Many lost at once: a round dials at most reconnectBatch of them.
	for i := range 20 {
		id := fmt.Sprintf("x%d", i)
		c.handleJoin(node(id, byte(100+i)))
		c.handleLeave(node(id, byte(100+i)))
	}
	lost, _ = c.reconnectTargets(now)
	assert.Len(t, lost, reconnectBatch)
}
