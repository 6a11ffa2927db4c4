package tui

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// clusterFixture is the fixture seen from n1, a member of a cluster of six:
// n1 itself, n2 draining, n3 suspect, n4 dead, n5 left, n6 alive and
// nearly full.
func clusterFixture(at time.Time, generated uint64) *api.Snapshot {
	s := fixture(at, generated)
	load := func(kv ...float64) map[string]api.NodeModelLoad {
		out := map[string]api.NodeModelLoad{}
		for i, f := range kv {
			out[fmt.Sprintf("sim/m%d", i)] = api.NodeModelLoad{Running: 2 + i, Waiting: i, KVUsage: f}
		}
		return out
	}
	s.Cluster = []api.NodeInfo{
		{ID: "n1", APIAddr: "10.0.0.1:8700", Models: []string{"sim/small", "sim/mid"}, Status: "alive", Local: true,
			Load: map[string]api.NodeModelLoad{"sim/small": {Running: 3, Waiting: 2, KVUsage: 0.62},
				"sim/mid": {Running: 2, Waiting: 3, KVUsage: 0.92}}, PrefixKeys: 1234, Updated: at},
		{ID: "n2", APIAddr: "10.0.0.2:8700", Models: []string{"sim/m0"}, Status: "alive", Draining: true,
			Load: load(0.1), PrefixKeys: 40, Updated: at.Add(-2 * time.Second)},
		{ID: "n3", APIAddr: "10.0.0.3:8700", Models: []string{"sim/m0", "sim/m1"}, Status: "suspect",
			Load: load(0.5, 0.3), PrefixKeys: 512, Updated: at.Add(-12 * time.Second)},
		{ID: "n4", APIAddr: "10.0.0.4:8700", Models: []string{"sim/m0"}, Status: "dead",
			Load: load(0.2), PrefixKeys: 7, Updated: at.Add(-125 * time.Second)},
		{ID: "n5", APIAddr: "10.0.0.5:8700", Status: "left", Load: map[string]api.NodeModelLoad{}},
		{ID: "n6-with-a-rather-long-name", APIAddr: "[fd00::6]:8700", Models: []string{"sim/m0", "sim/m1", "sim/m2"},
			Status: "alive", Load: load(0.95, 0.4, 0.1), PrefixKeys: 25000, Updated: at.Add(-time.Second)},
	}
	return s
}

// feedCluster is feed with the cluster fixture.
func feedCluster(m *Top) {
	gen := uint64(100000)
	for i := range 12 {
		gen += 500
		at := t0.Add(time.Duration(i-11) * 5 * time.Second)
		send(m, snapshotMsg{snap: clusterFixture(at, gen), at: at})
	}
}

func TestTopClusterView(t *testing.T) {
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("%dx%d", sz.w, sz.h), func(t *testing.T) {
			m := newTestTop(t, &fakeTop{}, TopOptions{}, sz.w, sz.h)
			feedCluster(m)
			press(m, "4")
			requireScreen(t, m.View(), sz.w, sz.h)
		})
	}
}

// TestTopClusterRows: one row per member, worst status first (then by
// id), the local one marked, the load summed over models with KV the
// fullest model's.
func TestTopClusterRows(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 120, 40)
	feedCluster(m)
	press(m, "4")
	tbl := m.tables[viewNodes]
	require.Same(t, m.clusterTable, tbl)
	var ids []string
	for _, i := range tbl.view {
		ids = append(ids, tbl.rows[i].ID)
	}
	require.Equal(t, []string{"n4", "n3", "n5", "n2", "n1", "n6-with-a-rather-long-name"}, ids)
	col, desc := tbl.SortColumn()
	require.Equal(t, "STATUS", col)
	require.True(t, desc)

	row := func(id string) Row {
		for _, r := range tbl.rows {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("no row %s", id)
		return Row{}
	}
	n1 := row("n1")
	require.Equal(t, "n1 (this)", n1.Cells[memName].Text)
	require.Equal(t, "5", n1.Cells[memRunning].Text)
	require.Equal(t, "5", n1.Cells[memWaiting].Text)
	require.Equal(t, "92%", n1.Cells[memKV].Text)
	require.Equal(t, LevelCrit, n1.Cells[memKV].Level)
	require.Equal(t, "1.2k", n1.Cells[memPrefix].Text)
	require.Equal(t, "0s", n1.Cells[memUpdated].Text)
	require.Equal(t, "draining", row("n2").Cells[memStatus].Text)
	require.Equal(t, LevelWarn, row("n2").Cells[memStatus].Level)
	require.Equal(t, LevelWarn, row("n3").Cells[memStatus].Level)
	require.Equal(t, LevelCrit, row("n4").Cells[memStatus].Level)
	require.Equal(t, "2m05s", row("n4").Cells[memUpdated].Text)
	require.Equal(t, LevelWarn, row("n5").Cells[memStatus].Level)
	require.Equal(t, "-", row("n5").Cells[memKV].Text, "no load gossiped")
	require.Equal(t, "-", row("n5").Cells[memUpdated].Text, "no state yet")
	require.Equal(t, LevelOK, row("n6-with-a-rather-long-name").Cells[memStatus].Level)

	view := m.View()
	require.Contains(t, view, "cluster: 6 members, 3 alive")
	require.NotContains(t, view, notClustered)
	require.Contains(t, view, "4 nodes 6")
}

// TestTopClusterSwitch: the nodes view follows the snapshots from a node
// alone to a cluster and back, keeping its filter.
func TestTopClusterSwitch(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 80, 24)
	feed(m)
	press(m, "4")
	require.Contains(t, m.View(), "this node only: llmd is not clustered")
	m.tables[viewNodes].SetFilter("n")

	send(m, snapshotMsg{snap: clusterFixture(t0.Add(5*time.Second), 200000)})
	require.Same(t, m.clusterTable, m.tables[viewNodes])
	require.Equal(t, "n", m.tables[viewNodes].Filter())
	require.Contains(t, m.View(), "cluster: 6 members, 3 alive")
	require.Contains(t, m.View(), "filter n (6)")

	send(m, snapshotMsg{snap: fixture(t0.Add(10*time.Second), 200000)})
	require.Same(t, m.nodeTable, m.tables[viewNodes])
	require.Contains(t, m.View(), "this node only: llmd is not clustered")

	one := fixture(t0, 1)
	one.Cluster = []api.NodeInfo{{ID: "n1", Status: "alive", Local: true}}
	send(m, snapshotMsg{snap: one})
	require.Contains(t, m.View(), "cluster: 1 member, 1 alive")
}

func TestWriteSnapshotCluster(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, WriteSnapshot(&b, clusterFixture(t0, 123456)))
	require.NotContains(t, b.String(), "\x1b", "no escape sequences")
	require.Contains(t, b.String(), "(cluster: 6 members, 3 alive)\n")
	golden.RequireEqual(t, b.Bytes())
}
