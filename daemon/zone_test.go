package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// TestZonesPreferTheEntryZone: turn 1 of a conversation served in zone eu;
// turn 2 entering in zone us stays in us although eu holds its prefix; a
// model only eu serves is sent there, marked cross-zone in the usage row
// and counted in /metrics.
func TestZonesPreferTheEntryZone(t *testing.T) {
	t.Parallel()
	zones := []string{"eu", "us", "us"}
	nodes := startTestCluster(t, 3, func(i int, c *Config) {
		c.Cluster.Zone = zones[i]
		if i == 0 {
			c.Models = []string{"small", "mid"}
		}
	})
	c := testClient(t)
	sys := api.Message{Role: "system", Content: api.Content(longSystem)}
	turn1 := []api.Message{sys, {Role: "user", Content: "Do you sell soldering irons?"}}
	resp, b := post(t, c, nodes[0].base+"/v1/chat/completions", chatJSON(false, turn1...))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	rows := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))
	require.True(t, strings.HasPrefix(rows["node-a"].Route, "local"), rows["node-a"].Route)
	waitForSummary(t, nodes, "node-a")

	turn2 := append(turn1, api.Message{Role: "user", Content: "And the tips for them?"})
	resp, b = post(t, c, nodes[2].base+"/v1/chat/completions", chatJSON(false, turn2...))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	row := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))["node-c"]
	require.NotContains(t, row.Route, "node-a", "turn 2 left its zone for the prefix: %s", row.Route)
	require.NotContains(t, row.Route, "cross_zone")

	body, _ := json.Marshal(map[string]any{"model": "sim/mid", "max_tokens": 4, "messages": []api.Message{{Role: "user", Content: "hi"}}})
	resp, b = post(t, c, nodes[2].base+"/v1/chat/completions", string(body))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	row = usageRows(t, nodes, resp.Header.Get("X-Request-Id"))["node-c"]
	require.True(t, strings.HasPrefix(row.Route, "node-a "), row.Route)
	require.True(t, strings.HasSuffix(row.Route, " cross_zone"), row.Route)

	mresp, err := c.Get(nodes[2].base + "/metrics")
	require.NoError(t, err)
	defer mresp.Body.Close()
	metrics, err := io.ReadAll(mresp.Body)
	require.NoError(t, err)
	require.Contains(t, string(metrics), `llmd_routed_requests_total{destination="peer",zone="cross"} 1`)
}
