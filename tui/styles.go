package tui

import (
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/lipgloss"
)

// Styles are every style the TUIs draw with, built once by [DefaultStyles]
// and passed to the constructors, so that colours live in one place and
// tests can render without any.
type Styles struct {
	// Title is the top line of llmctl top; Paused marks it while polling
	// is paused.
	Title  lipgloss.Style
	Paused lipgloss.Style
	// Label names a value (e.g. "KV", "TTFT"); Value is the value; Dim is
	// for secondary text.
	Label lipgloss.Style
	Value lipgloss.Style
	Dim   lipgloss.Style
	// Model is a model's name in the header.
	Model lipgloss.Style
	// Level styles, for gauges and cells: OK below 75 %, Warn from 75 %,
	// Crit from 90 %. Hot highlights a state that needs attention (a
	// degradation level other than "none").
	OK   lipgloss.Style
	Warn lipgloss.Style
	Crit lipgloss.Style
	Hot  lipgloss.Style
	// BarCached and BarFree draw the cached and free parts of the KV bar
	// (the used part takes its level's style).
	BarCached lipgloss.Style
	BarFree   lipgloss.Style
	// Spark draws the tokens/s sparkline.
	Spark lipgloss.Style

	Tab       lipgloss.Style
	ActiveTab lipgloss.Style

	Table TableStyles

	// Status is the status line; Error an error in it; Prompt a question
	// (confirm) or the filter prompt.
	Status lipgloss.Style
	Error  lipgloss.Style
	Prompt lipgloss.Style

	// PaneTitle heads the follow pane.
	PaneTitle lipgloss.Style

	Chat ChatStyles

	// Help styles the bubbles/help views.
	Help help.Styles
}

// TableStyles style a table.
type TableStyles struct {
	Header   lipgloss.Style
	Selected lipgloss.Style
	Empty    lipgloss.Style
}

// ChatStyles style llmctl chat.
type ChatStyles struct {
	User      lipgloss.Style
	Assistant lipgloss.Style
	Notice    lipgloss.Style
	Separator lipgloss.Style
	Busy      lipgloss.Style
	Input     lipgloss.Style
}

// DefaultStyles returns llmctl's styles rendered by r: pass
// lipgloss.NewRenderer(out) for the terminal the program draws on, so that
// its colour profile is detected (a renderer with the Ascii profile draws
// no colour and no attribute at all).
func DefaultStyles(r *lipgloss.Renderer) Styles {
	ns := r.NewStyle
	green := lipgloss.AdaptiveColor{Light: "#00875f", Dark: "#5fd787"}
	yellow := lipgloss.AdaptiveColor{Light: "#af8700", Dark: "#ffd75f"}
	red := lipgloss.AdaptiveColor{Light: "#d70000", Dark: "#ff5f5f"}
	blue := lipgloss.AdaptiveColor{Light: "#005fd7", Dark: "#5fafff"}
	grey := lipgloss.AdaptiveColor{Light: "#8a8a8a", Dark: "#6c6c6c"}
	magenta := lipgloss.AdaptiveColor{Light: "#af00af", Dark: "#d787ff"}

	keyStyle := ns().Foreground(blue)
	descStyle := ns().Foreground(grey)
	return Styles{
		Title:     ns().Bold(true),
		Paused:    ns().Bold(true).Foreground(yellow),
		Label:     ns().Foreground(grey),
		Value:     ns(),
		Dim:       ns().Foreground(grey),
		Model:     ns().Bold(true),
		OK:        ns().Foreground(green),
		Warn:      ns().Foreground(yellow),
		Crit:      ns().Foreground(red).Bold(true),
		Hot:       ns().Foreground(red).Bold(true).Reverse(true),
		BarCached: ns().Foreground(blue),
		BarFree:   ns().Foreground(grey),
		Spark:     ns().Foreground(blue),
		Tab:       ns().Foreground(grey),
		ActiveTab: ns().Bold(true),
		Table: TableStyles{
			Header:   ns().Bold(true).Foreground(grey),
			Selected: ns().Reverse(true),
			Empty:    ns().Foreground(grey).Italic(true),
		},
		Status:    ns().Foreground(grey),
		Error:     ns().Foreground(red),
		Prompt:    ns().Bold(true).Foreground(yellow),
		PaneTitle: ns().Bold(true),
		Chat: ChatStyles{
			User:      ns().Bold(true).Foreground(blue),
			Assistant: ns().Bold(true).Foreground(magenta),
			Notice:    ns().Foreground(grey).Italic(true),
			Separator: ns().Foreground(grey),
			Busy:      ns().Foreground(yellow),
			Input:     ns(),
		},
		Help: help.Styles{
			Ellipsis:       descStyle,
			ShortKey:       keyStyle,
			ShortDesc:      descStyle,
			ShortSeparator: descStyle,
			FullKey:        keyStyle,
			FullDesc:       descStyle,
			FullSeparator:  descStyle,
		},
	}
}

// Level grades a value for display: how full a gauge is, or whether a
// state needs attention.
type Level int

// Levels, from plain to alarming.
const (
	LevelNone Level = iota
	LevelDim
	LevelOK
	LevelWarn
	LevelCrit
	LevelHot
)

// Thresholds of the gauges' colours, as fractions of the limit.
const (
	warnAt = 0.75
	critAt = 0.90
)

// fillLevel grades a fraction of a limit: OK, Warn from 75 %, Crit from
// 90 %.
func fillLevel(frac float64) Level {
	switch {
	case frac >= critAt:
		return LevelCrit
	case frac >= warnAt:
		return LevelWarn
	default:
		return LevelOK
	}
}

// style returns the style of level l.
func (s Styles) style(l Level) lipgloss.Style {
	switch l {
	case LevelDim:
		return s.Dim
	case LevelOK:
		return s.OK
	case LevelWarn:
		return s.Warn
	case LevelCrit:
		return s.Crit
	case LevelHot:
		return s.Hot
	}
	return s.Value
}
