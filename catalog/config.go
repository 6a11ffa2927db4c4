package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults of the models config, used when a key is absent.
const (
	DefaultFallbackCooldown  = 30 * time.Second      // fallback_cooldown
	DefaultFallbackWindow    = 60 * time.Second      // fallback_window
	DefaultFallbackFailures  = 3                     // fallback_failures
	DefaultRollbackWindow    = 5 * time.Minute       // canary.rollback.window
	DefaultMinRequests       = 20                    // canary.rollback.min_requests
	DefaultMaxErrorRateDelta = 0.05                  // canary.rollback.max_error_rate_delta
	DefaultMaxTTFTp95Ratio   = 1.5                   // canary.rollback.max_ttft_p95_ratio
	DefaultClassifierTimeout = 50 * time.Millisecond // routers.*.classifier.timeout
)

// tiers are the tier names a config may use.
var tiers = []string{"batch", "free", "paid", "enterprise"}

// Config is a parsed models config: plain data. Parse fills the defaults;
// a Config built in Go must pass [Config.Validate].
type Config struct {
	Models  []ModelSpec
	Aliases map[string]Alias  // by alias name
	Routers map[string]Router // by router name

	// FallbackCooldown is how long a model is skipped once it is in cooldown.
	FallbackCooldown time.Duration
	// FallbackFailures failures within FallbackWindow put a model in cooldown.
	FallbackFailures int
	FallbackWindow   time.Duration
}

// ModelSpec is one served model version.
type ModelSpec struct {
	ID     string // the served id, unique; "sim/..." exactly when Source is "sim:..."
	Source string // "sim:PROFILE", a path to a GGUF file, or "ollama:NAME[:TAG]"

	KVCacheBytes int64  // GGUF models; 0 for the loader's default
	Threads      int    // GGUF models; 0 for the loader's default
	GPU          string // sim models
	TP           int    // sim models: tensor-parallel degree

	// KeepAlive > 0 loads the model on first request and unloads it after
	// this idle time; 0 keeps it resident.
	KeepAlive time.Duration

	Deprecated  time.Time // from then, answers carry Deprecation/Sunset headers; zero for never
	Sunset      time.Time // from then, requests are refused (410); zero for never
	Replacement string    // a model id or alias named in those answers
	Fallbacks   []string  // model ids or aliases tried in order when this model is refused

	// Safety overrides llmd's safety check (--safety-url) for this model;
	// nil keeps it.
	Safety *SafetySpec
}

// SafetySpec is a model's own safety check: its classifier and settings
// (the safety package's), or none at all (Off).
type SafetySpec struct {
	Off         bool
	URL         string
	Timeout     time.Duration // 0: the safety package's default
	Policy      string        // "open" or "closed"; "" for open
	OutputEvery int           // check the answer every N tokens and at its end; 0 input only
}

// Alias is a stable name for a model version, with optional per-tier
// overrides, fallbacks, a canary and a shadow.
type Alias struct {
	Version   string            // the stable version: a model id
	Tiers     map[string]string // tier -> model id serving that tier instead
	Fallbacks []string          // model ids or aliases, tried before the version's own
	Canary    *Canary           // nil for none
	Shadow    *Shadow           // nil for none
}

// Canary sends a share of an alias's requests to another version.
type Canary struct {
	Version  string             // a model id other than the alias's stable version
	Percent  map[string]float64 // tier -> share of conversations in 0..100; a missing tier gets 0
	Rollback *Rollback          // nil: no automatic rollback
}

// Rollback is a canary's automatic rollback policy, judged over the
// outcomes of the last Window by [Catalog.CheckRollback].
type Rollback struct {
	Window      time.Duration
	MinRequests int // both versions need this many outcomes in Window
	// MaxErrorRateDelta: the canary is rolled back when its error rate minus
	// the stable version's exceeds it.
	MaxErrorRateDelta float64
	// MaxTTFTp95Ratio: the canary is rolled back when its TTFT p95 divided
	// by the stable version's exceeds it.
	MaxTTFTp95Ratio float64
}

