// Package pipeline runs one generation request, decoded from any API, to
// its outcome through typed stages. Each stage takes values and returns
// values; the request's state is never one record that stages share and
// change:
//
//	Prepare   tenant    the principal's tier and limits (once)
//	          validate  the checks that need no model
//	          choose    the model: named, fallback, degradation route
//	          prepare   the prompt rendered and tokenized, max_tokens fit: a Job
//	          admit     priority, the degradation ladder, the quota reservation
//	          route     where it may run: this node's engine, peers (Targets)
//	Start               the first Target that accepts the Job (an Execution)
//	Finish    relay     the answer through the codec's Sink
//	          settle    the usage row, the reservation reconciled, the end event
//	          record    the one log line, from the request's Outcome
//
// Prepare and Start may refuse a request: the caller answers with an HTTP
// error and calls Record. After Start the answer is
// the Sink's: text, then an end or an error event. The API codecs (package
// server) decode requests into a Request and implement Sink; a Target runs
// a Job: the local engine here (LocalTarget), a peer in package peer.
//
// A new API is a codec pair in server; a new place to run a request (an
// upstream engine) is a Target; a new check is a stage in Prepare.
//
// pipeline imports engine, quota, store, cluster, metrics and api; never
// net/http's server side, relay, peer or server.
package pipeline
