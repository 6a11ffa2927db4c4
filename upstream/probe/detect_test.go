package probe_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/upstream/probe"
)

func TestDetect(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		engine func() *engine
		client *http.Client
		want   probe.Info
		// paths are the probes Detect must make, in order: no more.
		paths []string
	}{
		"vllm": {
			engine: vllmEngine,
			want: probe.Info{Kind: probe.KindVLLM, Version: "0.10.1.1", Models: []probe.ModelInfo{{ID: vllmModel, MaxModelLen: 32768,
				Root: "meta-llama/Llama-3.1-8B-Instruct"}}},
			paths: []string{"/v1/models", "/version"},
		},
		"sglang, version under its older route": {
			engine: sglangEngine,
			want: probe.Info{Kind: probe.KindSGLang, Version: "0.4.10", Models: []probe.ModelInfo{{ID: sglangModel, MaxModelLen: 32768,
				Root: "Qwen/Qwen2.5-7B-Instruct"}}},
			paths: []string{"/v1/models", "/server_info", "/get_server_info"},
		},
		"llama.cpp, context per slot from /props": {
			engine: llamaCppEngine,
			want: probe.Info{Kind: probe.KindLlamaCpp, Version: "b6123-0c8e9ba2",
				Models: []probe.ModelInfo{{ID: llamaCppModel, MaxModelLen: 8192, Root: "/models/qwen2.5-7b-instruct-q4_k_m.gguf"}}},
			paths: []string{"/v1/models", "/props"},
		},
		"llama.cpp, context from the model list": {
			engine: func() *engine {
				e := llamaCppEngine()
				e.routes["/v1/models"] = jsonAnswer(http.StatusOK, `{"object":"list","data":[{"id":"`+llamaCppModel+
					`","object":"model","created":1754000000,"owned_by":"llamacpp","meta":{"vocab_type":2,`+
					`"n_vocab":152064,"n_ctx":4096,"n_ctx_train":32768,"n_embd":3584,"n_params":7615616512,"size":4677120000}}]}`)
				return e
			},
			want: probe.Info{Kind: probe.KindLlamaCpp, Version: "b6123-0c8e9ba2",
				Models: []probe.ModelInfo{{ID: llamaCppModel, MaxModelLen: 4096, Root: "/models/qwen2.5-7b-instruct-q4_k_m.gguf"}}},
			paths: []string{"/v1/models", "/props"},
		},
		"tgi": {
			engine: tgiEngine,
			want:   probe.Info{Kind: probe.KindTGI, Version: "3.3.4", Models: []probe.ModelInfo{{ID: tgiModel, MaxModelLen: 4096}}},
			paths:  []string{"/v1/models", "/api/version", "/info"},
		},
		"tgi without /v1/models": {
			engine: func() *engine {
				e := tgiEngine()
				delete(e.routes, "/v1/models")
				return e
			},
			want:  probe.Info{Kind: probe.KindTGI, Version: "3.3.4", Models: []probe.ModelInfo{{ID: tgiModel, MaxModelLen: 4096}}},
			paths: []string{"/v1/models", "/api/version", "/info"},
		},
		"ollama": {
			engine: ollamaEngine,
			want: probe.Info{Kind: probe.KindOllama, Version: "0.11.4", Models: []probe.ModelInfo{
				{ID: "llama3.2:latest"}, {ID: "hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"}}},
			paths: []string{"/v1/models", "/api/version"},
		},
		"llmd with its key": {
			engine: llmdEngine,
			client: bearer(llmdKey),
			want: probe.Info{Kind: probe.KindLLMD, Models: []probe.ModelInfo{
				{ID: "sim/small", MaxModelLen: 4096}, {ID: "sim/mid", MaxModelLen: 8192}, {ID: "chat", MaxModelLen: 8192}}},
			paths: []string{"/v1/models"},
		},
		"unknown OpenAI-compatible server": {
			engine: func() *engine {
				return &engine{routes: map[string]http.HandlerFunc{
					"/v1/models": jsonAnswer(http.StatusOK,
						`{"data":[{"id":"qwen2.5-7b-instruct","object":"model","owned_by":"organization_owner"}],"object":"list"}`),
				}}
			},
			want:  probe.Info{Kind: probe.KindOpenAI, Models: []probe.ModelInfo{{ID: "qwen2.5-7b-instruct"}}},
			paths: []string{"/v1/models", "/api/version", "/info", "/props", "/version", "/metrics"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := tt.engine()
			srv := e.start(t)
			info, err := probe.Detect(t.Context(), tt.client, srv.URL+"/")
			require.NoError(t, err)
			assert.Equal(t, tt.want, info)
			assert.Equal(t, tt.paths, e.paths())
		})
	}
}

