package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ttft runs reqs then probe on a fresh engine in virtual time and returns
// the probe's time to first token (virtual). It drives the engine with
// Step, so the probe arrives at a known point of the flood.
func ttft(t *testing.T, flood []Request, probe Request) time.Duration {
	t.Helper()
	exec := newFakeExec(8192, 16, 4096)
	exec.step = 20 * time.Millisecond
	cfg := DefaultConfig()
	cfg.MaxRunning = 8
	e, err := New(exec, exec.clock, cfg, nil)
	require.NoError(t, err)
	ctx := t.Context()
	var streams []*Stream
	for _, r := range flood {
		st, err := e.Submit(ctx, r)
		require.NoError(t, err)
		streams = append(streams, st)
	}
	// Let the flood fill the running set first.
	for len(flood) > 0 && e.Stats().Running < cfg.MaxRunning {
		ran, err := e.Step(ctx)
		require.NoError(t, err)
		require.True(t, ran)
	}
	start := exec.clock.Now()
	st, err := e.Submit(ctx, probe)
	require.NoError(t, err)
	got := time.Duration(-1)
	for {
		ran, err := e.Step(ctx)
		require.NoError(t, err)
		if !ran {
			break
		}
		for _, ev := range drain(t, st) {
			if got < 0 {
				require.Equal(t, EventToken, ev.Kind)
				got = ev.Time.Sub(start)
			}
		}
	}
	require.GreaterOrEqual(t, got, time.Duration(0), "the probe never ran")
	for _, s := range streams {
		_, _, _, err := Collect(ctx, s)
		require.NoError(t, err)
	}
	require.NoError(t, e.sched.CheckIdle())
	return got
}

// TestFreeFloodDoesNotStarvePaidTTFT: with the running set full of a
// free-tier flood and 200 more free requests queued, a paid request gets
// the next free slot: its time to first token is bounded by one flood
// request's run time (a slot must free up), not by the queue ahead of it
// (FIFO would make it wait for the whole flood, about 25 such runs).
func TestFreeFloodDoesNotStarvePaidTTFT(t *testing.T) {
	var flood []Request
	for i := range 208 {
		flood = append(flood, Request{ID: fmt.Sprintf("free-%d", i), Tenant: fmt.Sprintf("f%d", i%5), Priority: PriorityFree,
			Prompt: prompt(32, i*1000), MaxTokens: 50, N: 1, Seed: uint64(i)})
	}
	probe := Request{ID: "paid", Tenant: "p", Priority: PriorityPaid, Prompt: prompt(32, 7777777), MaxTokens: 5, N: 1}
	alone := ttft(t, nil, probe)
	loaded := ttft(t, flood, probe)
	oneRun := 51 * 20 * time.Millisecond // prefill plus 50 decode steps of a flood request
	t.Logf("paid TTFT alone %v, under a free flood %v (one flood request runs %v)", alone, loaded, oneRun)
	require.LessOrEqual(t, loaded, alone+oneRun+2*20*time.Millisecond)
}

// TestQueuedTime: the final event reports how long a request waited for
// its first step: nothing for the first of two requests on one slot, the
// whole run of the first for the second.
func TestQueuedTime(t *testing.T) {
	exec := newFakeExec(1024, 16, 1024)
	exec.step = 10 * time.Millisecond
	cfg := DefaultConfig()
	cfg.MaxRunning = 1
	e, err := New(exec, exec.clock, cfg, nil)
	require.NoError(t, err)
	ctx := context.Background()
	var streams []*Stream
	for i := range 2 {
		st, err := e.Submit(ctx, Request{ID: fmt.Sprint(i), Tenant: "t", Prompt: prompt(8, i*100), MaxTokens: 5, N: 1})
		require.NoError(t, err)
		streams = append(streams, st)
	}
	runEngine(t, e)
	var queued []time.Duration
	for _, st := range streams {
		for {
			ev, err := st.Next(ctx)
			require.NoError(t, err)
			if ev.Last() {
				queued = append(queued, ev.Queued)
				break
			}
		}
	}
	require.Equal(t, []time.Duration{0, 5 * 10 * time.Millisecond}, queued, "one prefill step (which samples) and 4 decode steps")
}

// TestRequests: inspection reports each live request's state, newest first.
func TestRequests(t *testing.T) {
	exec := newFakeExec(1024, 16, 1024)
	exec.step = 10 * time.Millisecond
	cfg := DefaultConfig()
	cfg.MaxRunning = 1
	e, err := New(realPace{exec, time.Millisecond}, exec.clock, cfg, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		_, err := e.Submit(ctx, Request{ID: fmt.Sprint(i), Tenant: "t", Prompt: prompt(8, i*100), MaxTokens: 500, N: 1})
		require.NoError(t, err)
	}
	runEngine(t, e)
	require.Eventually(t, func() bool {
		rs, err := e.Requests(ctx)
		require.NoError(t, err)
		return len(rs) == 3 && rs[2].State == "decode"
	}, 5*time.Second, time.Millisecond)
	rs, err := e.Requests(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"2", "1", "0"}, []string{rs[0].ID, rs[1].ID, rs[2].ID})
	require.Equal(t, "queued", rs[0].State)
	require.Equal(t, 8, rs[2].Prompt)
	require.Positive(t, rs[2].Generated)
	cancel()
}
