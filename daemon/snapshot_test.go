package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// TestSnapshot: the admin snapshot shows a running request with its state
// and tokens, the models' engine state, tenants' quota burn, and the
// simulated GPU labelled as such.
func TestSnapshot(t *testing.T) {
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 1 })
	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	user := makeKey(t, s, "acme", store.TierPaid, false)
	base := startServer(t, s)
	c := testClient(t)

	st := openSSE(t, c, http.MethodPost, base+"/v1/chat", user,
		`{"model":"sim/small","max_tokens":3000,"messages":[{"role":"user","content":"go on"}]}`, nil)
	id := st.resp.Header.Get("X-Request-Id")

	var snap api.Snapshot
	require.Eventually(t, func() bool {
		r, b := call(t, c, http.MethodGet, base+"/v1/admin/snapshot", admin, "")
		require.Equal(t, http.StatusOK, r.StatusCode, "%s", b)
		require.NoError(t, json.Unmarshal(b, &snap))
		return len(snap.Requests) == 1 && snap.Requests[0].State == api.StateDecode && snap.Requests[0].GeneratedTokens > 2
	}, 5*time.Second, 10*time.Millisecond)
	rq := snap.Requests[0]
	require.Equal(t, id, rq.ID)
	require.Equal(t, "acme", rq.Tenant)
	require.Equal(t, "sim/small", rq.Model)
	require.Equal(t, "paid", rq.Tier)
	require.True(t, rq.Resumable)
	require.Positive(t, rq.TTFT)
	require.Positive(t, rq.Age)
	require.Len(t, snap.Models, 1)
	require.Equal(t, 1, snap.Models[0].Running)
	require.Len(t, snap.GPUs, 1)
	require.True(t, snap.GPUs[0].Simulated)
	require.Contains(t, snap.GPUs[0].Name, "H100")
	require.Greater(t, snap.GPUs[0].MemoryUsed, int64(0))
	var acme *api.TenantSnapshot
	for i := range snap.Tenants {
		if snap.Tenants[i].Tenant == "acme" {
			acme = &snap.Tenants[i]
		}
	}
	require.NotNil(t, acme)
	require.Equal(t, 1, acme.Running)
	require.EqualValues(t, 1, acme.Usage.InFlight)

	r, _ := call(t, c, http.MethodGet, base+"/v1/admin/snapshot", user, "")
	require.Equal(t, http.StatusForbidden, r.StatusCode)
	r, _ = call(t, c, http.MethodDelete, base+"/v1/requests/"+id, user, "")
	require.Equal(t, http.StatusOK, r.StatusCode)
}

// TestCancelJSONRequest: DELETE of a non-streamed request in flight ends
// it at once with a 409, and the engine frees it.
func TestCancelJSONRequest(t *testing.T) {
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 1 })
	base := startServer(t, s)
	c := testClient(t)
	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	go func() {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", "",
			`{"model":"sim/small","max_tokens":5000,"messages":[{"role":"user","content":"long"}]}`)
		done <- result{resp.StatusCode, b}
	}()
	var id string
	require.Eventually(t, func() bool {
		rs, err := s.models.List()[0].Replica.Requests(t.Context())
		require.NoError(t, err)
		if len(rs) == 1 && rs[0].Generated > 0 {
			id = rs[0].ID
			return true
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)
	r, b := call(t, c, http.MethodDelete, base+"/v1/requests/"+id, "", "")
	require.Equal(t, http.StatusOK, r.StatusCode, "%s", b)
	res := <-done
	require.Equal(t, http.StatusConflict, res.code, "%s", res.body)
	require.Equal(t, "request_cancelled", errorOf(t, res.body)["code"])
	require.Eventually(t, func() bool { return s.Stats()[0].Running == 0 }, 5*time.Second, time.Millisecond)
	r, _ = call(t, c, http.MethodDelete, base+"/v1/requests/"+id, "", "")
	require.Equal(t, http.StatusNotFound, r.StatusCode, "a finished JSON request is forgotten")
}

// TestAdminCancelsAnyTenantsRequest: an admin key (llmctl top) may cancel
// another tenant's request; another user key gets the same 404 as for a
// missing id (SE-3).
func TestAdminCancelsAnyTenantsRequest(t *testing.T) {
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 1 })
	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	owner := makeKey(t, s, "acme", store.TierPaid, false)
	other := makeKey(t, s, "globex", store.TierPaid, false)
	base := startServer(t, s)
	c := testClient(t)
	st := openSSE(t, c, http.MethodPost, base+"/v1/chat", owner,
		`{"model":"sim/small","max_tokens":3000,"messages":[{"role":"user","content":"go on"}]}`, nil)
	id := st.resp.Header.Get("X-Request-Id")

	r1, b1 := call(t, c, http.MethodDelete, base+"/v1/requests/"+id, other, "")
	r2, b2 := call(t, c, http.MethodDelete, base+"/v1/requests/req_00000000000000000000000000000000", other, "")
	require.Equal(t, http.StatusNotFound, r1.StatusCode)
	require.Equal(t, http.StatusNotFound, r2.StatusCode)
	require.Equal(t, strings.ReplaceAll(string(b1), id, "X"), strings.ReplaceAll(string(b2), "req_00000000000000000000000000000000", "X"),
		"another tenant's request looks exactly like a missing one")
	r, b := call(t, c, http.MethodGet, base+"/v1/requests/"+id+"/stream", other, "")
	require.Equal(t, http.StatusNotFound, r.StatusCode, "%s", b)

	r, b = call(t, c, http.MethodDelete, base+"/v1/requests/"+id, admin, "")
	require.Equal(t, http.StatusOK, r.StatusCode, "%s", b)
}

