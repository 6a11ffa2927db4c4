package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/daemon"
)

func configFrom(t *testing.T, yaml string) (daemon.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "llmd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	o := &options{}
	fs := pflag.NewFlagSet("llmd", pflag.ContinueOnError)
	o.bind(fs)
	require.NoError(t, fs.Parse([]string{"--config", path, "--data-dir", "/d"}))
	return o.config(envOf(nil))
}

func TestConfigFile(t *testing.T) {
	cfg, err := configFrom(t, `
currency: EUR
gpu_hour_price: 2.5
prices:
  sim/small: {input: 0.1, cached: 0.05, output: 0.4}
`)
	require.NoError(t, err)
	require.Equal(t, "EUR", cfg.Currency)
	require.Equal(t, 2.5, cfg.GPUHourPrice)
	require.Equal(t, map[string]daemon.Price{"sim/small": {Input: 0.1, Cached: 0.05, Output: 0.4}}, cfg.Prices)

	_, err = configFrom(t, "gpu_hour_prize: 2\n")
	require.ErrorContains(t, err, "gpu_hour_prize")
	_, err = configFrom(t, "prices:\n  m: {input: -1}\n")
	require.ErrorContains(t, err, "must not be negative")
	cfg, err = configFrom(t, "")
	require.NoError(t, err, "an empty file is no configuration")
	require.Equal(t, "USD", cfg.Currency)
}
