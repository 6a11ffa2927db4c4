package fleet

import (
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/workload"
	"github.com/llmd/llmd/quota"
)

// smallConfig is a fleet cheap enough for -race: two nodes of sim/small
// (one H100 each) and a few requests a second.
func smallConfig(nodes int, spec workload.Spec) Config {
	cfg := DefaultConfig()
	cfg.Nodes = nodes
	cfg.Workload = spec
	return cfg
}

func spec(rate float64, d time.Duration) workload.Spec {
	return workload.Spec{Duration: d, Rate: rate, Input: workload.Uniform(32, 256), Output: workload.Uniform(8, 64), Seed: 7}
}

// sameReport compares two reports, all but the wall time.
func sameReport(t *testing.T, a, b *Report) {
	t.Helper()
	a2, b2 := *a, *b
	a2.Wall, b2.Wall = 0, 0
	require.Equal(t, a2, b2)
}

// TestRunEverythingFinishes: without a duration the run goes on until
// every request has finished; every answer is as long as the workload
// asked (no EOS), every request got a first token and every later token
// an inter-token gap.
func TestRunEverythingFinishes(t *testing.T) {
	t.Parallel()
	sp := spec(20, 0)
	sp.Requests = 60
	cfg := smallConfig(2, sp)
	items, err := workload.Generate(sp)
	require.NoError(t, err)
	var want int64
	for _, it := range items {
		want += int64(it.OutputTokens)
	}
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 60, r.Arrived)
	assert.Equal(t, 60, r.Fleet.Requests)
	assert.Equal(t, 60, r.Fleet.Completed)
	assert.Zero(t, r.Unfinished)
	assert.Empty(t, r.Refused)
	assert.Equal(t, want, r.Fleet.OutputTokens)
	assert.Equal(t, want, r.OfferedOutputTokens)
	assert.EqualValues(t, 60, r.Fleet.TTFT.Count)
	assert.EqualValues(t, want-60, r.Fleet.ITL.Count)
	assert.Positive(t, r.Fleet.Throughput)
	assert.Positive(t, r.Fleet.KVMax)
	assert.LessOrEqual(t, r.Fleet.KVMean, r.Fleet.KVMax)
	// One H100 runs sim/small's decode steps of a few sequences in about
	// 7.5 ms: the weights (16 GB) over 80% of 3.35 TB/s, plus 1 ms, plus
	// 80 µs a sequence (the calibrated cost model).
	assert.InDelta(t, 7.5*float64(time.Millisecond), float64(r.Fleet.ITL.P50), float64(time.Millisecond))
	assert.Greater(t, r.Fleet.TTFT.P50, r.Fleet.ITL.P50)
	for _, n := range r.Nodes {
		assert.Positive(t, n.Requests, n.ID)
	}
}

// TestRunDeterministic: the same Config gives the same Report, whatever
// the number of workers stepping the nodes, with conversations, cancels
// and quotas in play.
func TestRunDeterministic(t *testing.T) {
	t.Parallel()
	sp := spec(12, 20*time.Second)
	sp.Turns = workload.Uniform(1, 4)
	sp.SharedPrefix, sp.SystemPrompts, sp.SystemTokens = 0.5, 3, workload.Fixed(300)
	sp.CancelRatio = 0.1
	sp.Tenants = []string{"a", "b"}
	cfg := smallConfig(3, sp)
	cfg.Quota = &quota.Limits{RPM: 300, TPM: 200_000}
	cfg.Warmup = 2 * time.Second
	cfg.Workers = 1
	one, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	assert.Positive(t, one.Fleet.Completed)
	cfg.Workers = 3
	three, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	sameReport(t, one, three)
	again, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	sameReport(t, three, again)
}

// TestRunPrefixRouting: with shared system prompts and conversations,
// routing by prefix serves far more prompt tokens from the cache than
// round robin does, and most of its decisions are prefix hits.
func TestRunPrefixRouting(t *testing.T) {
	t.Parallel()
	sp := spec(8, 30*time.Second)
	sp.Turns = workload.Uniform(2, 4)
	sp.SharedPrefix, sp.SystemPrompts, sp.SystemTokens = 1, 8, workload.Fixed(512)
	cfg := smallConfig(4, sp)
	prefix, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	cfg.Route = cluster.PolicyRoundRobin
	rr, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	t.Logf("cache hit: prefix %.2f, round robin %.2f; prefix-routed %.2f", prefix.Fleet.CacheHit, rr.Fleet.CacheHit, prefix.PrefixRouted)
	assert.Greater(t, prefix.Fleet.CacheHit, rr.Fleet.CacheHit+0.1)
	assert.Greater(t, prefix.PrefixRouted, 0.5)
	assert.Equal(t, rr.Arrived, rr.Routed[cluster.ReasonRoundRobin])
	for _, n := range rr.Nodes {
		assert.InDelta(t, rr.Arrived/4, n.Requests, 1, "round robin spreads evenly")
	}
}

