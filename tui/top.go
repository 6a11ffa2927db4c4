package tui

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmd/llmd/api"
)

// TopClient is what llmctl top needs of llmd; *api.Client implements it.
type TopClient interface {
	// Snapshot returns the node's live state (GET /v1/admin/snapshot).
	Snapshot(ctx context.Context) (*api.Snapshot, error)
	// CancelRequest cancels a live request (DELETE /v1/requests/{id}).
	CancelRequest(ctx context.Context, id string) error
	// FollowRequest streams a request's tokens from its start without
	// affecting it (GET /v1/requests/{id}/stream).
	FollowRequest(ctx context.Context, id string, fn func(api.NativeDelta) error) (*api.NativeDone, error)
}

// Polling intervals of llmctl top.
const (
	DefaultInterval = time.Second
	MinInterval     = 250 * time.Millisecond
	// IntervalStep is what + and - add to and take from the interval.
	IntervalStep = 250 * time.Millisecond
)

// defaultTimeout bounds each snapshot and cancel call.
const defaultTimeout = 5 * time.Second

// TopOptions configure a [Top].
type TopOptions struct {
	// Interval is the time between snapshots: 0 means DefaultInterval, and
	// one below MinInterval is raised to it.
	Interval time.Duration
	// ReadOnly refuses to cancel requests.
	ReadOnly bool
	// Addr is llmd's address, shown while there is no snapshot yet.
	Addr string
	// ErrorText turns an error of the client into the one line the status
	// line shows (what happened and what to do); nil means err.Error().
	ErrorText func(error) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Timeout bounds each snapshot and cancel call; 0 means 5s.
	Timeout time.Duration
}

// pane is what fills the body under the tabs.
type pane int

const (
	paneTable pane = iota
	paneFollow
	paneHelp
)

// prompt is the question or input the status line holds.
type prompt int

const (
	promptNone prompt = iota
	promptFilter
	promptConfirm
)

// Messages of Top.
type (
	// snapshotMsg is the result of one poll, received at at.
	snapshotMsg struct {
		snap *api.Snapshot
		err  error
		at   time.Time
	}
	// tickMsg asks for the next poll; only the one with the current id
	// counts (changing the interval or pausing invalidates the others).
	tickMsg struct{ id int }
	// cancelledMsg is the result of cancelling request id.
	cancelledMsg struct {
		id  string
		err error
	}
)

// Top is the root model of llmctl top: it polls a node's snapshot, shows
// gauges per model in a header and one of four tables (requests, tenants,
// models, nodes), follows a request's tokens, and cancels requests.
//
// Call Close after the program ends: it stops the streams and polls still
// running and waits for them.
type Top struct {
	client TopClient
	opts   TopOptions
	st     Styles
	keys   TopKeys
	// helpKeys are keys as the help shows them (K disabled when read-only).
	helpKeys TopKeys

	header *Header
	tables [numViews]*Table
	// nodeTable (this node alone) and clusterTable (one row per member)
	// are the nodes view's tables; tables[viewNodes] is the one the last
	// snapshot calls for.
	nodeTable, clusterTable *Table

	follow *Follow
	help   help.Model
	input  textinput.Model
	rates  *rateTracker
	g      *group

	view   view
	pane   pane
	prompt prompt
	// back is the pane the help returns to.
	back pane
	// confirmID is the request a confirm prompt is about.
	confirmID string

	snap     *api.Snapshot
	interval time.Duration
	paused   bool
	inFlight bool
	pollStop context.CancelFunc
	tick     int
	// errText is the last poll's error, "" after a good poll.
	errText string
	// note is a message about the last action.
	note      string
	noteLevel Level

	stream     int // id of the current follow stream
	streamStop context.CancelFunc

	width, height int
}

var _ tea.Model = (*Top)(nil)

