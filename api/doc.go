// Package api holds llmd's wire types (the OpenAI-compatible API and the
// native API) and the Go client that llmctl, the TUI, peers and tests use.
//
// The server imports these same types, so each wire struct has one
// definition. api imports nothing else of llmd and reads no environment.
package api
