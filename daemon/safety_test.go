package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/safety"
	"github.com/llmd/llmd/store"
)

// classifier is a safety classifier: it blocks texts with "forbidden",
// flags those with "sketchy", and hangs on "slow".
func classifier(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req safety.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v := safety.Response{Verdict: safety.Allow}
		switch {
		case strings.Contains(req.Text, "forbidden"):
			v = safety.Response{Verdict: safety.Block, Category: "violence"}
		case strings.Contains(req.Text, "sketchy"):
			v = safety.Response{Verdict: safety.Flag, Category: "self_harm"}
		case strings.Contains(req.Text, "slow"):
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
		_ = json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSafetyHook: allow serves, flag serves and records, block answers 400
// content_filter before any token; a classifier that times out lets the
// request through under fail-open and refuses it (503) under fail-closed.
// Every verdict but allow is in the usage row.
func TestSafetyHook(t *testing.T) {
	t.Parallel()
	url := classifier(t)
	for _, policy := range []safety.Policy{safety.FailOpen, safety.FailClosed} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Models = []string{"small"}
			cfg.StepTimeScale = 0.05
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.Safety = safety.Config{URL: url, Timeout: 100 * time.Millisecond, Policy: policy}
			d, err := Open(cfg, testLogger(t))
			require.NoError(t, err)
			base := startServer(t, d)
			hc := testClient(t)
			verdicts := map[string]string{}
			for _, tc := range []struct {
				text, safety string
				status       int
				code         string
			}{
				{"hello", "", http.StatusOK, ""},
				{"a sketchy question", "flag:self_harm", http.StatusOK, ""},
				{"something forbidden", "block:violence", http.StatusBadRequest, "content_filter"},
				{"a slow one", map[safety.Policy]string{safety.FailOpen: "fail_open", safety.FailClosed: "fail_closed"}[policy],
					map[safety.Policy]int{safety.FailOpen: http.StatusOK, safety.FailClosed: http.StatusServiceUnavailable}[policy],
					map[safety.Policy]string{safety.FailClosed: "safety_unavailable"}[policy]},
			} {
				resp, body := chatVia(t, hc, base, "sim/small", tc.text, nil)
				require.Equal(t, tc.status, resp.StatusCode, "%s: %v", tc.text, body)
				if tc.code != "" {
					require.Equal(t, tc.code, body["error"].(map[string]any)["code"], tc.text)
				}
				verdicts[resp.Header.Get("X-Request-Id")] = tc.safety
			}
			for id, want := range verdicts {
				var ev store.UsageEvent
				require.Eventually(t, func() bool {
					ev, err = d.deps.Store.UsageEvent(context.Background(), id)
					return err == nil && ev.Status != store.UsageInFlight
				}, 5*time.Second, 10*time.Millisecond)
				require.Equal(t, want, ev.Safety, id)
			}
			resp, body := get(t, hc, base+"/metrics")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Contains(t, string(body), `llmd_safety_check_seconds_count{failed="false",verdict="block"} 1`)
		})
	}
}

// TestSafetyOutputChecks: the answer is checked every N tokens as it
// streams and at its end. A block mid-stream ends it with finish_reason
// "content_filter" before max_tokens; a flag at the end is served and
// recorded.
func TestSafetyOutputChecks(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req safety.Request
		_ = json.NewDecoder(r.Body).Decode(&req)
		v := safety.Response{Verdict: safety.Allow}
		switch {
		case req.Stage == safety.StageOutput && req.Model == "sim/small" && len(strings.Fields(req.Text)) >= 8:
			v = safety.Response{Verdict: safety.Block, Category: "leak"}
		case req.Stage == safety.StageOutput && req.Final:
			v = safety.Response{Verdict: safety.Flag, Category: "tone"}
		}
		_ = json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig()
	cfg.Models = []string{"small", "mid"}
	cfg.StepTimeScale = 0.2
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Safety = safety.Config{URL: srv.URL, Timeout: time.Second, OutputEvery: 4}
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	c := fleetClient(t, base)
	ctx := t.Context()

	// sim/small: blocked once its answer has 8 words.
	var finish, text string
	max := 200
	err = c.ChatCompletionStream(ctx, api.ChatCompletionRequest{Model: "sim/small", MaxTokens: &max, Controls: api.Controls{IgnoreEOS: true},
		Messages: []api.Message{{Role: "user", Content: "Go on"}}}, func(ch api.ChatCompletionChunk) error {
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				text += *c.Delta.Content
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "content_filter", finish)
	require.GreaterOrEqual(t, len(strings.Fields(text)), 8)
	require.Less(t, len(strings.Fields(text)), 150, "stopped long before max_tokens")

	// sim/mid: served whole, flagged at the end.
	resp, body := chatVia(t, testClient(t), base, "sim/mid", "Hi", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "length", body["choices"].([]any)[0].(map[string]any)["finish_reason"])
	id := resp.Header.Get("X-Request-Id")
	require.Eventually(t, func() bool {
		ev, err := d.deps.Store.UsageEvent(context.Background(), id)
		return err == nil && ev.Safety == "output_flag:tone"
	}, 5*time.Second, 10*time.Millisecond)
}

// TestSafetyPerModel: the models config overrides the safety check per
// model: off for one, another classifier for another (also when an alias
// chose it).
func TestSafetyPerModel(t *testing.T) {
	t.Parallel()
	global := classifier(t) // blocks "forbidden"
	strict := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(safety.Response{Verdict: safety.Block, Category: "strict"})
	}))
	t.Cleanup(strict.Close)
	cfg := withModelsConfig(t, fmt.Sprintf(`
models:
  - {id: sim/open, source: "sim:small", safety: {off: true}}
  - {id: sim/strict, source: "sim:small", safety: {url: %q}}
  - {id: sim/plain, source: "sim:small"}
aliases:
  s: {version: sim/strict}
`, strict.URL))
	cfg.Safety = safety.Config{URL: global}
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	hc := testClient(t)
	for _, tc := range []struct {
		model, text, category string
	}{
		{"sim/open", "something forbidden", ""},
		{"sim/plain", "something forbidden", "violence"},
		{"sim/plain", "hello", ""},
		{"sim/strict", "hello", "strict"},
		{"s", "hello", "strict"},
	} {
		resp, body := chatVia(t, hc, base, tc.model, tc.text, nil)
		if tc.category == "" {
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %v", tc.model, tc.text, body)
			continue
		}
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s: %v", tc.model, tc.text, body)
		require.Contains(t, body["error"].(map[string]any)["message"], tc.category)
	}
}
