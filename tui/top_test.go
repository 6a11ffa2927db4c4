package tui

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

func newTestTop(t *testing.T, f *fakeTop, o TopOptions, width, height int) *Top {
	t.Helper()
	m := NewTop(f, o, testStyles(), DefaultKeyMap())
	t.Cleanup(m.Close)
	send(m, tea.WindowSizeMsg{Width: width, Height: height})
	return m
}

// feed shows the fixture twelve times, 5 s apart, with sim/small
// generating at changing rates, so that the sparkline has a minute of
// history; the last snapshot is at t0.
func feed(m *Top) {
	gen := uint64(100000)
	steps := []uint64{400, 420, 380, 500, 610, 580, 450, 300, 520, 640, 700, 690}
	for i, d := range steps {
		gen += d
		at := t0.Add(time.Duration(i-len(steps)+1) * 5 * time.Second)
		send(m, snapshotMsg{snap: fixture(at, gen), at: at})
	}
}

// requireScreen checks that view is exactly height lines of at most width
// cells, and compares it with the test's golden file.
func requireScreen(t *testing.T, view string, width, height int) {
	t.Helper()
	lines := strings.Split(view, "\n")
	require.Len(t, lines, height, "lines of the view")
	for i, l := range lines {
		require.LessOrEqual(t, lipgloss.Width(l), width, "line %d is too wide: %q", i, l)
	}
	golden.RequireEqual(t, []byte(view))
}

var sizes = []struct{ w, h int }{{80, 24}, {120, 40}}

func TestTopView(t *testing.T) {
	for _, sz := range sizes {
		for _, v := range []string{"requests", "tenants", "models", "nodes"} {
			t.Run(fmt.Sprintf("%s_%dx%d", v, sz.w, sz.h), func(t *testing.T) {
				m := newTestTop(t, &fakeTop{}, TopOptions{}, sz.w, sz.h)
				feed(m)
				press(m, map[string]string{"requests": "1", "tenants": "2", "models": "3", "nodes": "4"}[v])
				requireScreen(t, m.View(), sz.w, sz.h)
			})
		}
	}
}

func TestTopResize(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 120, 40)
	feed(m)
	for _, sz := range []struct{ w, h int }{{80, 24}, {60, 15}, {200, 50}, {120, 40}} {
		send(m, tea.WindowSizeMsg{Width: sz.w, Height: sz.h})
		lines := strings.Split(m.View(), "\n")
		require.Len(t, lines, sz.h)
		for i, l := range lines {
			require.LessOrEqual(t, lipgloss.Width(l), sz.w, "%dx%d line %d: %q", sz.w, sz.h, i, l)
		}
	}
	// Back at 120x40 the screen is the one drawn at that size from the
	// start.
	fresh := newTestTop(t, &fakeTop{}, TopOptions{}, 120, 40)
	feed(fresh)
	require.Equal(t, fresh.View(), m.View())
}

func TestTopHelpView(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{ReadOnly: true}, 80, 24)
	feed(m)
	press(m, "p", "?")
	requireScreen(t, m.View(), 80, 24)
	press(m, "?")
	require.Equal(t, paneTable, m.pane)
}

func TestTopViewSwitch(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 80, 24)
	feed(m)
	for _, step := range []struct {
		key  string
		want view
	}{
		{"2", viewTenants}, {"3", viewModels}, {"4", viewNodes}, {"1", viewRequests},
		{"tab", viewTenants}, {"tab", viewModels}, {"tab", viewNodes}, {"tab", viewRequests},
		{"shift+tab", viewNodes}, {"shift+tab", viewModels},
	} {
		press(m, step.key)
		require.Equal(t, step.want, m.view, "after %s", step.key)
	}
}

func TestTopFilter(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 80, 24)
	feed(m)
	tbl := m.tables[viewRequests]

	press(m, "/", "g", "l", "o")
	require.Equal(t, promptFilter, m.prompt)
	vis, total := tbl.Len()
	require.Equal(t, 1, vis, "live filter")
	require.Equal(t, 5, total)
	row, ok := tbl.Selected()
	require.True(t, ok)
	require.Equal(t, idPrefill, row.ID)

	press(m, "enter")
	require.Equal(t, promptNone, m.prompt)
	require.Equal(t, "glo", tbl.Filter())
	require.Contains(t, m.View(), `filter glo (1)`)

	// The filter matches any column: state, model, a piece of an id.
	for _, c := range []struct {
		filter string
		want   int
	}{{"decode", 2}, {"SIM/MID", 2}, {"4e5f6071", 5}, {"nothing", 0}} {
		tbl.SetFilter(c.filter)
		vis, _ := tbl.Len()
		require.Equal(t, c.want, vis, "filter %q", c.filter)
	}
	require.Contains(t, m.View(), `no row matches the filter "nothing"`)

	// Esc in the prompt clears it; Esc on the table too.
	press(m, "/", "esc")
	require.Equal(t, "", tbl.Filter())
	tbl.SetFilter("acme")
	press(m, "esc")
	require.Equal(t, "", tbl.Filter())
}

