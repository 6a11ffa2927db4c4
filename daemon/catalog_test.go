package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// rolloutConfig is a models config: two versions of one small model, a
// model loaded on demand, the alias "chat", and the router "auto".
const rolloutConfig = `
models:
  - id: sim/chat-2026-10-01
    source: sim:small
  - id: sim/chat-2026-11-15
    source: sim:small
  - id: sim/lazy
    source: sim:small
    keep_alive: 1m
aliases:
  chat:
    version: sim/chat-2026-10-01
routers:
  auto:
    rules:
      - name: short
        when: {max_prompt_tokens: 8, tools: false}
        model: sim/chat-2026-11-15
      - name: default
        model: chat
`

// withModelsConfig writes yaml as a models config and returns a test
// config that serves it (no simulated models besides its own, a data
// directory beside it, fast simulated steps); its ModelsConfig is the
// file's path.
func withModelsConfig(t *testing.T, yaml string) Config {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "models.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	cfg := testConfig()
	cfg.Models = nil
	cfg.ModelsConfig = path
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.StepTimeScale = 0.05
	return cfg
}

// chatVia posts a chat request for model and returns the response, its
// decoded body (model and error) and headers.
func chatVia(t *testing.T, c *http.Client, base, model, text string, header map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, model, text)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return resp, m
}

