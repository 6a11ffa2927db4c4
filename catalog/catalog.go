package catalog

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Roles of a [Decision]: how its model was chosen.
const (
	RoleDirect   = "direct"   // the request named a model id
	RoleStable   = "stable"   // an alias's stable version
	RoleCanary   = "canary"   // an alias's canary version
	RoleTier     = "tier"     // an alias's per-tier override
	RoleFallback = "fallback" // the first fallback not in cooldown, the choice being in cooldown
)

// defaultTier is the tier of a [Query] that names none: a tenant's default.
const defaultTier = "paid"

// maxOutcomes bounds the outcomes kept per model.
const maxOutcomes = 10000

// Catalog is the live registry: a [Config] plus the state built on it
// (rolled-back canaries, fallback cooldowns, outcome windows). It is safe for
// concurrent use.
type Catalog struct {
	mu        sync.Mutex
	cfg       *Config
	models    map[string]*ModelSpec    // by id, into cfg.Models
	rolled    map[string]rollbackState // by alias
	health    map[string]*health       // by model id
	outcomes  map[string][]Outcome     // by model id, in order of arrival
	maxWindow time.Duration            // how long outcomes are kept
}

type rollbackState struct {
	version, reason string
	at              time.Time
}

type health struct {
	failures []time.Time // within the fallback window, oldest first
	until    time.Time   // end of the cooldown; zero for none
}

// New returns a catalog serving cfg, which must be valid (from [Parse], or
// checked with [Config.Validate]); zero fallback settings take their
// defaults and a nil cfg is an empty catalog. New copies cfg.
func New(cfg *Config) *Catalog {
	c := &Catalog{rolled: map[string]rollbackState{}, health: map[string]*health{}, outcomes: map[string][]Outcome{}}
	c.Apply(cfg)
	return c
}

// Apply replaces the config (SIGHUP, `llmctl models apply`) and keeps the
// state that still applies: a rolled-back canary stays rolled back while the
// alias's canary is the same version; cooldowns and outcomes are kept for
// models still listed. cfg must be valid, as for [New]; Apply copies it.
func (c *Catalog) Apply(cfg *Config) {
	if cfg == nil {
		cfg = &Config{}
	}
	cfg = cfg.clone()
	if cfg.FallbackCooldown == 0 {
		cfg.FallbackCooldown = DefaultFallbackCooldown
	}
	if cfg.FallbackWindow == 0 {
		cfg.FallbackWindow = DefaultFallbackWindow
	}
	if cfg.FallbackFailures == 0 {
		cfg.FallbackFailures = DefaultFallbackFailures
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setConfig(cfg)
}

// setConfig installs cfg and drops the state that no longer applies.
func (c *Catalog) setConfig(cfg *Config) {
	c.cfg = cfg
	c.models = make(map[string]*ModelSpec, len(cfg.Models))
	for i := range cfg.Models {
		c.models[cfg.Models[i].ID] = &cfg.Models[i]
	}
	c.maxWindow = DefaultRollbackWindow
	for _, a := range cfg.Aliases {
		if a.Canary != nil && a.Canary.Rollback != nil {
			c.maxWindow = max(c.maxWindow, a.Canary.Rollback.Window)
		}
	}
	for alias, rs := range c.rolled {
		if a, ok := cfg.Aliases[alias]; !ok || a.Canary == nil || a.Canary.Version != rs.version {
			delete(c.rolled, alias)
		}
	}
	maps.DeleteFunc(c.health, func(id string, _ *health) bool { return c.models[id] == nil })
	maps.DeleteFunc(c.outcomes, func(id string, _ []Outcome) bool { return c.models[id] == nil })
}

// Config returns a copy of the config in force, with the changes made by
// [Catalog.Promote], [Catalog.SetCanary] and the like. The caller owns it.
func (c *Catalog) Config() *Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.clone()
}

