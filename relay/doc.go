// Package relay holds streamed answers between the request that produces
// them and the connections that read them: each stream's events, already
// formatted as Server-Sent Events, sit in a bounded log ([Stream]) that
// the producer appends to without ever waiting, while [Follow] copies them
// to a client at the client's pace, with heartbeats and a bound on how far
// a client may fall behind. A resumable stream outlives its connection: a
// client reconnects with Last-Event-ID and [Registry] finds the stream by
// request id for its tenant, until it expires.
//
// relay imports api (the SSE format) and nothing else of llmd; it knows
// no request, model or API format beyond the SSE framing.
package relay