// TestModelsConfigRollout walks a rollout as the design describes it,
// with the admin API alone and no restart: aliases and a router resolve
// (their decisions in the usage rows), a model loads on its first
// request, a canary takes a sticky share, the canary is promoted and the
// old version, still served by its pinned name, is deprecated and then
// retired; applying a new config unloads what it drops.
func TestModelsConfigRollout(t *testing.T) {
	t.Parallel()
	cfg := withModelsConfig(t, rolloutConfig)
	path := cfg.ModelsConfig
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	hc := testClient(t)
	c := fleetClient(t, base)
	ctx := t.Context()

	// The resident versions loaded at start; the lazy one is not loaded.
	require.Equal(t, "ready", stateOf(c, "sim/chat-2026-10-01"))
	require.Equal(t, "", stateOf(c, "sim/lazy"))
	models, err := c.Models(ctx)
	require.NoError(t, err)
	kinds := map[string]string{}
	for _, m := range models {
		kinds[m.ID] = m.Kind
	}
	require.Equal(t, map[string]string{"chat": "alias", "auto": "router", "sim/chat-2026-10-01": "version",
		"sim/chat-2026-11-15": "version", "sim/lazy": "version"}, kinds)
	resp, raw := get(t, hc, base+"/v1/models/chat")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var am api.Model
	require.NoError(t, json.Unmarshal(raw, &am))
	require.Equal(t, "alias", am.Kind)
	require.Equal(t, "sim/chat-2026-10-01", am.Target)

	resp, body := chatVia(t, hc, base, "chat", "Hello there, how are you today?", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "sim/chat-2026-10-01", body["model"])
	chatID := resp.Header.Get("X-Request-Id")
	resp, body = chatVia(t, hc, base, "auto", "Hi", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "sim/chat-2026-11-15", body["model"])
	shortID := resp.Header.Get("X-Request-Id")
	resp, body = chatVia(t, hc, base, "auto", "Please write me a long essay about the history of the bicycle", nil)
	require.Equal(t, "sim/chat-2026-10-01", body["model"])
	longID := resp.Header.Get("X-Request-Id")
	resp, body = chatVia(t, hc, base, "nope", "Hi", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body["error"].(map[string]any)["message"], "auto, chat")

	// Loaded on its first request.
	resp, body = chatVia(t, hc, base, "sim/lazy", "Hi", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "ready", stateOf(c, "sim/lazy"))
	require.Equal(t, "1m0s", keepAliveOf(c, "sim/lazy"))

	// A canary at 50%: sticky per conversation, both versions used.
	_, err = c.SetCanary(ctx, "chat", api.CanaryRequest{Version: "sim/chat-2026-11-15", Percent: map[string]float64{"paid": 50}})
	require.NoError(t, err)
	seen := map[string]int{}
	for i := range 40 {
		conv := map[string]string{"X-Conversation-Id": fmt.Sprintf("conv-%d", i)}
		_, first := chatVia(t, hc, base, "chat", "Hi", conv)
		_, again := chatVia(t, hc, base, "chat", "Hi again", conv)
		require.Equal(t, first["model"], again["model"], "conversation %d changed version", i)
		seen[first["model"].(string)]++
	}
	require.Positive(t, seen["sim/chat-2026-10-01"])
	require.Positive(t, seen["sim/chat-2026-11-15"])
	ro, err := c.Rollouts(ctx)
	require.NoError(t, err)
	require.Len(t, ro.Aliases, 1)
	require.Equal(t, "running", ro.Aliases[0].State)
	require.Positive(t, ro.Aliases[0].CanaryStats.Requests)

	// Promote, deprecating the old version now with a sunset ahead.
	sunset := time.Now().Add(48 * time.Hour).UTC().Format(time.DateOnly)
	pr, err := c.Promote(ctx, "chat", api.PromoteRequest{Deprecate: time.Now().UTC().Add(-time.Minute).Format(time.RFC3339), Sunset: sunset})
	require.NoError(t, err)
	require.Equal(t, "sim/chat-2026-11-15", pr.Stable)
	require.Equal(t, "sim/chat-2026-10-01", pr.Previous)
	_, body = chatVia(t, hc, base, "chat", "Hi", map[string]string{"X-Conversation-Id": "conv-1"})
	require.Equal(t, "sim/chat-2026-11-15", body["model"])
	resp, body = chatVia(t, hc, base, "sim/chat-2026-10-01", "Hi", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.True(t, strings.HasPrefix(resp.Header.Get("Deprecation"), "@"), resp.Header)
	require.Contains(t, resp.Header.Get("Sunset"), "GMT")
	require.Equal(t, "chat", resp.Header.Get("X-LLMD-Replacement-Model"))
	// The promotion was saved to the file: a reload (SIGHUP) keeps it.
	saved, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(saved), "version: sim/chat-2026-11-15")
	require.NoError(t, d.ReloadModels(ctx))
	_, body = chatVia(t, hc, base, "chat", "Hi", nil)
	require.Equal(t, "sim/chat-2026-11-15", body["model"])

	// Past the sunset: 410 naming the replacement.
	_, err = c.Promote(ctx, "chat", api.PromoteRequest{})
	require.Error(t, err, "no canary left to promote")
	applied, err := c.ApplyModelsConfig(ctx, []byte(strings.Replace(strings.Replace(rolloutConfig,
		"    version: sim/chat-2026-10-01", "    version: sim/chat-2026-11-15", 1),
		"    source: sim:small\n  - id: sim/chat-2026-11-15", "    source: sim:small\n    deprecated: 2026-01-01\n    sunset: 2026-02-01\n    replacement: chat\n  - id: sim/chat-2026-11-15", 1)))
	require.NoError(t, err)
	require.True(t, applied.Saved)
	resp, body = chatVia(t, hc, base, "sim/chat-2026-10-01", "Hi", nil)
	require.Equal(t, http.StatusGone, resp.StatusCode, body)
	require.Contains(t, body["error"].(map[string]any)["message"], "Use `chat` instead")
	saved, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(saved), "sunset: 2026-02-01")

	// A config without the lazy model unloads it.
	applied, err = c.ApplyModelsConfig(ctx, []byte(strings.Replace(rolloutConfig, "  - id: sim/lazy\n    source: sim:small\n    keep_alive: 1m\n", "", 1)))
	require.NoError(t, err)
	require.Equal(t, []string{"sim/lazy"}, applied.Unloaded)
	require.Equal(t, "", stateOf(c, "sim/lazy"))
	_, err = c.ApplyModelsConfig(ctx, []byte("models: [{id: x}]\n"))
	requireStatus(t, err, http.StatusBadRequest, "models config")

	// The decisions are in the usage rows.
	st := d.deps.Store
	require.Eventually(t, func() bool {
		ev, err := st.UsageEvent(context.Background(), longID)
		return err == nil && ev.Status == store.UsageFinished
	}, 5*time.Second, 10*time.Millisecond)
	for id, want := range map[string]string{chatID: "chat/stable", shortID: "auto/short", longID: "auto/default"} {
		ev, err := st.UsageEvent(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, want, ev.Decision, id)
	}
}