// Shadow copies a share of an alias's requests to another version, whose
// answers are scored and discarded.
type Shadow struct {
	Version string  // a model id other than the alias's stable version
	Percent float64 // share of requests in 0..100
	Scorer  string  // a command the daemon runs on the pairs of answers; "" for none
}

// Router is a model name resolved per request by ordered rules.
type Router struct {
	Classifier *Classifier // nil for none; needed by rules with labels
	Rules      []Rule      // the first rule whose conditions hold wins
}

// Classifier is an HTTP hook that labels a request before the rules run.
type Classifier struct {
	URL     string
	Timeout time.Duration
}

// Rule is one rule of a router.
type Rule struct {
	Name  string     `yaml:"name"`
	When  Conditions `yaml:"when"`
	Model string     `yaml:"model"` // a model id or alias, never a router
}

// Conditions are a rule's conditions; zero fields do not constrain, and a
// rule matches when every set condition holds.
type Conditions struct {
	MinPromptTokens int      `yaml:"min_prompt_tokens"`
	MaxPromptTokens int      `yaml:"max_prompt_tokens"`
	Tools           *bool    `yaml:"tools"`       // whether the request has tools
	JSONSchema      *bool    `yaml:"json_schema"` // whether the output is constrained (JSON schema, JSON object, grammar)
	Tiers           []string `yaml:"tiers"`
	Modes           []string `yaml:"modes"`
	MaxTurns        int      `yaml:"max_turns"`
	Labels          []string `yaml:"labels"` // the classifier's label is one of these
}

// ReadFile reads and parses the models config at path.
func ReadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read models config: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a models config, fills its defaults and validates it.
// Unknown keys are errors. An error names the first problem and its place,
// e.g. `models config: aliases.flagship.canary.version "x": no such model`.
func Parse(b []byte) (*Config, error) {
	var raw rawConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("models config: %w", err)
	}
	cfg, err := raw.convert()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

type rawConfig struct {
	FallbackCooldown string              `yaml:"fallback_cooldown"`
	FallbackFailures *int                `yaml:"fallback_failures"`
	FallbackWindow   string              `yaml:"fallback_window"`
	Models           []rawModel          `yaml:"models"`
	Aliases          map[string]rawAlias `yaml:"aliases"`
	Routers          map[string]struct {
		Classifier *struct {
			URL     string `yaml:"url"`
			Timeout string `yaml:"timeout"`
		} `yaml:"classifier"`
		Rules []Rule `yaml:"rules"`
	} `yaml:"routers"`
}

type rawModel struct {
	ID          string   `yaml:"id"`
	Source      string   `yaml:"source"`
	KVCache     string   `yaml:"kv_cache"`
	Threads     int      `yaml:"threads"`
	GPU         string   `yaml:"gpu"`
	TP          int      `yaml:"tp"`
	KeepAlive   string   `yaml:"keep_alive"`
	Deprecated  string   `yaml:"deprecated"`
	Sunset      string   `yaml:"sunset"`
	Replacement string   `yaml:"replacement"`
	Fallbacks   []string `yaml:"fallbacks"`
	Safety      *struct {
		Off         bool   `yaml:"off"`
		URL         string `yaml:"url"`
		Timeout     string `yaml:"timeout"`
		Policy      string `yaml:"policy"`
		OutputEvery int    `yaml:"output_every"`
	} `yaml:"safety"`
}

type rawAlias struct {
	Version   string            `yaml:"version"`
	Tiers     map[string]string `yaml:"tiers"`
	Fallbacks []string          `yaml:"fallbacks"`
	Canary    *struct {
		Version  string    `yaml:"version"`
		Percent  yaml.Node `yaml:"percent"`
		Rollback *struct {
			Window            string   `yaml:"window"`
			MinRequests       *int     `yaml:"min_requests"`
			MaxErrorRateDelta *float64 `yaml:"max_error_rate_delta"`
			MaxTTFTp95Ratio   *float64 `yaml:"max_ttft_p95_ratio"`
		} `yaml:"rollback"`
	} `yaml:"canary"`
	Shadow *struct {
		Version string   `yaml:"version"`
		Percent *float64 `yaml:"percent"`
		Scorer  string   `yaml:"scorer"`
	} `yaml:"shadow"`
}

