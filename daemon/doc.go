// Package daemon is llmd's HTTP front end: it serves the OpenAI-compatible
// API (/v1/chat/completions, /v1/completions, /v1/models), the native
// streaming API (/v1/chat) and the health endpoints, and it owns the model
// replicas (one [engine.Engine] per served model) and their lifetime.
//
// A request's way through the package: decode the body under a size limit,
// validate it (every bad request is answered with an OpenAI error body
// before anything reaches an engine), render and tokenize the prompt, check
// it against the model's context length, submit it to the model's engine
// with the request's context (a client that goes away cancels its
// sequence), then relay the engine's events as JSON or as Server-Sent
// Events. Exactly one function, apiErrorFor, maps errors to HTTP statuses
// and error bodies.
//
// daemon imports engine and api; nothing below cmd/ imports daemon, and
// daemon reads no environment variables (cmd/llmd resolves them).
package daemon
