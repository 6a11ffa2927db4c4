package probe_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// This file holds fakes of each engine's routes, answering what the real
// servers answer (shapes read from their sources: vLLM's and SGLang's
// ModelCard, llama-server's /props and error bodies, TGI's Info and
// ModelInfo, Ollama's openai.ToListCompletion, llmd's server package).

// engine is a fake engine: its routes by exact path, what it answers on
// any other path, and the paths it was asked for.
type engine struct {
	routes   map[string]http.HandlerFunc
	notFound http.HandlerFunc
	// key, when set, is the API key every route but public wants.
	key    string
	public map[string]bool

	mu   sync.Mutex
	hits []string
}

// start serves e on loopback until the test ends.
func (e *engine) start(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.hits = append(e.hits, r.URL.Path)
		e.mu.Unlock()
		if e.key != "" && !e.public[r.URL.Path] && r.Header.Get("Authorization") != "Bearer "+e.key {
			writeJSON(w, http.StatusUnauthorized,
				`{"error":{"message":"missing or invalid API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
			return
		}
		if h, ok := e.routes[r.URL.Path]; ok {
			h(w, r)
			return
		}
		if e.notFound != nil {
			e.notFound(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// paths returns the paths e was asked for, in order.
func (e *engine) paths() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.hits...)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func jsonAnswer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, status, body) }
}

func textAnswer(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func metricsAnswer(body string) http.HandlerFunc {
	return textAnswer(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", body)
}

// hang answers nothing until the client gives up.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// What each engine answers on a path it does not serve.
var (
	fastAPINotFound  = jsonAnswer(http.StatusNotFound, `{"detail":"Not Found"}`)
	llamaCppNotFound = jsonAnswer(http.StatusNotFound, `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`)
	ginNotFound      = textAnswer(http.StatusNotFound, "text/plain", "404 page not found")
	axumNotFound     = textAnswer(http.StatusNotFound, "text/plain", "")
)

// vLLM (V1 engine, 0.10).

const vllmModel = "meta-llama/Llama-3.1-8B-Instruct"

const vllmModels = `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model",` +
	`"created":1754000000,"owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,` +
	`"max_model_len":32768,"permission":[{"id":"modelperm-6d3c0b6f","object":"model_permission",` +
	`"created":1754000000,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,` +
	`"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*",` +
	`"group":null,"is_blocking":false}]}]}`

const vllmMetrics = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 19853.0
python_gc_objects_collected_total{generation="1"} 3311.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4375
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 81234.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 123456.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 412.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="meta-llama/Llama-3.1-8B-Instruct"} 9.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 301.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 423.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 423.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 51.7
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="28520"} 1.0
`

// vllmMetricsDP2 is vLLM with --data-parallel-size 2: one engine label each.
const vllmMetricsDP2 = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4375
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.8125
`

// vllmMetricsV0 is an older vLLM (0.6, V0 engine): gpu_cache_usage_perc,
// no engine label.
const vllmMetricsV0 = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",gpu_memory_utilization="0.9",num_cpu_blocks="2048",num_gpu_blocks="7419",swap_space="4"} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
`

func vllmEngine() *engine {
	return &engine{
		routes: map[string]http.HandlerFunc{
			"/v1/models": jsonAnswer(http.StatusOK, vllmModels),
			"/version":   jsonAnswer(http.StatusOK, `{"version":"0.10.1.1"}`),
			"/health":    textAnswer(http.StatusOK, "application/json", ""),
			"/metrics":   metricsAnswer(vllmMetrics),
			"/ping":      textAnswer(http.StatusOK, "application/json", ""),
			"/tokenize":  jsonAnswer(http.StatusMethodNotAllowed, `{"detail":"Method Not Allowed"}`),
		},
		notFound: fastAPINotFound,
	}
}

// SGLang (0.4.10, --tp 2 --enable-metrics). It also answers Ollama's
// /api/version (SGLang's Ollama compatibility), which must not make it
// look like Ollama.

const sglangModel = "Qwen/Qwen2.5-7B-Instruct"

const sglangModels = `{"object":"list","data":[{"id":"Qwen/Qwen2.5-7B-Instruct","object":"model",` +
	`"created":1754000000,"owned_by":"sglang","root":"Qwen/Qwen2.5-7B-Instruct","max_model_len":32768}]}`

const sglangServerInfo = `{"model_path":"Qwen/Qwen2.5-7B-Instruct","tokenizer_path":"Qwen/Qwen2.5-7B-Instruct",` +
	`"tp_size":2,"dp_size":1,"enable_metrics":true,"max_running_requests":null,"max_total_num_tokens":452366,` +
	`"internal_states":[{"last_gen_throughput":812.4,"memory_usage":{"weight":7.6,"kvcache":31.2}}],"version":"0.4.10"}`

// sglangMetrics: each of the two tensor-parallel ranks publishes its
// scheduler's figures (the same numbers).
const sglangMetrics = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 12.0
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 12.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 126662.0
sglang:num_used_tokens{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 126662.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.28
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.28
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 4.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0075
sglang:cache_hit_rate{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.0075
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct"} 8.128902e+06
`

// sglangMetricsDP2: data-parallel attention, two schedulers, each its own
// queue.
const sglangMetricsDP2 = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 10.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 6.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.61
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.33
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 1.0
`

func sglangEngine() *engine {
	return &engine{
		routes: map[string]http.HandlerFunc{
			"/v1/models":       jsonAnswer(http.StatusOK, sglangModels),
			"/get_server_info": jsonAnswer(http.StatusOK, sglangServerInfo),
			"/health":          textAnswer(http.StatusOK, "text/plain", ""),
			"/metrics":         metricsAnswer(sglangMetrics),
			"/api/version":     jsonAnswer(http.StatusOK, `{"version":"0.4.10"}`),
		},
		notFound: fastAPINotFound,
	}
}

// llama.cpp's llama-server (b6123, --metrics, -c 32768 -np 4: 8192 tokens a
// slot). Its /v1/models meta has n_ctx_train only in this build.

const llamaCppModel = "qwen2.5-7b-instruct-q4_k_m.gguf"

const llamaCppModels = `{"models":[{"name":"qwen2.5-7b-instruct-q4_k_m.gguf","model":"qwen2.5-7b-instruct-q4_k_m.gguf",` +
	`"modified_at":"","size":"","digest":"","type":"model","description":"","tags":[""],` +
	`"capabilities":["completion"],"parameters":"","details":{"parent_model":"","format":"gguf",` +
	`"family":"","families":[""],"parameter_size":"","quantization_level":""}}],"object":"list",` +
	`"data":[{"id":"qwen2.5-7b-instruct-q4_k_m.gguf","object":"model","created":1754000000,` +
	`"owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":152064,"n_ctx_train":32768,"n_embd":3584,` +
	`"n_params":7615616512,"size":4677120000}}]}`

const llamaCppProps = `{"default_generation_settings":{"id":0,"id_task":-1,"n_ctx":8192,"speculative":false,` +
	`"is_processing":false,"params":{"n_predict":-1,"seed":4294967295,"temperature":0.8,"top_k":40,` +
	`"top_p":0.95,"min_p":0.05,"stop":[]},"prompt":"","next_token":{"has_next_token":true,"n_remain":-1}},` +
	`"total_slots":4,"model_path":"/models/qwen2.5-7b-instruct-q4_k_m.gguf",` +
	`"modalities":{"vision":false,"audio":false},"chat_template":"{%- for message in messages %}...{%- endfor %}",` +
	`"bos_token":"","eos_token":"<|im_end|>","build_info":"b6123-0c8e9ba2"}`

const llamaCppLoading = `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`

// llamaCppMetrics is a recent llama-server: no KV-cache series.
const llamaCppMetrics = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33065
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 235.743
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 7801
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 6420
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 140.26
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 33.09
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 2.71
`

