package catalog

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is before any deprecation in testConfig.
var t0 = time.Date(2026, 10, 15, 12, 0, 0, 0, time.UTC)

func newTest(t *testing.T) *Catalog {
	t.Helper()
	return New(parseTest(t, testConfig))
}

func TestResolve(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	const (
		stable = "sim/flagship-2026-10-01"
		mid    = "sim/mid-2026-10-01"
		small  = "sim/small-2026-10-01"
	)
	// chat is a request the first rule of auto matches.
	chat := Query{Model: "auto", Tier: "free", PromptTokens: 100, Mode: "fast", Turns: 2, Now: t0}
	with := func(f func(*Query)) Query { q := chat; f(&q); return q }
	for name, tc := range map[string]struct {
		q    Query
		want Decision
	}{
		"pinned version": {Query{Model: mid, Now: t0},
			Decision{Model: mid, Asked: mid, Role: RoleDirect}},
		"alias stable (enterprise gets no canary)": {Query{Model: "flagship", Tier: "enterprise", Conversation: "c1", Now: t0},
			Decision{Model: stable, Asked: "flagship", Alias: "flagship", Role: RoleStable, Fallbacks: []string{small, mid}}},
		"per-tier override": {Query{Model: "flagship", Tier: "batch", Conversation: "c1", Now: t0},
			Decision{Model: small, Asked: "flagship", Alias: "flagship", Role: RoleTier}},
		"router first rule": {chat,
			Decision{Model: small, Asked: "auto", Alias: "small", Router: "auto", Rule: "short-chat", Role: RoleStable,
				Alternatives: []string{mid, "local/qwen3", "flagship"}}},
		"router label": {with(func(q *Query) { q.Tools, q.Label = true, "simple" }),
			Decision{Model: mid, Asked: "auto", Router: "auto", Rule: "simple", Role: RoleDirect,
				Alternatives: []string{"small", "local/qwen3", "flagship"}}},
		"router min tokens": {with(func(q *Query) { q.PromptTokens = 5000 }),
			Decision{Model: "local/qwen3", Asked: "auto", Router: "auto", Rule: "long", Role: RoleDirect,
				Alternatives: []string{"small", mid, "flagship"}}},
	} {
		t.Run(name, func(t *testing.T) {
			d, ok, err := c.Resolve(tc.q)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, tc.want, d)
		})
	}

	// Each condition of the first rule, broken alone, sends chat to the
	// default rule.
	for name, f := range map[string]func(*Query){
		"too many tokens": func(q *Query) { q.PromptTokens = 257 },
		"tools":           func(q *Query) { q.Tools = true },
		"json schema":     func(q *Query) { q.Structured = true },
		"tier":            func(q *Query) { q.Tier = "enterprise" },
		"mode":            func(q *Query) { q.Mode = "thorough" },
		"turns":           func(q *Query) { q.Turns = 5 },
		"wrong label":     func(q *Query) { q.Turns, q.Label = 9, "hard" },
	} {
		t.Run("condition "+name, func(t *testing.T) {
			d, ok, err := c.Resolve(with(f))
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, "default", d.Rule)
			assert.Equal(t, "flagship", d.Alias)
		})
	}

	_, ok, err := c.Resolve(Query{Model: "unknown/model", Now: t0})
	require.NoError(t, err)
	assert.False(t, ok, "a name outside the catalog")
}

func TestResolveNoRule(t *testing.T) {
	t.Parallel()
	cfg := parseTest(t, `
models: [{id: a, source: /a.gguf}]
routers: {r: {rules: [{name: tools, when: {tools: true}, model: a}]}}`)
	_, ok, err := New(cfg).Resolve(Query{Model: "r", Now: t0})
	assert.True(t, ok)
	var nr *NoRuleError
	require.ErrorAs(t, err, &nr)
	assert.Equal(t, "r", nr.Router)
	assert.EqualError(t, err, `catalog: no rule of router "r" matches the request`)
}