// TestCanaryRollsBackOnErrors: a canary whose executor fails is rolled
// back automatically once its error rate passes the stable version's by
// the policy's margin; then every request goes to the stable version.
func TestCanaryRollsBackOnErrors(t *testing.T) {
	t.Parallel()
	path := withModelsConfig(t, `
models:
  - {id: sim/good, source: "sim:small"}
  - {id: sim/bad, source: "sim:small"}
aliases:
  m:
    version: sim/good
    canary:
      version: sim/bad
      percent: 50
      rollback: {window: 1m, min_requests: 5, max_error_rate_delta: 0.2}
`).ModelsConfig
	good := newFake("sim/good", 512, "fine")
	bad := newFake("sim/bad", 512, "never")
	bad.err = errors.New("executor failed")
	cfg := testConfig()
	cfg.ModelsConfig = path
	models := []*pipeline.Model{newModel(good, byteTokenizer{}, time.Now(), nil), newModel(bad, byteTokenizer{}, time.Now(), nil)}
	base := startServer(t, newServer(t, cfg, testLogger(t), models))
	hc := testClient(t)
	c := fleetClient(t, base)
	failures := 0
	for i := 0; i < 200 && failures < 10; i++ {
		resp, _ := chatVia(t, hc, base, "m", "Hi", map[string]string{"X-Conversation-Id": fmt.Sprintf("c%d", i)})
		if resp.StatusCode != http.StatusOK {
			failures++
		}
	}
	require.Equal(t, 10, failures)
	var ro *api.RolloutList
	require.Eventually(t, func() bool {
		var err error
		ro, err = c.Rollouts(context.Background())
		return err == nil && ro.Aliases[0].State == "rolled_back"
	}, 5*time.Second, 20*time.Millisecond)
	require.Contains(t, ro.Aliases[0].Reason, "error rate")
	for i := range 20 {
		resp, body := chatVia(t, hc, base, "m", "Hi", map[string]string{"X-Conversation-Id": fmt.Sprintf("c%d", i)})
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, "sim/good", body["model"])
	}
}