// convert turns the raw strings into values, with defaults, in the order
// of the file (maps by sorted key), so that the first error is stable.
func (r *rawConfig) convert() (*Config, error) {
	cfg := &Config{FallbackCooldown: DefaultFallbackCooldown, FallbackWindow: DefaultFallbackWindow,
		FallbackFailures: DefaultFallbackFailures, Aliases: map[string]Alias{}, Routers: map[string]Router{}}
	if err := parseDuration("fallback_cooldown", r.FallbackCooldown, &cfg.FallbackCooldown); err != nil {
		return nil, err
	}
	if err := parseDuration("fallback_window", r.FallbackWindow, &cfg.FallbackWindow); err != nil {
		return nil, err
	}
	if r.FallbackFailures != nil {
		cfg.FallbackFailures = *r.FallbackFailures
	}
	for i, m := range r.Models {
		p := fmt.Sprintf("models[%d]", i)
		s := ModelSpec{ID: m.ID, Source: m.Source, Threads: m.Threads, GPU: m.GPU, TP: m.TP,
			Replacement: m.Replacement, Fallbacks: m.Fallbacks}
		var err error
		if s.KVCacheBytes, err = parseSize(p+".kv_cache", m.KVCache); err != nil {
			return nil, err
		}
		if sf := m.Safety; sf != nil {
			s.Safety = &SafetySpec{Off: sf.Off, URL: sf.URL, Policy: sf.Policy, OutputEvery: sf.OutputEvery}
			if err = parseDuration(p+".safety.timeout", sf.Timeout, &s.Safety.Timeout); err != nil {
				return nil, err
			}
			switch {
			case sf.Off && sf.URL != "":
				return nil, fmt.Errorf("models config: %s.safety: off and url exclude each other", p)
			case !sf.Off && sf.URL == "":
				return nil, fmt.Errorf("models config: %s.safety: url is required (or off: true)", p)
			case sf.Policy != "" && sf.Policy != "open" && sf.Policy != "closed":
				return nil, fmt.Errorf("models config: %s.safety.policy %q: want open or closed", p, sf.Policy)
			case sf.OutputEvery < 0:
				return nil, fmt.Errorf("models config: %s.safety.output_every %d: must not be negative", p, sf.OutputEvery)
			}
		}
		if err = parseDuration(p+".keep_alive", m.KeepAlive, &s.KeepAlive); err != nil {
			return nil, err
		}
		if s.Deprecated, err = parseDate(p+".deprecated", m.Deprecated); err != nil {
			return nil, err
		}
		if s.Sunset, err = parseDate(p+".sunset", m.Sunset); err != nil {
			return nil, err
		}
		cfg.Models = append(cfg.Models, s)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Aliases)) {
		ra, p := r.Aliases[name], "aliases."+name
		a := Alias{Version: ra.Version, Tiers: ra.Tiers, Fallbacks: ra.Fallbacks}
		if rc := ra.Canary; rc != nil {
			a.Canary = &Canary{Version: rc.Version}
			pct, err := parsePercent(p+".canary.percent", &rc.Percent)
			if err != nil {
				return nil, err
			}
			a.Canary.Percent = pct
			if rr := rc.Rollback; rr != nil {
				rb := &Rollback{Window: DefaultRollbackWindow, MinRequests: DefaultMinRequests,
					MaxErrorRateDelta: DefaultMaxErrorRateDelta, MaxTTFTp95Ratio: DefaultMaxTTFTp95Ratio}
				if err := parseDuration(p+".canary.rollback.window", rr.Window, &rb.Window); err != nil {
					return nil, err
				}
				setIf(&rb.MinRequests, rr.MinRequests)
				setIf(&rb.MaxErrorRateDelta, rr.MaxErrorRateDelta)
				setIf(&rb.MaxTTFTp95Ratio, rr.MaxTTFTp95Ratio)
				a.Canary.Rollback = rb
			}
		}
		if rs := ra.Shadow; rs != nil {
			if rs.Percent == nil {
				return nil, errorf("%s.shadow.percent: missing", p)
			}
			a.Shadow = &Shadow{Version: rs.Version, Percent: *rs.Percent, Scorer: rs.Scorer}
		}
		cfg.Aliases[name] = a
	}
	for _, name := range slices.Sorted(maps.Keys(r.Routers)) {
		rr := r.Routers[name]
		rt := Router{Rules: rr.Rules}
		if rc := rr.Classifier; rc != nil {
			rt.Classifier = &Classifier{URL: rc.URL, Timeout: DefaultClassifierTimeout}
			if err := parseDuration("routers."+name+".classifier.timeout", rc.Timeout, &rt.Classifier.Timeout); err != nil {
				return nil, err
			}
		}
		cfg.Routers[name] = rt
	}
	return cfg, nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("models config: "+format, args...)
}