// Query is what [Catalog.Resolve] needs to know of a request.
type Query struct {
	Model        string // the name the request used
	Tier         string // the tenant's tier; "" is "paid"
	Conversation string // keeps a conversation on one canary version; "" uses RequestID
	RequestID    string
	PromptTokens int
	Tools        bool      // the request has tools
	Structured   bool      // the output is constrained: JSON schema, JSON object or a grammar
	Mode         string    // the request's mode (e.g. "fast"), matched by rules' modes
	Turns        int       // the number of messages
	Label        string    // the classifier's label (see [Catalog.NeedsLabel]); "" for none
	Now          time.Time // the request's arrival; required (cooldowns and dates are judged at it)
}

// Decision says which model serves a request and why.
type Decision struct {
	Model  string // the model id that serves the request
	Asked  string // the name the request used
	Alias  string // the alias that resolved it, "" for none
	Router string // the router that resolved it, "" for none
	Rule   string // the router's rule that matched: its name, or "rules[i]"
	Role   string // RoleDirect, RoleStable, RoleCanary, RoleTier or RoleFallback
	// Alternatives are the targets of the router's other rules, for the log.
	Alternatives []string
	// Fallbacks are the model ids to try in order if Model is refused for
	// overload; models in cooldown are left out.
	Fallbacks []string
	Shadow    string // the model id to copy the request to, "" for none
	// ShadowScorer is the alias's scorer command for the shadow's answer,
	// "" for none.
	ShadowScorer string

	// Deprecated, Sunset and Replacement are the chosen model's, set only
	// once it is deprecated (Now at or after its deprecation or sunset).
	Deprecated  time.Time
	Sunset      time.Time
	Replacement string
	Gone        bool // Now is at or after Sunset: answer 410 naming Replacement
}

// NoRuleError is the error of [Catalog.Resolve] when no rule of a router
// matches a request (a client error: the request is outside every rule).
type NoRuleError struct {
	Router string
}

// Error implements error.
func (e *NoRuleError) Error() string {
	return fmt.Sprintf("catalog: no rule of router %q matches the request", e.Router)
}

// Resolve chooses the model that serves q. ok is false when q.Model is not a
// name of the catalog (the caller may still serve it as a plain model id).
// The error is a *[NoRuleError] when q.Model is a router none of whose rules
// matches.
func (c *Catalog) Resolve(q Query) (d Decision, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d = Decision{Asked: q.Model}
	name, tier := q.Model, q.Tier
	if tier == "" {
		tier = defaultTier
	}
	if r, isRouter := c.cfg.Routers[name]; isRouter {
		i := slices.IndexFunc(r.Rules, func(rule Rule) bool { return rule.When.match(q, tier) })
		if i < 0 {
			return Decision{}, true, &NoRuleError{Router: name}
		}
		d.Router, d.Rule, name = q.Model, ruleName(r.Rules[i], i), r.Rules[i].Model
		for _, rule := range r.Rules {
			if rule.Model != name && !slices.Contains(d.Alternatives, rule.Model) {
				d.Alternatives = append(d.Alternatives, rule.Model)
			}
		}
	}
	var chain []string
	if a, isAlias := c.cfg.Aliases[name]; isAlias {
		d.Alias = name
		key := q.Conversation
		if key == "" {
			key = q.RequestID
		}
		switch {
		case a.Tiers[tier] != "":
			d.Model, d.Role = a.Tiers[tier], RoleTier
		case c.canaryRunning(name, a) && draw(name, "canary", key) < a.Canary.Percent[tier]*100:
			d.Model, d.Role = a.Canary.Version, RoleCanary
		default:
			d.Model, d.Role = a.Version, RoleStable
		}
		if s := a.Shadow; s != nil && s.Version != d.Model && draw(name, "shadow", key) < s.Percent*100 {
			d.Shadow, d.ShadowScorer = s.Version, s.Scorer
		}
		chain = c.versions(a.Fallbacks)
	} else if c.models[name] != nil {
		d.Model, d.Role = name, RoleDirect
	} else {
		return Decision{}, false, nil
	}
	chain = append(chain, c.versions(c.spec(d.Model).Fallbacks)...)
	for _, m := range chain {
		if m != d.Model && !slices.Contains(d.Fallbacks, m) && !c.inCooldown(m, q.Now) {
			d.Fallbacks = append(d.Fallbacks, m)
		}
	}
	if len(d.Fallbacks) > 0 && c.inCooldown(d.Model, q.Now) {
		d.Model, d.Role, d.Fallbacks = d.Fallbacks[0], RoleFallback, d.Fallbacks[1:]
	}
	if len(d.Fallbacks) == 0 {
		d.Fallbacks = nil
	}
	m := c.spec(d.Model)
	d.Gone = !m.Sunset.IsZero() && !q.Now.Before(m.Sunset)
	if d.Gone || (!m.Deprecated.IsZero() && !q.Now.Before(m.Deprecated)) {
		d.Deprecated, d.Sunset, d.Replacement = m.Deprecated, m.Sunset, m.Replacement
	}
	return d, true, nil
}

