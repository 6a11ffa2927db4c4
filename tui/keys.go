package tui

import "github.com/charmbracelet/bubbles/key"

// KeyMap holds every key binding of the TUIs, with its help text. Build it
// with [DefaultKeyMap]; the help views are generated from it.
type KeyMap struct {
	Top  TopKeys
	Chat ChatKeys
}

// TopKeys are the bindings of llmctl top. They follow nvitop, btop and k9s
// (see the project's ecosystem notes).
type TopKeys struct {
	Requests, Tenants, Models, Nodes key.Binding
	NextView, PrevView               key.Binding

	Up, Down, PageUp, PageDown, Home, End key.Binding

	Filter                          key.Binding
	SortPrev, SortNext, SortReverse key.Binding

	Follow key.Binding
	Back   key.Binding
	Cancel key.Binding
	// Yes confirms a cancel; any other key declines it.
	Yes   key.Binding
	Apply key.Binding

	Pause          key.Binding
	Slower, Faster key.Binding
	Help           key.Binding
	Quit           key.Binding
}

// ChatKeys are the bindings of llmctl chat.
type ChatKeys struct {
	Send key.Binding
	Stop key.Binding
	// Quit quits; ctrl+d only on an empty line (else it deletes, as in a
	// shell).
	Quit             key.Binding
	PageUp, PageDown key.Binding
	LineUp, LineDown key.Binding
}

// DefaultKeyMap returns llmctl's key bindings.
func DefaultKeyMap() KeyMap {
	b := func(help string, desc string, keys ...string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return KeyMap{
		Top: TopKeys{
			Requests: b("1", "requests", "1"),
			Tenants:  b("2", "tenants", "2"),
			Models:   b("3", "models", "3"),
			Nodes:    b("4", "nodes", "4"),
			NextView: b("tab", "next view", "tab"),
			PrevView: b("shift+tab", "prev view", "shift+tab"),

			Up:       b("↑/k", "up", "up", "k"),
			Down:     b("↓/j", "down", "down", "j"),
			PageUp:   b("pgup", "page ↑", "pgup"),
			PageDown: b("pgdn", "page ↓", "pgdown"),
			Home:     b("home/g", "first", "home", "g"),
			End:      b("end/G", "last", "end", "G"),

			Filter:      b("/", "filter", "/"),
			SortPrev:    b(",", "prev sort column", ","),
			SortNext:    b(".", "next sort column", "."),
			SortReverse: b("r", "reverse sort", "r"),

			Follow: b("enter", "follow", "enter"),
			Back:   b("esc", "back/unfilter", "esc"),
			Cancel: b("K", "cancel", "K"),
			Yes:    b("y", "yes", "y", "Y"),
			Apply:  b("enter", "apply", "enter"),

			Pause:  b("p", "pause", "p"),
			Slower: b("+", "interval +250ms", "+", "="),
			Faster: b("-", "interval -250ms", "-", "_"),
			Help:   b("?", "help", "?"),
			Quit:   b("q", "quit", "q", "ctrl+c"),
		},
		Chat: ChatKeys{
			Send:     b("enter", "send", "enter"),
			Stop:     b("ctrl+c", "stop answer", "ctrl+c"),
			Quit:     b("esc/ctrl+d", "quit", "esc", "ctrl+d"),
			PageUp:   b("pgup/pgdn", "scroll", "pgup"),
			PageDown: b("pgdn", "scroll down", "pgdown"),
			LineUp:   b("↑", "scroll up a line", "up"),
			LineDown: b("↓", "scroll down a line", "down"),
		},
	}
}

// ShortHelp implements help.KeyMap.
func (k TopKeys) ShortHelp() []key.Binding {
	return []key.Binding{k.Help, k.Quit, k.NextView, k.Filter, k.Follow, k.Cancel, k.Pause}
}

// FullHelp implements help.KeyMap.
func (k TopKeys) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Requests, k.Tenants, k.Models, k.Nodes, k.NextView, k.PrevView},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Home, k.End},
		{k.Filter, k.SortPrev, k.SortNext, k.SortReverse, k.Follow, k.Back},
		{k.Cancel, k.Pause, k.Slower, k.Faster, k.Help, k.Quit},
	}
}

// ShortHelp implements help.KeyMap.
func (k ChatKeys) ShortHelp() []key.Binding {
	return []key.Binding{k.Send, k.Stop, k.Quit, k.PageUp}
}

// FullHelp implements help.KeyMap.
func (k ChatKeys) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Send, k.Stop, k.Quit}, {k.PageUp, k.PageDown, k.LineUp, k.LineDown}}
}
