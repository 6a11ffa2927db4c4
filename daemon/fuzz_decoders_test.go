package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// IN-1: one fuzz target per request decoder that FuzzRequests does not
// aim at. Each answer must be a success or a 4xx with an OpenAI error body,
// never a 5xx or a panic; a stream must end with exactly one terminal
// event. The seed corpora in testdata/fuzz/<target>/ run with every go
// test; go test -fuzz=<target> ./daemon/ explores further (prefer a count,
// -fuzztime=200000x: with a duration, go1.26 may end a clean run with a
// spurious "context deadline exceeded", golang/go#75804).

// fuzzServer returns a server over a fake (model sim/fake, context 64) that
// the targets call through its handler; with a store it also returns an
// admin key.
func fuzzServer(f *testing.F, withStore bool) (*Daemon, string) {
	fake := newFake(fakeModel, 64, "okay then")
	cfg := testConfig()
	cfg.MaxBodyBytes = 1 << 12
	models := []*pipeline.Model{newModel(fake, byteTokenizer{}, time.Unix(0, 0), nil)}
	if !withStore {
		s := newServer(f, cfg, nil, models)
		s.srv.SetState(server.StateReady)
		return s, ""
	}
	ctx := context.Background()
	st, err := store.Open(ctx, f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	s := newDaemon(f, cfg, nil, Deps{Store: st, Models: models})
	s.srv.SetState(server.StateReady)
	if _, err := st.EnsureTenant(ctx, "ops", store.TierEnterprise); err != nil {
		f.Fatal(err)
	}
	key, _, err := st.CreateKey(ctx, "ops", true, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	return s, key
}

// fuzzCall sends one request through s's handler and checks the answer.
func fuzzCall(t *testing.T, s *Daemon, method, path, key, body string) {
	w := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(t.Context(), method, "http://localhost"+path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	s.Handler().ServeHTTP(w, r)
	switch {
	case w.Code >= 500:
		t.Fatalf("%s %s: status %d for %q: %s", method, path, w.Code, body, w.Body)
	case w.Code >= 400:
		var e api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("%s %s: status %d without an error body for %q: %s", method, path, w.Code, body, w.Body)
		}
	case strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream"):
		if _, problem := terminalShape(path == "/v1/chat", w.Body.Bytes()); problem != "" {
			t.Fatalf("%s %s: stream for %q: %s: %s", method, path, body, problem, w.Body)
		}
	default:
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s: status %d with a body that is not JSON for %q: %s", method, path, w.Code, body, w.Body)
		}
	}
}

func FuzzCompletions(f *testing.F) {
	f.Add(`{"model":"sim/fake","prompt":"hi"}`)
	s, _ := fuzzServer(f, false)
	f.Fuzz(func(t *testing.T, body string) {
		fuzzCall(t, s, http.MethodPost, "/v1/completions", "", body)
	})
}

func FuzzNativeChat(f *testing.F) {
	f.Add(`{"model":"sim/fake","messages":[{"role":"user","content":"hi"}]}`)
	s, _ := fuzzServer(f, false)
	f.Fuzz(func(t *testing.T, body string) {
		fuzzCall(t, s, http.MethodPost, "/v1/chat", "", body)
	})
}

func FuzzTokenize(f *testing.F) {
	f.Add(`{"model":"sim/fake","prompt":"hi"}`)
	s, _ := fuzzServer(f, false)
	f.Fuzz(func(t *testing.T, body string) {
		fuzzCall(t, s, http.MethodPost, "/tokenize", "", body)
	})
}

func FuzzDetokenize(f *testing.F) {
	f.Add(`{"model":"sim/fake","tokens":[104,105]}`)
	s, _ := fuzzServer(f, false)
	f.Fuzz(func(t *testing.T, body string) {
		fuzzCall(t, s, http.MethodPost, "/detokenize", "", body)
	})
}

func FuzzSetQuota(f *testing.F) {
	f.Add("acme", `{"tier":"free","rpm":60}`)
	s, key := fuzzServer(f, true)
	f.Fuzz(func(t *testing.T, tenant, body string) {
		fuzzCall(t, s, http.MethodPut, "/v1/admin/quotas/"+url.PathEscape(tenant), key, body)
	})
}

func FuzzCreateKey(f *testing.F) {
	f.Add(`{"tenant":"acme","tier":"paid","name":"ci"}`)
	s, key := fuzzServer(f, true)
	f.Fuzz(func(t *testing.T, body string) {
		fuzzCall(t, s, http.MethodPost, "/v1/admin/keys", key, body)
	})
}
