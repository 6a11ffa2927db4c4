package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStepFit(t *testing.T) {
	t.Parallel()
	t.Run("a line is found exactly", func(t *testing.T) {
		var f stepFit
		for i := range 300 {
			n := 1 + (i*37)%2000
			f.observe(n, 20*time.Millisecond+time.Duration(n)*100*time.Microsecond)
		}
		assert.InEpsilon(t, 10_000, f.rate(), 0.01)
	})
	t.Run("steps of one size say nothing", func(t *testing.T) {
		var f stepFit
		for range 100 {
			f.observe(32, 20*time.Millisecond)
		}
		assert.Zero(t, f.rate())
	})
	t.Run("the last trusted slope is kept", func(t *testing.T) {
		var f stepFit
		for i := range 200 {
			n := 1 + (i*37)%2000
			f.observe(n, time.Duration(n)*50*time.Microsecond)
		}
		before := f.rate()
		require.InEpsilon(t, 20_000, before, 0.01)
		for range 2000 {
			f.observe(40, 2*time.Millisecond)
		}
		assert.InEpsilon(t, before, f.rate(), 1e-6, "steady decode keeps the rate")
	})
	t.Run("empty and instant steps are ignored", func(t *testing.T) {
		var f stepFit
		f.observe(0, time.Second)
		f.observe(10, 0)
		f.observe(-1, -time.Second)
		assert.Zero(t, f.w)
	})
}

// linearExec is fakeExec whose steps take fixed plus perToken per batch
// token.
type linearExec struct {
	*fakeExec
	fixed, perToken time.Duration
}

func (l *linearExec) Forward(ctx context.Context, b *Batch) (*Output, error) {
	l.fakeExec.step = l.fixed + time.Duration(batchTokens(b))*l.perToken
	return l.fakeExec.Forward(ctx, b)
}

// TestEngineMeasuresPrefill: the engine's stats report the prompt tokens
// still to prefill, and, once steps of several sizes ran, the executor's
// cost per token as a rate, whatever the fixed cost of a step.
func TestEngineMeasuresPrefill(t *testing.T) {
	t.Parallel()
	exec := &linearExec{fakeExec: newFakeExec(512, 16, 4096), fixed: 20 * time.Millisecond, perToken: 200 * time.Microsecond}
	cfg := DefaultConfig()
	cfg.MaxBatchTokens = 256
	e, err := New(exec, exec.clock, cfg, nil)
	require.NoError(t, err)
	st := e.Stats()
	require.Zero(t, st.QueuedPromptTokens)
	require.Zero(t, st.PrefillTokensPerSecond, "no step yet")

	lengths := []int{300, 40, 700, 90}
	total := 0
	for i, n := range lengths {
		_, err := e.Submit(t.Context(), Request{ID: fmt.Sprint("r", i), Prompt: prompt(n, 1000*i), MaxTokens: 4, N: 1})
		require.NoError(t, err)
		total += n
	}
	// The first step takes the submissions and prefills 256 tokens.
	ran, err := e.Step(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	assert.Equal(t, total-256, e.Stats().QueuedPromptTokens)

	prev := total
	for {
		queued := e.Stats().QueuedPromptTokens
		require.LessOrEqual(t, queued, prev, "the backlog only shrinks without new work")
		prev = queued
		ran, err := e.Step(t.Context())
		require.NoError(t, err)
		if !ran {
			break
		}
	}
	st = e.Stats()
	assert.Zero(t, st.QueuedPromptTokens)
	assert.InEpsilon(t, 5_000, st.PrefillTokensPerSecond, 0.01, "1 / 200us, the fixed 20ms left out")
}

// TestQueuedPromptTokensCountsCachedPrefix: a queued request counts the
// prompt tokens the prefix cache does not hold when it is queued; a
// running one what it still has to prefill.
func TestQueuedPromptTokensCountsCachedPrefix(t *testing.T) {
	t.Parallel()
	exec := newFakeExec(64, 4, 1024)
	cfg := DefaultConfig()
	cfg.MaxBatchTokens, cfg.MaxRunning = 8, 1
	e, err := New(exec, exec.clock, cfg, nil)
	require.NoError(t, err)
	run := func() {
		for {
			ran, err := e.Step(t.Context())
			require.NoError(t, err)
			if !ran {
				return
			}
		}
	}
	shared := prompt(20, 0)
	_, err = e.Submit(t.Context(), Request{ID: "r0", Prompt: shared, MaxTokens: 2, N: 1})
	require.NoError(t, err)
	run()
	require.Zero(t, e.Stats().QueuedPromptTokens)

	// Both share r0's first 16 tokens (4 blocks) and add 12 of their own.
	for i, id := range []string{"r1", "r2"} {
		p := append(append([]int32{}, shared[:16]...), prompt(12, 500+100*i)...)
		_, err = e.Submit(t.Context(), Request{ID: id, Prompt: p, MaxTokens: 2, N: 1})
		require.NoError(t, err)
	}
	ran, err := e.Step(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	// r1 runs: 16 cached, 8 computed, 4 to go; r2 waits: 28 less 16.
	assert.Equal(t, 4+12, e.Stats().QueuedPromptTokens)
	run()
	assert.Zero(t, e.Stats().QueuedPromptTokens)
}
