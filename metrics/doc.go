// Package metrics is llmd's Prometheus exposition (GET /metrics) with
// vLLM's metric names, types, labels and bucket boundaries, so that stock
// routers (llm-d's inference scheduler reads vllm:num_requests_waiting,
// vllm:num_requests_running, vllm:kv_cache_usage_perc,
// vllm:lora_requests_info and vllm:cache_config_info) and vLLM dashboards
// work against llmd unchanged, plus llmd's own llmd_* series (tier queues,
// the degradation ladder, swap, quota, usage metering).
//
// Two kinds of series, one source each:
//
//   - State read at scrape time from a [Source]: the engines' snapshots
//     ([engine.Stats]), the quota limiter's counters and the usage writer.
//     Custom collectors turn them into gauges and counters when Prometheus
//     scrapes, so values are never stale and nothing polls. The engines'
//     counters are monotonic since each engine started, so they are
//     exposed as counters as they are.
//   - Per-request histograms and counters fed by [Metrics.ObserveRequest]
//     once per finished request, and [Metrics.ObserveRejected] for
//     requests refused before any compute.
//
// Every vllm:* series carries model_name and engine="0" (llmd runs one
// engine per model, like one vLLM process). The model_name label only ever
// takes the names of served models: an observation for any other name is
// counted under model_name="other", so a client cannot grow the number of
// series.
//
// metrics imports engine and quota for their data types only; it
// imports nothing of the request path (pipeline and server import it).
package metrics
