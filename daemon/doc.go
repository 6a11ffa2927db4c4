// Package daemon composes one llmd: it builds (OpenDeps) or is handed
// (New) its store, usage ledger, quota limiter and models, wires the
// request pipeline, the stream relay, the HTTP server, the peer forwarder
// and the cluster membership together, and runs them (Run) until a drain
// stops them in order: stop admitting, leave the cluster, finish or cancel
// in-flight work, stop the HTTP server and the engines, flush the ledger,
// close the store. It holds no request logic: that is package pipeline's;
// the HTTP API is package server's.
//
// Only cmd/ imports daemon, and daemon reads no environment variables
// (cmd/llmd resolves them).
package daemon
