package safety_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/safety"
)

func TestCheckVerdicts(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		text string
		want safety.Result
	}{
		"allow": {text: "tell me about the weather", want: safety.Result{Verdict: safety.Allow}},
		"flag":  {text: "a sketchy question", want: safety.Result{Verdict: safety.Flag, Category: "sketchy_word"}},
		"block": {text: "something forbidden", want: safety.Result{
			Verdict: safety.Block, Category: "forbidden_word", Reason: "the text says forbidden",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cls := newClassifier(t)
			c := newChecker(t, cls, safety.Config{Timeout: 10 * time.Second})
			res := c.Check(t.Context(), safety.Input{
				RequestID: "req-1", Tenant: "acme", Model: "small", Stage: safety.StageInput, Text: tc.text,
			})
			require.NoError(t, res.Err)
			require.False(t, res.Failed)
			assert.Positive(t, res.Latency)
			res.Latency = 0
			require.Equal(t, tc.want, res)

			got := cls.received()
			require.Len(t, got, 1)
			require.Equal(t, safety.Request{
				RequestID: "req-1", Tenant: "acme", Model: "small", Stage: safety.StageInput, Text: tc.text,
			}, got[0].req)
		})
	}
}

// TestWireRequest: the body has exactly the protocol's keys (truncated only
// when the text was cut), sent as a JSON POST.
func TestWireRequest(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	c := newChecker(t, cls, safety.Config{Timeout: 10 * time.Second})
	res := c.Check(t.Context(), safety.Input{
		RequestID: "r9", Tenant: "t1", Model: "mid", Stage: safety.StageOutput, Text: "a <b> & c", Final: true,
	})
	require.False(t, res.Failed, "%v", res.Err)

	got := cls.received()
	require.Len(t, got, 1)
	require.Equal(t, "POST", got[0].method)
	require.Equal(t, "application/json", got[0].contentType)
	require.Equal(t, map[string]any{
		"request_id": "r9",
		"tenant":     "t1",
		"model":      "mid",
		"stage":      "output",
		"text":       "a <b> & c",
		"final":      true,
	}, got[0].raw)
}

func TestTruncation(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		stage     safety.Stage
		text      string
		max       int
		want      string
		truncated bool
	}{
		"input keeps the head":     {stage: safety.StageInput, text: "0123456789abcdef", max: 10, want: "0123456789", truncated: true},
		"output keeps the tail":    {stage: safety.StageOutput, text: "0123456789abcdef", max: 10, want: "6789abcdef", truncated: true},
		"exactly the limit":        {stage: safety.StageOutput, text: "0123456789", max: 10, want: "0123456789"},
		"input whole runes":        {stage: safety.StageInput, text: "ééééé", max: 5, want: "éé", truncated: true},
		"output whole runes":       {stage: safety.StageOutput, text: "aéééé", max: 5, want: "éé", truncated: true},
		"output ends on boundary":  {stage: safety.StageOutput, text: "éééab", max: 5, want: "éab", truncated: true},
		"default limit is 64 KiB":  {stage: safety.StageInput, text: strings.Repeat("x", 64<<10+1), want: strings.Repeat("x", 64<<10), truncated: true},
		"default limit not passed": {stage: safety.StageInput, text: strings.Repeat("x", 64<<10), want: strings.Repeat("x", 64<<10)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cls := newClassifier(t)
			c := newChecker(t, cls, safety.Config{Timeout: 10 * time.Second, MaxTextBytes: tc.max})
			res := c.Check(t.Context(), safety.Input{Stage: tc.stage, Text: tc.text})
			require.False(t, res.Failed, "%v", res.Err)

			got := cls.received()
			require.Len(t, got, 1)
			require.Equal(t, tc.want, got[0].req.Text)
			require.True(t, utf8.ValidString(got[0].req.Text))
			require.Equal(t, tc.truncated, got[0].req.Truncated)
			_, hasKey := got[0].raw["truncated"]
			require.Equal(t, tc.truncated, hasKey)
		})
	}
}