// spec returns the model id's spec; an empty one for an id not listed,
// which only a config that skipped Validate can name.
func (c *Catalog) spec(id string) *ModelSpec {
	if m := c.models[id]; m != nil {
		return m
	}
	return &ModelSpec{ID: id}
}

func ruleName(r Rule, i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rules[%d]", i)
}

// match reports whether a request satisfies every set condition.
func (w *Conditions) match(q Query, tier string) bool {
	switch {
	case w.MinPromptTokens > 0 && q.PromptTokens < w.MinPromptTokens,
		w.MaxPromptTokens > 0 && q.PromptTokens > w.MaxPromptTokens,
		w.Tools != nil && *w.Tools != q.Tools,
		w.JSONSchema != nil && *w.JSONSchema != q.Structured,
		len(w.Tiers) > 0 && !slices.Contains(w.Tiers, tier),
		len(w.Modes) > 0 && !slices.Contains(w.Modes, q.Mode),
		w.MaxTurns > 0 && q.Turns > w.MaxTurns,
		len(w.Labels) > 0 && (q.Label == "" || !slices.Contains(w.Labels, q.Label)):
		return false
	}
	return true
}

// versions maps fallback names to model ids: an alias to its stable version.
func (c *Catalog) versions(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if a, ok := c.cfg.Aliases[n]; ok {
			n = a.Version
		}
		out = append(out, n)
	}
	return out
}

// draw maps (alias, salt, key) to [0, 10000), uniformly and stably.
func draw(alias, salt, key string) float64 {
	h := fnv.New64a()
	h.Write([]byte(alias + "\x00" + salt + "\x00" + key))
	return float64(h.Sum64() % 10000)
}

// NeedsLabel reports whether resolving the name model would use a
// classifier label, and if so the classifier's URL and timeout. The caller
// asks the classifier and passes its label in Query.Label; a request without
// a label matches no rule with labels.
func (c *Catalog) NeedsLabel(model string) (url string, timeout time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, isRouter := c.cfg.Routers[model]
	if !isRouter || r.Classifier == nil {
		return "", 0, false
	}
	for _, rule := range r.Rules {
		if len(rule.When.Labels) > 0 {
			return r.Classifier.URL, r.Classifier.Timeout, true
		}
	}
	return "", 0, false
}

// ReportFailure records that model failed a request (overloaded or
// unhealthy) at now. FallbackFailures failures within FallbackWindow, with
// no success between, put it in cooldown for FallbackCooldown.
func (c *Catalog) ReportFailure(model string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.models[model] == nil {
		return
	}
	h := c.health[model]
	if h == nil {
		h = &health{}
		c.health[model] = h
	}
	since := now.Add(-c.cfg.FallbackWindow)
	h.failures = slices.DeleteFunc(h.failures, func(t time.Time) bool { return !t.After(since) })
	h.failures = append(h.failures, now)
	if len(h.failures) >= c.cfg.FallbackFailures {
		h.failures, h.until = nil, now.Add(c.cfg.FallbackCooldown)
	}
}