func TestTopSort(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 120, 40)
	feed(m)
	tbl := m.tables[viewRequests]
	ids := func() []string {
		var out []string
		for _, i := range tbl.view {
			out = append(out, tbl.rows[i].ID)
		}
		return out
	}
	col, desc := tbl.SortColumn()
	require.Equal(t, "AGE", col)
	require.False(t, desc)
	require.Equal(t, []string{idQueued, idPrefill, idDecode, idLocal, idSwapped}, ids())

	press(m, "r")
	require.Equal(t, []string{idSwapped, idLocal, idDecode, idPrefill, idQueued}, ids())

	press(m, ",") // TOK/S, numbers sort descending first
	col, desc = tbl.SortColumn()
	require.Equal(t, "TOK/S", col)
	require.True(t, desc)
	require.Equal(t, []string{idLocal, idDecode, idSwapped, idPrefill, idQueued}, ids())

	press(m, ".", ".") // wraps around to ID, text sorts ascending
	col, desc = tbl.SortColumn()
	require.Equal(t, "ID", col)
	require.False(t, desc)
	require.Equal(t, []string{idDecode, idPrefill, idQueued, idSwapped, idLocal}, ids())
	require.Contains(t, m.View(), "sort ID▲")
}

func TestTopSelectionFollowsRow(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 80, 24)
	feed(m)
	press(m, "down", "down")
	row, _ := m.tables[viewRequests].Selected()
	require.Equal(t, idDecode, row.ID)

	// The next snapshot lists a new request first: the selection stays on
	// the same request.
	s := fixture(t0.Add(time.Second), 200000)
	s.Requests = append([]api.RequestSnapshot{{ID: "req_new", Tenant: "acme", Model: "sim/small", State: "queued"}}, s.Requests...)
	send(m, snapshotMsg{snap: s, at: t0.Add(time.Second)})
	row, _ = m.tables[viewRequests].Selected()
	require.Equal(t, idDecode, row.ID)
}

func TestTopCancel(t *testing.T) {
	f := &fakeTop{snap: fixture(t0, 1)}
	m := newTestTop(t, f, TopOptions{}, 80, 24)
	feed(m)
	press(m, "down", "down")

	require.Nil(t, press(m, "K"))
	require.Equal(t, promptConfirm, m.prompt)
	require.Contains(t, m.View(), "cancel "+idDecode+" (acme, sim/small, decode)? [y/n]")

	// n (or any key but y) leaves it running.
	require.Nil(t, press(m, "n"))
	require.Equal(t, promptNone, m.prompt)
	require.Empty(t, f.cancels())

	press(m, "K")
	cmd := press(m, "y")
	require.NotNil(t, cmd)
	msg := cmd()
	require.Equal(t, []string{idDecode}, f.cancels())
	require.Equal(t, cancelledMsg{id: idDecode}, msg)

	// The result shows, and polls at once so the request is seen to leave.
	cmd = send(m, msg)
	require.Contains(t, m.View(), "cancelled "+idDecode)
	require.NotNil(t, cmd)
	_, isSnap := cmd().(snapshotMsg)
	require.True(t, isSnap)
}

func TestTopCancelError(t *testing.T) {
	f := &fakeTop{cancelErr: &api.StatusError{StatusCode: 404, Message: "no request"}}
	m := newTestTop(t, f, TopOptions{}, 120, 40)
	feed(m)
	press(m, "K")
	send(m, press(m, "y")())
	require.Contains(t, m.View(), "cancel "+idQueued+": llmd: 404: no request (it finished, or belongs to another tenant")
}

func TestTopReadOnlyRefusesCancel(t *testing.T) {
	f := &fakeTop{}
	m := newTestTop(t, f, TopOptions{ReadOnly: true}, 80, 24)
	feed(m)
	require.Nil(t, press(m, "K"))
	require.Equal(t, promptNone, m.prompt)
	require.Contains(t, m.View(), "read-only: cancelling requests is disabled")
	require.Nil(t, press(m, "y"))
	require.Empty(t, f.cancels())
	require.NotContains(t, m.helpLine(), "cancel")
}

func TestTopPolling(t *testing.T) {
	f := &fakeTop{snap: fixture(t0, 1)}
	m := newTestTop(t, f, TopOptions{}, 80, 24)
	require.Equal(t, DefaultInterval, m.Interval())

	// Init polls; the result schedules the next tick, which polls again.
	msg := m.Init()()
	require.IsType(t, snapshotMsg{}, msg)
	require.NotNil(t, send(m, msg))
	require.Equal(t, fixture(t0, 1), m.Snapshot())
	poll := send(m, tickMsg{id: m.tick})
	require.NotNil(t, poll)
	require.IsType(t, snapshotMsg{}, poll())
	require.Equal(t, 2, f.polls)

	// A tick of an older schedule is ignored.
	send(m, snapshotMsg{snap: fixture(t0.Add(time.Second), 2)})
	require.Nil(t, send(m, tickMsg{id: m.tick - 1}))
}