// TestDrainKeepsAnsweringProbes: while in-flight requests finish, llmd
// keeps listening: a new connection's readiness probe gets 503 (not a
// refused connection) and a new request 503.
func TestDrainKeepsAnsweringProbes(t *testing.T) {
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 1; c.ShutdownTimeout = 10 * time.Second })
	addr, err := s.Listen()
	require.NoError(t, err)
	base := "http://" + addr.String()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateReady }, 5*time.Second, time.Millisecond)

	c := testClient(t)
	long := make(chan int, 1)
	go func() {
		resp, _ := call(t, c, http.MethodPost, base+"/v1/chat/completions", "",
			`{"model":"sim/small","max_tokens":400,"messages":[{"role":"user","content":"long"}]}`)
		long <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return s.Stats()[0].Running == 1 }, 5*time.Second, time.Millisecond)
	stop()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateDraining }, 5*time.Second, time.Millisecond)

	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := fresh.Get(base + "/readyz")
	require.NoError(t, err, "a new connection is still accepted while draining")
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, err = fresh.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim/small","max_tokens":4,"messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	require.Equal(t, http.StatusOK, <-long, "the in-flight request finishes")
	require.NoError(t, <-done)
}

// TestSnapshotCluster: a clustered node's snapshot lists the cluster's
// members, itself marked local, with their status and load; a node alone
// sends no member list.
func TestSnapshotCluster(t *testing.T) {
	first := newStoreServer(t, func(c *Config) {
		c.NodeID = "node-a"
		c.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", InsecureGossip: true, Profile: "local"}
	})
	baseA := startServer(t, first)
	second := newStoreServer(t, func(c *Config) {
		c.NodeID = "node-b"
		c.Models = []string{"mid"}
		c.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", InsecureGossip: true, Profile: "local",
			Join: []string{first.cluster.Load().Addr()}}
	})
	startServer(t, second)
	c := testClient(t)

	var snap api.Snapshot
	require.Eventually(t, func() bool {
		resp, b := call(t, c, http.MethodGet, baseA+"/v1/admin/snapshot", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		snap = api.Snapshot{}
		require.NoError(t, json.Unmarshal(b, &snap))
		if len(snap.Cluster) != 2 {
			return false
		}
		for _, n := range snap.Cluster {
			if n.Status != "alive" || len(n.Load) != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	a, b := snap.Cluster[0], snap.Cluster[1]
	require.Equal(t, "node-a", a.ID)
	require.True(t, a.Local)
	require.Equal(t, []string{"sim/small"}, a.Models)
	require.Equal(t, "node-b", b.ID)
	require.False(t, b.Local)
	require.Equal(t, []string{"sim/mid"}, b.Models)
	require.Contains(t, b.Load, "sim/mid")
	require.NotEmpty(t, b.APIAddr)
	require.False(t, b.Updated.IsZero())

	alone := startServer(t, newStoreServer(t, nil))
	resp, body := call(t, c, http.MethodGet, alone+"/v1/admin/snapshot", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, string(body), `"cluster"`)
}
