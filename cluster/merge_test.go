package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// tableCluster is a Cluster with no memberlist, for merge and route tests.
func tableCluster(t *testing.T, id string) *Cluster {
	t.Helper()
	cfg := testConfig(id)
	cfg.setDefaults()
	meta, err := cfg.validate()
	require.NoError(t, err)
	return newCluster(cfg, meta)
}

// join tells c that memberlist saw node id serving models.
func join(c *Cluster, id string, models ...string) {
	c.handleJoin(&memberlist.Node{Name: id, Meta: (&nodeMeta{ID: id, APIAddr: "api-" + id, Models: models}).encode()})
}

func gossip(id string, v version, running int, flags byte) []byte {
	return appendRecord(nil, &record{Kind: kindState, Node: id, Version: v, Flags: flags,
		Models: []modelRecord{{Name: "m", Load: ModelLoad{Running: running}}}})
}

func TestMergeVersions(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	d := &delegate{c}
	join(c, "b", "m")
	running := func() int {
		m, ok := member(c, "b")
		require.True(t, ok)
		return m.State.Load["m"].Running
	}

	d.NotifyMsg(gossip("b", version{10, 5}, 5, 0))
	assert.Equal(t, 5, running())
	assert.Equal(t, 1, c.queue.NumQueued(), "news is queued for relay")

	d.NotifyMsg(gossip("b", version{10, 4}, 4, 0))
	d.NotifyMsg(gossip("b", version{10, 5}, 99, 0))
	d.NotifyMsg(gossip("b", version{9, 100}, 9, 0))
	assert.Equal(t, 5, running(), "older and equal versions are dropped")
	assert.Equal(t, 1, c.queue.NumQueued(), "stale messages are not relayed")

	d.NotifyMsg(gossip("b", version{10, 6}, 6, 0))
	assert.Equal(t, 6, running())
	d.NotifyMsg(gossip("b", version{11, 1}, 7, 0))
	assert.Equal(t, 7, running(), "a later epoch wins over any seq")
	assert.Equal(t, 1, c.queue.NumQueued(), "a newer message about a node replaces the queued one")

	// Push/pull merges by the same rule, idempotently, in any order.
	_, sum := stateRecords("b", version{11, 3}, State{Prefixes: map[string][]kvcache.Hash{"m": chain(1, 50)}}, BroadcastPrefixKeys)
	old := &record{Kind: kindState, Node: "b", Version: version{11, 0}, Models: []modelRecord{{Name: "m", Load: ModelLoad{Running: 1}}}}
	pp := encodePushPull([]*record{old, sum})
	d.MergeRemoteState(pp, false)
	d.MergeRemoteState(pp, false)
	m, _ := member(c, "b")
	assert.Equal(t, 7, m.State.Load["m"].Running)
	assert.Len(t, m.State.Prefixes["m"], 50, "the summary register took the full keys")
	assert.Equal(t, prefixKey(chain(1, 50)[49]), m.State.Prefixes["m"][49].Hi)
	assert.Zero(t, m.State.Prefixes["m"][49].Lo, "remote hashes carry 64 bits")

	assert.Zero(t, c.BadMessages())
	d.NotifyMsg([]byte{1, 2, 3})
	d.MergeRemoteState([]byte{3, 9}, true)
	assert.Equal(t, uint64(2), c.BadMessages())
}

// TestRestartAccepted: a node that restarts with a lower version (its
// clock went back) is accepted again, both after it was seen gone (the
// versions are forgotten on rejoin) and when it hears of its old self
// (it raises its epoch past it, like memberlist's refute).
func TestRestartAccepted(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	d := &delegate{c}
	join(c, "b", "m")
	d.NotifyMsg(gossip("b", version{1000, 50}, 1, 0))

	c.handleLeave(&memberlist.Node{Name: "b"})
	m, _ := member(c, "b")
	assert.Equal(t, StatusDead, m.Status)
	join(c, "b", "m")
	d.NotifyMsg(gossip("b", version{10, 1}, 2, 0))
	m, _ = member(c, "b")
	assert.Equal(t, StatusAlive, m.Status)
	assert.Equal(t, 2, m.State.Load["m"].Running, "the restarted node's lower version is accepted after rejoin")

	// This node hears of itself at a later version than its own.
	self := tableCluster(t, "b")
	self.cfg.epoch = 5
	self.ver = version{Epoch: 5}
	self.tick(time.Now())
	d2 := &delegate{self}
	d2.NotifyMsg(gossip("b", version{1000, 50}, 1, 0))
	self.tick(time.Now())
	assert.Equal(t, version{1001, 1}, self.ver, "refuted: the next publication jumps past its old self")
	d2.NotifyMsg(gossip("b", self.ver, 0, 0))
	self.tick(time.Now())
	assert.Equal(t, version{1001, 1}, self.ver, "its own message relayed back changes nothing")
	d2.MergeRemoteState(encodePushPull([]*record{{Kind: kindState, Node: "b", Version: version{3000, 1}}}), false)
	self.tick(time.Now())
	assert.Equal(t, version{3001, 1}, self.ver)
}

