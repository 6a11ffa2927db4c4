package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/sim"
)

// seedInputs are the seed's capacity example: 10M daily users, 20
// requests each, 1,500 tokens in and 400 out, a 3x peak, 8K-token
// conversations.
var seedInputs = planInputs{DAU: 10_000_000, RequestsPerUser: 20, InputTokens: 1500, OutputTokens: 400, Peak: 3, Context: 8192}

func flagshipOn(t *testing.T, gpu string, tp int) sim.Config {
	t.Helper()
	sc := sim.CalibratedConfig()
	var err error
	sc.Model, err = sim.ModelByName("flagship")
	require.NoError(t, err)
	sc.GPU, err = sim.GPUByName(gpu)
	require.NoError(t, err)
	sc.TP = tp
	return sc
}

// TestPlanArithmeticSeed reproduces the seed's figures exactly.
func TestPlanArithmeticSeed(t *testing.T) {
	t.Parallel()
	p, err := planArithmetic(seedInputs, flagshipOn(t, "h100", 8))
	require.NoError(t, err)
	// 10,000,000 x 20 / 86,400 = 2,314.8 requests/s; x3 = 6,944.4.
	assert.InDelta(t, 2314.81, p.RequestsPerSec, 0.01)
	assert.InDelta(t, 6944.44, p.PeakRequestsPerSec, 0.01)
	assert.Equal(t, "2,315", commas(p.RequestsPerSec))
	assert.Equal(t, "6,944", commas(p.PeakRequestsPerSec))
	assert.InDelta(t, 3_472_222.2, p.InputTokensPerSec, 0.1)
	assert.InDelta(t, 925_925.9, p.OutputTokensPerSec, 0.1)
	assert.InDelta(t, 10_416_666.7, p.PeakInputPerSec, 0.1)
	assert.InDelta(t, 2_777_777.8, p.PeakOutputPerSec, 0.1)
	// 2 x 80 layers x 8 KV heads x 128 x 2 bytes.
	assert.EqualValues(t, 327_680, p.KVBytesPerToken)
	assert.EqualValues(t, 8192*327_680, p.KVPerConversation) // 2.68 GB
	assert.Equal(t, "2.68 GB", gbString(p.KVPerConversation))
	assert.Equal(t, "2.50 GiB", gibString(p.KVPerConversation))
	assert.Equal(t, "2.62 GB", gbString(8000*p.KVBytesPerToken), "an 8,000-token conversation")
	assert.EqualValues(t, 1900*327_680, p.KVPerRequest)
	// 8 x 81,559 MiB, less 10%, less 70,553,706,496 bytes of FP8 weights.
	mem := int64(8 * 81559 << 20)
	assert.Equal(t, mem, p.NodeMemoryBytes)
	assert.EqualValues(t, 70_553_706_496, p.WeightBytes)
	assert.Equal(t, mem-int64(float64(mem)*0.1)-70_553_706_496, p.KVCapacityBytes)
	assert.EqualValues(t, p.KVCapacityBytes/(1900*327_680), p.SequencesPerNode)
	assert.EqualValues(t, 875, p.SequencesPerNode)
	assert.EqualValues(t, 203, p.ConversationsPerNode)

	p.fleet(nodeResult{RequestsPerSec: 12.5})
	assert.Equal(t, 556, p.NodesAtPeak) // ceil(6,944.4 / 12.5)
	assert.Equal(t, 556*8, p.GPUsAtPeak)
	assert.Equal(t, 186, p.NodesAtAverage)
	assert.Equal(t, 186*8, p.GPUsAtAverage)
}

// TestPlanArithmeticReplicatedKV: past the model's KV heads each GPU holds
// every KV head of its share of the heads, so a request takes more of the
// node's memory.
func TestPlanArithmeticReplicatedKV(t *testing.T) {
	t.Parallel()
	p, err := planArithmetic(seedInputs, flagshipOn(t, "h100", 16))
	require.NoError(t, err)
	assert.EqualValues(t, 327_680, p.KVBytesPerToken, "the model's figure")
	assert.EqualValues(t, 1900*327_680*2, p.KVPerRequest, "16 GPUs hold 16 copies of 8 KV heads' worth")
}

