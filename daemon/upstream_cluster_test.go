package daemon

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/store"
)

// TestUpstreamPrefixAcrossNodes: two nodes serve model "qwen" through
// engines of their own, a third serves only a simulated model. Turn 1 of
// a conversation, entering at the third, is served by one of the two; the
// gossip carries what that node sent its engine, and turn 2, entering at
// any node, is routed to it by prefix, and billed by the node it entered.
func TestUpstreamPrefixAcrossNodes(t *testing.T) {
	t.Parallel()
	engineA, engineABase := startEngine(t, 0.05)
	engineB, engineBBase := startEngine(t, 0.05)
	engines := map[string]*Daemon{"node-a": engineA, "node-b": engineB}
	nodes := startTestCluster(t, 3, func(i int, c *Config) {
		switch i {
		case 0:
			c.Models = nil
			c.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: []string{asVLLM(t, engineABase)}}}
		case 1:
			c.Models = nil
			c.Upstreams = []UpstreamSpec{{Model: "qwen", URLs: []string{asVLLM(t, engineBBase)}}}
		}
	})
	c := testClient(t)
	chat := func(msgs ...api.Message) string {
		b, _ := json.Marshal(map[string]any{"model": "qwen", "max_tokens": 4, "messages": msgs})
		return string(b)
	}
	sys := api.Message{Role: "system", Content: api.Content(longSystem)}
	turn1 := []api.Message{sys, {Role: "user", Content: "Do you sell soldering irons?"}}
	resp, b := post(t, c, nodes[2].base+"/v1/chat/completions", chat(turn1...))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var first api.ChatCompletion
	require.NoError(t, json.Unmarshal(b, &first))
	holder := ""
	for id, e := range engines {
		if e.Stats()[0].Completed > 0 {
			holder = id
		}
	}
	require.NotEmpty(t, holder)
	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			for _, m := range nd.s.cluster.Load().Members() {
				if m.ID == holder && len(m.State.Prefixes["qwen"]) > 0 {
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "node %s never heard of %s's prefixes", nd.s.cfg.NodeID, holder)
	}

	turn2 := append(turn1, api.Message{Role: "assistant", Content: api.Content(first.Choices[0].Message.Content)},
		api.Message{Role: "user", Content: "And the tips for them?"})
	for _, nd := range nodes {
		// On a loaded machine the short test gossip can briefly suspect a
		// node; routing is to alive nodes.
		require.Eventually(t, func() bool {
			return slices.ContainsFunc(nd.s.cluster.Load().Members(), func(m cluster.Member) bool {
				return m.ID == holder && m.Status == cluster.StatusAlive
			})
		}, 10*time.Second, 10*time.Millisecond)
		resp, b := post(t, c, nd.base+"/v1/chat/completions", chat(turn2...))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		rows := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))
		require.Len(t, rows, 1, "billed once")
		row, ok := rows[nd.s.cfg.NodeID]
		require.True(t, ok, "billed by the entry node %s: %v", nd.s.cfg.NodeID, rows)
		require.Equal(t, store.UsageFinished, row.Status)
		if nd.s.cfg.NodeID == holder {
			require.True(t, strings.HasPrefix(row.Route, "local prefix:"), row.Route)
		} else {
			require.True(t, strings.HasPrefix(row.Route, holder+" prefix:"), "entering at %s: %s", nd.s.cfg.NodeID, row.Route)
		}
	}
	for id, e := range engines {
		if id != holder {
			require.Zero(t, e.Stats()[0].Completed, "the other engine served a turn")
		} else {
			require.EqualValues(t, 4, e.Stats()[0].Completed)
		}
	}
}
