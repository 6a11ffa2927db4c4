// Package server is llmd's HTTP API: the route table with each route's
// access policy, authentication (API keys, the local tenant, signed peer
// requests), the API codecs (OpenAI chat and text completions, llmd's
// native chat) that decode a request into a pipeline.Request and write its
// answer through a pipeline.Sink (JSON, or Server-Sent Events into a
// relay.Stream), the one mapping of errors to HTTP statuses and OpenAI
// error bodies, and the admin and inspection routes (keys, tenants,
// quotas, usage, stats, snapshot, nodes, metrics).
//
// A generation request's way: authenticate (api) -> decode (a codec) ->
// pipeline.Prepare -> pipeline.Start -> pipeline.Finish through the codec's
// sink, the handler following the stream's log for a streamed answer.
// server reaches the engine only through the pipeline.
package server
