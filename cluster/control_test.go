package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memControl is a ControlStore in memory: the newer version wins.
type memControl struct {
	mu      sync.Mutex
	recs    map[controlKey]ControlRecord
	applies int
}

func newMemControl() *memControl { return &memControl{recs: map[controlKey]ControlRecord{}} }

func (m *memControl) ControlRecords(context.Context) ([]ControlRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ControlRecord, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r)
	}
	return out, nil
}

func (m *memControl) ApplyControl(_ context.Context, recs []ControlRecord) ([]ControlRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applies++
	var changed []ControlRecord
	for _, r := range recs {
		if old, ok := m.recs[keyOf(&r)]; ok && !r.Version.After(old.Version) {
			continue
		}
		m.recs[keyOf(&r)] = r
		changed = append(changed, r)
	}
	return changed, nil
}

// put makes a local change and returns its record.
func (m *memControl) put(kind, id, node string, wall int64, payload string) ControlRecord {
	r := ControlRecord{Kind: kind, ID: id, Version: ControlVersion{Wall: wall, Node: node}, Payload: []byte(payload)}
	m.mu.Lock()
	m.recs[keyOf(&r)] = r
	m.mu.Unlock()
	return r
}

func (m *memControl) get(kind, id string) (ControlRecord, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[controlKey{kind, id}]
	return r, ok
}

func TestControlWireRoundTrip(t *testing.T) {
	t.Parallel()
	recs := []ControlRecord{
		{Kind: "key", ID: "llmd-abcdefg", Version: ControlVersion{Wall: 1700000000000, Logical: 3, Node: "node-a"},
			Payload: []byte(`{"tenant":"acme"}`)},
		{Kind: "quota", ID: "acme", Version: ControlVersion{Wall: 1, Node: "b"}, Deleted: true, Payload: []byte(`{}`)},
	}
	for _, r := range recs {
		msg := encodeControlMsg(&r)
		require.NotNil(t, msg)
		got, err := decodeControlMsg(msg)
		require.NoError(t, err)
		assert.Equal(t, r, got)
		// Every truncation and every flipped byte is an error or a record,
		// never a panic.
		for i := range msg {
			_, err := decodeControlMsg(msg[:i])
			assert.Error(t, err, "truncated at %d", i)
			bad := bytes.Clone(msg)
			bad[i] ^= 0xff
			_, _ = decodeControlMsg(bad)
		}
	}
	var page []byte
	for _, r := range recs {
		page = appendSized(page, appendControlRecord(nil, &r))
	}
	state := encodePushPull(nil)
	buf := encodePushPullV2(state, len(recs), page)
	gotState, got, err := decodePushPullV2(buf)
	require.NoError(t, err)
	assert.Equal(t, state, gotState)
	assert.Equal(t, recs, got)
	for i := range buf {
		_, _, err := decodePushPullV2(buf[:i])
		assert.Error(t, err, "truncated at %d", i)
	}
	// A node without control records sends the old state: accepted.
	gotState, got, err = decodePushPullV2(state)
	require.NoError(t, err)
	assert.Equal(t, state, gotState)
	assert.Empty(t, got)

	big := ControlRecord{Kind: "key", ID: "x", Version: ControlVersion{Node: "n"}, Payload: make([]byte, MaxBroadcastBytes)}
	assert.Nil(t, encodeControlMsg(&big), "too big to gossip: push/pull only")
}

// TestControlPagesCoverEverything: a set larger than one push/pull page
// goes out in successive pages that together hold every record.
func TestControlPagesCoverEverything(t *testing.T) {
	t.Parallel()
	store := newMemControl()
	const n = 150 // 150 x 8 KiB: two pages
	for i := range n {
		store.put("key", fmt.Sprintf("k%03d", i), "a", 1, string(make([]byte, 8<<10)))
	}
	cfg := testConfig("a")
	cfg.Control = store
	cfg.setDefaults()
	c := newCluster(cfg, nil)
	require.NoError(t, c.loadControl(t.Context()))
	seen := map[string]int{}
	for range 3 {
		count, page := c.controlPage()
		require.LessOrEqual(t, len(page), maxControlPageBytes)
		_, recs, err := decodePushPullV2(encodePushPullV2(encodePushPull(nil), count, page))
		require.NoError(t, err)
		require.Less(t, len(recs), n, "one page does not hold them all")
		for _, r := range recs {
			seen[r.ID]++
		}
	}
	assert.Len(t, seen, n, "three pages hold every record")
}

// controlNode starts a node replicating store.
func controlNode(t *testing.T, id string, store *memControl, join ...string) (*Cluster, func() error) {
	t.Helper()
	cfg := testConfig(id, join...)
	cfg.Control = store
	return runNode(t, cfg)
}