// parseDuration sets *d from s unless s is empty.
func parseDuration(path, s string, d *time.Duration) error {
	if s == "" {
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return errorf("%s %q: not a duration (like 30s or 5m)", path, s)
	}
	*d = v
	return nil
}

func parseDate(path, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errorf("%s %q: not a date (YYYY-MM-DD or RFC 3339)", path, s)
	}
	return t, nil
}

func parseSize(path, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num, mult := s, int64(1)
	for i, suffix := range []string{"KiB", "MiB", "GiB"} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			num, mult = n, 1<<(10*(i+1))
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errorf("%s %q: not a size (bytes, or a whole number with KiB, MiB or GiB)", path, s)
	}
	return n * mult, nil
}

// parsePercent reads a plain number (every tier) or a map tier -> number.
func parsePercent(path string, n *yaml.Node) (map[string]float64, error) {
	switch n.Kind {
	case 0:
		return nil, errorf("%s: missing", path)
	case yaml.ScalarNode:
		var v float64
		if err := n.Decode(&v); err != nil {
			return nil, errorf("%s %q: not a number", path, n.Value)
		}
		m := map[string]float64{}
		for _, t := range tiers {
			m[t] = v
		}
		return m, nil
	}
	var m map[string]float64
	if err := n.Decode(&m); err != nil {
		return nil, errorf("%s: want a number or a map of tier to number (line %d)", path, n.Line)
	}
	return m, nil
}

