package probe_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/upstream/probe"
)

func TestParseLoad(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		kind  probe.Kind
		model string
		text  string
		want  probe.Load
	}{
		"vllm": {
			kind: probe.KindVLLM, text: vllmMetrics,
			want: probe.Load{KVUsage: 0.4375, Running: 7, Waiting: 3},
		},
		"vllm, model filter": {
			kind: probe.KindVLLM, model: vllmModel, text: vllmMetrics,
			want: probe.Load{KVUsage: 0.4375, Running: 7, Waiting: 3},
		},
		"vllm data-parallel: counts summed, fullest KV": {
			kind: probe.KindVLLM, text: vllmMetricsDP2,
			want: probe.Load{KVUsage: 0.8125, Running: 12, Waiting: 3},
		},
		"vllm before 0.9: gpu_cache_usage_perc": {
			kind: probe.KindVLLM, text: vllmMetricsV0,
			want: probe.Load{KVUsage: 0.25, Running: 2, Waiting: 1},
		},
		"sglang: tensor-parallel ranks count once": {
			kind: probe.KindSGLang, text: sglangMetrics,
			want: probe.Load{KVUsage: 0.28, Running: 12, Waiting: 4},
		},
		"sglang data-parallel: ranks summed": {
			kind: probe.KindSGLang, model: sglangModel, text: sglangMetricsDP2,
			want: probe.Load{KVUsage: 0.61, Running: 16, Waiting: 3},
		},
		"llama.cpp: no KV series in recent builds": {
			kind: probe.KindLlamaCpp, text: llamaCppMetrics,
			want: probe.Load{KVUsage: -1, Running: 3, Waiting: 2},
		},
		"llama.cpp 2024: kv_cache_usage_ratio": {
			kind: probe.KindLlamaCpp, text: llamaCppMetricsOld,
			want: probe.Load{KVUsage: 0.53, Running: 1, Waiting: 0},
		},
		"llama.cpp labels no model: the filter changes nothing": {
			kind: probe.KindLlamaCpp, model: "other", text: llamaCppMetrics,
			want: probe.Load{KVUsage: -1, Running: 3, Waiting: 2},
		},
		"tgi: no KV figure": {
			kind: probe.KindTGI, text: tgiMetrics,
			want: probe.Load{KVUsage: -1, Running: 12, Waiting: 4},
		},
		"llmd: all models": {
			kind: probe.KindLLMD, text: llmdMetrics,
			want: probe.Load{KVUsage: 0.75, Running: 8, Waiting: 3},
		},
		"llmd: one model": {
			kind: probe.KindLLMD, model: "sim/small", text: llmdMetrics,
			want: probe.Load{KVUsage: 0.125, Running: 2, Waiting: 0},
		},
		"unknown kind: series guessed": {
			kind: probe.KindOpenAI, text: sglangMetrics,
			want: probe.Load{KVUsage: 0.28, Running: 12, Waiting: 4},
		},
		"vllm without its waiting gauge": {
			kind: probe.KindVLLM,
			text: "# HELP vllm:num_requests_running Number of requests in model execution batches.\n" +
				"# TYPE vllm:num_requests_running gauge\n" +
				`vllm:num_requests_running{engine="0",model_name="m"} 1.0` + "\n",
			want: probe.Load{KVUsage: -1, Running: 1, Waiting: -1},
		},
		"untyped samples": {
			kind: probe.KindTGI, text: "tgi_queue_size 5\ntgi_batch_current_size 9\n",
			want: probe.Load{KVUsage: -1, Running: 9, Waiting: 5},
		},
		"NaN is unknown": {
			kind: probe.KindVLLM,
			text: "# TYPE vllm:kv_cache_usage_perc gauge\n" + `vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN` + "\n" +
				"# TYPE vllm:num_requests_running gauge\n" + `vllm:num_requests_running{engine="0",model_name="m"} 2` + "\n",
			want: probe.Load{KVUsage: -1, Running: 2, Waiting: -1},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := probe.ParseLoad(tt.kind, tt.model, strings.NewReader(tt.text))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseLoadNoMetrics(t *testing.T) {
	t.Parallel()
	unknown := probe.Load{KVUsage: -1, Running: -1, Waiting: -1}
	tests := map[string]struct {
		kind  probe.Kind
		model string
		text  string
	}{
		"model not served":        {kind: probe.KindVLLM, model: "other", text: vllmMetrics},
		"another engine's series": {kind: probe.KindVLLM, text: sglangMetrics},
		"process series only": {kind: probe.KindTGI,
			text: "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n" +
				"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"},
		"empty":            {kind: probe.KindSGLang, text: ""},
		"ollama, guessing": {kind: probe.KindOllama, text: "go_goroutines 12\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := probe.ParseLoad(tt.kind, tt.model, strings.NewReader(tt.text))
			require.ErrorIs(t, err, probe.ErrNoMetrics)
			assert.Equal(t, unknown, got)
		})
	}
}

func TestParseLoadGarbage(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"html":           "<!doctype html><html><body>Not Found</body></html>",
		"json":           `{"error":{"message":"Not Found"}}`,
		"unclosed label": `vllm:num_requests_running{model_name="m" 3` + "\n",
		"bad value":      "vllm:num_requests_running{model_name=\"m\"} three\n",
		"binary":         "\x00\x01\x02\xff\xfe",
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := probe.ParseLoad(probe.KindVLLM, "", strings.NewReader(text))
			require.Error(t, err)
			assert.NotErrorIs(t, err, probe.ErrNoMetrics)
			assert.Equal(t, probe.Load{KVUsage: -1, Running: -1, Waiting: -1}, got)
		})
	}
}

