package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/cpu"
)

// TestCPUF16MatMulFlag: --cpu-f16-matmul and LLMD_CPU_F16_MATMUL reach the
// daemon's config, empty (the executor's exact f32) by default; an unknown
// value is refused with the list, and bf16 where the CPU lacks
// AVX512_BF16.
func TestCPUF16MatMulFlag(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"default": {want: ""},
		"flag":    {args: []string{"--cpu-f16-matmul", "f32"}, want: "f32"},
		"env":     {env: map[string]string{"LLMD_CPU_F16_MATMUL": "f32"}, want: "f32"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := parseConfig(t, append([]string{"--data-dir", "/d"}, tc.args...), tc.env)
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.CPUF16MatMul)
			require.NoError(t, cfg.Validate())
		})
	}
	_, err := parseConfig(t, []string{"--data-dir", "/d", "--cpu-f16-matmul", "fp8"}, nil)
	require.ErrorContains(t, err, "want one of f32, bf16")
	cfg, err := parseConfig(t, []string{"--data-dir", "/d", "--cpu-f16-matmul", "bf16"}, nil)
	if cpu.HasBF16MatMul() {
		require.NoError(t, err)
		require.Equal(t, "bf16", cfg.CPUF16MatMul)
	} else {
		require.ErrorContains(t, err, "AVX512_BF16")
	}
}
