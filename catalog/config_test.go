package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testConfig is the example of the models config, complete.
const testConfig = `
fallback_cooldown: 20s
models:
  - id: sim/flagship-2026-10-01
    source: sim:flagship
    gpu: h100
    tp: 2
    deprecated: 2026-11-01
    sunset: 2027-01-01
    replacement: sim/flagship-2026-11-15
    fallbacks: [sim/mid-2026-10-01]
  - id: sim/flagship-2026-11-15
    source: sim:flagship
  - id: sim/mid-2026-10-01
    source: sim:mid
  - id: sim/small-2026-10-01
    source: sim:small
    keep_alive: 5m
  - id: local/qwen3
    source: /models/qwen3.gguf
    kv_cache: 512MiB
    threads: 2
aliases:
  flagship:
    version: sim/flagship-2026-10-01
    tiers: {batch: sim/small-2026-10-01}
    fallbacks: [small]
    canary:
      version: sim/flagship-2026-11-15
      percent: {free: 5, paid: 50, enterprise: 0}
      rollback: {min_requests: 10}
    shadow:
      version: sim/mid-2026-10-01
      percent: 10
      scorer: "python3 score.py"
  small:
    version: sim/small-2026-10-01
routers:
  auto:
    classifier: {url: "http://127.0.0.1:9000/classify"}
    rules:
      - name: short-chat
        when: {max_prompt_tokens: 256, tools: false, json_schema: false, tiers: [free, paid], modes: [fast], max_turns: 4}
        model: small
      - name: simple
        when: {labels: [simple]}
        model: sim/mid-2026-10-01
      - name: long
        when: {min_prompt_tokens: 4096}
        model: local/qwen3
      - name: default
        model: flagship
`

func parseTest(t *testing.T, yaml string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(yaml))
	require.NoError(t, err)
	return cfg
}