func TestPlanFormatting(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "0", commas(0))
	assert.Equal(t, "999", commas(999))
	assert.Equal(t, "1,000", commas(999.6))
	assert.Equal(t, "10,000,000", commas(1e7))
	assert.Equal(t, "-1,234", commas(-1234))
	assert.Equal(t, "3.47M", siCount(3_472_222))
	assert.Equal(t, "926K", siCount(925_926))
	assert.Equal(t, "12", siCount(12))
	assert.Equal(t, "623 MB", gbString(1900*327_680))
	assert.Equal(t, "12.5", trimFloat(12.5))
	assert.Equal(t, 12.3, roundRate(12.34))
	assert.Equal(t, 29.5, roundRate(29.5149))
	assert.Equal(t, 1230.0, roundRate(1234.5))
}

// TestPlanSearchSmoke runs the simulator's search on a small node: the
// rate found meets the targets and the next rate tried above it does not.
func TestPlanSearchSmoke(t *testing.T) {
	t.Parallel()
	h := hardware{gpu: "h100", model: "small", tp: 1, maxRunning: 256, batchTokens: 2048, costModel: costCalibrated}
	cfg, err := h.config(1)
	require.NoError(t, err)
	n, err := searchNodeRate(t.Context(), cfg, nodeTarget{InputTokens: 512, OutputTokens: 128, ITL: 50 * time.Millisecond,
		TTFT: 2 * time.Second, KeepUp: 0.97, Duration: 20 * time.Second})
	require.NoError(t, err)
	require.Positive(t, n.RequestsPerSec)
	assert.LessOrEqual(t, n.ITL.P99, 50*time.Millisecond)
	assert.LessOrEqual(t, n.TTFT.P99, 2*time.Second)
	assert.InDelta(t, n.RequestsPerSec*128, n.OutputTokensPerSec, 0.2*n.RequestsPerSec*128, "a short window also counts tokens of requests that arrived in the warm-up")
	var above float64
	for _, tr := range n.Tried {
		if tr.OK {
			assert.LessOrEqual(t, tr.Rate, n.RequestsPerSec)
		} else if tr.Rate > n.RequestsPerSec && (above == 0 || tr.Rate < above) {
			above = tr.Rate
		}
	}
	require.Positive(t, above, "the search found where the node stops keeping up")
	assert.Less(t, (above-n.RequestsPerSec)/n.RequestsPerSec, 0.05, "bisected to a few percent")
}

// TestPlanCmd runs llmctl plan with the seed's inputs (the defaults) and a
// short search, and checks the figures it prints.
func TestPlanCmd(t *testing.T) {
	t.Parallel()
	out, _, err := runCmd(t, "", "plan", "--sim-duration", "20s", "--json")
	require.NoError(t, err)
	var p struct {
		RPS         float64 `json:"requests_per_s"`
		PeakRPS     float64 `json:"peak_requests_per_s"`
		KVPerToken  int64   `json:"kv_bytes_per_token"`
		KVPerConv   int64   `json:"kv_bytes_per_conversation"`
		NodesAtPeak int     `json:"nodes_at_peak"`
		GPUsAtPeak  int     `json:"gpus_at_peak"`
		Node        struct {
			RPS float64 `json:"requests_per_s"`
		} `json:"node"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	assert.InDelta(t, 2314.8, p.RPS, 0.1)
	assert.InDelta(t, 6944.4, p.PeakRPS, 0.1)
	assert.EqualValues(t, 327_680, p.KVPerToken)
	assert.EqualValues(t, 2_684_354_560, p.KVPerConv)
	require.Positive(t, p.Node.RPS)
	assert.Equal(t, 8*p.NodesAtPeak, p.GPUsAtPeak)

	out, _, err = runCmd(t, "", "plan", "--sim-duration", "20s")
	require.NoError(t, err)
	for _, want := range []string{"2,315 req/s", "6,944 req/s", "327,680 B", "2.68 GB", "SIMULATED", "nodes at peak", "GPUs"} {
		assert.Contains(t, out, want)
	}

	_, _, err = runCmd(t, "", "plan", "--peak", "0.5")
	require.Error(t, err)
	_, _, err = runCmd(t, "", "plan", "--model", "nope")
	require.Error(t, err)
}
