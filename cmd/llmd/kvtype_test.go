package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKVCacheTypeFlag: --kv-cache-type and LLMD_KV_CACHE_TYPE reach the
// daemon's config, empty (the executor's f16) by default, and an unknown type is refused with the list.
func TestKVCacheTypeFlag(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"default": {want: ""}, // the executor's default, f16
		"flag":    {args: []string{"--kv-cache-type", "q8_0"}, want: "q8_0"},
		"env":     {env: map[string]string{"LLMD_KV_CACHE_TYPE": "q4_0"}, want: "q4_0"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := parseConfig(t, append([]string{"--data-dir", "/d"}, tc.args...), tc.env)
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.KVCacheType)
			require.NoError(t, cfg.Validate())
		})
	}
	_, err := parseConfig(t, []string{"--data-dir", "/d", "--kv-cache-type", "q5_1"}, nil)
	require.ErrorContains(t, err, "kv cache type")
}
