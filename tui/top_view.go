package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/llmd/llmd/api"
)

// chrome is the rows around the header and body: title, tabs, status
// line, key help.
const chrome = 4

// minBody is the fewest rows the body keeps when the header is large.
const minBody = 4

// SetSize lays the screen out for a terminal of width x height.
func (t *Top) SetSize(width, height int) {
	t.width, t.height = max(width, 0), max(height, 0)
	t.layout()
}

func (t *Top) layout() {
	t.header.SetSize(t.width, max(t.height-chrome-minBody, 1))
	body := t.bodyHeight()
	for v, tbl := range t.tables {
		if view(v) != viewNodes {
			tbl.SetSize(t.width, body)
		}
	}
	// The nodes view's first line says whether llmd is clustered.
	t.nodeTable.SetSize(t.width, max(body-1, 0))
	t.clusterTable.SetSize(t.width, max(body-1, 0))
	t.follow.SetSize(t.width, body)
	t.help.Width = t.width
	t.input.Width = max(t.width-3, 1)
}

func (t *Top) bodyHeight() int {
	return max(t.height-chrome-t.header.Height(), 0)
}

// View implements tea.Model: exactly height lines of at most width cells.
func (t *Top) View() string {
	if t.width == 0 || t.height == 0 {
		return ""
	}
	lines := []string{t.titleLine()}
	if t.pane == paneHelp {
		// The help takes the whole screen below the title, so that it
		// fits 80x24 however tall the header is.
		lines = append(lines, fitLines(strings.Split(t.helpView(), "\n"), max(t.height-3, 0))...)
	} else {
		if h := t.header.View(); h != "" {
			lines = append(lines, strings.Split(h, "\n")...)
		}
		lines = append(lines, t.tabsLine())
		lines = append(lines, t.bodyLines()...)
	}
	lines = append(lines, t.statusLine(), t.helpLine())
	for i, l := range lines {
		lines[i] = clip(l, t.width)
	}
	for len(lines) < t.height {
		lines = append(lines, "")
	}
	return strings.Join(lines[:t.height], "\n")
}

func (t *Top) titleLine() string {
	st := t.st
	left := st.Title.Render("llmctl top")
	if s := t.snap; s != nil {
		if s.Node != "" {
			left += st.Label.Render("  node ") + st.Value.Render(s.Node)
		}
		left += st.Label.Render("  up ") + st.Value.Render(fmtAge(s.Uptime))
		if !s.Time.IsZero() {
			left += st.Label.Render("  at ") + st.Value.Render(s.Time.Local().Format("15:04:05"))
		}
	} else if t.opts.Addr != "" {
		left += st.Label.Render("  ") + st.Value.Render(t.opts.Addr)
	}
	left += st.Label.Render("  every ") + st.Value.Render(t.interval.String())
	var right []string
	if t.opts.ReadOnly {
		right = append(right, st.Dim.Render("read-only"))
	}
	if t.paused {
		right = append(right, st.Paused.Render("PAUSED"))
	}
	return spread(left, strings.Join(right, "  "), t.width)
}

// spread puts left and right on one line of width cells, right-aligned.
func spread(left, right string, width int) string {
	gap := width - lipgloss.Width(left) - lipgloss.Width(right)
	if right == "" || gap < 1 {
		return left
	}
	return left + strings.Repeat(" ", gap) + right
}

func (t *Top) tabsLine() string {
	var parts []string
	for v := range numViews {
		_, n := t.tables[v].Len()
		label := fmt.Sprintf("%d %s %d", v+1, viewNames[v], n)
		if v == t.view {
			parts = append(parts, t.st.ActiveTab.Render("["+label+"]"))
		} else {
			parts = append(parts, t.st.Tab.Render(" "+label+" "))
		}
	}
	left := strings.Join(parts, " ")
	tbl := t.tables[t.view]
	col, desc := tbl.SortColumn()
	order := "▲"
	if desc {
		order = "▼"
	}
	sort := t.st.Label.Render("sort ") + t.st.Value.Render(col+order)
	f := tbl.Filter()
	if f == "" {
		return spread(left, sort, t.width)
	}
	vis, _ := tbl.Len()
	filter := t.st.Label.Render("filter ") + t.st.Prompt.Render(f) + t.st.Label.Render(fmt.Sprintf(" (%d)", vis))
	if both := filter + "  " + sort; lipgloss.Width(left)+1+lipgloss.Width(both) <= t.width {
		return spread(left, both, t.width)
	}
	return spread(left, filter, t.width)
}

