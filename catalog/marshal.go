package catalog

import (
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Marshal writes cfg as a models config file that Parse reads back to an
// equal Config: the form llmd saves after a change made through its admin
// API (a canary, a shadow, a promotion), so that a reload keeps it.
// Comments of the file the config came from are not kept.
func Marshal(cfg *Config) ([]byte, error) {
	out := outConfig{FallbackFailures: cfg.FallbackFailures, Aliases: map[string]outAlias{}, Routers: map[string]outRouter{}}
	if cfg.FallbackCooldown > 0 {
		out.FallbackCooldown = cfg.FallbackCooldown.String()
	}
	if cfg.FallbackWindow > 0 {
		out.FallbackWindow = cfg.FallbackWindow.String()
	}
	for _, m := range cfg.Models {
		om := outModel{ID: m.ID, Source: m.Source, Threads: m.Threads, GPU: m.GPU, TP: m.TP, KeepAlive: duration(m.KeepAlive),
			Deprecated: date(m.Deprecated), Sunset: date(m.Sunset), Replacement: m.Replacement, Fallbacks: m.Fallbacks}
		if m.KVCacheBytes > 0 {
			om.KVCache = strconv.FormatInt(m.KVCacheBytes, 10)
		}
		if s := m.Safety; s != nil {
			om.Safety = &outSafety{Off: s.Off, URL: s.URL, Timeout: duration(s.Timeout), Policy: s.Policy, OutputEvery: s.OutputEvery}
		}
		out.Models = append(out.Models, om)
	}
	for name, a := range cfg.Aliases {
		oa := outAlias{Version: a.Version, Tiers: a.Tiers, Fallbacks: a.Fallbacks}
		if c := a.Canary; c != nil {
			oc := &outCanary{Version: c.Version, Percent: c.Percent}
			if rb := c.Rollback; rb != nil {
				oc.Rollback = &outRollback{Window: duration(rb.Window), MinRequests: rb.MinRequests,
					MaxErrorRateDelta: rb.MaxErrorRateDelta, MaxTTFTp95Ratio: rb.MaxTTFTp95Ratio}
			}
			oa.Canary = oc
		}
		if s := a.Shadow; s != nil {
			oa.Shadow = &outShadow{Version: s.Version, Percent: s.Percent, Scorer: s.Scorer}
		}
		out.Aliases[name] = oa
	}
	for name, r := range cfg.Routers {
		or := outRouter{Rules: []outRule{}}
		for _, rule := range r.Rules {
			w := rule.When
			or.Rules = append(or.Rules, outRule{Name: rule.Name, Model: rule.Model, When: outConditions{
				MinPromptTokens: w.MinPromptTokens, MaxPromptTokens: w.MaxPromptTokens, Tools: w.Tools, JSONSchema: w.JSONSchema,
				Tiers: w.Tiers, Modes: w.Modes, MaxTurns: w.MaxTurns, Labels: w.Labels}})
		}
		if c := r.Classifier; c != nil {
			or.Classifier = &outClassifier{URL: c.URL, Timeout: duration(c.Timeout)}
		}
		out.Routers[name] = or
	}
	return yaml.Marshal(out)
}

func duration(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

func date(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

type outConfig struct {
	FallbackCooldown string               `yaml:"fallback_cooldown,omitempty"`
	FallbackFailures int                  `yaml:"fallback_failures,omitempty"`
	FallbackWindow   string               `yaml:"fallback_window,omitempty"`
	Models           []outModel           `yaml:"models,omitempty"`
	Aliases          map[string]outAlias  `yaml:"aliases,omitempty"`
	Routers          map[string]outRouter `yaml:"routers,omitempty"`
}

type outModel struct {
	ID          string     `yaml:"id"`
	Source      string     `yaml:"source"`
	KVCache     string     `yaml:"kv_cache,omitempty"`
	Threads     int        `yaml:"threads,omitempty"`
	GPU         string     `yaml:"gpu,omitempty"`
	TP          int        `yaml:"tp,omitempty"`
	KeepAlive   string     `yaml:"keep_alive,omitempty"`
	Deprecated  string     `yaml:"deprecated,omitempty"`
	Sunset      string     `yaml:"sunset,omitempty"`
	Replacement string     `yaml:"replacement,omitempty"`
	Fallbacks   []string   `yaml:"fallbacks,omitempty"`
	Safety      *outSafety `yaml:"safety,omitempty"`
}

type outSafety struct {
	Off         bool   `yaml:"off,omitempty"`
	URL         string `yaml:"url,omitempty"`
	Timeout     string `yaml:"timeout,omitempty"`
	Policy      string `yaml:"policy,omitempty"`
	OutputEvery int    `yaml:"output_every,omitempty"`
}

type outAlias struct {
	Version   string            `yaml:"version"`
	Tiers     map[string]string `yaml:"tiers,omitempty"`
	Fallbacks []string          `yaml:"fallbacks,omitempty"`
	Canary    *outCanary        `yaml:"canary,omitempty"`
	Shadow    *outShadow        `yaml:"shadow,omitempty"`
}

type outCanary struct {
	Version  string             `yaml:"version"`
	Percent  map[string]float64 `yaml:"percent"`
	Rollback *outRollback       `yaml:"rollback,omitempty"`
}

type outRollback struct {
	Window            string  `yaml:"window,omitempty"`
	MinRequests       int     `yaml:"min_requests"`
	MaxErrorRateDelta float64 `yaml:"max_error_rate_delta"`
	MaxTTFTp95Ratio   float64 `yaml:"max_ttft_p95_ratio"`
}

type outShadow struct {
	Version string  `yaml:"version"`
	Percent float64 `yaml:"percent"`
	Scorer  string  `yaml:"scorer,omitempty"`
}

type outRouter struct {
	Classifier *outClassifier `yaml:"classifier,omitempty"`
	Rules      []outRule      `yaml:"rules"`
}

type outRule struct {
	Name  string        `yaml:"name,omitempty"`
	When  outConditions `yaml:"when,omitempty"`
	Model string        `yaml:"model"`
}

type outConditions struct {
	MinPromptTokens int      `yaml:"min_prompt_tokens,omitempty"`
	MaxPromptTokens int      `yaml:"max_prompt_tokens,omitempty"`
	Tools           *bool    `yaml:"tools,omitempty"`
	JSONSchema      *bool    `yaml:"json_schema,omitempty"`
	Tiers           []string `yaml:"tiers,omitempty"`
	Modes           []string `yaml:"modes,omitempty"`
	MaxTurns        int      `yaml:"max_turns,omitempty"`
	Labels          []string `yaml:"labels,omitempty"`
}

type outClassifier struct {
	URL     string `yaml:"url"`
	Timeout string `yaml:"timeout,omitempty"`
}
