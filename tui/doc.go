// Package tui holds llmctl's terminal user interfaces: [Top], the live view
// of an llmd node ("llmctl top"), and [Chat], the interactive chat
// ("llmctl chat" on a terminal). Both are Bubble Tea models.
//
// The package imports only package api and the charm modules (Bubble Tea,
// Bubbles, Lip Gloss). It never reads the environment or flags: llmd is
// reached through the small client interfaces declared here ([TopClient],
// [ChatClient]), which *api.Client implements, and the [Styles] and
// [KeyMap] are built once by the caller and passed to the constructors.
//
// All I/O happens in tea.Cmd functions. A token stream enters a program
// as a command that reads one batch of events from a channel and re-arms
// itself; the goroutine writing the channel runs inside another command
// and is stopped, and waited for, by the model's Close.
package tui