// TestFailures: each kind of failure takes the policy's verdict, is
// counted, and says why.
func TestFailures(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mode    mode
		wantErr error // nil: a transport error, neither sentinel
	}{
		"status 500":      {mode: status500, wantErr: safety.ErrBadResponse},
		"garbage json":    {mode: garbage, wantErr: safety.ErrBadResponse},
		"unknown verdict": {mode: unknown, wantErr: safety.ErrBadResponse},
		"no verdict":      {mode: noVerdict, wantErr: safety.ErrBadResponse},
		"huge body":       {mode: huge, wantErr: safety.ErrBadResponse},
		"unreachable":     {mode: -1},
	}
	for name, tc := range tests {
		for _, policy := range []safety.Policy{safety.FailOpen, safety.FailClosed} {
			t.Run(name+"/"+string(policy), func(t *testing.T) {
				t.Parallel()
				cls := newClassifier(t)
				cls.setMode(tc.mode)
				cfg := safety.Config{Timeout: 10 * time.Second, Policy: policy}
				if tc.mode == -1 {
					dead := httptest.NewServer(nil)
					dead.Close()
					cfg.URL = dead.URL
				} else {
					cfg.URL = cls.URL
				}
				c, err := safety.New(cfg, nil)
				require.NoError(t, err)
				t.Cleanup(c.CloseIdleConnections)

				res := c.Check(t.Context(), safety.Input{Stage: safety.StageInput, Text: "hello"})
				require.True(t, res.Failed)
				require.Error(t, res.Err)
				if tc.wantErr != nil {
					require.ErrorIs(t, res.Err, tc.wantErr)
				} else {
					require.NotErrorIs(t, res.Err, safety.ErrBadResponse)
				}
				require.NotErrorIs(t, res.Err, safety.ErrTimeout)
				if policy == safety.FailOpen {
					require.Equal(t, safety.Allow, res.Verdict)
					require.Empty(t, res.Category)
				} else {
					require.Equal(t, safety.Block, res.Verdict)
					require.Equal(t, safety.CategoryUnavailable, res.Category)
				}
				st := c.Stats()
				require.Equal(t, safety.Stats{Checks: 1, Failures: 1}, withoutLatency(st))
			})
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	for _, policy := range []safety.Policy{safety.FailOpen, safety.FailClosed} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			cls := newClassifier(t)
			cls.setMode(hang)
			const timeout = 50 * time.Millisecond
			c := newChecker(t, cls, safety.Config{Timeout: timeout, Policy: policy})

			res := c.Check(t.Context(), safety.Input{Stage: safety.StageInput, Text: "hello"})
			require.True(t, res.Failed)
			require.ErrorIs(t, res.Err, safety.ErrTimeout)
			require.GreaterOrEqual(t, res.Latency, timeout)
			if policy == safety.FailOpen {
				require.Equal(t, safety.Allow, res.Verdict)
			} else {
				require.Equal(t, safety.Block, res.Verdict)
				require.Equal(t, safety.CategoryUnavailable, res.Category)
			}
			waitFor(t, cls.gone, "the classifier to see the request end")
			require.Equal(t, safety.Stats{Checks: 1, Failures: 1, TimedOut: 1}, withoutLatency(c.Stats()))
		})
	}
}

// TestClientTimeoutCountsAsTimeout: a caller's client with a shorter
// timeout of its own ends the check as a timeout.
func TestClientTimeoutCountsAsTimeout(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	cls.setMode(hang)
	hc := cls.Client()
	hc.Timeout = 20 * time.Millisecond
	c, err := safety.New(safety.Config{URL: cls.URL, Timeout: 10 * time.Second}, hc)
	require.NoError(t, err)

	res := c.Check(t.Context(), safety.Input{Stage: safety.StageInput, Text: "hello"})
	require.True(t, res.Failed)
	require.ErrorIs(t, res.Err, safety.ErrTimeout)
	require.Equal(t, uint64(1), c.Stats().TimedOut)
	waitFor(t, cls.gone, "the classifier to see the request end")
}

