package safety_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/safety"
)

// TestStartRunsInParallel: Start returns while the classifier still holds
// the request, so the caller's own work overlaps the check; Wait then
// returns the classifier's verdict. No timing is measured: the classifier
// answers only after the caller has gone on.
func TestStartRunsInParallel(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	cls.setMode(hold)
	c := newChecker(t, cls, safety.Config{Timeout: 30 * time.Second})

	p := c.Start(t.Context(), safety.Input{Stage: safety.StageInput, Text: "sketchy"})
	waitFor(t, cls.arrived, "the check to reach the classifier")
	select {
	case <-p.Done():
		t.Fatal("the check finished while the classifier held it")
	default:
	}
	// The caller routes and admits here; then the classifier answers.
	close(cls.release)

	res := p.Wait(t.Context())
	require.False(t, res.Failed, "%v", res.Err)
	require.Equal(t, safety.Flag, res.Verdict)
	require.Equal(t, res, p.Wait(t.Context()), "Wait again returns the same result")
	require.Equal(t, uint64(1), c.Stats().Flagged)
}

// TestStartContextCanceled: the request's context ending stops the check,
// and Wait returns the policy's failure.
func TestStartContextCanceled(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	cls.setMode(hang)
	c := newChecker(t, cls, safety.Config{Timeout: 30 * time.Second, Policy: safety.FailClosed})

	ctx, cancel := context.WithCancel(t.Context())
	p := c.Start(ctx, safety.Input{Stage: safety.StageInput, Text: "hello"})
	waitFor(t, cls.arrived, "the check to reach the classifier")
	cancel()

	res := p.Wait(t.Context())
	require.True(t, res.Failed)
	require.ErrorIs(t, res.Err, context.Canceled)
	require.Equal(t, safety.Block, res.Verdict)
	waitFor(t, cls.gone, "the classifier to see the request end")
	require.Equal(t, safety.Stats{Checks: 1, Canceled: 1}, c.Stats())
}

// TestWaitContextCanceled: Wait gives up when its own context ends, and
// stops the check, whose goroutine then ends.
func TestWaitContextCanceled(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	cls.setMode(hang)
	c := newChecker(t, cls, safety.Config{Timeout: 30 * time.Second})

	p := c.Start(t.Context(), safety.Input{Stage: safety.StageInput, Text: "hello"})
	waitFor(t, cls.arrived, "the check to reach the classifier")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	res := p.Wait(ctx)
	require.True(t, res.Failed)
	require.ErrorIs(t, res.Err, context.Canceled)
	require.Equal(t, safety.Allow, res.Verdict)
	require.Positive(t, res.Latency)
	waitFor(t, p.Done(), "the check to stop")
	waitFor(t, cls.gone, "the classifier to see the request end")
	require.Equal(t, safety.Stats{Checks: 1, Canceled: 1}, c.Stats())
}
