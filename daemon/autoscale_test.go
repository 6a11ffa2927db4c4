package daemon

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
)

func TestRecommend(t *testing.T) {
	t.Parallel()
	member := func(id string, local bool, models map[string]cluster.ModelLoad) cluster.Member {
		m := cluster.Member{ID: id, Local: local, Status: cluster.StatusAlive, State: cluster.State{Load: models}}
		for k := range models {
			m.Models = append(m.Models, k)
		}
		return m
	}
	members := []cluster.Member{
		member("a", true, map[string]cluster.ModelLoad{"m": {KVUsage: 0.9, Waiting: 2}, "idle": {}}),
		member("b", false, map[string]cluster.ModelLoad{"m": {KVUsage: 0.7, Waiting: 6}}),
		{ID: "gone", Status: cluster.StatusDead, Models: []string{"m"}},
	}
	ttft := func(model string) time.Duration {
		if model == "m" {
			return time.Second
		}
		return 0
	}
	recs := recommend(members, ttft, AutoscaleTargets{})
	byModel := map[string]Recommendation{}
	for _, r := range recs {
		byModel[r.Model] = r
	}
	m := byModel["m"]
	require.Equal(t, 2, m.Replicas)
	require.InDelta(t, 1.0, m.KV, 1e-9)    // mean 0.8 over 0.8
	require.InDelta(t, 1.0, m.Queue, 1e-9) // mean 4 over 4
	require.InDelta(t, 0.5, m.TTFT, 1e-9)  // 1 s over 2 s
	require.Equal(t, 3, m.Desired, "2 x 1.0 x 1.1, rounded up")
	require.Equal(t, 1, byModel["idle"].Desired, "an idle model keeps its minimum")

	// A slow first token alone asks for more.
	slow := recommend(members, func(string) time.Duration { return 6 * time.Second }, AutoscaleTargets{WarmBuffer: -1})
	for _, r := range slow {
		if r.Model == "m" {
			require.InDelta(t, 3.0, r.TTFT, 1e-9)
			require.Equal(t, 6, r.Desired)
		}
	}
}

func TestAutoscaleGauge(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	resp, err := testClient(t).Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), `llmd_desired_replicas{model_name="sim/small"} 1`)
	require.Contains(t, string(b), `llmd_autoscale_signal_ratio{model_name="sim/small",signal="kv"} 0`)
	require.Contains(t, string(b), `llmd_autoscale_replicas{model_name="sim/small"} 1`)
}
