// Package fleet simulates a fleet of llmd nodes in virtual time, in one
// process. It is SIMULATED: no model runs anywhere; each node is a real
// [engine.Engine] (the scheduler, the paged KV cache with prefix caching,
// preemption, tiers) over the simulated executor of engine/sim, whose steps
// take the roofline time of a GPU profile, a model profile and a
// tensor-parallel degree. A router in front places each request with the
// cluster package's router ([cluster.RoutePool]), fed each node's load and
// prefix summary straight from its engine; an optional quota (the
// in-memory limiter of package quota, on the virtual clock) refuses
// requests before they are routed. The traffic is an open-loop workload of
// internal/workload.
//
// # Driving many engines on one timeline
//
// A [engine.VirtualClock] shared by the nodes cannot work: each step's
// Sleep would move every node's time. Instead the simulation is one
// discrete-event loop with one virtual now, and each node's engine and
// executor read a clock of the node's own that the loop sets. The events
// are a step's end on some node and a request's arrival (a workload item,
// or a conversation's next turn once the previous one finished); the loop
// always takes the earliest (ties: step ends, by node, before arrivals) and
// sets now to it. When a node is free it runs a step at once with
// [engine.Engine.Step], on the loop's goroutine: the step takes what was
// submitted before now, the executor sleeps the step's roofline time on the
// node's clock, and the results (token events stamped with the step's end)
// are applied; the loop records the node as busy until that end. Running
// the step eagerly is exact because nothing reaches a node's engine
// between a step's start and its end: a request routed to it meanwhile
// waits in the engine's inbox for the next step, exactly as with Run. Only
// the router must not see the future, so it sees each node as the node
// published itself at the end of its last finished step (as a gossiped
// state would be), plus the requests routed to it since; prefix summaries
// are refreshed every SummaryInterval, at a step boundary.
//
// Between two arrivals the nodes do not interact, so their steps may run
// on several goroutines at once (Config.Workers); what a node's step
// produces for the others (a finished turn that moves a conversation on, a
// quota to settle) is taken in afterwards in order of time. A turn's
// finish can itself be an arrival (the next turn was waiting for it), so a
// node holding such a turn is stepped no further ahead than its next
// finish could come. There is no wall clock, so a run is a pure function
// of its Config: the same Config gives the same Report, whatever the
// machine or the number of workers (except Report.Wall).
package fleet
