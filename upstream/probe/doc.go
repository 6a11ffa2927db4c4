// Package probe talks to an OpenAI-compatible inference engine running
// beside llmd (vLLM, SGLang, llama.cpp's llama-server, TGI, Ollama, or
// another llmd) about everything but generation: what kind of engine it is
// and which models it serves ([Detect]), whether it is ready ([Health]),
// and how loaded it is, as its Prometheus /metrics says ([ReadLoad],
// [ParseLoad]). An upstream replica holds its own queue in front of the
// engine and releases requests while the engine's KV-cache use and waiting
// queue are under bounds; this package supplies those readings.
//
// Every function takes the caller's *http.Client, so credentials (an
// engine started with an API key, or an llmd that wants a key on
// /v1/models and /metrics) travel in its Transport. A base URL is the
// server's root ("http://127.0.0.1:8000", not ".../v1"). Every request is
// bounded by the caller's context and by a timeout of its own (5 s), and
// every body read is capped (1 MiB for JSON, 4 MiB for /metrics). Errors
// name the URL; an unexpected HTTP status is a [*StatusError].
//
// probe imports only the standard library and the Prometheus text-format
// parser; nothing of llmd.
package probe
