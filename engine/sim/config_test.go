package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testConfig returns the default config for the named GPU and model.
func testConfig(t testing.TB, gpu, model string, tp int) Config {
	t.Helper()
	cfg := DefaultConfig()
	var err error
	cfg.GPU, err = GPUByName(gpu)
	require.NoError(t, err)
	cfg.Model, err = ModelByName(model)
	require.NoError(t, err)
	cfg.TP = tp
	return cfg
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	require.NoError(t, cfg.Validate())
	require.Equal(t, "sim/small", cfg.Model.ID)
	require.Equal(t, "H100 SXM 80GB", cfg.GPU.Name)
	require.Equal(t, 1, cfg.TP)
	require.Equal(t, 16, cfg.BlockSize)
	require.Equal(t, 0.10, cfg.ReserveFraction)
	require.Equal(t, time.Millisecond, cfg.StepOverhead)
	require.Equal(t, int64(64<<30), cfg.HostSwapBytes)
	require.Equal(t, 150, cfg.MeanOutputTokens)
	require.Equal(t, 1.0, cfg.TimeScale)
}

func TestCalibratedConfig(t *testing.T) {
	t.Parallel()
	c := CalibratedConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, 0.8, c.BandwidthEfficiency)
	require.Equal(t, 0.5, c.ComputeEfficiency)
	require.Equal(t, 80*time.Microsecond, c.SeqOverhead)
	d := DefaultConfig()
	require.Zero(t, d.BandwidthEfficiency, "the default is the pure roofline")
	require.Zero(t, d.ComputeEfficiency)
	require.Zero(t, d.SeqOverhead)
	c.BandwidthEfficiency, c.ComputeEfficiency, c.SeqOverhead = 0, 0, 0
	require.Equal(t, d, c, "only the efficiencies differ")
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		edit    func(*Config)
		wantFit bool // a *FitError
		wantErr bool
	}{
		"default":               {edit: func(*Config) {}},
		"flagship on h100":      {edit: func(c *Config) { *c = testConfig(t, "h100", "flagship", 1) }},
		"flagship on a100":      {edit: func(c *Config) { *c = testConfig(t, "a100", "flagship", 1) }},
		"flagship on l40s":      {edit: func(c *Config) { *c = testConfig(t, "l40s", "flagship", 1) }, wantFit: true},
		"flagship on 2x l40s":   {edit: func(c *Config) { *c = testConfig(t, "l40s", "flagship", 2) }},
		"mid on l40s":           {edit: func(c *Config) { *c = testConfig(t, "l40s", "mid", 1) }, wantFit: true},
		"all memory reserved":   {edit: func(c *Config) { c.ReserveFraction = 0.99 }, wantFit: true},
		"tp 8":                  {edit: func(c *Config) { c.TP = 8 }},
		"tp 16 replicates kv":   {edit: func(c *Config) { c.TP = 16 }},
		"tp 0":                  {edit: func(c *Config) { c.TP = 0 }, wantErr: true},
		"tp 3":                  {edit: func(c *Config) { c.TP = 3 }, wantErr: true},
		"tp 128":                {edit: func(c *Config) { c.TP = 128 }, wantErr: true},
		"tp 8 on 40 heads":      {edit: func(c *Config) { *c = testConfig(t, "h100", "mid", 8) }},
		"tp 16 on 40 heads":     {edit: func(c *Config) { *c = testConfig(t, "h100", "mid", 16) }, wantErr: true},
		"block size 12":         {edit: func(c *Config) { c.BlockSize = 12 }, wantErr: true},
		"block size 0":          {edit: func(c *Config) { c.BlockSize = 0 }, wantErr: true},
		"reserve 1":             {edit: func(c *Config) { c.ReserveFraction = 1 }, wantErr: true},
		"reserve negative":      {edit: func(c *Config) { c.ReserveFraction = -0.1 }, wantErr: true},
		"overhead negative":     {edit: func(c *Config) { c.StepOverhead = -time.Millisecond }, wantErr: true},
		"seq overhead negative": {edit: func(c *Config) { c.SeqOverhead = -time.Microsecond }, wantErr: true},
		"calibrated":            {edit: func(c *Config) { *c = CalibratedConfig() }},
		"bandwidth eff. 1.5":    {edit: func(c *Config) { c.BandwidthEfficiency = 1.5 }, wantErr: true},
		"compute eff. negative": {edit: func(c *Config) { c.ComputeEfficiency = -0.5 }, wantErr: true},
		"405b on 8x h100":       {edit: func(c *Config) { *c = testConfig(t, "h100", "llama3-405b", 8) }},
		"405b on 4x h100":       {edit: func(c *Config) { *c = testConfig(t, "h100", "llama3-405b", 4) }, wantFit: true},
		"no overhead":           {edit: func(c *Config) { c.StepOverhead = 0 }},
		"host link negative":    {edit: func(c *Config) { c.HostLinkBytesPerSec = -1 }, wantErr: true},
		"no host link at all":   {edit: func(c *Config) { c.GPU.HostLinkBytesPerSec = 0 }, wantErr: true},
		"swap negative":         {edit: func(c *Config) { c.HostSwapBytes = -1 }, wantErr: true},
		"no swap":               {edit: func(c *Config) { c.HostSwapBytes = 0 }},
		"mean output negative":  {edit: func(c *Config) { c.MeanOutputTokens = -1 }, wantErr: true},
		"time scale 0":          {edit: func(c *Config) { c.TimeScale = 0 }, wantErr: true},
		"model id not sim":      {edit: func(c *Config) { c.Model.ID = "meta/llama" }, wantErr: true},
		"model no layers":       {edit: func(c *Config) { c.Model.Layers = 0 }, wantErr: true},
		"model fp32 weights":    {edit: func(c *Config) { c.Model.WeightDTypeBytes = 4 }, wantErr: true},
		"model tiny vocab":      {edit: func(c *Config) { c.Model.VocabSize = 100 }, wantErr: true},
		"gpu zero":              {edit: func(c *Config) { c.GPU = GPU{} }, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.wantFit:
				var fit *FitError
				require.ErrorAs(t, err, &fit)
				require.Equal(t, cfg.Model.ID, fit.Model)
				require.Equal(t, cfg.TP, fit.TP)
			case tc.wantErr:
				require.Error(t, err)
				var fit *FitError
				require.NotErrorAs(t, err, &fit)
			default:
				require.NoError(t, err)
			}
			_, newErr := New(cfg, nil)
			require.Error(t, newErr, "a nil clock is refused")
		})
	}
}

func TestFitErrorMessage(t *testing.T) {
	t.Parallel()
	err := testConfig(t, "l40s", "flagship", 1).Validate()
	require.EqualError(t, err, "sim: model sim/flagship (70.6 GB of weights) does not fit on 1x L40S 48GB: "+
		"48.3 GB of memory less a 10% reserve leaves no room for the KV cache; raise the tensor-parallel degree or pick a larger GPU")
}
