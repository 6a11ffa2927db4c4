package tui

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

func TestRateHistory(t *testing.T) {
	t.Parallel()
	var h rateHistory
	require.Equal(t, 0.0, h.current())
	h.add(t0, 1000)
	require.Equal(t, 0.0, h.current(), "one snapshot gives no rate")
	h.add(t0.Add(2*time.Second), 1100)
	require.Equal(t, 50.0, h.current())
	h.add(t0.Add(2*time.Second), 5000) // not newer: ignored
	require.Equal(t, 50.0, h.current())
	h.add(t0.Add(3*time.Second), 1400)
	require.Equal(t, 300.0, h.current())

	// Six buckets of 10 s over the minute before the last snapshot: only
	// the last holds samples, weighted by overlap (2 s at 50, 1 s at 300).
	b := h.buckets(6)
	for _, v := range b[:5] {
		require.True(t, math.IsNaN(v))
	}
	require.InDelta(t, (2*50.0+300)/3, b[5], 1e-9)
	require.Equal(t, "     █", sparkline(b))

	// A counter that goes down (llmd restarted) starts again.
	h.add(t0.Add(4*time.Second), 10)
	require.Equal(t, 0.0, h.current())
	h.add(t0.Add(5*time.Second), 20)
	require.Equal(t, 10.0, h.current())
	require.Len(t, h.samples, 1)

	// Samples older than a minute are dropped.
	h.add(t0.Add(2*time.Minute), 20)
	require.Len(t, h.samples, 1)
	require.Equal(t, 0.0, h.current())
}

func TestRateTrackerForgetsModels(t *testing.T) {
	t.Parallel()
	rt := newRateTracker()
	rt.observe(fixture(t0, 100), t0)
	rt.observe(fixture(t0.Add(time.Second), 300), t0.Add(time.Second))
	require.Equal(t, 200.0, rt.current("sim/small"))
	s := fixture(t0.Add(2*time.Second), 400)
	s.Models = s.Models[:1]
	rt.observe(s, t0.Add(2*time.Second))
	require.NotContains(t, rt.byModel, "sim/mid")
	require.Equal(t, 20, len([]rune(rt.spark("sim/small", 20))))
	require.Equal(t, strings.Repeat(" ", 5), rt.spark("unknown", 5))
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0: "-", 0.0005: "500µs", 0.12: "120ms", 1.234: "1.23s", 12.34: "12.3s", 125: "2m05s"} {
		require.Equal(t, want, fmtLatency(in), "latency %v", in)
	}
	for in, want := range map[float64]string{5: "5s", 185: "3m05s", 3725: "1h02m", 2*86400 + 3*3600: "2d03h"} {
		require.Equal(t, want, fmtAge(in), "age %v", in)
	}
	for in, want := range map[float64]string{999: "999", 12345: "12.3k", 456789: "456k", 4.5e6: "4.5M", 2e9: "2.0G"} {
		require.Equal(t, want, fmtCount(in), "count %v", in)
	}
	for in, want := range map[float64]string{0: "-", 7.54: "7.5", 512.4: "512", 12345: "12.3k"} {
		require.Equal(t, want, fmtRate(in), "rate %v", in)
	}
	require.Equal(t, []int{3, 1, 6}, cells(10, 30, 5, 65))
	require.Equal(t, []int{1, 9}, cells(10, 0.02, 0.98), "a part above 0 shows")
	require.Equal(t, []int{0, 10}, cells(10, 0, 1))
	require.Equal(t, "██░░░", burnBar(0.4, 5))
	require.Equal(t, "▁▅█ ", sparkline([]float64{0, 5, 10, math.NaN()}))
}

func TestTableLayout(t *testing.T) {
	t.Parallel()
	cols := []Column{
		{Title: "NAME", Width: 6, Flex: true, Max: 10},
		{Title: "A", Width: 4, Right: true, Numeric: true},
		{Title: "B", Width: 4, Drop: 1},
		{Title: "C", Width: 4, Drop: 2},
	}
	tbl := NewTable(testStyles(), DefaultKeyMap().Top, cols, 0, false, "empty")
	tbl.SetRows([]Row{
		{ID: "r1", Cells: []Cell{{Text: "a-very-long-name"}, {Text: "1", Num: 1}, {Text: "b1"}, {Text: "c1"}}},
		{ID: "r2", Cells: []Cell{{Text: "short"}, {Text: "22", Num: 22}, {Text: "b2"}, {Text: "c2"}}},
	})
	for _, c := range []struct {
		width int
		want  string
	}{
		// marker 2 + NAME 6 + A 4 + B 4 + C 4 + 3 gaps = 23: all fit.
		{23, "  NAME▲     A B    C   \n▶ a-ver…    1 b1   c1  \n  short    22 b2   c2  "},
		// C (Drop 2) goes first; NAME takes the room left, up to its Max.
		{22, "  NAME▲         A B   \n▶ a-very-lo…    1 b1  \n  short        22 b2  "},
		{17, "  NAME▲         A\n▶ a-very-lo…    1\n  short        22"},
		{16, "  NAME▲        A\n▶ a-very-l…    1\n  short       22"},
		// Wide: NAME stops at its Max of 10, the rest stays blank.
		{40, "  NAME▲         A B    C                \n▶ a-very-lo…    1 b1   c1               \n  short        22 b2   c2               "},
	} {
		tbl.SetSize(c.width, 3)
		require.Equal(t, c.want, tbl.View(), "width %d", c.width)
	}
}