// NewTop returns llmctl top's model, reading llmd through c.
func NewTop(c TopClient, o TopOptions, st Styles, km KeyMap) *Top {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	o.Interval = max(o.Interval, MinInterval)
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ErrorText == nil {
		o.ErrorText = func(err error) string { return err.Error() }
	}
	t := &Top{
		client: c, opts: o, st: st, keys: km.Top, helpKeys: km.Top,
		header:   NewHeader(st),
		follow:   NewFollow(st),
		help:     help.New(),
		input:    textinput.New(),
		rates:    newRateTracker(),
		g:        newGroup(),
		interval: o.Interval,
	}
	if o.ReadOnly {
		t.helpKeys.Cancel.SetEnabled(false)
	}
	t.help.Styles = st.Help
	t.help.FullSeparator = "  "
	t.input.Prompt = "/"
	t.input.PromptStyle = st.Prompt
	t.input.TextStyle = st.Value
	t.input.Placeholder = "filter: any column contains…"
	t.input.PlaceholderStyle = st.Dim
	t.tables[viewRequests] = NewTable(st, km.Top, requestColumns(), reqAge, false, "no live requests")
	t.tables[viewTenants] = NewTable(st, km.Top, tenantColumns(), tenName, false, "no tenant with a quota or recent traffic")
	t.tables[viewModels] = NewTable(st, km.Top, modelColumns(), modName, false, "no models")
	t.nodeTable = NewTable(st, km.Top, nodeColumns(), nodeName, false, "no snapshot yet")
	t.clusterTable = NewTable(st, km.Top, memberColumns(), memStatus, true, "no member")
	t.tables[viewNodes] = t.nodeTable
	return t
}

// Init starts polling.
func (t *Top) Init() tea.Cmd { return t.poll() }

// Close stops the commands still running (a poll, a followed stream, a
// cancel) and waits for them.
func (t *Top) Close() {
	if t.pollStop != nil {
		t.pollStop()
	}
	t.stopFollow()
	t.g.closeAndWait()
}

// Interval returns the time between polls.
func (t *Top) Interval() time.Duration { return t.interval }

// Paused tells whether polling is paused.
func (t *Top) Paused() bool { return t.paused }

// Snapshot returns the snapshot shown; nil before the first.
func (t *Top) Snapshot() *api.Snapshot { return t.snap }

// poll returns the command that fetches one snapshot.
func (t *Top) poll() tea.Cmd {
	t.inFlight = true
	ctx, cancel := context.WithTimeout(context.Background(), t.opts.Timeout)
	t.pollStop = cancel
	client, g, now := t.client, t.g, t.opts.Now
	return func() tea.Msg {
		defer cancel()
		if !g.enter() {
			return nil
		}
		defer g.leave()
		s, err := client.Snapshot(ctx)
		return snapshotMsg{snap: s, err: err, at: now()}
	}
}

// schedule returns the command that asks for the next poll after the
// interval, invalidating any earlier one.
func (t *Top) schedule() tea.Cmd {
	t.tick++
	id := t.tick
	return tea.Tick(t.interval, func(time.Time) tea.Msg { return tickMsg{id: id} })
}

// Update implements tea.Model.
func (t *Top) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		t.SetSize(msg.Width, msg.Height)
		return t, nil
	case snapshotMsg:
		return t, t.onSnapshot(msg)
	case tickMsg:
		if msg.id != t.tick || t.paused || t.inFlight {
			return t, nil
		}
		return t, t.poll()
	case cancelledMsg:
		return t, t.onCancelled(msg)
	case streamMsg:
		return t, t.onStream(msg)
	case tea.KeyMsg:
		return t, t.onKey(msg)
	}
	if t.prompt == promptFilter {
		var cmd tea.Cmd
		t.input, cmd = t.input.Update(msg)
		return t, cmd
	}
	return t, nil
}

func (t *Top) onSnapshot(msg snapshotMsg) tea.Cmd {
	t.inFlight = false
	if msg.err != nil {
		t.errText = t.opts.ErrorText(msg.err)
	} else if msg.snap != nil {
		t.errText = ""
		t.apply(msg.snap, msg.at)
	}
	if t.paused {
		return nil
	}
	return t.schedule()
}

// apply shows snapshot s, received at at.
func (t *Top) apply(s *api.Snapshot, at time.Time) {
	t.snap = s
	when := s.Time
	if when.IsZero() {
		when = at
	}
	t.rates.observe(s, when)
	t.header.SetData(s, t.rates)
	t.tables[viewRequests].SetRows(requestRows(s))
	t.tables[viewTenants].SetRows(tenantRows(s))
	t.tables[viewModels].SetRows(modelRows(s, t.rates))
	t.nodeTable.SetRows(nodeRows(s))
	t.clusterTable.SetRows(memberRows(s))
	nodes := t.nodeTable
	if len(s.Cluster) > 0 {
		nodes = t.clusterTable
	}
	if old := t.tables[viewNodes]; old != nodes {
		nodes.SetFilter(old.Filter())
		t.tables[viewNodes] = nodes
	}
	if t.follow.ID() != "" {
		t.follow.SetRequest(findRequest(s, t.follow.ID()))
	}
	t.layout()
}