// TestShadowTraffic: with a shadow at 100%, every request of the alias
// is copied to the shadow version; the client sees the primary's answer
// alone, only the primary is billed, and each comparison (greedy: exact
// match and edit distance; the scorer's value) is in the shadow report.
func TestShadowTraffic(t *testing.T) {
	t.Parallel()
	cfg := withModelsConfig(t, `
models:
  - {id: sim/v1, source: "sim:small"}
  - {id: sim/v2, source: "sim:small"}
aliases:
  m:
    version: sim/v1
    shadow: {version: sim/v2, percent: 100, scorer: "cat >/dev/null; echo 0.75"}
`)
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	hc := testClient(t)
	c := fleetClient(t, base)
	ids := make([]string, 0, 6)
	for i := range 6 {
		body := fmt.Sprintf(`{"model":"m","max_tokens":12,"temperature":0,"messages":[{"role":"user","content":"question %d"}]}`, i)
		resp, b := post(t, hc, base+"/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var cc api.ChatCompletion
		require.NoError(t, json.Unmarshal(b, &cc))
		require.Equal(t, "sim/v1", cc.Model)
		ids = append(ids, resp.Header.Get("X-Request-Id"))
	}
	var rep *api.ShadowReport
	require.Eventually(t, func() bool {
		rep, err = c.ShadowReport(context.Background(), api.ShadowReportQuery{Alias: "m"})
		return err == nil && len(rep.Rows) == 1 && rep.Rows[0].Runs == 6
	}, 10*time.Second, 20*time.Millisecond)
	row := rep.Rows[0]
	require.Equal(t, "sim/v1", row.PrimaryModel)
	require.Equal(t, "sim/v2", row.ShadowModel)
	require.Zero(t, row.ShadowErrors)
	require.Equal(t, int64(6), row.Greedy)
	require.Equal(t, int64(6), row.Compared)
	require.Equal(t, int64(6), row.Scored)
	require.InDelta(t, 0.75, row.MeanScore, 1e-9)
	require.InDelta(t, 12, row.ShadowTokensMean, 1e-9)
	// Billed once per request: no usage row for the copies.
	st := d.deps.Store
	for _, id := range ids {
		ev, err := st.UsageEvent(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, "m/stable", ev.Decision)
		_, err = st.UsageEvent(context.Background(), id+"-shadow")
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	rows, err := st.UsageReport(context.Background(), store.UsageQuery{By: "model"})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "sim/v1", rows[0].Model)
	require.Equal(t, int64(6), rows[0].Requests)
}

// TestRouterClassifier: a router's classifier labels each request; a rule
// matches on the label, and past the classifier's timeout the rules decide
// without one.
func TestRouterClassifier(t *testing.T) {
	t.Parallel()
	cls := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Text string `json:"text"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if strings.Contains(req.Text, "slow") {
			select {
			case <-time.After(time.Second):
			case <-r.Context().Done():
			}
		}
		label := "hard"
		if strings.Contains(req.Text, "easy") {
			label = "simple"
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"label": label})
	}))
	t.Cleanup(cls.Close)
	cfg := withModelsConfig(t, fmt.Sprintf(`
models:
  - {id: sim/cheap, source: "sim:small"}
  - {id: sim/big, source: "sim:small"}
routers:
  auto:
    classifier: {url: %q, timeout: 100ms}
    rules:
      - {name: simple, when: {labels: [simple]}, model: sim/cheap}
      - {name: default, model: sim/big}
`, cls.URL))
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	hc := testClient(t)
	for text, want := range map[string]string{"an easy one": "sim/cheap", "a hard one": "sim/big", "an easy but slow one": "sim/big"} {
		resp, body := chatVia(t, hc, base, "auto", text, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, want, body["model"], text)
	}
}

// TestAliasFallbackWhileUnloading: while an alias's version drains (being
// unloaded), its requests go to the alias's fallback.
func TestAliasFallbackWhileUnloading(t *testing.T) {
	t.Parallel()
	path := withModelsConfig(t, `
models:
  - {id: sim/main, source: "sim:small"}
  - {id: sim/spare, source: "sim:small"}
aliases:
  m: {version: sim/main, fallbacks: [sim/spare]}
`).ModelsConfig
	main := newFake("sim/main", 512, strings.Repeat("x", 400))
	main.delay = 5 * time.Millisecond
	spare := newFake("sim/spare", 512, "spare")
	cfg := testConfig()
	cfg.ModelsConfig = path
	models := []*pipeline.Model{newModel(main, byteTokenizer{}, time.Now(), nil), newModel(spare, byteTokenizer{}, time.Now(), nil)}
	base := startServer(t, newServer(t, cfg, testLogger(t), models))
	hc := testClient(t)
	c := fleetClient(t, base)
	long := make(chan error, 1)
	go func() {
		_, err := chatOnce(t.Context(), c, "sim/main", 400)
		long <- err
	}()
	require.Eventually(t, func() bool { return activeOf(c, "sim/main") == 1 }, 5*time.Second, time.Millisecond)
	unloaded := make(chan error, 1)
	go func() {
		_, err := c.UnloadModel(t.Context(), "sim/main", 10*time.Second)
		unloaded <- err
	}()
	require.Eventually(t, func() bool { return stateOf(c, "sim/main") == "draining" }, 5*time.Second, time.Millisecond)
	resp, body := chatVia(t, hc, base, "m", "Hi", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "sim/spare", body["model"])
	require.NoError(t, <-long)
	require.NoError(t, <-unloaded)
}

// TestOnDemandLoadOnce: concurrent first requests for a model loaded on
// demand wait for one load and are all served.
func TestOnDemandLoadOnce(t *testing.T) {
	t.Parallel()
	cfg := withModelsConfig(t, "models:\n  - {id: sim/lazy, source: \"sim:small\", keep_alive: 1m}\n")
	cfg.Models = []string{"small"}
	var logs syncBuffer
	d, err := Open(cfg, newBufferLogger(&logs))
	require.NoError(t, err)
	base := startServer(t, d)
	hc := testClient(t)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"sim/lazy","max_tokens":4,"messages":[{"role":"user","content":"Hi"}]}`)
			resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, strings.Count(logs.String(), "model loaded on demand"))
}