// Validate checks a config: unique ids, no name used twice across models,
// aliases and routers, references to existing models and aliases, percents
// in 0..100, known tiers, consistent dates and positive settings. The
// error names the first problem and its place.
func (c *Config) Validate() error {
	used := map[string]string{} // name -> where it is defined
	models := map[string]bool{}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		sim := strings.HasPrefix(m.Source, "sim:")
		switch {
		case m.ID == "":
			return errorf("%s.id: missing", p)
		case used[m.ID] != "":
			return errorf("%s.id %q: duplicate of %s", p, m.ID, used[m.ID])
		case strings.TrimSpace(m.Source) == "":
			return errorf("%s.source: missing", p)
		case sim && strings.TrimPrefix(m.Source, "sim:") == "":
			return errorf("%s.source %q: no profile after sim:", p, m.Source)
		case m.Source == "ollama:":
			return errorf("%s.source %q: no model name after ollama:", p, m.Source)
		case sim && !strings.HasPrefix(m.ID, "sim/"):
			return errorf("%s.id %q: a simulated model's id must start with sim/", p, m.ID)
		case !sim && strings.HasPrefix(m.ID, "sim/"):
			return errorf("%s.id %q: the sim/ prefix is for sim: sources only", p, m.ID)
		case m.KVCacheBytes < 0 || m.Threads < 0 || m.TP < 0 || m.KeepAlive < 0:
			return errorf("%s: kv_cache, threads, tp and keep_alive must not be negative", p)
		case !m.Sunset.IsZero() && !m.Deprecated.IsZero() && m.Sunset.Before(m.Deprecated):
			return errorf("%s.sunset %s: before deprecated %s", p, m.Sunset.Format(time.RFC3339), m.Deprecated.Format(time.RFC3339))
		}
		used[m.ID], models[m.ID] = p, true
	}
	aliasNames := slices.Sorted(maps.Keys(c.Aliases))
	routerNames := slices.Sorted(maps.Keys(c.Routers))
	for _, name := range aliasNames {
		if err := claim(used, name, "aliases."+name); err != nil {
			return err
		}
	}
	for _, name := range routerNames {
		if err := claim(used, name, "routers."+name); err != nil {
			return err
		}
	}
	isModel := func(path, name string) error {
		if !models[name] {
			return errorf("%s %q: no such model", path, name)
		}
		return nil
	}
	isTarget := func(path, name string) error {
		if _, ok := c.Routers[name]; ok {
			return errorf("%s %q: is a router; name a model or alias", path, name)
		}
		if _, ok := c.Aliases[name]; !ok && !models[name] {
			return errorf("%s %q: no such model or alias", path, name)
		}
		return nil
	}
	fallbacks := func(path, self string, names []string) error {
		for i, f := range names {
			if err := isTarget(fmt.Sprintf("%s.fallbacks[%d]", path, i), f); err != nil {
				return err
			}
			if f == self {
				return errorf("%s.fallbacks[%d] %q: names itself", path, i, f)
			}
		}
		return nil
	}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		if m.Replacement != "" {
			if err := isTarget(p+".replacement", m.Replacement); err != nil {
				return err
			}
		}
		if err := fallbacks(p, m.ID, m.Fallbacks); err != nil {
			return err
		}
	}
	for _, name := range aliasNames {
		a, p := c.Aliases[name], "aliases."+name
		if a.Version == "" {
			return errorf("%s.version: missing", p)
		}
		if err := isModel(p+".version", a.Version); err != nil {
			return err
		}
		for _, tier := range slices.Sorted(maps.Keys(a.Tiers)) {
			if err := checkTier(p+".tiers", tier); err != nil {
				return err
			}
			if err := isModel(p+".tiers."+tier, a.Tiers[tier]); err != nil {
				return err
			}
		}
		if err := fallbacks(p, name, a.Fallbacks); err != nil {
			return err
		}
		if err := a.Canary.validate(p+".canary", a.Version, isModel); err != nil {
			return err
		}
		if s := a.Shadow; s != nil {
			if err := checkVersion(p+".shadow.version", s.Version, a.Version, isModel); err != nil {
				return err
			}
			if err := checkPercent(p+".shadow.percent", s.Percent); err != nil {
				return err
			}
		}
	}
	for _, name := range routerNames {
		if err := c.Routers[name].validate("routers."+name, isTarget); err != nil {
			return err
		}
	}
	switch {
	case c.FallbackCooldown <= 0:
		return errorf("fallback_cooldown %s: must be positive", c.FallbackCooldown)
	case c.FallbackWindow <= 0:
		return errorf("fallback_window %s: must be positive", c.FallbackWindow)
	case c.FallbackFailures < 1:
		return errorf("fallback_failures %d: must be at least 1", c.FallbackFailures)
	}
	return nil
}

func claim(used map[string]string, name, path string) error {
	if name == "" {
		return errorf("%s: empty name", path)
	}
	if prev := used[name]; prev != "" {
		return errorf("%s: name %q already used by %s", path, name, prev)
	}
	used[name] = path
	return nil
}

func checkTier(path, tier string) error {
	if !slices.Contains(tiers, tier) {
		return errorf("%s: unknown tier %q (want one of %s)", path, tier, strings.Join(tiers, ", "))
	}
	return nil
}

func checkPercent(path string, v float64) error {
	if !(v >= 0 && v <= 100) {
		return errorf("%s %v: not in 0..100", path, v)
	}
	return nil
}

func checkVersion(path, version, stable string, isModel func(string, string) error) error {
	if version == "" {
		return errorf("%s: missing", path)
	}
	if err := isModel(path, version); err != nil {
		return err
	}
	if version == stable {
		return errorf("%s %q: same as the stable version", path, version)
	}
	return nil
}