func findRequest(s *api.Snapshot, id string) *api.RequestSnapshot {
	for i := range s.Requests {
		if s.Requests[i].ID == id {
			return &s.Requests[i]
		}
	}
	return nil
}

func (t *Top) setNote(s string, l Level) { t.note, t.noteLevel = s, l }

func (t *Top) onKey(msg tea.KeyMsg) tea.Cmd {
	k := t.keys
	switch t.prompt {
	case promptConfirm:
		t.prompt = promptNone
		id := t.confirmID
		switch {
		case msg.Type == tea.KeyCtrlC:
			return tea.Quit
		case key.Matches(msg, k.Yes):
			t.setNote("cancelling "+id+"…", LevelDim)
			return t.cancel(id)
		}
		t.setNote("not cancelled", LevelDim)
		return nil
	case promptFilter:
		tbl := t.tables[t.view]
		switch {
		case msg.Type == tea.KeyCtrlC:
			return tea.Quit
		case key.Matches(msg, k.Back):
			t.prompt = promptNone
			t.input.Blur()
			tbl.SetFilter("")
			return nil
		case key.Matches(msg, k.Apply):
			t.prompt = promptNone
			t.input.Blur()
			return nil
		}
		var cmd tea.Cmd
		t.input, cmd = t.input.Update(msg)
		tbl.SetFilter(t.input.Value())
		return cmd
	}

	t.note = ""
	switch {
	case key.Matches(msg, k.Quit):
		return tea.Quit
	case key.Matches(msg, k.Help):
		if t.pane == paneHelp {
			t.pane = t.back
		} else {
			t.back, t.pane = t.pane, paneHelp
		}
		return nil
	case key.Matches(msg, k.Pause):
		return t.togglePause()
	case key.Matches(msg, k.Slower):
		return t.setInterval(t.interval + IntervalStep)
	case key.Matches(msg, k.Faster):
		return t.setInterval(t.interval - IntervalStep)
	}

	switch t.pane {
	case paneHelp:
		if key.Matches(msg, k.Back) {
			t.pane = t.back
		}
		return nil
	case paneFollow:
		switch {
		case key.Matches(msg, k.Back):
			t.stopFollow()
			t.pane = paneTable
			return nil
		case key.Matches(msg, k.Cancel):
			t.askCancel(t.follow.ID())
			return nil
		}
		_, cmd := t.follow.Update(msg)
		return cmd
	}

	tbl := t.tables[t.view]
	switch {
	case key.Matches(msg, k.Requests):
		t.view = viewRequests
	case key.Matches(msg, k.Tenants):
		t.view = viewTenants
	case key.Matches(msg, k.Models):
		t.view = viewModels
	case key.Matches(msg, k.Nodes):
		t.view = viewNodes
	case key.Matches(msg, k.NextView):
		t.view = (t.view + 1) % numViews
	case key.Matches(msg, k.PrevView):
		t.view = (t.view + numViews - 1) % numViews
	case key.Matches(msg, k.Filter):
		t.prompt = promptFilter
		t.input.SetValue(tbl.Filter())
		t.input.CursorEnd()
		return t.input.Focus()
	case key.Matches(msg, k.SortNext):
		tbl.CycleSort(1)
	case key.Matches(msg, k.SortPrev):
		tbl.CycleSort(-1)
	case key.Matches(msg, k.SortReverse):
		tbl.ReverseSort()
	case key.Matches(msg, k.Back):
		tbl.SetFilter("")
	case key.Matches(msg, k.Follow):
		if r, ok := t.selectedRequest(); ok {
			return t.startFollow(r)
		}
	case key.Matches(msg, k.Cancel):
		if t.view != viewRequests {
			t.setNote("select a request in the requests view (1) to cancel it", LevelDim)
			return nil
		}
		if r, ok := tbl.Selected(); ok {
			t.askCancel(r.ID)
		}
	default:
		_, cmd := tbl.Update(msg)
		return cmd
	}
	return nil
}

