package catalog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	stableV = "sim/flagship-2026-10-01"
	canaryV = "sim/flagship-2026-11-15"
)

// feed records n outcomes of model, one a second ending at end; every
// errEvery-th fails (0: none).
func feed(c *Catalog, model string, n, errEvery int, ttft time.Duration, end time.Time) {
	for i := range n {
		c.Observe(Outcome{Model: model, At: end.Add(-time.Duration(i) * time.Second), TTFT: ttft,
			ITL: 20 * time.Millisecond, Error: errEvery > 0 && i%errEvery == 0})
	}
}

// canaryShare returns the percentage of 1000 paid conversations on the canary.
func canaryShare(t *testing.T, c *Catalog) float64 {
	got, _ := share(t, c, Query{Model: "flagship", Tier: "paid", Now: t0}, 1000, model, canaryV)
	return got
}

func TestRollback(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	ms := time.Millisecond
	for name, tc := range map[string]struct {
		stableN, canaryN, canaryErrEvery int
		canaryTTFT                       time.Duration
		reason                           string // "" for no rollback
	}{
		"errors":             {30, 30, 3, 100 * ms, "error rate 0.333 vs stable 0.000 (delta 0.333 > 0.050)"},
		"slow":               {30, 30, 0, 200 * ms, "TTFT p95 200ms vs stable 100ms (ratio 2.00 > 1.50)"},
		"below min_requests": {30, 9, 1, 100 * ms, ""},
		"stable too few":     {9, 30, 1, 100 * ms, ""},
		"equal behaviour":    {30, 30, 0, 100 * ms, ""},
		"within tolerance":   {30, 30, 0, 140 * ms, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newTest(t) // min_requests 10
			feed(c, stableV, tc.stableN, 0, 100*ms, now)
			feed(c, canaryV, tc.canaryN, tc.canaryErrEvery, tc.canaryTTFT, now)
			feed(c, canaryV, 50, 1, time.Second, now.Add(-10*time.Minute)) // out of the window
			rolled := c.CheckRollback(now)
			st := c.Canaries(now)
			require.Len(t, st, 2)
			assert.Equal(t, StateNone, st[1].State, "small has no canary")
			if tc.reason == "" {
				assert.Empty(t, rolled)
				assert.Equal(t, StateRunning, st[0].State)
				assert.InDelta(t, 50, canaryShare(t, c), 5)
				return
			}
			require.Len(t, rolled, 1)
			assert.Equal(t, st[0], rolled[0])
			assert.Equal(t, StateRolledBack, rolled[0].State)
			assert.Equal(t, tc.reason, rolled[0].Reason)
			assert.Equal(t, now, rolled[0].RolledBackAt)
			assert.Equal(t, tc.canaryN, rolled[0].CanaryStats.Requests)
			assert.Equal(t, tc.stableN, rolled[0].StableStats.Requests)
			assert.Zero(t, canaryShare(t, c), "a rolled-back canary gets 0%")
			assert.Empty(t, c.CheckRollback(now), "rolled back once")
		})
	}
}

func TestVersionStats(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	now := t0.Add(time.Hour)
	for i := range 100 {
		c.Observe(Outcome{Model: stableV, At: now.Add(-time.Duration(i) * time.Second),
			TTFT: time.Duration(i+1) * time.Millisecond, ITL: time.Duration(i%10+1) * time.Millisecond,
			Error: i < 10, Length: i < 20, Cancelled: i < 5})
	}
	c.Observe(Outcome{Model: "not/listed", At: now})
	s := c.Canaries(now)[0].StableStats
	assert.Equal(t, VersionStats{Model: stableV, Requests: 100, ErrorRate: 0.1, LengthRate: 0.2, CancelRate: 0.05,
		TTFTp50: 50 * time.Millisecond, TTFTp95: 95 * time.Millisecond, ITLp50: 5 * time.Millisecond, ITLp95: 10 * time.Millisecond}, s)
}

