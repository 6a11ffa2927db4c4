package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
)

// FuzzRequests throws arbitrary bodies at every generation endpoint: the
// answer is a success or a 4xx with an OpenAI error body, never a 5xx or a
// panic. The seed corpus runs with every go test.
func FuzzRequests(f *testing.F) {
	for _, tc := range badRequests(fakeModel, 64, 1<<10, strings.Repeat("a", 100)) {
		f.Add(uint8(0), tc.body)
	}
	for _, b := range []string{
		`{"model":"sim/fake","messages":[{"role":"user","content":"hi"}],"stream":true,"n":3,"stop":["k"]}`,
		`{"model":"sim/fake","prompt":"hi","max_tokens":3,"seed":-1,"temperature":0,"top_p":1}`,
		`{"model":"sim/fake","messages":[{"role":"user","content":null}],"max_completion_tokens":9223372036854775807}`,
		`{"model":"sim/fake","messages":[{"role":"user","content":"hi"}],"temperature":1e400}`,
		`{"model":"sim/fake","model":"x","messages":[[[[[[[[[[]]]]]]]]]]}`,
		`{"model":"sim/fake","prompt":["\u00e9"],"stop":"\ud800"}`,
	} {
		for p := range uint8(3) {
			f.Add(p, b)
		}
	}
	fake := newFake(fakeModel, 64, "okay then")
	cfg := testConfig()
	cfg.MaxBodyBytes = 1 << 10
	s := newServer(f, cfg, nil, []*pipeline.Model{newModel(fake, byteTokenizer{}, time.Unix(0, 0), nil)})
	s.srv.SetState(server.StateReady)
	paths := []string{"/v1/chat/completions", "/v1/completions", "/v1/chat"}
	f.Fuzz(func(t *testing.T, p uint8, body string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "http://localhost"+paths[int(p)%len(paths)], strings.NewReader(body))
		s.Handler().ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if w.Code >= 400 {
			var e api.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("status %d without an error body for %q: %s", w.Code, body, w.Body)
			}
		}
	})
}
