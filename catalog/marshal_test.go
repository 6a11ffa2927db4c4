package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMarshalRoundTrip: a config written by Marshal parses back equal,
// every field set.
func TestMarshalRoundTrip(t *testing.T) {
	cfg, err := Parse([]byte(`
fallback_cooldown: 45s
fallback_failures: 4
fallback_window: 2m
models:
  - id: sim/a-1
    source: sim:small
    gpu: h200
    tp: 2
    deprecated: 2026-11-01
    sunset: 2027-01-01T12:00:00Z
    replacement: a
    fallbacks: [sim/b]
    safety: {url: "http://127.0.0.1:9/check", timeout: 150ms, policy: closed, output_every: 16}
  - id: sim/a-2
    source: sim:mid
    keep_alive: 5m
    safety: {off: true}
  - id: sim/b
    source: sim:small
  - id: local
    source: /models/x.gguf
    kv_cache: 64MiB
    threads: 2
aliases:
  a:
    version: sim/a-1
    tiers: {free: sim/b}
    fallbacks: [sim/b]
    canary:
      version: sim/a-2
      percent: {free: 5, paid: 0.5}
      rollback: {window: 10m, min_requests: 30, max_error_rate_delta: 0.1, max_ttft_p95_ratio: 2}
    shadow: {version: sim/b, percent: 12.5, scorer: "echo 1"}
routers:
  auto:
    classifier: {url: "http://127.0.0.1:9/label", timeout: 80ms}
    rules:
      - name: small
        when: {max_prompt_tokens: 100, min_prompt_tokens: 1, tools: false, json_schema: true, tiers: [free], modes: [fast], max_turns: 3, labels: [easy]}
        model: sim/b
      - model: a
`))
	require.NoError(t, err)
	b, err := Marshal(cfg)
	require.NoError(t, err)
	back, err := Parse(b)
	require.NoError(t, err, string(b))
	require.Equal(t, cfg, back, string(b))
}
