package metrics

// Bucket upper bounds, as vLLM registers them (vllm/v1/metrics/loggers.py).
var (
	// ttftBuckets are vllm:time_to_first_token_seconds's, in seconds.
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	// itlBuckets are vllm:inter_token_latency_seconds's and
	// vllm:request_time_per_output_token_seconds's, in seconds.
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80}
	// latencyBuckets are those of the request phase histograms (e2e,
	// queue, prefill, decode, inference), in seconds.
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60,
		120, 240, 480, 960, 1920, 7680}
	// nBuckets are vllm:request_params_n's: vLLM uses these five, not
	// 1-2-5 up to max_model_len as for the token histograms.
	nBuckets = []float64{1, 2, 5, 10, 20}
)

// defaultMaxModelLen bounds the token histograms of a model whose context
// length is unknown (EngineSnapshot.MaxModelLen <= 0) and of the "other"
// model. maxBucket caps any bound (and keeps the arithmetic in range).
const (
	defaultMaxModelLen = 1_000_000
	maxBucket          = 1_000_000_000_000
)

// buckets125 returns vLLM's build_1_2_5_buckets(maxValue): 1, 2, 5, 10,
// 20, 50, ... up to and including maxValue; maxValue itself is a bound only
// when it is of that form (4096 gives 1 ... 2000). A maxValue below 1 takes
// defaultMaxModelLen.
func buckets125(maxValue int) []float64 {
	if maxValue < 1 {
		maxValue = defaultMaxModelLen
	}
	maxValue = min(maxValue, maxBucket)
	var b []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range [...]int{1, 2, 5} {
			v := m * scale
			if v > maxValue {
				return b
			}
			b = append(b, float64(v))
		}
	}
}
