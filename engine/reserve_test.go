package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
)

// saturation is a run of the engine on the sim executor in virtual time:
// eight enterprise tenants flood it with more work than it can do, and
// tenant "res", in the free tier (the smallest weight), submits reserved
// requests (ReservedTPS) from resFrom to resTo.
type saturation struct {
	reserved       float64
	resFrom, resTo time.Duration
	// until is the virtual time the run lasts.
	until time.Duration
}

// resultOf is the output tokens delivered to each tenant in virtual-time
// windows of one second, from the start.
type resultOf map[string][]int

// rate is tenant's output tokens per second from second from to second to.
func (r resultOf) rate(tenant string, from, to int) float64 {
	n := 0
	for s := from; s < to && s < len(r[tenant]); s++ {
		n += r[tenant][s]
	}
	return float64(n) / float64(to-from)
}

// others is the rate of every tenant but "res".
func (r resultOf) others(from, to int) float64 {
	sum := 0.0
	for name := range r {
		if name != "res" {
			sum += r.rate(name, from, to)
		}
	}
	return sum
}

const promptTokens, outputTokens = 128, 128

func (s saturation) run(t *testing.T) (resultOf, *engine.Engine) {
	t.Helper()
	start := time.Unix(0, 0)
	clock := engine.NewVirtualClock(start)
	cfg := sim.DefaultConfig()
	cfg.MeanOutputTokens = 0 // every answer runs to max_tokens
	exec, err := sim.New(cfg, clock)
	require.NoError(t, err)
	ecfg := engine.DefaultConfig()
	ecfg.MaxRunning = 32 // the running set, not memory, is the bottleneck
	eng, err := engine.New(exec, clock, ecfg, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type sub struct {
		tenant string
		st     *engine.Stream
	}
	var subs []sub
	submit := func(tenant string, prio engine.Priority, reserved float64, i int) {
		prompt := make([]int32, promptTokens)
		for j := range prompt {
			prompt[j] = int32(1 + (i*31+j*7)%500)
		}
		st, err := eng.Submit(ctx, engine.Request{ID: fmt.Sprintf("%s-%d", tenant, i), Tenant: tenant, Prompt: prompt,
			MaxTokens: outputTokens, N: 1, Priority: prio, Seed: uint64(i), IgnoreEOS: true, ReservedTPS: reserved})
		require.NoError(t, err)
		subs = append(subs, sub{tenant, st})
	}
	entSubmitted, resSubmitted := 0, 0
	for clock.Now().Sub(start) < s.until {
		now := clock.Now().Sub(start)
		// More work than the engine can do: 64 enterprise requests always
		// wait.
		for eng.Stats().WaitingByPriority[engine.PriorityEnterprise] < 64 {
			submit(fmt.Sprintf("ent-%d", entSubmitted%8), engine.PriorityEnterprise, 0, entSubmitted)
			entSubmitted++
			_, err := eng.Step(ctx) // take the submission in
			require.NoError(t, err)
		}
		// The reserved tenant keeps 16 requests waiting while it is active.
		if s.reserved > 0 && now >= s.resFrom && now < s.resTo {
			for eng.Stats().WaitingByPriority[engine.PriorityFree] < 16 {
				submit("res", engine.PriorityFree, s.reserved, 100000+resSubmitted)
				resSubmitted++
				_, err := eng.Step(ctx) // take the submission in
				require.NoError(t, err)
			}
		}
		ran, err := eng.Step(ctx)
		require.NoError(t, err)
		require.True(t, ran, "the flood keeps the engine busy")
	}
	res := resultOf{}
	secs := int(s.until / time.Second)
	// A done context: Next returns what is buffered, then gives up.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for _, sb := range subs {
		if res[sb.tenant] == nil {
			res[sb.tenant] = make([]int, secs)
		}
		for {
			ev, err := sb.st.Next(stopped)
			if err != nil {
				break
			}
			if ev.Kind != engine.EventToken {
				continue
			}
			if s := int(ev.Time.Sub(start) / time.Second); s < secs {
				res[sb.tenant][s]++
			}
		}
	}
	return res, eng
}

// TestReservedThroughputUnderSaturation: eight enterprise tenants saturate
// the engine; a free-tier tenant holding a reservation of a quarter of the
// engine's capacity receives at least 95% of it (weighted fair queuing
// alone would give it 2/66 of the tokens admitted), and the others share
// the rest.
func TestReservedThroughputUnderSaturation(t *testing.T) {
	t.Parallel()
	base, _ := saturation{until: 12 * time.Second}.run(t)
	capacity := base.others(2, 12)
	require.Positive(t, capacity)
	t.Logf("capacity without reservations: %.0f output tokens/s", capacity)

	reserved := capacity / 4
	got, eng := saturation{reserved: reserved, resTo: time.Hour, until: 12 * time.Second}.run(t)
	delivered := got.rate("res", 0, 12)
	t.Logf("reserved %.0f tok/s, delivered %.0f tok/s (%.1f%%), others %.0f tok/s", reserved, delivered,
		100*delivered/reserved, got.others(0, 12))
	require.GreaterOrEqual(t, delivered, 0.95*reserved, "the reserved tenant gets at least 95%% of its reservation")
	require.GreaterOrEqual(t, got.others(0, 12), 0.6*capacity, "the others share the rest")
	for s := 1; s < 12; s++ {
		require.GreaterOrEqual(t, float64(got["res"][s]), 0.8*reserved, "second %d: the reservation holds all along", s)
	}
	stats := eng.Reservations()
	require.Len(t, stats, 1)
	require.Equal(t, "res", stats[0].Tenant)
	require.InDelta(t, reserved, stats[0].ReservedTPS, 1e-9)
	require.InDelta(t, reserved, stats[0].DeliveredTPS, 0.25*reserved, "the engine reports the delivered rate")
}

// TestReservedCapacityReturnsWhenIdle: a reserved tenant active for the
// first four seconds, then idle: afterwards the others get the whole
// engine back.
func TestReservedCapacityReturnsWhenIdle(t *testing.T) {
	t.Parallel()
	base, _ := saturation{until: 12 * time.Second}.run(t)
	capacity := base.others(2, 12)
	got, _ := saturation{reserved: capacity / 2, resTo: 4 * time.Second, until: 12 * time.Second}.run(t)
	during, after := got.others(1, 4), got.others(7, 12)
	t.Logf("capacity %.0f tok/s; others while reserved %.0f, after %.0f", capacity, during, after)
	require.Less(t, during, 0.75*capacity, "while active the reservation takes its share")
	require.GreaterOrEqual(t, after, 0.95*capacity, "idle, its capacity goes back to the others")
	require.Zero(t, got.rate("res", 7, 12), "it asked for nothing after its requests ended")
}
