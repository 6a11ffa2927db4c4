package catalog

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// States of a [CanaryStatus].
const (
	StateRunning    = "running"     // the canary gets its configured share
	StateRolledBack = "rolled_back" // the canary was rolled back and gets no requests
	StateNone       = "none"        // the alias has no canary
)

// Outcome is the result of one request served by a model.
type Outcome struct {
	Model     string // the model id that served it
	At        time.Time
	TTFT      time.Duration // time to first token; 0 when none came
	ITL       time.Duration // mean inter-token latency; 0 when unknown
	Error     bool          // it failed
	Length    bool          // it stopped at its token limit
	Cancelled bool          // the client went away
}

// Observe records an outcome, for the canary comparison. The catalog keeps,
// per model, at most the last 10,000 outcomes within the longest rollback
// window (at least DefaultRollbackWindow); outcomes of models not in the
// config are dropped.
func (c *Catalog) Observe(o Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.models[o.Model] == nil {
		return
	}
	w := append(c.outcomes[o.Model], o)
	since := o.At.Add(-c.maxWindow)
	i := 0
	for i < len(w) && w[i].At.Before(since) {
		i++
	}
	c.outcomes[o.Model] = w[max(i, len(w)-maxOutcomes):]
}

// VersionStats summarises a model's outcomes over a window. Latency
// percentiles are over the outcomes that have the latency (non-zero).
type VersionStats struct {
	Model      string
	Requests   int
	ErrorRate  float64 // in 0..1
	LengthRate float64 // in 0..1
	CancelRate float64 // in 0..1
	TTFTp50    time.Duration
	TTFTp95    time.Duration
	ITLp50     time.Duration
	ITLp95     time.Duration
}

// CanaryStatus is an alias's canary and the comparison of its versions.
type CanaryStatus struct {
	Alias        string
	Stable       string             // the stable version
	Canary       string             // the canary version; "" when State is StateNone
	Percent      map[string]float64 // the configured share per tier
	State        string             // StateRunning, StateRolledBack or StateNone
	Reason       string             // why it was rolled back
	RolledBackAt time.Time
	// StableStats and CanaryStats cover the rollback window (DefaultRollbackWindow
	// without a policy) up to now. StableStats counts every request the stable
	// version served, pinned ones included.
	StableStats VersionStats
	CanaryStats VersionStats
}

// Canaries returns the status of every alias, sorted by alias.
func (c *Catalog) Canaries(now time.Time) []CanaryStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []CanaryStatus
	for _, name := range slices.Sorted(maps.Keys(c.cfg.Aliases)) {
		out = append(out, c.status(name, now))
	}
	return out
}

// CheckRollback judges every running canary that has a rollback policy over
// its window up to now, and rolls back those whose error rate or TTFT p95 is
// worse than the stable version's by more than the policy allows. Both
// versions need MinRequests outcomes in the window to be judged. It returns
// the canaries it rolled back in this call, sorted by alias. A rolled-back
// canary gets no requests until it is set again ([Catalog.SetCanary], or a
// config with another canary version).
func (c *Catalog) CheckRollback(now time.Time) []CanaryStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []CanaryStatus
	for _, name := range slices.Sorted(maps.Keys(c.cfg.Aliases)) {
		cn := c.cfg.Aliases[name].Canary
		if cn == nil || cn.Rollback == nil || !c.canaryRunning(name, c.cfg.Aliases[name]) {
			continue
		}
		s := c.status(name, now)
		if reason := judge(cn.Rollback, s.StableStats, s.CanaryStats); reason != "" {
			c.rolled[name] = rollbackState{version: cn.Version, reason: reason, at: now}
			out = append(out, c.status(name, now))
		}
	}
	return out
}

// judge returns why a canary must be rolled back, or "".
func judge(rb *Rollback, st, cn VersionStats) string {
	if st.Requests < rb.MinRequests || cn.Requests < rb.MinRequests {
		return ""
	}
	if d := cn.ErrorRate - st.ErrorRate; d > rb.MaxErrorRateDelta {
		return fmt.Sprintf("error rate %.3f vs stable %.3f (delta %.3f > %.3f)", cn.ErrorRate, st.ErrorRate, d, rb.MaxErrorRateDelta)
	}
	if st.TTFTp95 > 0 && cn.TTFTp95 > 0 {
		if r := float64(cn.TTFTp95) / float64(st.TTFTp95); r > rb.MaxTTFTp95Ratio {
			return fmt.Sprintf("TTFT p95 %s vs stable %s (ratio %.2f > %.2f)", cn.TTFTp95, st.TTFTp95, r, rb.MaxTTFTp95Ratio)
		}
	}
	return ""
}

func (c *Catalog) canaryRunning(alias string, a Alias) bool {
	rs, rolled := c.rolled[alias]
	return a.Canary != nil && (!rolled || rs.version != a.Canary.Version)
}