// llamaCppMetricsOld is a 2024 llama-server, which still published its
// KV-cache use.
const llamaCppMetricsOld = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1024
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.53
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 17367
# HELP llamacpp:requests_processing Number of request processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of request deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
`

func llamaCppEngine() *engine {
	return &engine{
		routes: map[string]http.HandlerFunc{
			"/v1/models": jsonAnswer(http.StatusOK, llamaCppModels),
			"/props":     jsonAnswer(http.StatusOK, llamaCppProps),
			"/health":    jsonAnswer(http.StatusOK, `{"status":"ok"}`),
			"/metrics":   metricsAnswer(llamaCppMetrics),
			// llama-server's Ollama-compatible model list.
			"/api/tags": jsonAnswer(http.StatusOK, `{"models":[]}`),
		},
		notFound: llamaCppNotFound,
	}
}

// TGI (3.3): its /v1/models entry is owned by the model id.

const tgiModel = "mistralai/Mistral-7B-Instruct-v0.3"

const tgiModels = `{"object":"list","data":[{"id":"mistralai/Mistral-7B-Instruct-v0.3","object":"model",` +
	`"created":0,"owned_by":"mistralai/Mistral-7B-Instruct-v0.3"}]}`

const tgiInfo = `{"model_id":"mistralai/Mistral-7B-Instruct-v0.3","model_sha":"e0bc86c23ce5aae1db576c8cca6f06f1f73af2db",` +
	`"model_pipeline_tag":"text-generation","max_concurrent_requests":128,"max_best_of":2,"max_stop_sequences":4,` +
	`"max_input_tokens":4095,"max_total_tokens":4096,"validation_workers":2,"max_client_batch_size":4,` +
	`"router":"text-generation-router","version":"3.3.4","sha":"9f38d9305135c0cb1ec5d1bc3b5a0b4dfb3f0a17",` +
	`"docker_label":"sha-9f38d93"}`

const tgiMetrics = `# TYPE tgi_request_count counter
tgi_request_count 1532
# TYPE tgi_request_success counter
tgi_request_success 1530
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 12
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 8192
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 120
tgi_request_duration_bucket{le="2"} 1011
tgi_request_duration_bucket{le="+Inf"} 1530
tgi_request_duration_sum 3120.5
tgi_request_duration_count 1530
`

func tgiEngine() *engine {
	return &engine{
		routes: map[string]http.HandlerFunc{
			"/v1/models": jsonAnswer(http.StatusOK, tgiModels),
			"/info":      jsonAnswer(http.StatusOK, tgiInfo),
			"/health":    textAnswer(http.StatusOK, "text/plain", ""),
			"/metrics":   metricsAnswer(tgiMetrics),
		},
		notFound: axumNotFound,
	}
}

// Ollama (0.11): /v1/models entries are owned by the model's namespace;
// no /metrics.

const ollamaModels = `{"object":"list","data":[{"id":"llama3.2:latest","object":"model","created":1730000000,` +
	`"owned_by":"library"},{"id":"hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M","object":"model",` +
	`"created":1730000001,"owned_by":"bartowski"}]}`

func ollamaEngine() *engine {
	return &engine{
		routes: map[string]http.HandlerFunc{
			"/":            textAnswer(http.StatusOK, "text/plain; charset=utf-8", "Ollama is running"),
			"/v1/models":   jsonAnswer(http.StatusOK, ollamaModels),
			"/api/version": jsonAnswer(http.StatusOK, `{"version":"0.11.4"}`),
		},
		notFound: ginNotFound,
	}
}

// llmd: /v1/models and /metrics want a key, /healthz and /readyz are
// public; unknown routes answer 401 without a key.

const llmdKey = "sk-test"

const llmdModels = `{"object":"list","data":[{"id":"sim/small","object":"model","created":1754000000,` +
	`"owned_by":"llmd","max_model_len":4096,"architecture":"sim","quantization":"BF16"},` +
	`{"id":"sim/mid","object":"model","created":1754000000,"owned_by":"llmd","max_model_len":8192,` +
	`"architecture":"sim","quantization":"BF16"},{"id":"chat","object":"model","created":1754000000,` +
	`"owned_by":"llmd","max_model_len":8192,"kind":"alias","target":"sim/mid"}]}`

// llmdMetrics is what llmd's metrics package exposes (client_golang) for
// two models.
const llmdMetrics = `# HELP llmd_degradation_level Degradation ladder level: 0 none, 1 pause_batch, 2 limit_free, 3 shed_free, 4 queue_paid.
# TYPE llmd_degradation_level gauge
llmd_degradation_level{model_name="sim/mid"} 0
llmd_degradation_level{model_name="sim/small"} 0
# HELP llmd_queue_depth Requests waiting in the engine's queue, by tier.
# TYPE llmd_queue_depth gauge
llmd_queue_depth{model_name="sim/mid",tier="free"} 2
llmd_queue_depth{model_name="sim/mid",tier="paid"} 1
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="sim/mid"} 0.75
vllm:kv_cache_usage_perc{engine="0",model_name="sim/small"} 0.125
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="sim/mid"} 6
vllm:num_requests_running{engine="0",model_name="sim/small"} 2
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="sim/mid"} 3
vllm:num_requests_waiting{engine="0",model_name="sim/small"} 0
`

func llmdEngine() *engine {
	return &engine{
		routes: map[string]http.HandlerFunc{
			"/v1/models": jsonAnswer(http.StatusOK, llmdModels),
			"/metrics":   metricsAnswer(llmdMetrics),
			"/healthz":   jsonAnswer(http.StatusOK, `{"status":"ok"}`),
			"/readyz":    jsonAnswer(http.StatusOK, `{"status":"ready"}`),
		},
		notFound: jsonAnswer(http.StatusNotFound,
			`{"error":{"message":"unknown route GET /x","type":"invalid_request_error","param":null,"code":null}}`),
		key:    llmdKey,
		public: map[string]bool{"/healthz": true, "/readyz": true},
	}
}

// bearer is a client that sends key as a Bearer token, as a caller
// configures hc for an engine that wants one.
func bearer(key string) *http.Client {
	return &http.Client{Transport: bearerTransport{key: key, next: http.DefaultTransport}}
}

type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}
