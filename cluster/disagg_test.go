package cluster

import (
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// TestMetaRole: a role travels in the metadata (format 3, with or without
// a zone); a node taking both roles writes the older formats.
func TestMetaRole(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"", "eu"} {
		for _, role := range []Role{RolePrefill, RoleDecode} {
			m := nodeMeta{ID: "n1", APIAddr: "127.0.0.1:8700", Version: "v", Models: []string{"m"}, Zone: zone, Role: role}
			b := m.encode()
			require.Equal(t, metaFormatRole, b[0])
			got, err := decodeMeta("n1", b)
			require.NoError(t, err)
			require.Equal(t, m, *got)
			// An unknown role byte, or none, is malformed.
			bad := append([]byte(nil), b...)
			bad[len(bad)-1] = 9
			_, err = decodeMeta("n1", bad)
			require.Error(t, err)
			_, err = decodeMeta("n1", b[:len(b)-1])
			require.Error(t, err)
		}
	}
	m := nodeMeta{ID: "n1", Models: []string{"m"}, Zone: "eu"}
	require.Equal(t, metaFormatZone, m.encode()[0])

	for in, want := range map[string]Role{"": RoleBoth, "both": RoleBoth, "prefill": RolePrefill, "decode": RoleDecode} {
		got, err := ParseRole(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ParseRole("encode")
	require.ErrorContains(t, err, `role "encode"`)
	cfg := testConfig("x")
	cfg.Role = "encode"
	cfg.setDefaults()
	_, err = cfg.validate()
	require.Error(t, err)
}

func joinRole(c *Cluster, id string, role Role, models ...string) {
	c.handleJoin(&memberlist.Node{Name: id, Meta: (&nodeMeta{ID: id, APIAddr: "api-" + id, Models: models, Role: role}).encode()})
}

// TestPrefillNodesAndRoute: prefill nodes serving the model are offered
// for prefill, least busy first, and the router sends requests to them
// only when no other node serves the model.
func TestPrefillNodesAndRoute(t *testing.T) {
	t.Parallel()
	c := tableCluster(t, "self")
	joinRole(c, "p1", RolePrefill, "m")
	joinRole(c, "p2", RolePrefill, "m")
	joinRole(c, "p3", RolePrefill, "other")
	joinRole(c, "d1", RoleDecode, "m")
	join(c, "b1", "m")
	c.mu.Lock()
	c.nodes["p1"].load = map[string]ModelLoad{"m": {QueuedPromptTokens: 900}}
	c.nodes["p2"].load = map[string]ModelLoad{"m": {QueuedPromptTokens: 100}}
	c.nodes["p1"].stateVer, c.nodes["p2"].stateVer = version{1, 1}, version{1, 1}
	c.mu.Unlock()

	var ids []string
	for _, m := range c.PrefillNodes("m") {
		ids = append(ids, m.ID)
		require.Equal(t, RolePrefill, m.Role)
	}
	require.Equal(t, []string{"p2", "p1"}, ids)
	require.Empty(t, c.PrefillNodes("absent"))

	var routed []string
	for _, cand := range c.Route(RouteRequest{Model: "m"}, nil) {
		routed = append(routed, cand.Member.ID)
	}
	require.ElementsMatch(t, []string{"d1", "b1", "self"}, routed)
	// Only prefill nodes serve "other": they still get its requests.
	got := c.Route(RouteRequest{Model: "other"}, nil)
	require.Len(t, got, 1)
	require.Equal(t, "p3", got[0].Member.ID)
}

func TestDisaggPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		p                 DisaggPolicy
		uncached, running int
		want              bool
		reason            string
	}{
		{"short prompt", DisaggPolicy{}, 100, 0, false, ""},
		{"long prompt, default threshold", DisaggPolicy{}, 512, 0, true, DisaggLongPrompt},
		{"threshold set", DisaggPolicy{MinPromptTokens: 64}, 64, 0, true, DisaggLongPrompt},
		{"busy decode node", DisaggPolicy{MinPromptTokens: 400, BusyRunning: 8}, 100, 8, true, DisaggITLPressure},
		{"busy, prompt too short", DisaggPolicy{MinPromptTokens: 400, BusyRunning: 8}, 99, 8, false, ""},
		{"not busy", DisaggPolicy{MinPromptTokens: 400, BusyRunning: 8}, 100, 7, false, ""},
	} {
		got, reason := tc.p.Decide(tc.uncached, tc.running)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.reason, reason, tc.name)
	}
}
