package workload

import "time"

// Named is a workload with a name, for tables and flags.
type Named struct {
	Name string
	// About says what the workload is, in a phrase.
	About string
	Spec  Spec
}

// RoutingWorkloads returns the workloads routing policies are compared on
// (issue 25, item 8), as open-loop specs of rate requests per second for
// duration, all 4-turn conversations over 8 shared system prompts of 1,000
// tokens:
//
//   - "documents": each conversation opens with a document of its own
//     (1,000 tokens) and asks 3 short questions (10 tokens) about it, 16
//     output tokens a turn: prefixes mostly private (the routing benchmark
//     of BENCHMARKS.md, make bench-cluster);
//   - "turns-1000": 1,000-token turns, 128 output tokens: a conversation's
//     history is private, the system prompts shared;
//   - "turns-200": 200-token turns, 128 output tokens: the shared system
//     prompts are most of each prompt, so every node holds most of it.
//
// A spec's Rate and Duration are the caller's to scale.
func RoutingWorkloads(rate float64, duration time.Duration, seed uint64) []Named {
	base := Spec{Duration: duration, Rate: rate, SharedPrefix: 1, SystemPrompts: 8, SystemTokens: Fixed(1000),
		Turns: Fixed(4), Seed: seed}
	docs := base
	docs.FirstInput, docs.Input, docs.Output = Fixed(1000), Fixed(10), Fixed(16)
	long := base
	long.Input, long.Output = Fixed(1000), Fixed(128)
	short := base
	short.Input, short.Output = Fixed(200), Fixed(128)
	return []Named{
		{Name: "documents", About: "a private 1,000-token document, then 10-token turns, 16 out", Spec: docs},
		{Name: "turns-1000", About: "1,000-token turns, 128 out", Spec: long},
		{Name: "turns-200", About: "200-token turns, 128 out", Spec: short},
	}
}