func (c *Catalog) status(name string, now time.Time) CanaryStatus {
	a := c.cfg.Aliases[name]
	s := CanaryStatus{Alias: name, Stable: a.Version, State: StateNone}
	window := DefaultRollbackWindow
	if cn := a.Canary; cn != nil {
		s.Canary, s.Percent, s.State = cn.Version, maps.Clone(cn.Percent), StateRunning
		if cn.Rollback != nil {
			window = cn.Rollback.Window
		}
		if !c.canaryRunning(name, a) {
			rs := c.rolled[name]
			s.State, s.Reason, s.RolledBackAt = StateRolledBack, rs.reason, rs.at
		}
		s.CanaryStats = c.stats(cn.Version, now, window)
	}
	s.StableStats = c.stats(a.Version, now, window)
	return s
}

// stats summarises model's outcomes in (now-window, now].
func (c *Catalog) stats(model string, now time.Time, window time.Duration) VersionStats {
	s := VersionStats{Model: model}
	var ttft, itl []time.Duration
	var errs, length, cancelled int
	since := now.Add(-window)
	for _, o := range c.outcomes[model] {
		if !o.At.After(since) || o.At.After(now) {
			continue
		}
		s.Requests++
		errs, length, cancelled = errs+b2i(o.Error), length+b2i(o.Length), cancelled+b2i(o.Cancelled)
		if o.TTFT > 0 {
			ttft = append(ttft, o.TTFT)
		}
		if o.ITL > 0 {
			itl = append(itl, o.ITL)
		}
	}
	if s.Requests > 0 {
		n := float64(s.Requests)
		s.ErrorRate, s.LengthRate, s.CancelRate = float64(errs)/n, float64(length)/n, float64(cancelled)/n
	}
	s.TTFTp50, s.TTFTp95 = percentile(ttft, 0.50), percentile(ttft, 0.95)
	s.ITLp50, s.ITLp95 = percentile(itl, 0.50), percentile(itl, 0.95)
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// percentile returns the nearest-rank p-quantile of ds (sorted in place), 0
// for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Promote makes alias's canary its stable version and removes the canary;
// the old stable version stays served as a pinned model id. A shadow of the
// promoted version is removed too. The change is to the catalog in memory ([Marshal] writes it out).
func (c *Catalog) Promote(alias string) error {
	return c.change(alias, false, func(a *Alias) error {
		if a.Canary == nil {
			return fmt.Errorf("catalog: alias %q has no canary to promote", alias)
		}
		a.Version, a.Canary = a.Canary.Version, nil
		if a.Shadow != nil && a.Shadow.Version == a.Version {
			a.Shadow = nil
		}
		return nil
	})
}

// SetCanary sets alias's canary to version with percent per tier (a
// missing tier gets 0), keeping the rollback policy of the canary it
// replaces, if any, and clearing a rollback. The change is to the catalog in memory ([Marshal] writes it out).
func (c *Catalog) SetCanary(alias, version string, percent map[string]float64) error {
	return c.change(alias, true, func(a *Alias) error {
		cn := &Canary{Version: version, Percent: maps.Clone(percent)}
		if a.Canary != nil {
			cn.Rollback = a.Canary.Rollback
		}
		a.Canary = cn
		return nil
	})
}

// ClearCanary removes alias's canary. The change is to the catalog in memory ([Marshal] writes it out).
func (c *Catalog) ClearCanary(alias string) error {
	return c.change(alias, false, func(a *Alias) error {
		a.Canary = nil
		return nil
	})
}

// SetShadow copies percent (0..100) of alias's requests to version. The
// change is to the catalog in memory ([Marshal] writes it out).
func (c *Catalog) SetShadow(alias, version string, percent float64) error {
	return c.change(alias, false, func(a *Alias) error {
		scorer := ""
		if a.Shadow != nil {
			scorer = a.Shadow.Scorer
		}
		a.Shadow = &Shadow{Version: version, Percent: percent, Scorer: scorer}
		return nil
	})
}

// ClearShadow removes alias's shadow. The change is to the catalog in memory ([Marshal] writes it out).
func (c *Catalog) ClearShadow(alias string) error {
	return c.change(alias, false, func(a *Alias) error {
		a.Shadow = nil
		return nil
	})
}

// change applies fn to a copy of alias and installs the result if the
// config stays valid, clearing alias's rollback if reset; otherwise nothing
// changes.
func (c *Catalog) change(alias string, reset bool, fn func(*Alias) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg.clone()
	a, ok := cfg.Aliases[alias]
	if !ok {
		return fmt.Errorf("catalog: no alias %q", alias)
	}
	if err := fn(&a); err != nil {
		return err
	}
	cfg.Aliases[alias] = a
	if err := cfg.Validate(); err != nil {
		return err
	}
	if reset {
		delete(c.rolled, alias)
	}
	c.setConfig(cfg)
	return nil
}
