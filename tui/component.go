package tui

import tea "github.com/charmbracelet/bubbletea"

// Component is a part of a screen: a Bubble Tea model that lays itself out
// in the size it is given. The root models call SetSize on every
// component when the terminal is resized.
type Component interface {
	tea.Model
	// SetSize sets the cells the component may draw in: width columns,
	// height rows.
	SetSize(width, height int)
}
