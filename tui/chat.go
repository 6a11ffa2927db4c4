package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmd/llmd/api"
)

// ChatClient is what llmctl chat needs of llmd; *api.Client implements it.
// Chat streams the answer to req into fn; when ctx ends it cancels the
// request in llmd before returning.
type ChatClient interface {
	Chat(ctx context.Context, req api.NativeChatRequest, fn func(api.NativeDelta) error) (*api.NativeDone, error)
}

// ChatOptions configure a [Chat].
type ChatOptions struct {
	// Request is the template of every turn's request: the model and the
	// sampling options. Messages is set per turn.
	Request api.NativeChatRequest
	// System is the system message the conversation starts with; "" for
	// none.
	System string
	// Tenant names the tenant the API key acts for, for the status line;
	// "" means "local" (no key).
	Tenant string
	// ErrorText turns an error of the client into one line (what happened
	// and what to do); nil means err.Error().
	ErrorText func(error) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Roles of the transcript's entries.
const (
	roleUser      = "user"
	roleAssistant = "assistant"
	roleNotice    = "notice"
)

// entry is one block of the transcript.
type entry struct {
	role string
	// label names the assistant (its model).
	label string
	text  string
	// note follows the text: how an answer ended when not normally.
	note string
}

// chatHelp is what /? shows.
const chatHelp = `Commands:
  /model NAME   chat with model NAME from the next message on
  /system TEXT  set the system message ("/system" alone removes it)
  /clear        forget the conversation
  /bye          quit (or Esc, or Ctrl-D on an empty line)
Ctrl-C stops the answer being written; PgUp/PgDn scroll.`

// Chat is the root model of the interactive llmctl chat: a scrolling
// transcript, an input line, and a status line with the model, the tenant
// and the last answer's time to first token and tokens per second.
//
// Call Close after the program ends: it cancels an answer still streaming
// (llmd then frees it) and waits for that.
type Chat struct {
	client ChatClient
	opts   ChatOptions
	st     Styles
	keys   ChatKeys

	vp    viewport.Model
	input textinput.Model
	help  help.Model
	g     *group

	req     api.NativeChatRequest
	system  string
	history []api.Message
	entries []entry

	// The turn in progress: streaming is set from sending the question
	// until its answer ends.
	streaming bool
	stream    int
	stop      context.CancelFunc
	question  string
	sent      time.Time
	first     time.Time

	// The last finished answer's numbers.
	lastTTFT time.Duration
	lastRate float64
	lastOK   bool

	// note is a passing message on the status line.
	note string

	width, height int
}

var _ tea.Model = (*Chat)(nil)

// NewChat returns llmctl chat's model, talking to llmd through c.
func NewChat(c ChatClient, o ChatOptions, st Styles, km KeyMap) *Chat {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ErrorText == nil {
		o.ErrorText = func(err error) string { return err.Error() }
	}
	if o.Tenant == "" {
		o.Tenant = "local"
	}
	m := &Chat{
		client: c, opts: o, st: st, keys: km.Chat,
		vp:     viewport.New(0, 0),
		input:  textinput.New(),
		help:   help.New(),
		g:      newGroup(),
		req:    o.Request,
		system: o.System,
	}
	m.vp.KeyMap = viewport.KeyMap{} // it scrolls only on the keys Update gives it
	m.help.Styles = st.Help
	m.input.Prompt = ">>> "
	m.input.PromptStyle = st.Chat.User
	m.input.TextStyle = st.Chat.Input
	m.input.Placeholder = "Send a message (/? for help)"
	m.input.PlaceholderStyle = st.Dim
	m.input.Focus()
	m.entries = append(m.entries, entry{role: roleNotice,
		text: fmt.Sprintf("Chatting with %s. Type /? for help; Esc, Ctrl-D or /bye quits.", m.req.Model)})
	m.render()
	return m
}

// Init implements tea.Model.
func (m *Chat) Init() tea.Cmd { return textinput.Blink }

// Close cancels the answer being streamed, if any, and waits for its
// goroutine to end (after llmd was told to cancel it).
func (m *Chat) Close() {
	if m.stop != nil {
		m.stop()
	}
	m.g.closeAndWait()
}

// Model returns the model the next message goes to.
func (m *Chat) Model() string { return m.req.Model }

// Streaming tells whether an answer is being written.
func (m *Chat) Streaming() bool { return m.streaming }

// History returns the conversation so far (without the system message).
func (m *Chat) History() []api.Message { return m.history }

// Transcript returns the conversation as plain text, for the terminal
// after the program ends.
func (m *Chat) Transcript() string {
	var b strings.Builder
	for _, e := range m.entries {
		switch e.role {
		case roleUser:
			fmt.Fprintf(&b, ">>> %s\n", e.text)
		case roleAssistant:
			b.WriteString(e.text)
			if !strings.HasSuffix(e.text, "\n") {
				b.WriteByte('\n')
			}
			if e.note != "" {
				fmt.Fprintf(&b, "%s\n", e.note)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Update implements tea.Model.
func (m *Chat) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.SetSize(msg.Width, msg.Height)
		return m, nil
	case streamMsg:
		return m, m.onStream(msg)
	case tea.KeyMsg:
		return m, m.onKey(msg)
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return m, cmd
}

func (m *Chat) onKey(msg tea.KeyMsg) tea.Cmd {
	k := m.keys
	m.note = ""
	switch {
	case key.Matches(msg, k.Stop):
		switch {
		case m.streaming:
			m.stop()
			m.note = "stopping the answer…"
		case m.input.Value() != "":
			m.input.Reset()
		default:
			m.note = "Esc, Ctrl-D or /bye quits"
		}
		return nil
	case key.Matches(msg, k.Quit) && (msg.Type != tea.KeyCtrlD || m.input.Value() == ""):
		return tea.Quit
	case key.Matches(msg, k.PageUp):
		m.vp.PageUp()
		return nil
	case key.Matches(msg, k.PageDown):
		m.vp.PageDown()
		return nil
	case key.Matches(msg, k.LineUp):
		m.vp.ScrollUp(1)
		return nil
	case key.Matches(msg, k.LineDown):
		m.vp.ScrollDown(1)
		return nil
	case key.Matches(msg, k.Send):
		line := strings.TrimSpace(m.input.Value())
		if line == "" {
			return nil
		}
		if m.streaming {
			m.note = "wait for the answer, or Ctrl-C to stop it"
			return nil
		}
		m.input.Reset()
		return m.submit(line)
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

// submit runs a command line or sends a message.
func (m *Chat) submit(line string) tea.Cmd {
	if !strings.HasPrefix(line, "/") {
		return m.send(line)
	}
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/bye":
		return tea.Quit
	case "/model":
		if arg == "" {
			m.notice("The model is " + m.req.Model + ". /model NAME changes it.")
		} else {
			m.req.Model = arg
			m.notice("Chatting with " + arg + " from now on.")
		}
	case "/system":
		m.system = arg
		if arg == "" {
			m.notice("Removed the system message.")
		} else {
			m.notice("System message set: " + arg)
		}
	case "/clear":
		m.history = nil
		m.entries = m.entries[:0]
		m.notice("Cleared the conversation.")
	case "/?", "/help":
		m.notice(chatHelp)
	default:
		m.notice("Unknown command " + name + ". Type /? for help.")
	}
	return nil
}

func (m *Chat) notice(s string) {
	m.entries = append(m.entries, entry{role: roleNotice, text: s})
	m.render()
	m.vp.GotoBottom()
}

// messages returns the conversation to send with question as the user's
// new message.
func (m *Chat) messages(question string) []api.Message {
	msgs := make([]api.Message, 0, len(m.history)+2)
	if m.system != "" {
		msgs = append(msgs, api.Message{Role: "system", Content: api.Content(m.system)})
	}
	msgs = append(msgs, m.history...)
	return append(msgs, api.Message{Role: "user", Content: api.Content(question)})
}

// send starts the answer to question.
func (m *Chat) send(question string) tea.Cmd {
	req := m.req
	req.Messages = m.messages(question)
	m.entries = append(m.entries,
		entry{role: roleUser, text: question},
		entry{role: roleAssistant, label: req.Model})
	m.streaming, m.question = true, question
	m.sent, m.first = m.opts.Now(), time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.stream++
	ch := make(chan streamEvent, streamBuffer)
	client := m.client
	open := func(ctx context.Context, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
		return client.Chat(ctx, req, fn)
	}
	m.render()
	m.vp.GotoBottom()
	return tea.Batch(runStream(ctx, m.g, ch, m.opts.Now, open), readStream(m.stream, ch))
}

func (m *Chat) onStream(msg streamMsg) tea.Cmd {
	if msg.id != m.stream || !m.streaming {
		return nil
	}
	atBottom := m.vp.AtBottom()
	ans := &m.entries[len(m.entries)-1]
	if msg.text != "" {
		if m.first.IsZero() {
			m.first = msg.first
		}
		ans.text += msg.text
	}
	if !msg.end {
		m.render()
		if atBottom {
			m.vp.GotoBottom()
		}
		return readStream(msg.id, msg.ch)
	}
	m.streaming = false
	m.stop()
	m.stop = nil
	m.note = "" // "stopping the answer…" is over
	switch err := msg.err; {
	case err == nil:
		m.history = append(m.history,
			api.Message{Role: "user", Content: api.Content(m.question)},
			api.Message{Role: "assistant", Content: api.Content(ans.text)})
		m.lastOK, m.lastTTFT, m.lastRate = false, 0, 0
		if !m.first.IsZero() {
			m.lastOK = true
			m.lastTTFT = m.first.Sub(m.sent)
			if d := msg.done; d != nil && d.Usage.OutputTokens > 1 && msg.at.After(m.first) {
				m.lastRate = float64(d.Usage.OutputTokens-1) / msg.at.Sub(m.first).Seconds()
			}
		}
	case errors.Is(err, context.Canceled):
		ans.note = "(cancelled)"
	default:
		ans.note = "error: " + m.opts.ErrorText(err)
	}
	m.render()
	if atBottom {
		m.vp.GotoBottom()
	}
	return nil
}

// SetSize lays the screen out: the transcript above a separator, the
// input line, the status line and the key help.
func (m *Chat) SetSize(width, height int) {
	m.width, m.height = max(width, 0), max(height, 0)
	m.vp.Width, m.vp.Height = m.width, max(m.height-4, 0)
	m.input.Width = max(m.width-len(m.input.Prompt)-1, 1)
	m.help.Width = m.width
	m.render()
	m.vp.GotoBottom()
}

// render lays the transcript out at the current width.
func (m *Chat) render() {
	w := max(m.width, 1)
	wrap := func(s string) string { return ansi.Wrap(s, w, "") }
	var blocks []string
	for i, e := range m.entries {
		var b strings.Builder
		switch e.role {
		case roleUser:
			b.WriteString(m.st.Chat.User.Render("you") + "\n" + wrap(e.text))
		case roleAssistant:
			b.WriteString(m.st.Chat.Assistant.Render(e.label) + "\n")
			text := e.text
			if m.streaming && i == len(m.entries)-1 {
				text += "▍"
			}
			b.WriteString(wrap(text))
			if e.note != "" {
				b.WriteString("\n" + m.st.Chat.Notice.Render(wrap(e.note)))
			}
		default:
			b.WriteString(m.st.Chat.Notice.Render(wrap(e.text)))
		}
		blocks = append(blocks, b.String())
	}
	m.vp.SetContent(strings.Join(blocks, "\n\n"))
}

// View implements tea.Model.
func (m *Chat) View() string {
	if m.width == 0 || m.height == 0 {
		return ""
	}
	st := m.st.Chat
	// The separator carries the state: a passing note, or the answer
	// being written.
	sep := ""
	switch {
	case m.note != "":
		sep = "── " + st.Busy.Render(m.note) + " "
	case m.streaming:
		sep = "── " + st.Busy.Render("answering… (Ctrl-C stops)") + " "
	}
	sep = clip(sep+st.Separator.Render(strings.Repeat("─", max(m.width-lipgloss.Width(sep), 0))), m.width)
	status := m.st.Label.Render("model ") + m.st.Value.Render(m.req.Model) +
		m.st.Label.Render("  tenant ") + m.st.Value.Render(m.opts.Tenant)
	if m.lastOK {
		status += m.st.Label.Render("  last answer: TTFT ") + m.st.Value.Render(fmtLatency(m.lastTTFT.Seconds())) +
			m.st.Label.Render("  ") + m.st.Value.Render(fmtRate(m.lastRate)) + m.st.Label.Render(" tok/s")
	}
	lines := []string{m.vp.View(), sep, clip(m.input.View(), m.width), clip(status, m.width),
		clip(m.help.ShortHelpView(m.keys.ShortHelp()), m.width)}
	return strings.Join(lines, "\n")
}
