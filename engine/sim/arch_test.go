package sim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCostMixtureOfExperts checks that a mixture of experts costs its
// active weights in FLOPs and, in bytes, its shared weights plus the
// experts a step's tokens are expected to touch: one token reads its 8 of
// 128 experts, a large batch nearly all of them.
func TestCostMixtureOfExperts(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, testConfig(t, "h100", "moe", 1))
	m := e.Config().Model
	expert := float64(m.expertParams()) * 2 * float64(m.Layers) // bytes of one expert over all layers
	shared := float64(m.WeightBytes()) - 128*expert

	one := e.Cost(decodeBatch(1, 1000))
	kv := 1001 * float64(m.KVBytesPerToken())
	require.InEpsilon(t, shared+8*expert+kv, one.Bytes, 1e-9)
	require.InEpsilon(t, 2*float64(m.ActiveParams())+4*float64(48*32*128)*1000, one.FLOPs, 1e-9)
	require.InEpsilon(t, 3.35e9, float64(m.ActiveParams()), 0.01, "Qwen3-30B-A3B multiplies by about 3.3B weights a token")

	// 64 tokens of 8 experts each touch 128·(1 − (120/128)^64) ≈ 126.
	many := e.Cost(decodeBatch(64, 1000))
	touched := 128 * (1 - math.Pow(120.0/128, 64))
	require.InEpsilon(t, shared+touched*expert+64*kv, many.Bytes, 1e-9)
	require.Less(t, many.Bytes-64*kv, float64(m.WeightBytes()))
	require.Greater(t, touched, 125.0)

	// A dense model of the same total size reads every weight and does
	// about nine times the matmul work.
	dense := m
	dense.Experts, dense.ExpertsUsed, dense.ExpertFFNSize = 0, 0, 0
	require.Equal(t, dense.Params, dense.ActiveParams())
	require.Equal(t, float64(dense.WeightBytes()), dense.stepWeightBytes(1))
	require.Greater(t, float64(dense.ActiveParams())/float64(m.ActiveParams()), 9.0)
}

// TestCostSlidingWindow checks that sliding-window layers read and attend
// over at most the window: gemma3-27b's 52 sliding layers of 62 read 1024
// tokens of KV at a 32k context.
func TestCostSlidingWindow(t *testing.T) {
	t.Parallel()
	e, _ := newTestExecutor(t, testConfig(t, "h200", "gemma3-27b", 1))
	m := e.Config().Model
	require.Equal(t, 52, m.slidingLayers())

	const ctx = 30000
	c := e.Cost(decodeBatch(1, ctx))
	read := (10*float64(ctx) + 52*1024) / 62
	require.InEpsilon(t, float64(m.WeightBytes())+(read+1)*float64(m.KVBytesPerToken()), c.Bytes, 1e-9)
	attn := 4 * float64(m.Layers*m.Heads*m.HeadDim) * (10*float64(ctx) + 52*1024) / 62
	require.InEpsilon(t, 2*float64(m.Params)+attn, c.FLOPs, 1e-9)

	// Within the window every layer sees the whole context.
	short := e.Cost(decodeBatch(1, 500))
	require.InEpsilon(t, float64(m.WeightBytes())+501*float64(m.KVBytesPerToken()), short.Bytes, 1e-9)

	// attended sums min(p, window) over the queries' key counts.
	for _, tc := range []struct{ pos, n int }{{0, 1}, {0, 3000}, {1000, 100}, {5, 2000}, {2000, 16}} {
		var global, local float64
		for p := tc.pos + 1; p <= tc.pos+tc.n; p++ {
			global += float64(p)
			local += float64(min(p, 1024))
		}
		require.InEpsilon(t, (10*global+52*local)/62, m.attended(float64(tc.pos), float64(tc.n)), 1e-12, "pos %d n %d", tc.pos, tc.n)
	}
	require.Less(t, e.PrefillTime(8192), e.PrefillTime(4096)*3, "attention grows linearly past the window in sliding layers")
}

func TestValidateArchShapes(t *testing.T) {
	t.Parallel()
	base, err := ModelByName("moe")
	require.NoError(t, err)
	for name, edit := range map[string]func(m *Model){
		"used above experts": func(m *Model) { m.ExpertsUsed = 129 },
		"no expert width":    func(m *Model) { m.ExpertFFNSize = 0 },
		"negative window":    func(m *Model) { m.SlidingWindow = -1 },
		"window no pattern":  func(m *Model) { m.SlidingWindow, m.SlidingPattern = 512, 0 },
	} {
		t.Run(name, func(t *testing.T) {
			m := base
			edit(&m)
			require.Error(t, m.Validate())
		})
	}
}