func TestNeedsLabel(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	url, timeout, ok := c.NeedsLabel("auto")
	assert.True(t, ok)
	assert.Equal(t, "http://127.0.0.1:9000/classify", url)
	assert.Equal(t, 50*time.Millisecond, timeout)
	for _, name := range []string{"flagship", "sim/mid-2026-10-01", "nothing"} {
		_, _, ok := c.NeedsLabel(name)
		assert.False(t, ok, name)
	}
}

func TestDeprecation(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	deprecated := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	sunset := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		now              time.Time
		deprecated, gone bool
	}{
		"before":            {t0, false, false},
		"at deprecation":    {deprecated, true, false},
		"between":           {deprecated.Add(24 * time.Hour), true, false},
		"at sunset":         {sunset, true, true},
		"long after sunset": {sunset.AddDate(1, 0, 0), true, true},
	} {
		t.Run(name, func(t *testing.T) {
			// Through the alias (enterprise: stable) and pinned.
			for _, q := range []Query{{Model: "flagship", Tier: "enterprise"}, {Model: "sim/flagship-2026-10-01"}} {
				q.Now = tc.now
				d, ok, err := c.Resolve(q)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, "sim/flagship-2026-10-01", d.Model)
				assert.Equal(t, tc.gone, d.Gone)
				if tc.deprecated {
					assert.Equal(t, deprecated, d.Deprecated)
					assert.Equal(t, sunset, d.Sunset)
					assert.Equal(t, "sim/flagship-2026-11-15", d.Replacement)
				} else {
					assert.Zero(t, d.Deprecated)
					assert.Zero(t, d.Sunset)
					assert.Empty(t, d.Replacement)
				}
			}
		})
	}
}

// share resolves n conversations and returns the percentage that got want,
// with the decisions by conversation.
func share(t *testing.T, c *Catalog, q Query, n int, pick func(Decision) string, want string) (float64, map[string]string) {
	t.Helper()
	got, hits := map[string]string{}, 0
	for i := range n {
		q.Conversation = fmt.Sprintf("conv-%d", i)
		d, ok, err := c.Resolve(q)
		require.NoError(t, err)
		require.True(t, ok)
		got[q.Conversation] = pick(d)
		if pick(d) == want {
			hits++
		}
	}
	return 100 * float64(hits) / float64(n), got
}

func model(d Decision) string  { return d.Model }
func shadow(d Decision) string { return d.Shadow }

func TestCanaryShare(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	const canary = "sim/flagship-2026-11-15"
	for tier, want := range map[string]float64{"free": 5, "paid": 50, "enterprise": 0, "batch": 0} {
		got, _ := share(t, c, Query{Model: "flagship", Tier: tier, Now: t0}, 10000, model, canary)
		assert.InDelta(t, want, got, 1, tier)
	}
	got, _ := share(t, c, Query{Model: "flagship", Tier: "", Now: t0}, 10000, model, canary)
	assert.InDelta(t, 50, got, 1, "no tier is paid")

	// Sticky: the same conversation gets the same version, whatever its
	// request id; the shadow draw is independent of the canary draw.
	_, first := share(t, c, Query{Model: "flagship", Tier: "paid", RequestID: "r1", Now: t0}, 2000, model, canary)
	_, again := share(t, c, Query{Model: "flagship", Tier: "paid", RequestID: "r2", Now: t0}, 2000, model, canary)
	assert.Equal(t, first, again)
	got, shadows := share(t, c, Query{Model: "flagship", Tier: "paid", Now: t0}, 10000, shadow, "sim/mid-2026-10-01")
	assert.InDelta(t, 10, got, 1, "shadow share")
	both := 0
	for conv, s := range shadows {
		if s != "" && first[conv] == canary {
			both++
		}
	}
	assert.InDelta(t, 5, 100*float64(both)/2000, 1.5, "the shadow draw does not follow the canary draw")

	// Without a conversation, the request id draws.
	var ids []string
	for i := range 1000 {
		d, _, err := c.Resolve(Query{Model: "flagship", Tier: "paid", RequestID: fmt.Sprint("req-", i), Now: t0})
		require.NoError(t, err)
		ids = append(ids, d.Model)
	}
	assert.Contains(t, ids, canary)
	assert.Contains(t, ids, "sim/flagship-2026-10-01")
}

