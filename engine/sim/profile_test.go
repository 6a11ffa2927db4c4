package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKVBytesPerToken(t *testing.T) {
	t.Parallel()
	tests := map[string]int64{
		"small":       2 * 32 * 8 * 128 * 2,
		"mid":         2 * 64 * 8 * 128 * 2,
		"flagship":    327_680,
		"llama3-405b": 2 * 126 * 8 * 128 * 2,
		"llama2-7b":   524_288, // 2 x 32 layers x 32 KV heads x 128 x 2 bytes
		"moe":         2 * 48 * 4 * 128 * 2,
		"gemma3-27b":  2 * 62 * 16 * 128 * 2,
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := ModelByName(name)
			require.NoError(t, err)
			require.Equal(t, want, m.KVBytesPerToken())
		})
	}
}

func TestModelProfiles(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		params      float64 // billions, approximate
		weightBytes int
		layers      int
		context     int // 0 means 32768
	}{
		"small":       {params: 8.0, weightBytes: 2, layers: 32},
		"mid":         {params: 32.8, weightBytes: 2, layers: 64},
		"flagship":    {params: 70.6, weightBytes: 1, layers: 80},
		"llama3-405b": {params: 405.9, weightBytes: 1, layers: 126},
		"llama2-7b":   {params: 6.74, weightBytes: 2, layers: 32, context: 4096},
		"moe":         {params: 30.5, weightBytes: 2, layers: 48},
		"gemma3-27b":  {params: 28.4, weightBytes: 2, layers: 62},
	}
	require.Equal(t, []string{"small", "mid", "flagship", "llama3-405b", "llama2-7b", "moe", "gemma3-27b"}, ModelNames())
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := ModelByName(name)
			require.NoError(t, err)
			require.NoError(t, m.Validate())
			require.Equal(t, "sim/"+name, m.ID)
			require.Equal(t, tc.layers, m.Layers)
			require.Equal(t, tc.weightBytes, m.WeightDTypeBytes)
			require.Equal(t, 2, m.KVDTypeBytes)
			wantContext := tc.context
			if wantContext == 0 {
				wantContext = 32768
			}
			require.Equal(t, wantContext, m.ContextLength)
			require.InEpsilon(t, tc.params*1e9, float64(m.Params), 0.01)
			// The parameter count follows from the shape (mid adds QKV
			// biases the count leaves out).
			require.InEpsilon(t, float64(countParams(m)), float64(m.Params), 0.001)
			require.Equal(t, m.Params*int64(tc.weightBytes), m.WeightBytes())
		})
	}
}

func TestModelByName(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		name    string
		want    string
		wantErr bool
	}{
		"short":   {name: "small", want: "sim/small"},
		"prefix":  {name: "sim/mid", want: "sim/mid"},
		"case":    {name: " SIM/Flagship ", want: "sim/flagship"},
		"llama2":  {name: "LLAMA2-7B", want: "sim/llama2-7b"},
		"unknown": {name: "llama", wantErr: true},
		"empty":   {name: "", wantErr: true},
		"bare":    {name: "sim/", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := ModelByName(tc.name)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, m.ID)
		})
	}
}

func TestGPUByName(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		name      string
		wantName  string
		memGiB    float64
		bandwidth float64 // TB/s
		bf16      float64 // TFLOP/s dense
		fp8       float64 // TFLOP/s dense used for FP8 weights
		wantErr   bool
	}{
		"h100":         {name: "h100", wantName: "H100 SXM 80GB", memGiB: 79.6, bandwidth: 3.35, bf16: 989, fp8: 1979},
		"h200":         {name: "H200", wantName: "H200 SXM 141GB", memGiB: 140.4, bandwidth: 4.8, bf16: 989, fp8: 1979},
		"a100":         {name: "A100", wantName: "A100 SXM 80GB", memGiB: 80, bandwidth: 2.039, bf16: 312, fp8: 312},
		"l40s":         {name: "l40S", wantName: "L40S 48GB", memGiB: 45, bandwidth: 0.864, bf16: 362.05, fp8: 733},
		"display name": {name: "h100 sxm 80gb", wantName: "H100 SXM 80GB", memGiB: 79.6, bandwidth: 3.35, bf16: 989, fp8: 1979},
		"unknown":      {name: "tpu", wantErr: true},
	}
	require.Equal(t, []string{"h100", "h200", "a100", "l40s"}, GPUNames())
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g, err := GPUByName(tc.name)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantName, g.Name)
			require.InEpsilon(t, tc.memGiB, float64(g.MemoryBytes)/(1<<30), 0.005)
			require.InEpsilon(t, tc.bandwidth*1e12, g.BandwidthBytesPerSec, 1e-9)
			require.InEpsilon(t, tc.bf16*1e12, g.PeakFLOPS(2), 1e-9)
			require.InEpsilon(t, tc.fp8*1e12, g.PeakFLOPS(1), 1e-9)
			require.Positive(t, g.HostLinkBytesPerSec)
		})
	}
}