func TestTopPause(t *testing.T) {
	f := &fakeTop{snap: fixture(t0, 1)}
	m := newTestTop(t, f, TopOptions{}, 80, 24)
	send(m, m.Init()())
	tick := m.tick

	require.Nil(t, press(m, "p"))
	require.True(t, m.Paused())
	require.Nil(t, send(m, tickMsg{id: tick}), "no poll while paused")
	require.Contains(t, m.View(), "PAUSED")

	// Resuming polls at once.
	cmd := press(m, "p")
	require.False(t, m.Paused())
	require.NotNil(t, cmd)
	require.IsType(t, snapshotMsg{}, cmd())

	// A poll that lands while paused schedules nothing.
	press(m, "p")
	require.Nil(t, send(m, snapshotMsg{snap: fixture(t0.Add(time.Second), 2)}))
}

func TestTopInterval(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{Interval: 2 * time.Second}, 80, 24)
	send(m, snapshotMsg{snap: fixture(t0, 1)})
	tick := m.tick
	require.NotNil(t, press(m, "+"))
	require.Equal(t, 2250*time.Millisecond, m.Interval())
	require.Greater(t, m.tick, tick, "the new interval replaces the scheduled tick")
	require.Contains(t, m.View(), "every 2.25s")
	for range 20 {
		press(m, "-")
	}
	require.Equal(t, MinInterval, m.Interval())
	press(m, "=")
	require.Equal(t, 500*time.Millisecond, m.Interval())

	require.Equal(t, MinInterval, NewTop(&fakeTop{}, TopOptions{Interval: time.Millisecond}, testStyles(), DefaultKeyMap()).Interval())
}

func TestTopErrorKeepsPolling(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{
		Addr:      "http://127.0.0.1:1",
		ErrorText: func(err error) string { return "cannot reach llmd: " + err.Error() },
	}, 80, 24)
	cmd := send(m, snapshotMsg{err: errTest})
	require.NotNil(t, cmd, "polling goes on")
	requireScreen(t, m.View(), 80, 24)

	// With a snapshot shown, an error keeps it and says so.
	feed(m)
	send(m, snapshotMsg{err: errTest})
	view := m.View()
	require.Contains(t, view, "error: cannot reach llmd: test error; retrying every 1s")
	require.Contains(t, view, idDecode[:12])
	send(m, snapshotMsg{snap: fixture(t0.Add(time.Minute), 1)})
	require.NotContains(t, m.View(), "error:")
}

func TestTopFollow(t *testing.T) {
	release := make(chan struct{})
	f := &fakeTop{follow: func(ctx context.Context, id string, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
		for _, d := range []string{"Once ", "upon ", "a time"} {
			if err := fn(api.NativeDelta{Delta: d}); err != nil {
				return nil, err
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &api.NativeDone{ID: id, FinishReason: "stop", Usage: api.NativeUsage{OutputTokens: 3}}, nil
	}}
	m := newTestTop(t, f, TopOptions{Now: func() time.Time { return t0 }}, 80, 24)
	feed(m)
	press(m, "down", "down")
	l := newLoop(t, m)
	l.run(press(m, "enter"))
	require.Equal(t, paneFollow, m.pane)
	l.until(func() bool { return strings.Contains(m.follow.text.String(), "a time") })
	close(release)
	l.until(func() bool { return strings.Contains(m.follow.note, "done") })
	requireScreen(t, m.View(), 80, 24)

	press(m, "esc")
	require.Equal(t, paneTable, m.pane)
}

func TestTopFollowNotFollowable(t *testing.T) {
	m := newTestTop(t, &fakeTop{}, TopOptions{}, 80, 24)
	feed(m)
	// The queued request is not resumable: no stream is opened.
	require.Nil(t, press(m, "enter"))
	require.Contains(t, m.View(), "not followable")
	press(m, "esc")

	// A resumable one that llmd no longer keeps answers 404.
	press(m, "down")
	l := newLoop(t, m)
	l.run(press(m, "enter"))
	l.until(func() bool { return m.follow.note == notFollowable })
	require.Contains(t, m.View(), "not followable")
}

func TestTopFollowEscStopsStream(t *testing.T) {
	stopped := make(chan struct{})
	f := &fakeTop{follow: func(ctx context.Context, id string, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	}}
	m := newTestTop(t, f, TopOptions{}, 80, 24)
	feed(m)
	press(m, "down")
	newLoop(t, m).run(press(m, "enter"))
	press(m, "esc")
	<-stopped
}
