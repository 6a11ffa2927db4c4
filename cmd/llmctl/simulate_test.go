package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimulateCmd runs a short simulation of two nodes and checks the
// table, the summary and the JSON report.
func TestSimulateCmd(t *testing.T) {
	t.Parallel()
	args := []string{"simulate", "--nodes", "2", "--rate", "6", "--duration", "20s", "--turns", "uniform:1-3",
		"--input", "uniform:32-256", "--output", "uniform:16-64", "--system-tokens", "256"}
	out, _, err := runCmd(t, "", args...)
	require.NoError(t, err)
	for _, want := range []string{"SIMULATED", "node-1", "node-2", "fleet", "TTFT P50/P90/P99 ms", "routing:", "wall time:", "20s simulated"} {
		assert.Contains(t, out, want)
	}

	out, _, err = runCmd(t, "", append(args, "--json")...)
	require.NoError(t, err)
	var r struct {
		Simulated bool `json:"simulated"`
		Config    struct {
			Nodes     int    `json:"nodes"`
			Model     string `json:"model"`
			CostModel string `json:"cost_model"`
		} `json:"config"`
		Report struct {
			Nodes []struct {
				ID       string `json:"id"`
				Requests int    `json:"requests"`
			} `json:"nodes"`
			Fleet struct {
				Completed  int     `json:"completed"`
				Throughput float64 `json:"output_tokens_per_s"`
				ITL        struct {
					P99 float64 `json:"p99_ms"`
				} `json:"itl"`
			} `json:"fleet"`
			Arrived int `json:"arrived"`
		} `json:"report"`
		SimulatedS float64 `json:"simulated_s"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.True(t, r.Simulated)
	assert.Equal(t, 2, r.Config.Nodes)
	assert.Equal(t, "sim/small", r.Config.Model)
	assert.Equal(t, "calibrated", r.Config.CostModel)
	require.Len(t, r.Report.Nodes, 2)
	assert.Equal(t, r.Report.Arrived, r.Report.Nodes[0].Requests+r.Report.Nodes[1].Requests)
	assert.Positive(t, r.Report.Fleet.Completed)
	assert.Positive(t, r.Report.Fleet.Throughput)
	assert.Positive(t, r.Report.Fleet.ITL.P99)
	assert.Equal(t, 20.0, r.SimulatedS)
}

func TestSimulateCmdUsageErrors(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"gpu":        {"--gpu", "tpu"},
		"model":      {"--model", "huge"},
		"route":      {"--route", "random"},
		"dist":       {"--input", "uniform:9-3"},
		"duration":   {"--duration", "0s"},
		"rate":       {"--rate", "0"},
		"too big":    {"--model", "flagship", "--gpu", "l40s"},
		"cost model": {"--cost-model", "exact"},
		"args":       {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCmd(t, "", append([]string{"simulate"}, args...)...)
			require.Error(t, err)
			var ee *exitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, exitUsage, ee.code)
		})
	}
}

// TestSimulateSpeculative: --speculative models drafts accepted at the
// configured rate, so at low load most tokens arrive with the one before
// them (the median gap between tokens falls) while the mean time per token
// drops; an unknown mode is refused.
func TestSimulateSpeculative(t *testing.T) {
	t.Parallel()
	type report struct {
		Config struct {
			Speculative string `json:"speculative"`
		} `json:"config"`
		Report struct {
			Fleet struct {
				Completed int `json:"completed"`
				ITL       struct {
					P50 float64 `json:"p50_ms"`
				} `json:"itl"`
			} `json:"fleet"`
		} `json:"report"`
	}
	run := func(mode string) report {
		out, _, err := runCmd(t, "", "simulate", "--rate", "0.5", "--duration", "2m", "--output", "128",
			"--speculative", mode, "--spec-acceptance", "0.8", "--json")
		require.NoError(t, err)
		var r report
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		require.Positive(t, r.Report.Fleet.Completed)
		return r
	}
	off, spec := run("off"), run("draft")
	assert.Empty(t, off.Config.Speculative)
	assert.Contains(t, spec.Config.Speculative, "draft, acceptance 0.8")
	assert.Less(t, spec.Report.Fleet.ITL.P50, off.Report.Fleet.ITL.P50)

	_, _, err := runCmd(t, "", "simulate", "--speculative", "medusa", "--duration", "1s")
	require.ErrorContains(t, err, "use off, ngram or draft")
}
