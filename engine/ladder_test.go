package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

func TestLadderClimbsAndDescendsOneHoldAtATime(t *testing.T) {
	cfg := DefaultLadderConfig() // high 2s / low 0.5s, KV 0.97 / 0.85, hold 1s
	l := ladder{cfg: cfg}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	steps := []struct {
		ms   int
		wait time.Duration
		kv   float64
		want DegradeLevel
	}{
		{0, 0, 0.5, DegradeNone},
		{500, 3 * time.Second, 0.5, DegradeNone},        // pressure starts
		{1400, 3 * time.Second, 0.5, DegradeNone},       // held 0.9 s
		{1500, 3 * time.Second, 0.5, DegradePauseBatch}, // held 1 s: climb
		{2000, 3 * time.Second, 0.99, DegradePauseBatch},
		{2500, time.Second, 0.99, DegradeLimitFree},    // KV pressure alone counts
		{3000, time.Second, 0.90, DegradeLimitFree},    // between the marks: stay
		{4500, time.Second, 0.90, DegradeLimitFree},    // still between
		{5000, 3 * time.Second, 0.5, DegradeLimitFree}, // pressure again: a new hold
		{6000, 3 * time.Second, 0.5, DegradeShedFree},
		{7000, 3 * time.Second, 0.5, DegradeQueuePaid},
		{9000, 3 * time.Second, 0.5, DegradeQueuePaid}, // the top
		{9100, 0, 0.1, DegradeQueuePaid},               // calm starts
		{10100, 0, 0.1, DegradeShedFree},               // one level per hold
		{12100, 0, 0.1, DegradePauseBatch},             // two holds at once (a rare observation)
		{13100, 0, 0.1, DegradeNone},
	}
	for _, s := range steps {
		l.observe(at(s.ms), s.wait, s.kv)
		require.Equal(t, s.want, l.level, "at %d ms (wait %v, kv %.2f)", s.ms, s.wait, s.kv)
	}
}

func TestLadderDisabledStays(t *testing.T) {
	l := ladder{cfg: LadderConfig{Disabled: true}}
	for i := range 10 {
		l.observe(time.Unix(int64(i*10), 0), time.Hour, 1)
	}
	require.Equal(t, DegradeNone, l.level)
}

func TestLadderConfigValidate(t *testing.T) {
	require.NoError(t, DefaultLadderConfig().Validate())
	require.NoError(t, LadderConfig{Disabled: true}.Validate())
	for name, c := range map[string]LadderConfig{
		"low above high": {QueueWaitHigh: time.Second, QueueWaitLow: 2 * time.Second, KVHigh: 0.9, KVLow: 0.5, Hold: time.Second},
		"kv above 1":     {QueueWaitHigh: time.Second, KVHigh: 1.5, KVLow: 0.5, Hold: time.Second},
		"no hold":        {QueueWaitHigh: time.Second, KVHigh: 0.9, KVLow: 0.5},
		"zero value":     {},
	} {
		require.Error(t, c.Validate(), name)
	}
	require.Equal(t, "shed_free", DegradeShedFree.String())
}

// TestPausedClassIsNotAdmitted: a paused batch class stays queued while
// other classes are admitted, and is admitted once resumed.
func TestPausedClassIsNotAdmitted(t *testing.T) {
	pool, err := kvcache.NewPool(256, 16)
	require.NoError(t, err)
	s, err := NewScheduler(SchedulerConfig{MaxBatchTokens: 1024, MaxRunning: 16, ContextLength: 1024}, pool, nil)
	require.NoError(t, err)
	s.SetClassPaused(PriorityBatch, true)
	t0 := time.Unix(100, 0)
	require.NoError(t, s.AddAt(Request{ID: "b", Tenant: "x", Priority: PriorityBatch, Prompt: prompt(8, 1), MaxTokens: 4, N: 1}, t0))
	require.NoError(t, s.AddAt(Request{ID: "f", Tenant: "y", Priority: PriorityFree, Prompt: prompt(8, 2), MaxTokens: 4, N: 1}, t0.Add(time.Second)))
	require.Equal(t, t0, s.OldestWaiting(PriorityBatch))
	require.Equal(t, t0.Add(time.Second), s.OldestWaiting(PriorityFree), "the batch request does not count above its class")

	s.Step()
	require.Equal(t, 1, s.NumRunning(), "only the free request runs")
	require.Equal(t, 1, s.NumWaiting())
	require.True(t, s.OldestWaiting(PriorityFree).IsZero())

	s.SetClassPaused(PriorityBatch, false)
	s.Step()
	require.Equal(t, 2, s.NumRunning())
	s.CancelAll()
}

