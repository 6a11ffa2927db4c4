// Package termquiet keeps Bubble Tea v1's package initialisation from
// asking the terminal for its background colour.
//
// bubbletea v1 calls lipgloss.HasDarkBackground in an init function (its
// tea_init.go, "removed in v2"), so every program that links it, whatever
// it runs, sends the terminal an OSC 11 query when its standard output is a
// terminal, and termenv waits up to 5 s (a constant) for an answer. A
// terminal that answers no query (a bare pty, some web consoles and CI
// runners) then delays every llmctl command by 5 s. termenv skips the
// query when $CI is set, so this package sets CI for the span of the
// initialisation and Restore, called first thing in main, puts it back.
// llmctl asks the background itself, with a short timeout, when it draws
// a full-screen view (cmd/llmctl/termbg.go).
//
// Go initialises packages in dependency order, and among those ready, in
// the order of their import paths: this package depends only on os, so it
// is ready before termenv (which depends on os and more), and its path
// sorts before github.com/muesli/termenv, so its init runs before
// termenv's, lipgloss's and bubbletea's. A program imports it for that
// effect (import _ "github.com/llmd/llmd/internal/termquiet") and calls
// Restore.
package termquiet

import "os"

// set records that init set $CI (it was unset before).
var set bool

func init() {
	if _, ok := os.LookupEnv("CI"); !ok {
		set = os.Setenv("CI", "llmctl-init") == nil
	}
}

// Restore unsets $CI if init set it. Call it at the start of main, after
// every package has been initialised.
func Restore() {
	if set {
		_ = os.Unsetenv("CI")
		set = false
	}
}
