package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmd/llmd/api"
)

// Follow is the pane that shows one request's tokens as llmd generates
// them: a title line with the request's latest numbers, then the text in
// a scrolling viewport that sticks to the bottom while it is there.
type Follow struct {
	st Styles
	vp viewport.Model

	id   string
	req  api.RequestSnapshot
	gone bool // the request left the snapshot (finished or cancelled)
	text strings.Builder
	// note says how the stream ended; noteLevel colours it.
	note      string
	noteLevel Level

	width, height int
}

var _ Component = (*Follow)(nil)

// NewFollow returns an empty follow pane.
func NewFollow(st Styles) *Follow {
	return &Follow{st: st, vp: viewport.New(0, 0)}
}

// Init implements tea.Model.
func (f *Follow) Init() tea.Cmd { return nil }

// Update scrolls the text on the viewport's keys.
func (f *Follow) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmd tea.Cmd
	f.vp, cmd = f.vp.Update(msg)
	return f, cmd
}

// SetSize implements Component: the title and the stream's state take a
// row each.
func (f *Follow) SetSize(width, height int) {
	f.width, f.height = max(width, 0), max(height, 0)
	f.vp.Width, f.vp.Height = f.width, max(f.height-2, 0)
	f.render()
}

// Start empties the pane for request r.
func (f *Follow) Start(r api.RequestSnapshot) {
	f.id, f.req, f.gone = r.ID, r, false
	f.text.Reset()
	f.note, f.noteLevel = "connecting…", LevelDim
	f.vp.GotoTop()
	f.render()
}

// ID returns the request followed.
func (f *Follow) ID() string { return f.id }

// SetRequest updates the request's numbers from a new snapshot; nil when
// the snapshot no longer lists it.
func (f *Follow) SetRequest(r *api.RequestSnapshot) {
	if r == nil {
		f.gone = true
		return
	}
	f.req, f.gone = *r, false
}

// Append adds streamed text.
func (f *Follow) Append(s string) {
	if f.note == "connecting…" {
		f.note, f.noteLevel = "streaming", LevelOK
	}
	f.text.WriteString(s)
	f.render()
}

// End records how the stream ended.
func (f *Follow) End(note string, l Level) {
	f.note, f.noteLevel = note, l
	f.render()
}

func (f *Follow) render() {
	atBottom := f.vp.AtBottom()
	body := f.text.String()
	if f.width > 0 {
		body = ansi.Wrap(body, f.width, "")
	}
	f.vp.SetContent(body)
	if atBottom {
		f.vp.GotoBottom()
	}
}

// View implements tea.Model.
func (f *Follow) View() string {
	if f.height == 0 {
		return ""
	}
	r := f.req
	state := r.State
	if f.gone {
		state = "ended"
	}
	title := f.st.PaneTitle.Render(r.ID) + f.st.Dim.Render(fmt.Sprintf("  %s  %s  %s  gen %d  %s tok/s",
		r.Tenant, r.Model, state, r.GeneratedTokens, fmtRate(r.TokensPerSecond)))
	note := f.st.style(f.noteLevel).Render(f.note) + f.st.Dim.Render("  (esc: back)")
	if f.height == 1 {
		return clip(title, f.width)
	}
	return clip(title, f.width) + "\n" + clip(note, f.width) + "\n" + f.vp.View()
}