func TestParse(t *testing.T) {
	cfg := parseTest(t, testConfig)
	assert.Equal(t, 20*time.Second, cfg.FallbackCooldown)
	assert.Equal(t, DefaultFallbackWindow, cfg.FallbackWindow)
	assert.Equal(t, DefaultFallbackFailures, cfg.FallbackFailures)
	require.Len(t, cfg.Models, 5)
	fl := cfg.Models[0]
	assert.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), fl.Deprecated)
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), fl.Sunset)
	assert.Equal(t, 2, fl.TP)
	assert.Equal(t, 5*time.Minute, cfg.Models[3].KeepAlive)
	assert.Equal(t, int64(512<<20), cfg.Models[4].KVCacheBytes)
	cn := cfg.Aliases["flagship"].Canary
	assert.Equal(t, map[string]float64{"free": 5, "paid": 50, "enterprise": 0}, cn.Percent)
	assert.Equal(t, &Rollback{Window: DefaultRollbackWindow, MinRequests: 10, MaxErrorRateDelta: DefaultMaxErrorRateDelta,
		MaxTTFTp95Ratio: DefaultMaxTTFTp95Ratio}, cn.Rollback)
	assert.Equal(t, "python3 score.py", cfg.Aliases["flagship"].Shadow.Scorer)
	auto := cfg.Routers["auto"]
	assert.Equal(t, DefaultClassifierTimeout, auto.Classifier.Timeout)
	assert.False(t, *auto.Rules[0].When.Tools)
	assert.Equal(t, []string{"fast"}, auto.Rules[0].When.Modes)

	cfg = parseTest(t, `
models: [{id: a, source: /a.gguf}, {id: b, source: "ollama:llama3:8b"}]
aliases: {x: {version: a, canary: {version: b, percent: 2.5}}}`)
	assert.Equal(t, map[string]float64{"batch": 2.5, "free": 2.5, "paid": 2.5, "enterprise": 2.5}, cfg.Aliases["x"].Canary.Percent)

	cfg = parseTest(t, "")
	assert.Empty(t, cfg.Models)
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "models.yaml")
	require.NoError(t, os.WriteFile(path, []byte(testConfig), 0o600))
	cfg, err := ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, cfg.Models, 5)

	require.NoError(t, os.WriteFile(path, []byte("models: [{id: a}]"), 0o600))
	_, err = ReadFile(path)
	require.EqualError(t, err, path+`: models config: models[0].source: missing`)
	_, err = ReadFile(filepath.Join(t.TempDir(), "none.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestParseErrors(t *testing.T) {
	const two = "models: [{id: a, source: /a.gguf}, {id: b, source: /b.gguf}]\n"
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown key":        {"models: [{id: a, source: /a.gguf, colour: red}]", "line 1: field colour not found"},
		"duplicate id":       {"models: [{id: a, source: /a.gguf}, {id: a, source: /b.gguf}]", `models[1].id "a": duplicate of models[0]`},
		"empty source":       {"models: [{id: a, source: ''}]", "models[0].source: missing"},
		"sim without prefix": {"models: [{id: flagship, source: 'sim:flagship'}]", `models[0].id "flagship": a simulated model's id must start with sim/`},
		"sim prefix abused":  {"models: [{id: sim/x, source: /x.gguf}]", `models[0].id "sim/x": the sim/ prefix is for sim: sources only`},
		"sim no profile":     {"models: [{id: sim/x, source: 'sim:'}]", `models[0].source "sim:": no profile`},
		"bad size":           {"models: [{id: a, source: /a.gguf, kv_cache: 5MB}]", `models[0].kv_cache "5MB": not a size`},
		"bad duration":       {"models: [{id: a, source: /a.gguf, keep_alive: 5}]", `models[0].keep_alive "5": not a duration`},
		"bad date":           {"models: [{id: a, source: /a.gguf, deprecated: 2026-13-01}]", `models[0].deprecated "2026-13-01": not a date`},
		"sunset first":       {"models: [{id: a, source: /a.gguf, deprecated: 2026-12-01, sunset: 2026-11-01}]", "models[0].sunset 2026-11-01T00:00:00Z: before deprecated 2026-12-01T00:00:00Z"},
		"bad replacement":    {"models: [{id: a, source: /a.gguf, replacement: z}]", `models[0].replacement "z": no such model or alias`},
		"bad fallback":       {"models: [{id: a, source: /a.gguf, fallbacks: [z]}]", `models[0].fallbacks[0] "z": no such model or alias`},
		"self fallback":      {"models: [{id: a, source: /a.gguf, fallbacks: [a]}]", `models[0].fallbacks[0] "a": names itself`},
		"alias is model":     {two + "aliases: {a: {version: b}}", `aliases.a: name "a" already used by models[0]`},
		"router is alias":    {two + "aliases: {x: {version: a}}\nrouters: {x: {rules: [{model: a}]}}", `routers.x: name "x" already used by aliases.x`},
		"no version":         {two + "aliases: {x: {}}", "aliases.x.version: missing"},
		"version is alias":   {two + "aliases: {x: {version: a}, y: {version: x}}", `aliases.y.version "x": no such model`},
		"unknown tier":       {two + "aliases: {x: {version: a, tiers: {gold: b}}}", `aliases.x.tiers: unknown tier "gold"`},
		"tier unknown model": {two + "aliases: {x: {version: a, tiers: {free: z}}}", `aliases.x.tiers.free "z": no such model`},
		"canary unknown":     {two + "aliases: {x: {version: a, canary: {version: z, percent: 1}}}", `aliases.x.canary.version "z": no such model`},
		"canary is stable":   {two + "aliases: {x: {version: a, canary: {version: a, percent: 1}}}", `aliases.x.canary.version "a": same as the stable version`},
		"canary no percent":  {two + "aliases: {x: {version: a, canary: {version: b}}}", "aliases.x.canary.percent: missing"},
		"canary over 100":    {two + "aliases: {x: {version: a, canary: {version: b, percent: {free: 101}}}}", "aliases.x.canary.percent.free 101: not in 0..100"},
		"canary negative":    {two + "aliases: {x: {version: a, canary: {version: b, percent: -1}}}", "aliases.x.canary.percent.batch -1: not in 0..100"},
		"canary tier":        {two + "aliases: {x: {version: a, canary: {version: b, percent: {gold: 1}}}}", `aliases.x.canary.percent: unknown tier "gold"`},
		"rollback window":    {two + "aliases: {x: {version: a, canary: {version: b, percent: 1, rollback: {window: soon}}}}", `aliases.x.canary.rollback.window "soon": not a duration`},
		"rollback min":       {two + "aliases: {x: {version: a, canary: {version: b, percent: 1, rollback: {min_requests: 0}}}}", "aliases.x.canary.rollback.min_requests 0: must be at least 1"},
		"shadow is stable":   {two + "aliases: {x: {version: a, shadow: {version: a, percent: 1}}}", `aliases.x.shadow.version "a": same as the stable version`},
		"shadow percent":     {two + "aliases: {x: {version: a, shadow: {version: b, percent: 200}}}", "aliases.x.shadow.percent 200: not in 0..100"},
		"alias fallback":     {two + "aliases: {x: {version: a, fallbacks: [x]}}", `aliases.x.fallbacks[0] "x": names itself`},
		"rule names router":  {two + "routers: {r: {rules: [{model: s}]}, s: {rules: [{model: a}]}}", `routers.r.rules[0].model "s": is a router; name a model or alias`},
		"rule unknown":       {two + "routers: {r: {rules: [{model: z}]}}", `routers.r.rules[0].model "z": no such model or alias`},
		"no rules":           {two + "routers: {r: {}}", "routers.r.rules: missing"},
		"rule tier":          {two + "routers: {r: {rules: [{when: {tiers: [gold]}, model: a}]}}", `routers.r.rules[0].when.tiers: unknown tier "gold"`},
		"labels no hook":     {two + "routers: {r: {rules: [{when: {labels: [x]}, model: a}]}}", "routers.r.rules[0].when.labels: the router has no classifier"},
		"classifier url":     {two + "routers: {r: {classifier: {url: 'ftp://x'}, rules: [{model: a}]}}", `routers.r.classifier.url "ftp://x": not an http(s) URL`},
		"failures zero":      {"fallback_failures: 0", "fallback_failures 0: must be at least 1"},
		"cooldown":           {"fallback_cooldown: -1s", "fallback_cooldown -1s: must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "models config: "), err.Error())
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestConfigIsCopied(t *testing.T) {
	cfg := parseTest(t, testConfig)
	c := New(cfg)
	cfg.Aliases["flagship"].Canary.Percent["paid"] = 100
	got := c.Config()
	got.Models[0].Fallbacks[0] = "changed"
	*got.Routers["auto"].Rules[0].When.Tools = true
	again := c.Config()
	assert.Equal(t, 50.0, again.Aliases["flagship"].Canary.Percent["paid"])
	assert.Equal(t, "sim/mid-2026-10-01", again.Models[0].Fallbacks[0])
	assert.False(t, *again.Routers["auto"].Rules[0].When.Tools)
}
