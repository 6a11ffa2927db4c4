// Package safety is llmd's safety-check hook: it asks an external
// classifier, an HTTP endpoint the operator runs, whether a request's input
// and, optionally, its output may be served.
//
// The input check runs in its own goroutine ([Checker.Start]) while the
// request is routed and admitted, so it adds little latency; the request
// waits for the verdict ([Pending.Wait]) before its first token. Output
// checks run every [Config.OutputEvery] output tokens and once at the end
// ([OutputMonitor]). A verdict is one of:
//
//   - [Allow]: serve the request.
//   - [Flag]: serve it, and record the verdict (category and reason).
//   - [Block]: refuse it. On input, the caller answers 400 before any
//     token; on output, the caller ends the stream with finish_reason
//     "content_filter".
//
// Each check has its own timeout ([Config.Timeout]). A check that fails (see
// below) takes the verdict of the policy ([Config.Policy]): fail-open
// ([FailOpen]) gives Allow, fail-closed ([FailClosed]) gives Block with
// category [CategoryUnavailable]; either way [Result.Failed] is true and
// [Result.Err] says why.
//
// # Wire protocol
//
// One HTTP request per check:
//
//	POST <Config.URL>
//	Content-Type: application/json
//
//	{"request_id": "...", "tenant": "...", "model": "...",
//	 "stage": "input"|"output", "text": "...", "final": bool}
//
// For the "input" stage, text is the prompt as the user wrote it: the chat
// messages' contents joined with "\n", or the completion prompt; final is
// false. For the "output" stage, text is the answer so far, and final is
// true on the last output check of the answer (the one at its end).
//
// Text longer than [Config.MaxTextBytes] (default 64 KiB) is cut: the input
// stage sends its first MaxTextBytes bytes, the output stage its last
// MaxTextBytes bytes (the newest text), never splitting a UTF-8 sequence
// (so a few bytes fewer may be sent), and the body then carries
// "truncated": true. The key is absent when nothing was cut.
//
// The classifier answers status 200 with
//
//	{"verdict": "allow"|"flag"|"block", "category": "optional short label", "reason": "optional text"}
//
// Unknown keys are ignored. A check fails when the classifier answers any
// other status (a Checker's own client follows no redirect), a body over
// 64 KiB ([MaxResponseBytes]), a body that does not parse, a missing or
// unknown verdict, or no answer within the timeout; it also fails when the
// classifier cannot be reached. A check whose caller's context ends first is
// abandoned: it is counted apart from failures ([Stats.Canceled]) and
// takes the policy's verdict too.
//
// safety imports only the standard library and nothing of llmd: it knows
// no API format, tenant store or stream. The pipeline builds [Input] from
// the request and maps a [Block] to its own error or finish reason.
package safety
