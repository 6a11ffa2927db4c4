package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/workload"
)

// offlineThroughput runs n requests of in prompt and out output tokens, all
// arriving at once, on one node of gpu x tp serving model, as vLLM's
// benchmark_throughput.py does, and returns the requests per second.
func offlineThroughput(t *testing.T, sc sim.Config, model string, gpu sim.GPU, tp, n, in, out int) float64 {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Sim = 1, sc
	cfg.Sim.MeanOutputTokens = 0
	var err error
	cfg.Sim.Model, err = sim.ModelByName(model)
	require.NoError(t, err)
	cfg.Sim.GPU = gpu
	cfg.Sim.TP = tp
	// vLLM's default token budget without chunked prefill (max(8192,
	// max_model_len) for an 8K model) and max_num_seqs 256.
	cfg.Engine.MaxBatchTokens, cfg.Engine.MaxRunning = 8192, 256
	cfg.Workload = workload.Spec{Requests: n, Rate: 1e7, Input: workload.Fixed(in), Output: workload.Fixed(out), Seed: 1}
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, n, r.Fleet.Completed)
	return float64(n) / r.Simulated.Seconds()
}

// a10g is the A10G of AWS's g5 instances, which NVIDIA publishes no
// datasheet for: 24 GB GDDR6 at 600 GB/s (23,028 MiB as nvidia-smi
// reports it), PCIe Gen4. Its dense FP16 tensor rate is quoted at 62.5 to
// 70 TFLOP/s by third parties, below the A10's datasheet 125, so the case
// that uses it runs both 70 and 125 and is logged, not checked.
func a10g(tflops float64) sim.GPU {
	return sim.GPU{
		Name:                 "A10G 24GB",
		MemoryBytes:          23028 << 20,
		BandwidthBytesPerSec: 600e9,
		BF16FLOPS:            tflops * 1e12,
		HostLinkBytesPerSec:  25e9,
	}
}

// TestCalibration compares the simulator with published vLLM throughput
// (BENCHMARKS.md, "Calibration"): within 15% for Llama 3 8B on one H100,
// to which sim.CalibratedConfig was fitted, and for Llama 2 7B on four
// H100s (out of sample); the preliminary FP8 405B figure and the A10G
// figure (whose GPU's tensor rate is uncertain) are logged, not checked.
func TestCalibration(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		model, gpu     string
		gpuProfile     *sim.GPU // used instead of gpu when set
		tp, n, in, out int
		published      float64 // requests/s
		check          bool
	}{
		// github.com/vllm-project/vllm/pull/7117: 24.32, 24.11, 24.29.
		"llama3-8b h100 256/256": {model: "small", gpu: "h100", tp: 1, n: 1000, in: 256, out: 256, published: 24.24, check: true},
		// github.com/vllm-project/vllm/pull/4600 (v0.4.1).
		"llama3-8b h100 1000/100": {model: "small", gpu: "h100", tp: 1, n: 1000, in: 1000, out: 100, published: 20.72, check: true},
		// blog.vllm.ai/2024/07/23/llama31.html: 2.82 req/s, 2,884.86
		// input and 291.53 output tokens/s, i.e. 1,023 and 103 a request.
		"llama3-405b 8xh100 1023/103": {model: "llama3-405b", gpu: "h100", tp: 8, n: 1000, in: 1023, out: 103, published: 2.82},
		// github.com/vllm-project/vllm/pull/6032 (Jul 2024, 4 H100, mp
		// backend): "benchmark_throughput.py --output-len 256 --input 256
		// --model meta-llama/Llama-2-7b-hf -tp 4", "Throughput: 32.98
		// requests/s, 16883.88 tokens/s". Out of sample.
		"llama2-7b 4xh100 256/256": {model: "llama2-7b", gpu: "h100", tp: 4, n: 1000, in: 256, out: 256, published: 32.98, check: true},
		// Neural Magic's nm-vllm nightly benchmark (github-action-benchmark
		// comments on its commits, Apr-May 2024, nm-vllm 0.2.0 = vLLM
		// 0.4.x): "NousResearch/Llama-2-7b-chat-hf", "max_model_len -
		// 4096", benchmark_throughput "input-len": 256, "output-len": 128,
		// "num-prompts": 1000, "NVIDIA A10G x 1": 3.8412 prompts/s
		// (commit a55fb2b), 3.8367 (4c04122). Out of sample; GPU-bound.
		"llama2-7b a10g(70TF) 256/128":  {model: "llama2-7b", gpuProfile: new(a10g(70)), tp: 1, n: 1000, in: 256, out: 128, published: 3.84},
		"llama2-7b a10g(125TF) 256/128": {model: "llama2-7b", gpuProfile: new(a10g(125)), tp: 1, n: 1000, in: 256, out: 128, published: 3.84},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var gpu sim.GPU
			if tc.gpuProfile != nil {
				gpu = *tc.gpuProfile
			} else {
				var err error
				gpu, err = sim.GPUByName(tc.gpu)
				require.NoError(t, err)
			}
			roof := offlineThroughput(t, sim.DefaultConfig(), tc.model, gpu, tc.tp, tc.n, tc.in, tc.out)
			cal := offlineThroughput(t, sim.CalibratedConfig(), tc.model, gpu, tc.tp, tc.n, tc.in, tc.out)
			t.Logf("published %.2f req/s; roofline %.2f (x%.2f); calibrated %.2f (x%.2f)", tc.published, roof, roof/tc.published, cal, cal/tc.published)
			if tc.check {
				assert.InEpsilon(t, tc.published, cal, 0.15)
			}
		})
	}
}