func TestApplyKeepsState(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	now := t0.Add(time.Hour)
	feed(c, stableV, 30, 0, time.Millisecond, now)
	feed(c, canaryV, 30, 1, time.Millisecond, now)
	require.Len(t, c.CheckRollback(now), 1)
	for range 3 {
		c.ReportFailure("sim/mid-2026-10-01", now)
	}

	// Same canary version: it stays rolled back; cooldowns and outcomes stay.
	c.Apply(parseTest(t, testConfig))
	st := c.Canaries(now)[0]
	assert.Equal(t, StateRolledBack, st.State)
	assert.Equal(t, 30, st.CanaryStats.Requests)
	assert.True(t, c.InCooldown("sim/mid-2026-10-01", now))

	// Another canary version runs afresh; a model gone from the config loses
	// its state.
	cfg := parseTest(t, testConfig)
	cfg.Aliases["flagship"].Canary.Version = "local/qwen3"
	c.Apply(cfg)
	assert.Equal(t, StateRunning, c.Canaries(now)[0].State)
	cfg.Aliases["flagship"].Canary.Version = canaryV
	c.Apply(cfg)
	assert.Equal(t, StateRunning, c.Canaries(now)[0].State, "the rollback was dropped with its version")

	cfg.Models = cfg.Models[:4] // without local/qwen3 and the router using it
	delete(cfg.Routers, "auto")
	require.NoError(t, cfg.Validate())
	for range 3 {
		c.ReportFailure("local/qwen3", now)
	}
	c.Apply(cfg)
	c.Apply(parseTest(t, testConfig))
	assert.False(t, c.InCooldown("local/qwen3", now))
}

func TestPromote(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	require.NoError(t, c.Promote("flagship"))
	a := c.Config().Aliases["flagship"]
	assert.Equal(t, canaryV, a.Version)
	assert.Nil(t, a.Canary)
	d, _, err := c.Resolve(Query{Model: "flagship", Tier: "free", Conversation: "c", Now: t0})
	require.NoError(t, err)
	assert.Equal(t, canaryV, d.Model)
	assert.Equal(t, RoleStable, d.Role)
	d, ok, err := c.Resolve(Query{Model: stableV, Now: t0})
	require.NoError(t, err)
	assert.True(t, ok, "the old stable stays served pinned")
	assert.Equal(t, stableV, d.Model)

	require.EqualError(t, c.Promote("flagship"), `catalog: alias "flagship" has no canary to promote`)
	require.EqualError(t, c.Promote("nope"), `catalog: no alias "nope"`)
}

func TestSetCanaryAndShadow(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	now := t0.Add(time.Hour)
	feed(c, stableV, 30, 0, time.Millisecond, now)
	feed(c, canaryV, 30, 1, time.Millisecond, now)
	require.Len(t, c.CheckRollback(now), 1)

	// Setting the canary again restarts it, keeping its rollback policy.
	require.NoError(t, c.SetCanary("flagship", canaryV, map[string]float64{"paid": 100}))
	assert.Equal(t, StateRunning, c.Canaries(now)[0].State)
	assert.Equal(t, 100.0, canaryShare(t, c))
	assert.Equal(t, 10, c.Config().Aliases["flagship"].Canary.Rollback.MinRequests)

	err := c.SetCanary("flagship", "sim/none", map[string]float64{"paid": 1})
	require.EqualError(t, err, `models config: aliases.flagship.canary.version "sim/none": no such model`)
	require.EqualError(t, c.SetCanary("flagship", canaryV, map[string]float64{"paid": 150}),
		"models config: aliases.flagship.canary.percent.paid 150: not in 0..100")
	assert.Equal(t, 100.0, canaryShare(t, c), "a refused change changes nothing")

	require.NoError(t, c.ClearCanary("flagship"))
	assert.Zero(t, canaryShare(t, c))
	assert.Equal(t, StateNone, c.Canaries(now)[0].State)

	require.NoError(t, c.SetShadow("flagship", canaryV, 100))
	d, _, err := c.Resolve(Query{Model: "flagship", Tier: "paid", Conversation: "c", Now: t0})
	require.NoError(t, err)
	assert.Equal(t, canaryV, d.Shadow)
	assert.Equal(t, "python3 score.py", c.Config().Aliases["flagship"].Shadow.Scorer)
	require.EqualError(t, c.SetShadow("flagship", stableV, 5),
		`models config: aliases.flagship.shadow.version "sim/flagship-2026-10-01": same as the stable version`)
	require.NoError(t, c.ClearShadow("flagship"))
	d, _, err = c.Resolve(Query{Model: "flagship", Tier: "paid", Conversation: "c", Now: t0})
	require.NoError(t, err)
	assert.Empty(t, d.Shadow)
	require.EqualError(t, c.ClearShadow("nope"), `catalog: no alias "nope"`)
}

func TestObserveBounded(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	for i := range maxOutcomes + 500 {
		c.Observe(Outcome{Model: stableV, At: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	assert.Len(t, c.outcomes[stableV], maxOutcomes)
	c.Observe(Outcome{Model: stableV, At: t0.Add(time.Hour)})
	assert.Len(t, c.outcomes[stableV], 1, "older than the longest window")
}