// TestRunConversationHistory: a later turn's prompt starts with the
// earlier turns (prompts and answers), so with one node nearly all of its
// history comes from the cache.
func TestRunConversationHistory(t *testing.T) {
	t.Parallel()
	sp := spec(2, 0)
	sp.Requests = 30
	sp.Turns = workload.Fixed(3)
	sp.Input, sp.Output = workload.Fixed(200), workload.Fixed(100)
	cfg := smallConfig(1, sp)
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, 30, r.Fleet.Completed)
	// Turn k's prompt is 300k+200 tokens, of which the first 300k were the
	// previous turn's prompt and answer (less the answer's last token and
	// a partial block): 10 conversations x (0 + 300 + 600) cached tokens
	// at most, 10 x (200 + 500 + 800) in all.
	assert.EqualValues(t, 10*(200+500+800), r.Fleet.InputTokens)
	assert.Greater(t, r.Fleet.CachedTokens, int64(10*(288+592)*9/10))
	assert.LessOrEqual(t, r.Fleet.CachedTokens, int64(10*(300+600)))
}

// TestRunQuota: a tenant over its request rate is refused before routing.
func TestRunQuota(t *testing.T) {
	t.Parallel()
	cfg := smallConfig(2, spec(10, 30*time.Second))
	cfg.Quota = &quota.Limits{RPM: 120}
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	// 2 requests a second are allowed (and a burst of 120) out of 10.
	assert.InDelta(t, r.Arrived-(120+60), r.Refused["quota"], 15)
	assert.Equal(t, r.Arrived-r.Refused["quota"], r.Fleet.Requests)
}

// TestRunContextLength: a request that can never fit is refused, not an
// error.
func TestRunContextLength(t *testing.T) {
	t.Parallel()
	sp := spec(2, 0)
	sp.Requests = 4
	sp.Input = workload.Fixed(40_000) // sim/small holds 32,768 tokens
	r, err := Run(t.Context(), smallConfig(1, sp))
	require.NoError(t, err)
	assert.Equal(t, 4, r.Refused["context_length"])
	assert.Zero(t, r.Fleet.Requests)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := smallConfig(2, spec(1, time.Second))
	require.NoError(t, ok.Validate())
	tests := map[string]func(*Config){
		"no nodes":    func(c *Config) { c.Nodes = 0 },
		"route":       func(c *Config) { c.Route = "random" },
		"closed loop": func(c *Config) { c.Workload.Rate = 0; c.Workload.Concurrency = 2 },
		"warm-up":     func(c *Config) { c.Warmup = 2 * time.Second },
		"time scale":  func(c *Config) { c.Sim.TimeScale = 0.5 },
		"model fits": func(c *Config) {
			c.Sim.Model, _ = sim.ModelByName("flagship")
			c.Sim.GPU, _ = sim.GPUByName("l40s")
		},
		"workers":      func(c *Config) { c.Workers = -1 },
		"bad workload": func(c *Config) { c.Workload.Input = workload.Dist{} },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := ok
			mutate(&c)
			require.Error(t, c.Validate())
		})
	}
}

// TestHistBuckets: every value falls in the bucket whose bounds hold it.
func TestHistBuckets(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 40, 1<<63 - 1}
	for range 10000 {
		vals = append(vals, rng.Uint64N(1<<uint(rng.IntN(63))+1))
	}
	for _, v := range vals {
		i := bucket(v)
		require.Less(t, i, histBuckets)
		lo, w := lower(i)
		require.True(t, lo <= v && v-lo < w, "v=%d bucket %d [%d, +%d)", v, i, lo, w)
	}
}

// TestHistQuantiles: the histogram's percentiles are within 0.5% of the
// exact ones.
func TestHistQuantiles(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var h hist
	var all []time.Duration
	for range 20000 {
		d := time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond))
		h.add(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		exact := all[int(q*float64(len(all)))-1]
		assert.InEpsilon(t, float64(exact), float64(h.quantile(q)), 0.006, "q=%v", q)
	}
	p := h.percentiles()
	assert.Equal(t, all[len(all)-1], p.Max)
	var empty hist
	assert.Zero(t, empty.percentiles().P99)
}

// TestFleetHour measures an hour of a 4-node fleet (LLMD_FLEET_HOUR=1; it
// takes tens of seconds).
func TestFleetHour(t *testing.T) {
	if os.Getenv("LLMD_FLEET_HOUR") == "" {
		t.Skip("set LLMD_FLEET_HOUR=1 to simulate an hour of a 4-node fleet")
	}
	cfg := DefaultConfig()
	cfg.Workload = workload.Spec{Duration: time.Hour, Rate: 40, Input: workload.Uniform(128, 1024),
		Output: workload.Uniform(64, 512), SharedPrefix: 0.5, SystemPrompts: 8, SystemTokens: workload.Fixed(1024),
		Seed: 1}
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	t.Logf("1 h of 4 nodes (sim/small, H100): %.0f output tok/s, KV mean %.0f%%, %d steps, wall %s",
		r.Fleet.Throughput, 100*r.Fleet.KVMean, r.Steps, r.Wall.Round(time.Millisecond))
}
