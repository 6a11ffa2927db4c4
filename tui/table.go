package tui

import (
	"cmp"
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
)

// Column describes one column of a [Table].
type Column struct {
	Title string
	// Width is the column's width in cells; a Flex column gets a share of
	// the width left over as well, up to Max cells in all (0: no bound).
	Width int
	Flex  bool
	Max   int
	// Right aligns the column right (numbers).
	Right bool
	// Numeric columns sort by Cell.Num; the others by Cell.Text.
	Numeric bool
	// Drop is the column's rank among those hidden when the table is too
	// narrow: the highest goes first; 0 is never hidden.
	Drop int
}

// Cell is one value of a row: Text is shown, filtered and (in a text
// column) sorted; Num is the sort key of a numeric column; Level colours
// the text.
type Cell struct {
	Text  string
	Num   float64
	Level Level
}

// Row is one row of a table; ID identifies it across updates (the
// selection follows it).
type Row struct {
	ID    string
	Cells []Cell
}

// Table is a component showing rows under column headers, filtered by a
// substring, sorted by one column, with a selected row. It hides
// low-priority columns when narrow and scrolls to keep the selection in
// view.
type Table struct {
	st   Styles
	keys TopKeys
	cols []Column
	// empty is shown when no row is visible.
	empty string

	rows   []Row
	view   []int // indexes into rows: those matching filter, sorted
	filter string
	// sortCol is the index in cols of the sort column; desc reverses it.
	sortCol int
	desc    bool

	cursor int // index into view
	offset int // first row of view drawn

	width, height int
	shown         []int // indexes of the columns drawn
	widths        []int // width of each shown column
}

var _ Component = (*Table)(nil)

// NewTable returns an empty table of cols sorted by column sortCol.
func NewTable(st Styles, keys TopKeys, cols []Column, sortCol int, desc bool, empty string) *Table {
	t := &Table{st: st, keys: keys, cols: cols, sortCol: sortCol, desc: desc, empty: empty}
	t.layout()
	return t
}

// Init implements tea.Model.
func (t *Table) Init() tea.Cmd { return nil }

// Update moves the selection on the navigation keys.
func (t *Table) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	km, ok := msg.(tea.KeyMsg)
	if !ok {
		return t, nil
	}
	page := max(1, t.bodyHeight()-1)
	switch {
	case key.Matches(km, t.keys.Up):
		t.moveTo(t.cursor - 1)
	case key.Matches(km, t.keys.Down):
		t.moveTo(t.cursor + 1)
	case key.Matches(km, t.keys.PageUp):
		t.moveTo(t.cursor - page)
	case key.Matches(km, t.keys.PageDown):
		t.moveTo(t.cursor + page)
	case key.Matches(km, t.keys.Home):
		t.moveTo(0)
	case key.Matches(km, t.keys.End):
		t.moveTo(len(t.view) - 1)
	}
	return t, nil
}

// SetSize implements Component: the header takes one row of height.
func (t *Table) SetSize(width, height int) {
	t.width, t.height = max(width, 0), max(height, 0)
	t.layout()
	t.scroll()
}

// SetRows replaces the rows, keeping the selection on the row with the
// same ID when it is still there, else at the same position.
func (t *Table) SetRows(rows []Row) {
	sel, had := t.Selected()
	t.rows = rows
	t.refresh(sel.ID, had)
}

// SetFilter shows only the rows with a cell containing s (case-insensitive).
func (t *Table) SetFilter(s string) {
	sel, had := t.Selected()
	t.filter = s
	t.refresh(sel.ID, had)
}

// Filter returns the filter text.
func (t *Table) Filter() string { return t.filter }

// CycleSort moves the sort to the next (delta 1) or previous (-1) column
// drawn, ascending for text columns and descending for numbers.
func (t *Table) CycleSort(delta int) {
	if len(t.shown) == 0 {
		return
	}
	i := slices.Index(t.shown, t.sortCol)
	if i < 0 {
		i = 0
	} else {
		i = (i + delta + len(t.shown)) % len(t.shown)
	}
	t.sortCol = t.shown[i]
	t.desc = t.cols[t.sortCol].Numeric
	t.resort()
}

// ReverseSort flips the sort order.
func (t *Table) ReverseSort() {
	t.desc = !t.desc
	t.resort()
}

// SortColumn returns the sort column's title and whether it is descending.
func (t *Table) SortColumn() (string, bool) {
	return t.cols[t.sortCol].Title, t.desc
}

// Selected returns the selected row; false when no row is visible.
func (t *Table) Selected() (Row, bool) {
	if t.cursor < 0 || t.cursor >= len(t.view) {
		return Row{}, false
	}
	return t.rows[t.view[t.cursor]], true
}

// Len returns the number of rows visible (matching the filter) and in
// all.
func (t *Table) Len() (visible, total int) { return len(t.view), len(t.rows) }

func (t *Table) resort() {
	sel, had := t.Selected()
	t.refresh(sel.ID, had)
}

// refresh recomputes the visible rows and puts the selection back on the
// row id (when keep) or clamps it.
func (t *Table) refresh(id string, keep bool) {
	needle := strings.ToLower(t.filter)
	t.view = t.view[:0]
	for i, r := range t.rows {
		if needle == "" || rowContains(r, needle) {
			t.view = append(t.view, i)
		}
	}
	col, num, desc := t.sortCol, t.cols[t.sortCol].Numeric, t.desc
	slices.SortStableFunc(t.view, func(a, b int) int {
		ca, cb := cellAt(t.rows[a], col), cellAt(t.rows[b], col)
		var c int
		if num {
			c = cmp.Compare(ca.Num, cb.Num)
		} else {
			c = strings.Compare(strings.ToLower(ca.Text), strings.ToLower(cb.Text))
		}
		if desc {
			c = -c
		}
		if c == 0 { // ties in id order, whichever the direction
			c = strings.Compare(t.rows[a].ID, t.rows[b].ID)
		}
		return c
	})
	if keep {
		for i, v := range t.view {
			if t.rows[v].ID == id {
				t.cursor = i
				t.scroll()
				return
			}
		}
	}
	t.moveTo(t.cursor)
}