func (cn *Canary) validate(p, stable string, isModel func(string, string) error) error {
	if cn == nil {
		return nil
	}
	if err := checkVersion(p+".version", cn.Version, stable, isModel); err != nil {
		return err
	}
	for _, tier := range slices.Sorted(maps.Keys(cn.Percent)) {
		if err := checkTier(p+".percent", tier); err != nil {
			return err
		}
		if err := checkPercent(p+".percent."+tier, cn.Percent[tier]); err != nil {
			return err
		}
	}
	if rb := cn.Rollback; rb != nil {
		switch {
		case rb.Window <= 0:
			return errorf("%s.rollback.window %s: must be positive", p, rb.Window)
		case rb.MinRequests < 1:
			return errorf("%s.rollback.min_requests %d: must be at least 1", p, rb.MinRequests)
		case !(rb.MaxErrorRateDelta >= 0):
			return errorf("%s.rollback.max_error_rate_delta %v: must not be negative", p, rb.MaxErrorRateDelta)
		case !(rb.MaxTTFTp95Ratio > 0):
			return errorf("%s.rollback.max_ttft_p95_ratio %v: must be positive", p, rb.MaxTTFTp95Ratio)
		}
	}
	return nil
}

func (r Router) validate(p string, isTarget func(string, string) error) error {
	if cl := r.Classifier; cl != nil {
		u, err := url.Parse(cl.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errorf("%s.classifier.url %q: not an http(s) URL", p, cl.URL)
		}
		if cl.Timeout <= 0 {
			return errorf("%s.classifier.timeout %s: must be positive", p, cl.Timeout)
		}
	}
	if len(r.Rules) == 0 {
		return errorf("%s.rules: missing", p)
	}
	for i, rule := range r.Rules {
		rp := fmt.Sprintf("%s.rules[%d]", p, i)
		if rule.Model == "" {
			return errorf("%s.model: missing", rp)
		}
		if err := isTarget(rp+".model", rule.Model); err != nil {
			return err
		}
		w := rule.When
		if w.MinPromptTokens < 0 || w.MaxPromptTokens < 0 || w.MaxTurns < 0 {
			return errorf("%s.when: min_prompt_tokens, max_prompt_tokens and max_turns must not be negative", rp)
		}
		for _, tier := range w.Tiers {
			if err := checkTier(rp+".when.tiers", tier); err != nil {
				return err
			}
		}
		if len(w.Labels) > 0 && r.Classifier == nil {
			return errorf("%s.when.labels: the router has no classifier", rp)
		}
	}
	return nil
}

// clone returns a deep copy of c.
func (c *Config) clone() *Config {
	n := *c
	n.Models = slices.Clone(c.Models)
	for i := range n.Models {
		n.Models[i].Fallbacks = slices.Clone(n.Models[i].Fallbacks)
		if sf := n.Models[i].Safety; sf != nil {
			c := *sf
			n.Models[i].Safety = &c
		}
	}
	n.Aliases = make(map[string]Alias, len(c.Aliases))
	for k, a := range c.Aliases {
		a.Tiers, a.Fallbacks = maps.Clone(a.Tiers), slices.Clone(a.Fallbacks)
		if a.Canary != nil {
			cn := *a.Canary
			cn.Percent = maps.Clone(cn.Percent)
			if cn.Rollback != nil {
				rb := *cn.Rollback
				cn.Rollback = &rb
			}
			a.Canary = &cn
		}
		if a.Shadow != nil {
			s := *a.Shadow
			a.Shadow = &s
		}
		n.Aliases[k] = a
	}
	n.Routers = make(map[string]Router, len(c.Routers))
	for k, r := range c.Routers {
		if r.Classifier != nil {
			cl := *r.Classifier
			r.Classifier = &cl
		}
		r.Rules = slices.Clone(r.Rules)
		for i := range r.Rules {
			w := &r.Rules[i].When
			w.Tiers, w.Modes, w.Labels = slices.Clone(w.Tiers), slices.Clone(w.Modes), slices.Clone(w.Labels)
			w.Tools, w.JSONSchema = cloneBool(w.Tools), cloneBool(w.JSONSchema)
		}
		n.Routers[k] = r
	}
	return &n
}

func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}