func TestParseLoadTooLarge(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for b.Len() <= 4<<20 {
		b.WriteString("# HELP padding a comment line that fills the exposition beyond its cap\n")
	}
	_, err := probe.ParseLoad(probe.KindVLLM, "", strings.NewReader(b.String()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "over")
}

func TestReadLoad(t *testing.T) {
	t.Parallel()

	t.Run("llmd, one model, with its key", func(t *testing.T) {
		t.Parallel()
		srv := llmdEngine().start(t)
		before := time.Now()
		l, err := probe.ReadLoad(t.Context(), bearer(llmdKey), srv.URL, probe.KindLLMD, "sim/mid")
		require.NoError(t, err)
		assert.Equal(t, 0.75, l.KVUsage)
		assert.Equal(t, 6, l.Running)
		assert.Equal(t, 3, l.Waiting)
		assert.False(t, l.At.Before(before))
	})

	t.Run("vllm", func(t *testing.T) {
		t.Parallel()
		srv := vllmEngine().start(t)
		l, err := probe.ReadLoad(t.Context(), nil, srv.URL, probe.KindVLLM, vllmModel)
		require.NoError(t, err)
		assert.Equal(t, probe.Load{KVUsage: 0.4375, Running: 7, Waiting: 3, At: l.At}, l)
	})

	noMetrics := map[string]struct {
		engine func() *engine
		kind   probe.Kind
		status int
	}{
		"ollama has no /metrics": {engine: ollamaEngine, kind: probe.KindOllama, status: http.StatusNotFound},
		"sglang without --enable-metrics": {engine: func() *engine {
			e := sglangEngine()
			delete(e.routes, "/metrics")
			return e
		}, kind: probe.KindSGLang, status: http.StatusNotFound},
		"llama.cpp without --metrics": {engine: func() *engine {
			e := llamaCppEngine()
			e.routes["/metrics"] = jsonAnswer(http.StatusNotImplemented,
				"{\"error\":{\"code\":501,\"message\":\"This server does not support metrics endpoint. Start it with `--metrics`\",\"type\":\"not_supported_error\"}}")
			return e
		}, kind: probe.KindLlamaCpp, status: http.StatusNotImplemented},
	}
	for name, tt := range noMetrics {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := tt.engine().start(t)
			l, err := probe.ReadLoad(t.Context(), nil, srv.URL, tt.kind, "")
			require.ErrorIs(t, err, probe.ErrNoMetrics)
			var se *probe.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.status, se.StatusCode)
			assert.Equal(t, srv.URL+"/metrics", se.URL)
			assert.Equal(t, -1, l.Running)
		})
	}

	t.Run("refused without a key", func(t *testing.T) {
		t.Parallel()
		srv := llmdEngine().start(t)
		_, err := probe.ReadLoad(t.Context(), nil, srv.URL, probe.KindLLMD, "")
		var se *probe.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
		assert.NotErrorIs(t, err, probe.ErrNoMetrics)
	})

	t.Run("garbage names the URL", func(t *testing.T) {
		t.Parallel()
		e := vllmEngine()
		e.routes["/metrics"] = textAnswer(http.StatusOK, "text/html", "<html>login</html>")
		srv := e.start(t)
		_, err := probe.ReadLoad(t.Context(), nil, srv.URL, probe.KindVLLM, "")
		require.Error(t, err)
		assert.Contains(t, err.Error(), srv.URL+"/metrics")
	})

	t.Run("ctx bounds the read", func(t *testing.T) {
		t.Parallel()
		e := vllmEngine()
		e.routes["/metrics"] = hang
		srv := e.start(t)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := probe.ReadLoad(ctx, nil, srv.URL, probe.KindVLLM, "")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 3*time.Second)
	})
}