// logRecorder collects the "to" level of each ladder change an engine logs.
type logRecorder struct {
	mu     sync.Mutex
	levels []string
	// paused is closed at the first change to pause_batch.
	paused chan struct{}
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "degradation level changed" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "to" {
			r.mu.Lock()
			r.levels = append(r.levels, a.Value.String())
			if a.Value.String() == "pause_batch" && r.paused != nil {
				close(r.paused)
				r.paused = nil
			}
			r.mu.Unlock()
		}
		return true
	})
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.levels)
}

// realPace makes each step of a virtual-time executor also take a little
// real time, so a test can act while a run is in progress.
type realPace struct {
	Executor
	d time.Duration
}

func (p realPace) Forward(ctx context.Context, b *Batch) (*Output, error) {
	time.Sleep(p.d)
	return p.Executor.Forward(ctx, b)
}

// TestEngineDegradesUnderFloodAndRecovers: a flood of free-tier work on a
// slow replica (virtual time) climbs the ladder; a batch request that
// arrives then is held back until the flood is served (without the pause
// its weight would admit it at once); when the ladder descends it runs.
// Each change is logged.
func TestEngineDegradesUnderFloodAndRecovers(t *testing.T) {
	exec := newFakeExec(4096, 16, 4096)
	exec.step = 50 * time.Millisecond
	cfg := DefaultConfig()
	cfg.MaxRunning = 2
	cfg.Ladder.Hold = 200 * time.Millisecond
	cfg.Ladder.QueueWaitHigh = 500 * time.Millisecond
	cfg.Ladder.QueueWaitLow = 100 * time.Millisecond
	rec := &logRecorder{paused: make(chan struct{})}
	paused := rec.paused
	e, err := New(realPace{exec, 200 * time.Microsecond}, exec.clock, cfg, slog.New(rec))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var streams []*Stream
	for i := range 40 {
		st, err := e.Submit(ctx, Request{ID: fmt.Sprintf("f%d", i), Tenant: "flood", Priority: PriorityFree,
			Prompt: prompt(16, i*100), MaxTokens: 20, N: 1, Seed: uint64(i)})
		require.NoError(t, err)
		streams = append(streams, st)
	}
	runEngine(t, e)
	<-paused
	batch, err := e.Submit(ctx, Request{ID: "batch", Tenant: "nightly", Priority: PriorityBatch,
		Prompt: prompt(16, 99999), MaxTokens: 4, N: 1})
	require.NoError(t, err)

	var lastFlood time.Time
	for _, st := range streams {
		for {
			ev, err := st.Next(ctx)
			if err != nil {
				break
			}
			if ev.Kind == EventToken && ev.Time.After(lastFlood) {
				lastFlood = ev.Time
			}
		}
	}
	seen := rec.seen()
	require.Subset(t, seen, []string{"pause_batch", "limit_free", "shed_free"},
		"40 requests on 2 slots of about 1 s each keep the queue wait far above 0.5 s")
	require.Equal(t, 1, e.Stats().WaitingByPriority[PriorityBatch], "the batch request is held back")

	// Idle in virtual time: nothing moves the clock until we do.
	exec.clock.(*VirtualClock).Advance(5 * time.Second)
	ev, err := batch.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, EventToken, ev.Kind)
	require.True(t, ev.Time.After(lastFlood), "the batch request starts after the whole flood")
	_, _, _, err = Collect(ctx, batch)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.Stats().Degrade == DegradeNone }, 5*time.Second, time.Millisecond)
	require.Equal(t, "none", rec.seen()[len(rec.seen())-1])
}
