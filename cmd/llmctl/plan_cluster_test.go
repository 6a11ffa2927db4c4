package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/daemon"
)

const autoscaleExposition = `# HELP llmd_desired_replicas x
# TYPE llmd_desired_replicas gauge
llmd_desired_replicas{model_name="big"} 6
llmd_desired_replicas{model_name="idle"} 1
# TYPE llmd_autoscale_replicas gauge
llmd_autoscale_replicas{model_name="big"} 2
llmd_autoscale_replicas{model_name="idle"} 2
# TYPE llmd_autoscale_signal_ratio gauge
llmd_autoscale_signal_ratio{model_name="big",signal="kv"} 1.2
llmd_autoscale_signal_ratio{model_name="big",signal="queue"} 2.5
llmd_autoscale_signal_ratio{model_name="big",signal="ttft"} 0.5
llmd_autoscale_signal_ratio{model_name="idle",signal="kv"} 0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="big"} 7
`

func TestParseAutoscaleAndNodeCount(t *testing.T) {
	models, err := parseAutoscale([]byte(autoscaleExposition))
	require.NoError(t, err)
	require.Equal(t, []clusterPlanModel{
		{Model: "big", Replicas: 2, KV: 1.2, Queue: 2.5, TTFT: 0.5, Desired: 6},
		{Model: "idle", Replicas: 2, Desired: 1},
	}, models)

	// Two nodes serve big (3x its replicas asked for), two others idle
	// (half); a draining node does not count.
	nl := &api.NodeList{Nodes: []api.NodeInfo{
		{ID: "a", Status: "alive", Models: []string{"big", "idle"}},
		{ID: "b", Status: "alive", Models: []string{"big"}},
		{ID: "c", Status: "alive", Models: []string{"idle"}},
		{ID: "d", Status: "alive", Models: []string{"idle"}},
		{ID: "e", Status: "alive", Draining: true, Models: []string{"big"}},
		{ID: "f", Status: "dead", Models: []string{"big"}},
	}}
	require.Equal(t, &clusterPlanNodeSum{Now: 4, Desired: 7}, nodeCount(nl, models), "3 + 3 + 0.5 + 0.5")

	_, err = parseAutoscale([]byte("not { prometheus"))
	require.Error(t, err)
}

// TestPlanFromCluster reads a running llmd's signal.
func TestPlanFromCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an in-process llmd; make test runs it")
	}
	cfg := daemon.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Models = []string{"small"}
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	base, _ := startDaemon(t, cfg)

	out, errOut, err := runCmd(t, "", "--addr", base, "plan", "--from-cluster", "--json")
	require.NoError(t, err, errOut)
	var p clusterPlan
	require.NoError(t, json.Unmarshal([]byte(out), &p), out)
	require.Equal(t, []clusterPlanModel{{Model: "sim/small", Replicas: 1, Desired: 1}}, p.Models, "idle: its minimum")
	require.Equal(t, &clusterPlanNodeSum{Now: 1, Desired: 1}, p.Nodes)

	out, errOut, err = runCmd(t, "", "--addr", base, "plan", "--from-cluster", "--warm-buffer", "0.5")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "warm buffer 50% (--warm-buffer)")
	require.Contains(t, out, "sim/small")
	require.Contains(t, out, "nodes: run 1 (now 1 alive)")

	_, _, err = runCmd(t, "", "--addr", base, "plan", "--from-cluster", "--warm-buffer=-2")
	require.ErrorContains(t, err, "--warm-buffer must be within 0 and 10")
}