func rowContains(r Row, needle string) bool {
	for _, c := range r.Cells {
		if strings.Contains(strings.ToLower(c.Text), needle) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(r.ID), needle)
}

func cellAt(r Row, i int) Cell {
	if i < len(r.Cells) {
		return r.Cells[i]
	}
	return Cell{}
}

func (t *Table) moveTo(i int) {
	t.cursor = max(0, min(i, len(t.view)-1))
	t.scroll()
}

// bodyHeight is the number of rows drawn under the header.
func (t *Table) bodyHeight() int { return max(t.height-1, 0) }

// scroll keeps the cursor within the rows drawn.
func (t *Table) scroll() {
	h := t.bodyHeight()
	if h == 0 {
		t.offset = 0
		return
	}
	if t.cursor < t.offset {
		t.offset = t.cursor
	}
	if t.cursor >= t.offset+h {
		t.offset = t.cursor - h + 1
	}
	t.offset = max(0, min(t.offset, len(t.view)-h))
}

// marker is the width of the selection marker before each row.
const marker = 2

// layout chooses the columns drawn at this width and their widths: it
// hides columns by Drop rank until the rest fit, then gives the room left
// to the Flex columns.
func (t *Table) layout() {
	t.shown = t.shown[:0]
	for i := range t.cols {
		t.shown = append(t.shown, i)
	}
	avail := t.width - marker
	need := func() int {
		n := len(t.shown) - 1 // one space between columns
		for _, c := range t.shown {
			n += t.cols[c].Width
		}
		return n
	}
	for need() > avail {
		drop := -1
		for j, c := range t.shown {
			if d := t.cols[c].Drop; d > 0 && (drop < 0 || d >= t.cols[t.shown[drop]].Drop) {
				drop = j
			}
		}
		if drop < 0 {
			break
		}
		t.shown = slices.Delete(t.shown, drop, drop+1)
	}
	t.widths = t.widths[:0]
	flex := 0
	for _, c := range t.shown {
		t.widths = append(t.widths, t.cols[c].Width)
		if t.cols[c].Flex {
			flex++
		}
	}
	if extra := avail - need(); extra > 0 && flex > 0 {
		for j, c := range t.shown {
			if col := t.cols[c]; col.Flex {
				share := extra / flex
				if col.Max > 0 {
					share = min(share, max(col.Max-t.widths[j], 0))
				}
				t.widths[j] += share
				extra -= share
				flex--
			}
		}
	}
}

// View draws the header and the rows in view, each line exactly the
// table's width.
func (t *Table) View() string {
	if t.height == 0 || t.width == 0 {
		return ""
	}
	lines := make([]string, 0, t.height)
	var hdr strings.Builder
	hdr.WriteString(strings.Repeat(" ", marker))
	for j, c := range t.shown {
		if j > 0 {
			hdr.WriteByte(' ')
		}
		title := t.cols[c].Title
		if c == t.sortCol {
			arrow := "▲"
			if t.desc {
				arrow = "▼"
			}
			title = ansi.Truncate(title, t.widths[j]-1, "") + arrow
		}
		hdr.WriteString(fit(title, t.widths[j], t.cols[c].Right))
	}
	lines = append(lines, t.st.Table.Header.Render(fit(hdr.String(), t.width, false)))

	if len(t.view) == 0 {
		msg := t.empty
		if t.filter != "" && len(t.rows) > 0 {
			msg = "no row matches the filter " + `"` + t.filter + `"`
		}
		lines = append(lines, t.st.Table.Empty.Render(fit(strings.Repeat(" ", marker)+msg, t.width, false)))
	}
	end := min(len(t.view), t.offset+t.bodyHeight())
	for i := t.offset; i < end; i++ {
		lines = append(lines, t.renderRow(t.rows[t.view[i]], i == t.cursor))
	}
	for len(lines) < t.height {
		lines = append(lines, strings.Repeat(" ", t.width))
	}
	return strings.Join(lines[:t.height], "\n")
}

func (t *Table) renderRow(r Row, selected bool) string {
	var b strings.Builder
	if selected {
		b.WriteString("▶ ")
	} else {
		b.WriteString(strings.Repeat(" ", marker))
	}
	for j, c := range t.shown {
		if j > 0 {
			b.WriteByte(' ')
		}
		cell := cellAt(r, c)
		text := fit(cell.Text, t.widths[j], t.cols[c].Right)
		if !selected && cell.Level != LevelNone {
			text = t.st.style(cell.Level).Render(text)
		}
		b.WriteString(text)
	}
	line := b.String()
	if pad := t.width - lipgloss.Width(line); pad > 0 {
		line += strings.Repeat(" ", pad)
	}
	if selected {
		return t.st.Table.Selected.Render(line)
	}
	return line
}

// fit truncates s to width cells (ending in "…" when cut) and pads it to
// exactly width, on the left when right is set.
func fit(s string, width int, right bool) string {
	if width <= 0 {
		return ""
	}
	if lipgloss.Width(s) > width {
		s = ansi.Truncate(s, width, "…")
	}
	pad := width - lipgloss.Width(s)
	if pad <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", pad) + s
	}
	return s + strings.Repeat(" ", pad)
}