func TestControlRecordsReachEveryNode(t *testing.T) {
	t.Parallel()
	stores := []*memControl{newMemControl(), newMemControl(), newMemControl()}
	// a holds a record before anyone joins: push/pull brings it.
	early := stores[0].put("tenant", "acme", "a", 10, "free")
	a, _ := controlNode(t, "a", stores[0])
	b, _ := controlNode(t, "b", stores[1], a.Addr())
	c, _ := controlNode(t, "c", stores[2], a.Addr())
	nodes := []*Cluster{a, b, c}
	held := func(i int, want ControlRecord) bool {
		r, ok := stores[i].get(want.Kind, want.ID)
		return ok && r.Version == want.Version && bytes.Equal(r.Payload, want.Payload)
	}
	for i := range nodes {
		eventually(t, func() bool { return held(i, early) }, 10*time.Second, "node %d got the early record", i)
	}

	// A change on c is gossiped at once.
	start := time.Now()
	rev := stores[2].put("key", "k1", "c", 20, "revoked")
	c.PublishControl([]ControlRecord{rev})
	for i := range nodes {
		eventually(t, func() bool { return held(i, rev) }, 5*time.Second, "node %d got the revocation", i)
	}
	t.Logf("a record reached 3 nodes in %v", time.Since(start))

	// An older record is handed to the store (which may merge it) and
	// changes nothing here; the same record again is not even handed over.
	stores[1].mu.Lock()
	before := stores[1].applies
	stores[1].mu.Unlock()
	old := rev
	old.Version.Wall = 5
	b.receiveControl([]ControlRecord{old})
	b.receiveControl([]ControlRecord{rev})
	eventually(t, func() bool {
		stores[1].mu.Lock()
		defer stores[1].mu.Unlock()
		return stores[1].applies == before+1
	}, 5*time.Second, "the older record went to the store")
	assert.True(t, held(1, rev))

	// A node joining later gets everything through push/pull.
	d, _ := controlNode(t, "d", newMemControl(), b.Addr())
	eventually(t, func() bool { return d.ControlStats().Held == 2 }, 10*time.Second, "d holds both records")
	for _, n := range append(nodes, d) {
		assert.Zero(t, n.BadMessages(), n.ID())
	}
}

// TestControlRestartedNodeConverges: a node stopped while records change
// elsewhere, restarted on its old state (same store), catches up; and its
// own change made while it was away (read from the store at start)
// reaches the others.
func TestControlRestartedNodeConverges(t *testing.T) {
	t.Parallel()
	sa, sb := newMemControl(), newMemControl()
	a, _ := controlNode(t, "a", sa)
	b, _ := controlNode(t, "b", sb, a.Addr())
	eventually(t, func() bool { return a.NumAlive() == 2 }, 10*time.Second, "joined")
	require.NoError(t, b.Kill())

	r1 := sa.put("quota", "acme", "a", 30, "rpm=5")
	a.PublishControl([]ControlRecord{r1})
	r2 := sb.put("tier", "free", "b", 31, "rpm=9") // written offline on b
	b2, _ := controlNode(t, "b", sb, a.Addr())
	eventually(t, func() bool { _, ok := sb.get("quota", "acme"); return ok }, 10*time.Second, "b caught up")
	eventually(t, func() bool { _, ok := sa.get("tier", "free"); return ok }, 10*time.Second, "a got b's change")
	got, _ := sa.get("tier", "free")
	assert.Equal(t, r2.Version, got.Version)
	recsA, _ := sa.ControlRecords(t.Context())
	recsB, _ := sb.ControlRecords(t.Context())
	sortRecs := func(rs []ControlRecord) {
		slices.SortFunc(rs, func(x, y ControlRecord) int { return bytes.Compare([]byte(x.ID), []byte(y.ID)) })
	}
	sortRecs(recsA)
	sortRecs(recsB)
	assert.Equal(t, recsA, recsB)
	assert.Equal(t, 2, b2.ControlStats().Held)
}

// TestControlConvergesAfterPartition: {a,b} and {c} cut apart by the
// transport hook each change records; once healed, the reconnect loop's
// push/pull brings every node to the same records without anyone acting.
func TestControlConvergesAfterPartition(t *testing.T) {
	t.Parallel()
	stores := []*memControl{newMemControl(), newMemControl(), newMemControl()}
	a, _ := controlNode(t, "a", stores[0])
	b, _ := controlNode(t, "b", stores[1], a.Addr())
	c, _ := controlNode(t, "c", stores[2], a.Addr())
	nodes := []*Cluster{a, b, c}
	eventually(t, func() bool { return allAlive(nodes, 3) }, 10*time.Second, "three nodes converge")

	partition([]*Cluster{a, b}, []*Cluster{c})
	eventually(t, func() bool { return a.NumAlive() == 2 && c.NumAlive() == 1 }, 10*time.Second, "split")
	left := stores[0].put("key", "k1", "a", 100, "granted")
	a.PublishControl([]ControlRecord{left})
	right := stores[2].put("key", "k1", "c", 101, "revoked") // newer, on the other side
	c.PublishControl([]ControlRecord{right})
	onlyRight := stores[2].put("quota", "acme", "c", 102, "rpm=1")
	c.PublishControl([]ControlRecord{onlyRight})
	eventually(t, func() bool { r, ok := stores[1].get("key", "k1"); return ok && r.Version == left.Version },
		5*time.Second, "b got a's change")
	_, ok := stores[1].get("quota", "acme")
	require.False(t, ok, "nothing crosses the partition")

	healed := time.Now()
	heal(nodes...)
	for i := range stores {
		eventually(t, func() bool {
			k, ok1 := stores[i].get("key", "k1")
			_, ok2 := stores[i].get("quota", "acme")
			return ok1 && ok2 && k.Version == right.Version
		}, 15*time.Second, "node %d converged", i)
	}
	t.Logf("control records converged %v after the heal", time.Since(healed).Round(time.Millisecond))
}