func TestCooldown(t *testing.T) {
	t.Parallel()
	c := newTest(t) // fallback_cooldown 20s, 3 failures in 60s
	const stable, mid, small = "sim/flagship-2026-10-01", "sim/mid-2026-10-01", "sim/small-2026-10-01"
	q := Query{Model: "flagship", Tier: "enterprise", Now: t0}
	resolve := func(now time.Time) Decision {
		q.Now = now
		d, _, err := c.Resolve(q)
		require.NoError(t, err)
		return d
	}

	c.ReportFailure(stable, t0)
	c.ReportFailure(stable, t0.Add(10*time.Second))
	c.ReportSuccess(stable, t0.Add(11*time.Second)) // clears the count
	c.ReportFailure(stable, t0.Add(12*time.Second))
	c.ReportFailure(stable, t0.Add(13*time.Second))
	assert.False(t, c.InCooldown(stable, t0.Add(13*time.Second)))
	c.ReportFailure(stable, t0.Add(80*time.Second)) // the first two are out of the window
	assert.False(t, c.InCooldown(stable, t0.Add(80*time.Second)))
	c.ReportFailure(stable, t0.Add(81*time.Second))
	c.ReportFailure(stable, t0.Add(82*time.Second))
	start := t0.Add(82 * time.Second)
	require.True(t, c.InCooldown(stable, start))

	// The alias's fallback (the small alias's stable version) comes first,
	// then the version's own.
	d := resolve(start.Add(time.Second))
	assert.Equal(t, RoleFallback, d.Role)
	assert.Equal(t, small, d.Model)
	assert.Equal(t, []string{mid}, d.Fallbacks)

	// A fallback in cooldown is skipped too.
	for range 3 {
		c.ReportFailure(small, start)
	}
	d = resolve(start.Add(time.Second))
	assert.Equal(t, mid, d.Model)
	assert.Nil(t, d.Fallbacks)

	// Recovery after the cooldown.
	assert.False(t, c.InCooldown(stable, start.Add(20*time.Second)))
	d = resolve(start.Add(20 * time.Second))
	assert.Equal(t, RoleStable, d.Role)
	assert.Equal(t, []string{small, mid}, d.Fallbacks)

	// A model without fallbacks is served in cooldown.
	for range 3 {
		c.ReportFailure("local/qwen3", start)
	}
	d, _, err := c.Resolve(Query{Model: "local/qwen3", Now: start})
	require.NoError(t, err)
	assert.Equal(t, "local/qwen3", d.Model)
}

func TestNamesAndDescribe(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	assert.Equal(t, []string{"auto", "flagship", "local/qwen3", "sim/flagship-2026-10-01", "sim/flagship-2026-11-15",
		"sim/mid-2026-10-01", "sim/small-2026-10-01", "small"}, c.Names())
	entries := c.Describe()
	require.Len(t, entries, 8)
	assert.Equal(t, Entry{Name: "auto", Kind: "router", Target: "flagship"}, entries[0])
	assert.Equal(t, "alias", entries[1].Kind)
	assert.Equal(t, "sim/flagship-2026-10-01", entries[1].Target)
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), entries[1].Sunset)
	assert.Equal(t, Entry{Name: "local/qwen3", Kind: "version"}, entries[2])
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c := newTest(t)
	cfg := parseTest(t, testConfig)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				now := t0.Add(time.Duration(i) * time.Second)
				d, _, err := c.Resolve(Query{Model: "flagship", Tier: "paid", Conversation: fmt.Sprint(g, i), Now: now})
				assert.NoError(t, err)
				c.Observe(Outcome{Model: d.Model, At: now, TTFT: time.Millisecond, Error: i%7 == 0})
				c.ReportFailure(d.Model, now)
				c.CheckRollback(now)
				if i%50 == 0 {
					c.Apply(cfg)
				}
			}
		})
	}
	wg.Wait()
}
