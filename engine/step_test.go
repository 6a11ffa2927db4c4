package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// drain reads the events already in st without waiting.
func drain(t *testing.T, st *Stream) []Event {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var evs []Event
	for {
		ev, err := st.Next(done)
		if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
			return evs
		}
		require.NoError(t, err)
		evs = append(evs, ev)
	}
}

// TestEngineStep drives an engine with Step alone, no goroutine: every
// request gets the same tokens as under Run, each step's events are in the
// streams when Step returns, stamped with the virtual time of the step's
// end, and Step reports false once nothing is left to run.
func TestEngineStep(t *testing.T) {
	t.Parallel()
	exec := newFakeExec(64, 16, 4096)
	clock := exec.clock.(*VirtualClock)
	start := clock.Now()
	e, err := New(exec, clock, DefaultConfig(), nil)
	require.NoError(t, err)

	ran, err := e.Step(t.Context())
	require.NoError(t, err)
	require.False(t, ran, "an idle engine runs no step")
	require.Equal(t, start, clock.Now())

	const n = 6
	streams := make([]*Stream, n)
	for i := range n {
		streams[i], err = e.Submit(t.Context(), Request{ID: fmt.Sprint("r", i), Prompt: prompt(20+i, i*100), MaxTokens: 3 + i, N: 1, Seed: uint64(i)})
		require.NoError(t, err)
	}
	tokens := make([][]int32, n)
	steps := 0
	for {
		ran, err := e.Step(t.Context())
		require.NoError(t, err)
		if !ran {
			break
		}
		steps++
		now := clock.Now()
		require.Equal(t, start.Add(time.Duration(steps)*exec.step), now)
		for i, st := range streams {
			for _, ev := range drain(t, st) {
				require.Equal(t, now, ev.Time, "events carry the end of the step that made them")
				if ev.Kind == EventToken {
					tokens[i] = append(tokens[i], ev.Token)
				}
			}
		}
	}
	require.Equal(t, 3+n-1, steps, "the longest answer takes a step per token, the first with the prefill")
	for i := range n {
		require.Len(t, tokens[i], 3+i)
		for j, tok := range tokens[i] {
			require.Equal(t, fakeToken(uint64(i), j), tok)
		}
	}
	st := e.Stats()
	require.Zero(t, st.Running+st.Waiting+st.BlocksUsed)
	require.NoError(t, e.sched.CheckIdle())
}

// TestEngineStepCancel: a cancel reaches the engine at the next Step, and
// a Step whose context has ended runs nothing.
func TestEngineStepCancel(t *testing.T) {
	t.Parallel()
	exec := newFakeExec(64, 16, 4096)
	e, err := New(exec, exec.clock, DefaultConfig(), nil)
	require.NoError(t, err)
	st, err := e.Submit(t.Context(), Request{ID: "a", Prompt: prompt(10, 0), MaxTokens: 100, N: 1})
	require.NoError(t, err)
	ran, err := e.Step(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	require.Len(t, drain(t, st), 1)

	e.Cancel("a")
	ran, err = e.Step(t.Context())
	require.NoError(t, err)
	require.False(t, ran)
	evs := drain(t, st)
	require.Len(t, evs, 2)
	require.Equal(t, FinishCancelled, evs[0].Finish)
	require.True(t, evs[1].Last())
	require.Zero(t, e.Stats().BlocksUsed)

	_, err = e.Submit(t.Context(), Request{ID: "b", Prompt: prompt(10, 0), MaxTokens: 1, N: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran, err = e.Step(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, ran)
	ran, err = e.Step(t.Context())
	require.NoError(t, err)
	require.True(t, ran, "the request is still there after a cancelled Step")
}