// ReportSuccess records that model served a request at now: it clears the
// model's failures. A cooldown runs its course (requests in flight when it
// began may still succeed).
func (c *Catalog) ReportSuccess(model string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.health[model]; h != nil {
		h.failures = nil
	}
}

// InCooldown reports whether model is in fallback cooldown at now.
func (c *Catalog) InCooldown(model string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inCooldown(model, now)
}

func (c *Catalog) inCooldown(model string, now time.Time) bool {
	h := c.health[model]
	return h != nil && now.Before(h.until)
}

// Names returns every name a caller may use, sorted: aliases, routers and
// model ids.
func (c *Catalog) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := slices.Collect(maps.Keys(c.models))
	names = slices.AppendSeq(names, maps.Keys(c.cfg.Aliases))
	names = slices.AppendSeq(names, maps.Keys(c.cfg.Routers))
	slices.Sort(names)
	return names
}

// Entry describes one name of the catalog, for /v1/models.
type Entry struct {
	Name string
	Kind string // "alias", "router" or "version" (a model id)
	// Target is an alias's stable version or a router's last rule's model
	// (its default); "" for a version.
	Target string
	// Deprecated, Sunset and Replacement are a version's, or an alias's
	// stable version's, as configured; zero when none.
	Deprecated  time.Time
	Sunset      time.Time
	Replacement string
}

// Describe returns one entry per alias, router and model, sorted by name.
func (c *Catalog) Describe() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Entry
	dated := func(e Entry, id string) Entry {
		m := c.spec(id)
		e.Deprecated, e.Sunset, e.Replacement = m.Deprecated, m.Sunset, m.Replacement
		return e
	}
	for _, m := range c.cfg.Models {
		out = append(out, dated(Entry{Name: m.ID, Kind: "version"}, m.ID))
	}
	for name, a := range c.cfg.Aliases {
		out = append(out, dated(Entry{Name: name, Kind: "alias", Target: a.Version}, a.Version))
	}
	for name, r := range c.cfg.Routers {
		e := Entry{Name: name, Kind: "router"}
		if len(r.Rules) > 0 {
			e.Target = r.Rules[len(r.Rules)-1].Model
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Knows reports whether id is a model of the config.
func (c *Catalog) Knows(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.models[id] != nil
}

// Spec returns the config's model id.
func (c *Catalog) Spec(id string) (ModelSpec, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.models[id]
	if s == nil {
		return ModelSpec{}, false
	}
	return *s, true
}

// Deprecate sets model's deprecation date, sunset (zero for none) and
// replacement (a model or alias). The change is to the catalog in memory ([Marshal] writes it out).
func (c *Catalog) Deprecate(model string, deprecated, sunset time.Time, replacement string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg.clone()
	for i := range cfg.Models {
		if cfg.Models[i].ID != model {
			continue
		}
		cfg.Models[i].Deprecated, cfg.Models[i].Sunset, cfg.Models[i].Replacement = deprecated, sunset, replacement
		if err := cfg.Validate(); err != nil {
			return err
		}
		c.setConfig(cfg)
		return nil
	}
	return fmt.Errorf("catalog: no model %q", model)
}

// Kind says what name is in the config: "alias", "router", "version" (a
// model id), or "" when the config does not know it.
func (c *Catalog) Kind(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.models[name] != nil:
		return "version"
	case c.cfg == nil:
		return ""
	}
	if _, ok := c.cfg.Aliases[name]; ok {
		return "alias"
	}
	if _, ok := c.cfg.Routers[name]; ok {
		return "router"
	}
	return ""
}

// RouterDefault is the model id the last rule of router name chooses (an
// alias resolved to its stable version), "" when name is no router.
func (c *Catalog) RouterDefault(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg == nil {
		return ""
	}
	r, ok := c.cfg.Routers[name]
	if !ok || len(r.Rules) == 0 {
		return ""
	}
	target := r.Rules[len(r.Rules)-1].Model
	if a, ok := c.cfg.Aliases[target]; ok {
		target = a.Version
	}
	return target
}
