// Package peer forwards requests between the nodes of a cluster: a
// [Forwarder] makes a pipeline.Target of each member the router picks,
// which sends the request as the client sent it, signed for the tenant it
// acts for ([Auth]), and reads the peer's answer (Server-Sent Events with
// api.SSEReader, or JSON) back into the entry node's Sink, so that the
// entry node formats, meters and bills it like an answer of its own. The
// serving node returns its usage in the Llmd-Usage trailer ([Usage]).
//
// peer imports pipeline, cluster and api; the HTTP server imports it to
// verify forwarded requests and to write the trailer.
package peer
