// Package engine is one model replica: a continuous-batching scheduler over a
// paged KV cache, driving an [Executor] one step at a time.
//
// The scheduler core ([Scheduler]) is a synchronous state machine: Step
// decides admissions, preemptions and the batch with no goroutines, no clock
// reads and no I/O. [Engine] wraps it in the one goroutine that owns all
// scheduler and KV-cache state ([Engine.Run]); requests enter through
// [Engine.Submit] and tokens leave through a per-request [Stream] that never
// blocks the step loop.
//
// engine imports no HTTP, SQL, gossip or UI code: it must not import daemon,
// cluster, store, tui or net/http (checked by scripts/check-imports.sh).
package engine