func (t *Top) bodyLines() []string {
	h := t.bodyHeight()
	if h == 0 {
		return nil
	}
	var body string
	switch {
	case t.pane == paneFollow:
		body = t.follow.View()
	case t.snap == nil:
		body = t.st.Dim.Render("waiting for the first snapshot…")
	case t.view == viewNodes:
		body = t.nodesLine() + "\n" + t.tables[viewNodes].View()
	default:
		body = t.tables[t.view].View()
	}
	return fitLines(strings.Split(body, "\n"), h)
}

// fitLines cuts lines to h, or pads them with empty lines to h.
func fitLines(lines []string, h int) []string {
	if len(lines) > h {
		lines = lines[:h]
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	return lines
}

// nodesLine heads the nodes view: the cluster's size and health, or that
// llmd runs alone.
func (t *Top) nodesLine() string {
	st := t.st
	if len(t.snap.Cluster) == 0 {
		return st.Dim.Render("this node only: llmd is " + notClustered)
	}
	members, alive := clusterCounts(t.snap)
	count := st.OK
	if alive < members {
		count = st.Warn
	}
	return st.Label.Render("cluster: ") + count.Render(clusterSummary(members, alive)) +
		st.Dim.Render("  (KV MAX: each member's fullest model)")
}

func (t *Top) helpView() string {
	st := t.st
	legend := []string{
		"",
		st.Label.Render("KV bar: ") + st.OK.Render(glyphUsed+glyphUsed) + st.Label.Render(" used  ") +
			st.BarCached.Render(glyphCached+glyphCached) + st.Label.Render(" cached (free, holding a reusable prefix)  ") +
			st.BarFree.Render(glyphFree+glyphFree) + st.Label.Render(" free"),
		st.Label.Render("gauges turn ") + st.Warn.Render("yellow at 75%") + st.Label.Render(" and ") +
			st.Crit.Render("red at 90%") + st.Label.Render("; run/wait counts sequences per tier"),
		st.Label.Render("enter follows the selected request's tokens live; K cancels it after a y"),
		st.Label.Render("tok/s comes from successive snapshots; the sparkline spans the last minute"),
	}
	head := st.Title.Render("keys") + st.Dim.Render("  (? or esc closes it)")
	return head + "\n" + t.help.FullHelpView(t.helpKeys.FullHelp()) + "\n" + strings.Join(legend, "\n")
}

func (t *Top) statusLine() string {
	st := t.st
	switch t.prompt {
	case promptFilter:
		return t.input.View()
	case promptConfirm:
		desc := t.confirmID
		if r := findRequest(t.snapOrEmpty(), t.confirmID); r != nil {
			desc += fmt.Sprintf(" (%s, %s, %s)", r.Tenant, r.Model, r.State)
		}
		const ask, yn = "cancel ", "? [y/n]"
		return st.Prompt.Render(ask + clip(desc, max(t.width-len(ask)-len(yn), 1)) + yn)
	}
	if t.errText != "" {
		retry := "; retrying every " + t.interval.String()
		if t.paused {
			retry = "; paused"
		}
		return st.Error.Render("error: " + t.errText + retry)
	}
	if t.note != "" {
		return st.style(t.noteLevel).Render(t.note)
	}
	if t.snap == nil {
		return st.Status.Render("connecting…")
	}
	vis, total := t.tables[t.view].Len()
	return st.Status.Render(fmt.Sprintf("%d of %d %s", vis, total, viewNames[t.view]))
}

func (t *Top) snapOrEmpty() *api.Snapshot {
	if t.snap == nil {
		return &api.Snapshot{}
	}
	return t.snap
}

func (t *Top) helpLine() string {
	return t.help.ShortHelpView(t.helpKeys.ShortHelp())
}