func TestTableNavigation(t *testing.T) {
	t.Parallel()
	tbl := NewTable(testStyles(), DefaultKeyMap().Top, []Column{{Title: "N", Width: 4}}, 0, false, "no rows")
	var rows []Row
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		rows = append(rows, Row{ID: id, Cells: []Cell{{Text: id}}})
	}
	tbl.SetRows(rows)
	tbl.SetSize(10, 4) // header + 3 rows
	sel := func() string {
		r, _ := tbl.Selected()
		return r.ID
	}
	require.Equal(t, "a", sel())
	tbl.Update(keyMsg("down"))
	tbl.Update(keyMsg("j"))
	require.Equal(t, "c", sel())
	tbl.Update(keyMsg("G"))
	require.Equal(t, "g", sel())
	require.Contains(t, tbl.View(), "▶ g")
	require.NotContains(t, tbl.View(), " a ")
	tbl.Update(keyMsg("pgup"))
	require.Equal(t, "e", sel())
	tbl.Update(keyMsg("g"))
	require.Equal(t, "a", sel())

	// The selected row leaves: the selection stays at its position.
	tbl.Update(keyMsg("down"))
	tbl.SetRows(append(rows[:1:1], rows[2:]...))
	require.Equal(t, "c", sel())
	tbl.SetRows(nil)
	_, ok := tbl.Selected()
	require.False(t, ok)
	require.Contains(t, tbl.View(), "no rows")
}

func TestWriteSnapshot(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, WriteSnapshot(&b, fixture(t0, 123456)))
	require.NotContains(t, b.String(), "\x1b", "no escape sequences")
	for i, l := range strings.Split(b.String(), "\n") {
		require.LessOrEqual(t, len(l), PlainWidth, "line %d is too wide: %q", i, l)
	}
	golden.RequireEqual(t, b.Bytes())

	b.Reset()
	require.NoError(t, WriteSnapshot(&b, &api.Snapshot{}))
	require.Contains(t, b.String(), "REQUESTS\nID")
	require.Contains(t, b.String(), "(none)")
}

// TestHeaderRolloutsAndSafety: the header shows a running canary with its
// shares, a rolled-back one with its reason, and the safety check's
// figures.
func TestHeaderRolloutsAndSafety(t *testing.T) {
	h := NewHeader(testStyles())
	h.SetSize(160, 20)
	h.SetData(&api.Snapshot{Models: []api.ModelSnapshot{{EngineStats: api.EngineStats{Model: "sim/a"}}},
		Rollouts: []api.RolloutBrief{
			{Alias: "chat", Stable: "sim/a", Canary: "sim/b", State: "running", Percent: map[string]float64{"free": 5, "paid": 1}},
			{Alias: "code", Stable: "sim/c", Canary: "sim/d", State: "rolled_back", Reason: "error rate 0.5 vs 0.0",
				Shadow: "sim/e", ShadowPercent: 10},
		},
		Safety: &api.SafetyStats{Checks: 10, Flagged: 2, Blocked: 1, P50Ms: 3.5, P95Ms: 9}}, nil)
	view := ansi.Strip(h.View())
	require.Contains(t, view, "rollout chat stable sim/a canary sim/b free 5% paid 1%")
	require.Contains(t, view, "rollout code stable sim/c canary sim/d ROLLED BACK: error rate 0.5 vs 0.0 shadow sim/e 10%")
	require.Contains(t, view, "safety 10 checks  1 blocked  2 flagged  0 failed  p50 3.5ms  p95 9.0ms")
}

// TestHeaderUpstreamModel: a model behind an upstream engine shows the
// engine's KV-cache fraction, not blocks.
func TestHeaderUpstreamModel(t *testing.T) {
	h := NewHeader(testStyles())
	h.SetSize(160, 20)
	h.SetData(&api.Snapshot{Models: []api.ModelSnapshot{{EngineStats: api.EngineStats{Model: "qwen", Executor: "upstream:vllm",
		BlocksTotal: 1000, BlocksUsed: 420}}}}, nil)
	view := ansi.Strip(h.View())
	require.Contains(t, view, "qwen up")
	require.Contains(t, view, "42%")
	require.Contains(t, view, "the engine's KV cache (vllm)")
	require.NotContains(t, view, "cached ")
}
