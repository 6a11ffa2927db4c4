package probe_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/upstream/probe"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		engine func() *engine
		kind   probe.Kind
		client *http.Client
		paths  []string
	}{
		"vllm":      {engine: vllmEngine, kind: probe.KindVLLM, paths: []string{"/health"}},
		"sglang":    {engine: sglangEngine, kind: probe.KindSGLang, paths: []string{"/health"}},
		"llama.cpp": {engine: llamaCppEngine, kind: probe.KindLlamaCpp, paths: []string{"/health"}},
		"tgi":       {engine: tgiEngine, kind: probe.KindTGI, paths: []string{"/health"}},
		"ollama":    {engine: ollamaEngine, kind: probe.KindOllama, paths: []string{"/api/version"}},
		"llmd":      {engine: llmdEngine, kind: probe.KindLLMD, paths: []string{"/readyz"}},
		"llmd without /readyz": {
			engine: func() *engine {
				e := llmdEngine()
				delete(e.routes, "/readyz")
				e.public["/readyz"] = true
				return e
			},
			kind: probe.KindLLMD, paths: []string{"/readyz", "/healthz"},
		},
		"openai: /v1/models when /health is missing": {
			engine: func() *engine {
				return &engine{routes: map[string]http.HandlerFunc{
					"/v1/models": jsonAnswer(http.StatusOK, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"me"}]}`),
				}}
			},
			kind: probe.KindOpenAI, paths: []string{"/health", "/v1/models"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := tt.engine()
			srv := e.start(t)
			require.NoError(t, probe.Health(t.Context(), tt.client, srv.URL, tt.kind))
			assert.Equal(t, tt.paths, e.paths())
		})
	}
}

func TestHealthNotReady(t *testing.T) {
	t.Parallel()

	t.Run("llama.cpp loading, then ready", func(t *testing.T) {
		t.Parallel()
		var loaded atomic.Bool
		e := llamaCppEngine()
		e.routes["/health"] = func(w http.ResponseWriter, r *http.Request) {
			if !loaded.Load() {
				writeJSON(w, http.StatusServiceUnavailable, llamaCppLoading)
				return
			}
			writeJSON(w, http.StatusOK, `{"status":"ok"}`)
		}
		srv := e.start(t)

		err := probe.Health(t.Context(), nil, srv.URL, probe.KindLlamaCpp)
		var se *probe.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusServiceUnavailable, se.StatusCode)
		assert.Equal(t, "Loading model", se.Message)
		assert.Equal(t, srv.URL+"/health", se.URL)
		assert.Contains(t, err.Error(), "Loading model")

		loaded.Store(true)
		require.NoError(t, probe.Health(t.Context(), nil, srv.URL, probe.KindLlamaCpp))
	})

	statuses := map[string]struct {
		engine  func() *engine
		kind    probe.Kind
		status  int
		message string
	}{
		"vllm engine dead": {engine: func() *engine {
			e := vllmEngine()
			e.routes["/health"] = textAnswer(http.StatusServiceUnavailable, "application/json", "")
			return e
		}, kind: probe.KindVLLM, status: http.StatusServiceUnavailable},
		"llmd draining": {engine: func() *engine {
			e := llmdEngine()
			e.routes["/readyz"] = jsonAnswer(http.StatusServiceUnavailable, `{"status":"draining"}`)
			return e
		}, kind: probe.KindLLMD, status: http.StatusServiceUnavailable, message: "draining"},
		"openai server wanting a key": {engine: func() *engine {
			return &engine{key: "k", routes: map[string]http.HandlerFunc{}}
		}, kind: probe.KindOpenAI, status: http.StatusUnauthorized, message: "missing or invalid API key"},
		"no route at all": {engine: func() *engine {
			return &engine{notFound: ginNotFound}
		}, kind: probe.KindOpenAI, status: http.StatusNotFound, message: "404 page not found"},
	}
	for name, tt := range statuses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := tt.engine().start(t)
			err := probe.Health(t.Context(), nil, srv.URL, tt.kind)
			var se *probe.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.status, se.StatusCode)
			assert.Equal(t, tt.message, se.Message)
		})
	}

	t.Run("down", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		err := probe.Health(t.Context(), nil, url, probe.KindVLLM)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		assert.Contains(t, err.Error(), url+"/health")
	})

	t.Run("ctx bounds the check", func(t *testing.T) {
		t.Parallel()
		e := vllmEngine()
		e.routes["/health"] = hang
		srv := e.start(t)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := probe.Health(ctx, nil, srv.URL, probe.KindVLLM)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 3*time.Second)
	})
}