func TestCheckCanceled(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	c := newChecker(t, cls, safety.Config{Timeout: 10 * time.Second, Policy: safety.FailClosed})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	res := c.Check(ctx, safety.Input{Stage: safety.StageInput, Text: "hello"})
	require.True(t, res.Failed)
	require.ErrorIs(t, res.Err, context.Canceled)
	require.Equal(t, safety.Block, res.Verdict, "the policy decides, whatever the cause")
	require.Equal(t, safety.Stats{Checks: 1, Canceled: 1}, c.Stats())
}

func TestInvalidStage(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	c := newChecker(t, cls, safety.Config{})
	res := c.Check(t.Context(), safety.Input{Stage: "middle", Text: "hello"})
	require.True(t, res.Failed)
	require.ErrorIs(t, res.Err, safety.ErrInvalidInput)
	require.Empty(t, cls.received(), "nothing is sent")
}

func TestStats(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	const timeout = 100 * time.Millisecond
	c := newChecker(t, cls, safety.Config{Timeout: timeout})
	check := func(ctx context.Context, text string) {
		c.Check(ctx, safety.Input{Stage: safety.StageInput, Text: text})
	}
	for _, text := range []string{"a", "b", "c", "sketchy 1", "sketchy 2", "forbidden"} {
		check(t.Context(), text)
	}
	cls.setMode(status500)
	check(t.Context(), "d")
	cls.setMode(hang)
	check(t.Context(), "e")
	waitFor(t, cls.gone, "the classifier to see the request end")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	check(ctx, "f")

	st := c.Stats()
	require.Equal(t, safety.Stats{
		Checks: 9, Allowed: 3, Flagged: 2, Blocked: 1, Failures: 2, TimedOut: 1, Canceled: 1,
	}, withoutLatency(st))
	require.Positive(t, st.LatencyP50)
	require.GreaterOrEqual(t, st.LatencyP95, st.LatencyP50)
	require.GreaterOrEqual(t, st.LatencyP95, timeout, "p95 of 8 checks is the slowest: the timed-out one")
}

func TestConcurrentChecks(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	c := newChecker(t, cls, safety.Config{Timeout: 10 * time.Second})
	const n = 64
	var wg sync.WaitGroup
	results := make([]safety.Result, n)
	for i := range n {
		wg.Go(func() {
			text := "fine"
			if i%4 == 0 {
				text = "forbidden"
			}
			results[i] = c.Check(t.Context(), safety.Input{Stage: safety.StageOutput, Text: text})
			_ = c.Stats()
		})
	}
	wg.Wait()
	for i, res := range results {
		require.False(t, res.Failed, "%v", res.Err)
		if i%4 == 0 {
			require.Equal(t, safety.Block, res.Verdict)
		} else {
			require.Equal(t, safety.Allow, res.Verdict)
		}
	}
	require.Equal(t, safety.Stats{Checks: n, Allowed: n * 3 / 4, Blocked: n / 4}, withoutLatency(c.Stats()))
}

// TestCallerClient: a caller's client is used.
func TestCallerClient(t *testing.T) {
	t.Parallel()
	cls := newClassifier(t)
	c, err := safety.New(safety.Config{URL: cls.URL}, cls.Client())
	require.NoError(t, err)
	res := c.Check(t.Context(), safety.Input{Stage: safety.StageInput, Text: "sketchy"})
	require.Equal(t, safety.Flag, res.Verdict)
	require.Equal(t, safety.DefaultTimeout, c.Config().Timeout)
}

func TestNilChecker(t *testing.T) {
	t.Parallel()
	var c *safety.Checker
	require.Equal(t, safety.Result{Verdict: safety.Allow}, c.Check(t.Context(), safety.Input{Text: "forbidden"}))
	p := c.Start(t.Context(), safety.Input{Text: "forbidden"})
	require.Equal(t, safety.Allow, p.Wait(t.Context()).Verdict)
	m := c.NewOutputMonitor()
	require.False(t, m.Enabled())
	require.False(t, m.Due(1000))
	require.False(t, m.Final())
	require.Equal(t, safety.Stats{}, c.Stats())
	c.CloseIdleConnections()
}

func withoutLatency(st safety.Stats) safety.Stats {
	st.LatencyP50, st.LatencyP95 = 0, 0
	return st
}