func TestDetectErrors(t *testing.T) {
	t.Parallel()

	t.Run("llmd without its key", func(t *testing.T) {
		t.Parallel()
		srv := llmdEngine().start(t)
		info, err := probe.Detect(t.Context(), nil, srv.URL)
		require.ErrorIs(t, err, probe.ErrUnrecognized)
		var se *probe.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
		assert.Equal(t, srv.URL+"/v1/models", se.URL)
		assert.Equal(t, "missing or invalid API key", se.Message)
		assert.Equal(t, probe.Info{}, info)
	})

	t.Run("vllm with --api-key: kind found, models refused", func(t *testing.T) {
		t.Parallel()
		e := vllmEngine()
		e.key, e.public = "sk-vllm", map[string]bool{"/version": true, "/health": true, "/metrics": true}
		srv := e.start(t)
		info, err := probe.Detect(t.Context(), nil, srv.URL)
		var se *probe.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
		assert.NotErrorIs(t, err, probe.ErrUnrecognized)
		assert.Equal(t, probe.Info{Kind: probe.KindVLLM, Version: "0.10.1.1"}, info)
	})

	t.Run("kind from /metrics when the rest is refused", func(t *testing.T) {
		t.Parallel()
		e := sglangEngine()
		e.key, e.public = "sk-sglang", map[string]bool{"/metrics": true}
		srv := e.start(t)
		info, err := probe.Detect(t.Context(), nil, srv.URL)
		require.Error(t, err)
		assert.Equal(t, probe.KindSGLang, info.Kind)
		assert.Empty(t, info.Models)
	})

	t.Run("llmd told from vllm by its own series", func(t *testing.T) {
		t.Parallel()
		e := llmdEngine()
		e.public["/metrics"] = true
		srv := e.start(t)
		info, err := probe.Detect(t.Context(), nil, srv.URL)
		require.Error(t, err)
		assert.Equal(t, probe.KindLLMD, info.Kind)
	})

	notEngines := map[string]http.HandlerFunc{
		"every route 404":         http.NotFound,
		"a web app's index page":  textAnswer(http.StatusOK, "text/html", "<!doctype html><html><body><div id=app></div></body></html>"),
		"JSON without the shapes": jsonAnswer(http.StatusOK, `{"ok":true}`),
	}
	for name, h := range notEngines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := (&engine{notFound: h}).start(t)
			info, err := probe.Detect(t.Context(), nil, srv.URL)
			require.ErrorIs(t, err, probe.ErrUnrecognized)
			assert.Equal(t, probe.Info{}, info)
		})
	}

	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		_, err := probe.Detect(t.Context(), nil, url)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		assert.Contains(t, err.Error(), url)
	})

	t.Run("bad base URL", func(t *testing.T) {
		t.Parallel()
		for _, base := range []string{"127.0.0.1:8000", "", "ftp://host", "http://host/?x=1"} {
			_, err := probe.Detect(t.Context(), nil, base)
			require.Error(t, err, base)
		}
	})
}

func TestDetectTimeouts(t *testing.T) {
	t.Parallel()

	t.Run("ctx bounds the whole detection", func(t *testing.T) {
		t.Parallel()
		srv := (&engine{notFound: hang}).start(t)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := probe.Detect(ctx, nil, srv.URL)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 3*time.Second)
	})

	t.Run("a hanging probe is skipped", func(t *testing.T) {
		t.Parallel()
		e := tgiEngine()
		e.routes["/api/version"] = hang
		srv := e.start(t)
		hc := &http.Client{Timeout: 300 * time.Millisecond}
		info, err := probe.Detect(t.Context(), hc, srv.URL)
		require.NoError(t, err)
		assert.Equal(t, probe.KindTGI, info.Kind)
	})
}
