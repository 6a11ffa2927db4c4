package safety_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/safety"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := func(c *safety.Config) {}
	tests := map[string]struct {
		change func(*safety.Config)
		ok     bool
	}{
		"defaults with a url": {change: ok, ok: true},
		"https":               {change: func(c *safety.Config) { c.URL = "https://guard.internal/v1/check" }, ok: true},
		"zero fields default": {change: func(c *safety.Config) { *c = safety.Config{URL: c.URL} }, ok: true},
		"fail closed":         {change: func(c *safety.Config) { c.Policy = safety.FailClosed }, ok: true},
		"output checks":       {change: func(c *safety.Config) { c.OutputEvery = 32; c.OutputAtEnd = true }, ok: true},
		"no url":              {change: func(c *safety.Config) { c.URL = "" }},
		"not http":            {change: func(c *safety.Config) { c.URL = "ftp://guard/check" }},
		"no host":             {change: func(c *safety.Config) { c.URL = "http:///check" }},
		"relative url":        {change: func(c *safety.Config) { c.URL = "/check" }},
		"bad url":             {change: func(c *safety.Config) { c.URL = "http://[::1" }},
		"unknown policy":      {change: func(c *safety.Config) { c.Policy = "maybe" }},
		"negative timeout":    {change: func(c *safety.Config) { c.Timeout = -time.Second }},
		"negative output":     {change: func(c *safety.Config) { c.OutputEvery = -1 }},
		"negative text bytes": {change: func(c *safety.Config) { c.MaxTextBytes = -1 }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := safety.DefaultConfig()
			cfg.URL = "http://127.0.0.1:9000/check"
			tc.change(&cfg)
			err := cfg.Validate()
			_, newErr := safety.New(cfg, nil)
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, newErr)
			} else {
				require.Error(t, err)
				require.Error(t, newErr)
			}
		})
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	c, err := safety.New(safety.Config{URL: "http://127.0.0.1:9000/check"}, nil)
	require.NoError(t, err)
	require.Equal(t, safety.Config{
		URL:          "http://127.0.0.1:9000/check",
		Timeout:      200 * time.Millisecond,
		Policy:       safety.FailOpen,
		MaxTextBytes: 64 << 10,
	}, c.Config())
}