// selectedRequest returns the request selected in the requests view.
func (t *Top) selectedRequest() (api.RequestSnapshot, bool) {
	if t.view != viewRequests || t.snap == nil {
		return api.RequestSnapshot{}, false
	}
	row, ok := t.tables[viewRequests].Selected()
	if !ok {
		return api.RequestSnapshot{}, false
	}
	r := findRequest(t.snap, row.ID)
	if r == nil {
		return api.RequestSnapshot{}, false
	}
	return *r, true
}

func (t *Top) togglePause() tea.Cmd {
	t.paused = !t.paused
	if t.paused {
		t.tick++ // the pending tick no longer counts
		t.setNote("paused: p resumes", LevelWarn)
		return nil
	}
	t.setNote("resumed", LevelDim)
	if t.inFlight {
		return nil // its result schedules the next poll
	}
	return t.poll()
}

func (t *Top) setInterval(d time.Duration) tea.Cmd {
	t.interval = max(d, MinInterval)
	t.setNote("refreshing every "+t.interval.String(), LevelDim)
	if t.paused || t.inFlight {
		return nil
	}
	return t.schedule()
}

// askCancel asks to confirm cancelling request id.
func (t *Top) askCancel(id string) {
	if t.opts.ReadOnly {
		t.setNote("read-only: cancelling requests is disabled (--readonly)", LevelWarn)
		return
	}
	if id == "" {
		return
	}
	t.prompt, t.confirmID = promptConfirm, id
}

// cancel returns the command that cancels request id.
func (t *Top) cancel(id string) tea.Cmd {
	client, g, timeout := t.client, t.g, t.opts.Timeout
	return func() tea.Msg {
		if !g.enter() {
			return nil
		}
		defer g.leave()
		ctx, stop := context.WithTimeout(context.Background(), timeout)
		defer stop()
		return cancelledMsg{id: id, err: client.CancelRequest(ctx, id)}
	}
}

func (t *Top) onCancelled(msg cancelledMsg) tea.Cmd {
	if msg.err != nil {
		text := t.opts.ErrorText(msg.err)
		if isNotFound(msg.err) {
			text += " (it finished, or belongs to another tenant than the API key's)"
		}
		t.setNote("cancel "+msg.id+": "+text, LevelCrit)
		return nil
	}
	t.setNote("cancelled "+msg.id, LevelOK)
	if t.paused || t.inFlight {
		return nil
	}
	return t.poll() // show it leave now
}

func isNotFound(err error) bool {
	var se *api.StatusError
	return errors.As(err, &se) && se.StatusCode == 404 // Not Found
}

// notFollowable explains why a request's tokens cannot be shown.
const notFollowable = "not followable: only resumable streams (native /v1/chat, or OpenAI with X-Resumable) can be followed"

// startFollow opens the follow pane on request r and starts its stream.
func (t *Top) startFollow(r api.RequestSnapshot) tea.Cmd {
	t.stopFollow()
	t.pane = paneFollow
	t.follow.Start(r)
	if !r.Resumable {
		t.follow.End(notFollowable, LevelWarn)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.streamStop = cancel
	ch := make(chan streamEvent, streamBuffer)
	client, id := t.client, r.ID
	open := func(ctx context.Context, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
		return client.FollowRequest(ctx, id, fn)
	}
	return tea.Batch(runStream(ctx, t.g, ch, t.opts.Now, open), readStream(t.stream, ch))
}

// stopFollow ends the follow stream, if any; its pending messages are
// ignored from now on.
func (t *Top) stopFollow() {
	if t.streamStop != nil {
		t.streamStop()
		t.streamStop = nil
	}
	t.stream++
}

func (t *Top) onStream(msg streamMsg) tea.Cmd {
	if msg.id != t.stream {
		return nil
	}
	if msg.text != "" {
		t.follow.Append(msg.text)
	}
	if !msg.end {
		return readStream(msg.id, msg.ch)
	}
	switch err := msg.err; {
	case err == nil && msg.done != nil:
		t.follow.End(fmt.Sprintf("done: %s, %d tokens", msg.done.FinishReason, msg.done.Usage.OutputTokens), LevelOK)
	case err == nil:
		t.follow.End("stream closed", LevelDim)
	case isNotFound(err):
		t.follow.End(notFollowable, LevelWarn)
	case errors.Is(err, context.Canceled):
	default:
		t.follow.End("stream ended: "+t.opts.ErrorText(err), LevelCrit)
	}
	return nil
}