func TestLeavingFlagMeansLeft(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	d := &delegate{c}
	join(c, "b", "m")
	join(c, "x", "m")
	d.NotifyMsg(gossip("b", version{1, 1}, 0, flagLeaving|flagDraining))
	c.handleLeave(&memberlist.Node{Name: "b"})
	c.handleLeave(&memberlist.Node{Name: "x"})
	b, _ := member(c, "b")
	x, _ := member(c, "x")
	assert.Equal(t, StatusLeft, b.Status)
	assert.Equal(t, StatusDead, x.Status)
	assert.Equal(t, 1, c.NumAlive())
}

func TestMalformedMemberIgnored(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	c.handleJoin(&memberlist.Node{Name: "evil", Meta: []byte{1, 0xff}})
	c.handleJoin(&memberlist.Node{Name: "liar", Meta: (&nodeMeta{ID: "other"}).encode()})
	assert.Len(t, c.Members(), 1)
	assert.Equal(t, uint64(2), c.BadMessages())
}

func TestSuspectAndMarkFailed(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	c.cfg.SuspectAfter = 50 * time.Millisecond
	d := &delegate{c}
	join(c, "b", "m")
	join(c, "c", "m")
	d.NotifyMsg(gossip("b", version{1, 1}, 0, 0))
	d.NotifyMsg(gossip("c", version{1, 1}, 0, 0))
	c.MarkFailed("c")
	c.MarkFailed("self")
	m, _ := member(c, "c")
	assert.Equal(t, StatusSuspect, m.Status, "evicted locally")
	assert.Len(t, c.Route(RouteRequest{Model: "m"}, nil), 1+1)

	require.Eventually(t, func() bool {
		m, _ = member(c, "b")
		return m.Status == StatusSuspect
	}, 5*time.Second, 5*time.Millisecond, "no state for SuspectAfter")
	assert.Equal(t, 3, c.NumAlive(), "suspect members still count as live")
	d.NotifyMsg(gossip("b", version{1, 2}, 0, 0))
	m, _ = member(c, "b")
	assert.Equal(t, StatusAlive, m.Status, "a newer state clears it")
}

func TestPruneForgetsGone(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	join(c, "b", "m")
	d := &delegate{c}
	d.NotifyMsg(gossip("stranger", version{1, 1}, 0, 0))
	c.handleLeave(&memberlist.Node{Name: "b"})
	c.prune(time.Now())
	assert.Len(t, c.Members(), 2, "kept while recent")
	c.prune(time.Now().Add(time.Hour))
	assert.Len(t, c.Members(), 1)
	c.mu.RLock()
	defer c.mu.RUnlock()
	assert.Len(t, c.nodes, 1, "records of nodes that never joined are dropped too")
	assert.Equal(t, []string{"self"}, c.ring.ids)
}

// TestFuzzSeedsCurrent: the valid seeds under testdata still decode, so the
// corpus follows the wire format.
func TestFuzzSeedsCurrent(t *testing.T) {
	t.Parallel()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecode", name))
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Len(t, lines, 2)
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		require.NoError(t, err)
		return []byte(s)
	}
	_, err := decodeGossip(read("state"))
	require.NoError(t, err)
	_, err = decodeRecord(read("summary"))
	require.NoError(t, err)
	recs, err := decodePushPull(read("pushpull"))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	_, err = decodeMeta("a", read("meta"))
	require.NoError(t, err)
	_, err = decodeGossip(read("state-nan"))
	require.ErrorIs(t, err, errMalformed)
}
