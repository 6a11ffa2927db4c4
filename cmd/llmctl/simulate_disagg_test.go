package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimulateDisagg runs --disagg 1:1 against two whole nodes on the same
// arrivals and checks the table and the JSON report.
func TestSimulateDisagg(t *testing.T) {
	t.Parallel()
	args := []string{"simulate", "--disagg", "1:1", "--rate", "2", "--duration", "10s", "--input", "uniform:1000-2000",
		"--output", "64", "--shared-prefix", "0", "--itl-slo", "30ms"}
	out, _, err := runCmd(t, "", args...)
	require.NoError(t, err)
	for _, want := range []string{"SIMULATED disaggregation", "2 whole", "1 prefill : 1 decode", "GOODPUT req/s", "objectives: TTFT <= 2s"} {
		assert.Contains(t, out, want)
	}
	out, _, err = runCmd(t, "", append(args, "--json")...)
	require.NoError(t, err)
	var r struct {
		Simulated bool `json:"simulated"`
		Rows      []struct {
			Prefill int `json:"prefill_nodes"`
			Decode  int `json:"decode_nodes"`
			Report  struct {
				Requests, Completed, Transfers int
				TransferBytes                  int64
			} `json:"report"`
		} `json:"setups"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.True(t, r.Simulated)
	require.Len(t, r.Rows, 2)
	assert.Equal(t, 0, r.Rows[0].Prefill)
	assert.Equal(t, 2, r.Rows[0].Decode)
	assert.Zero(t, r.Rows[0].Report.Transfers)
	assert.Equal(t, r.Rows[1].Report.Requests, r.Rows[1].Report.Transfers)
	assert.Positive(t, r.Rows[1].Report.TransferBytes)
	assert.Equal(t, r.Rows[0].Report.Requests, r.Rows[0].Report.Completed)

	for name, bad := range map[string][]string{
		"split":     {"--disagg", "3"},
		"zero":      {"--disagg", "0:2"},
		"bandwidth": {"--disagg", "1:1", "--disagg-bandwidth", "0"},
	} {
		_, _, err := runCmd(t, "", append([]string{"simulate"}, bad...)...)
		require.Error(t, err, name)
		var ee *exitError
		require.ErrorAs(t, err, &ee, name)
		assert.Equal(t, exitUsage, ee.code, name)
	}
}
