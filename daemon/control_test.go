package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/store"
)

// revocationBound is the propagation bound the tests hold replication to
// (loopback, the "local" gossip profile).
const revocationBound = 2 * time.Second

// keyWorks reports whether secret authenticates at base: 200 on the model
// list, 401 when refused. The node must hold some key (else it is open).
func keyWorks(t *testing.T, c *http.Client, base, secret string) bool {
	t.Helper()
	resp, b := call(t, c, http.MethodGet, base+"/v1/models", secret, "")
	switch resp.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusUnauthorized:
		return false
	}
	t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, b)
	return false
}

// adminKey makes an admin key on nodes[0] and waits until every node has
// it, so that every node requires keys from then on.
func adminKey(t *testing.T, nodes []testNode) string {
	t.Helper()
	secret := makeKey(t, nodes[0].s, "ops", store.TierEnterprise, true)
	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			_, err := nd.s.deps.Store.Authenticate(t.Context(), secret)
			return err == nil
		}, 10*time.Second, 5*time.Millisecond, "the admin key reached %s", nd.s.cfg.NodeID)
	}
	return secret
}

// createKey creates a key for tenant through node's admin API.
func createKey(t *testing.T, c *http.Client, base, admin, tenant string) api.KeyCreated {
	t.Helper()
	resp, b := call(t, c, http.MethodPost, base+"/v1/admin/keys", admin, fmt.Sprintf(`{"tenant":%q,"tier":"free"}`, tenant))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	var k api.KeyCreated
	require.NoError(t, json.Unmarshal(b, &k))
	return k
}

// waitKey waits until secret authenticates (or not) on every node and
// returns how long the slowest took.
func waitKey(t *testing.T, c *http.Client, nodes []testNode, secret string, works bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var slowest time.Duration
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Go(func() {
			deadline := start.Add(within)
			for keyWorks(t, c, nd.base, secret) != works {
				if time.Now().After(deadline) {
					t.Errorf("%s: key works=%v after %v", nd.s.cfg.NodeID, !works, within)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			mu.Lock()
			slowest = max(slowest, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	return slowest
}

// TestRevocationPropagates: a key created through node a's admin API
// authenticates on b and c; revoked through c, it is refused on a and b
// within revocationBound. The propagation times are logged (BENCHMARKS.md,
// "Control state propagation").
func TestRevocationPropagates(t *testing.T) {
	nodes := startTestCluster(t, 3, nil)
	c := testClient(t)
	admin := adminKey(t, nodes)
	const rounds = 5
	var grants, revokes []time.Duration
	for i := range rounds {
		k := createKey(t, c, nodes[0].base, admin, fmt.Sprintf("acme-%d", i))
		grants = append(grants, waitKey(t, c, nodes, k.Key, true, revocationBound))
		resp, b := call(t, c, http.MethodDelete, nodes[2].base+"/v1/admin/keys/"+k.ID, admin, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		revokes = append(revokes, waitKey(t, c, nodes[:2], k.Key, false, revocationBound))
	}
	slices.Sort(grants)
	slices.Sort(revokes)
	t.Logf("control state propagation over %d rounds, 3 nodes: key created on a usable on all: p50 %v max %v; "+
		"revoked on c refused on a and b: p50 %v max %v", rounds, grants[rounds/2].Round(time.Millisecond),
		grants[rounds-1].Round(time.Millisecond), revokes[rounds/2].Round(time.Millisecond),
		revokes[rounds-1].Round(time.Millisecond))
	// Every node lists the same keys and tenants.
	for _, nd := range nodes[1:] {
		want, err := nodes[0].s.deps.Store.Records(t.Context())
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			got, err := nd.s.deps.Store.Records(t.Context())
			require.NoError(t, err)
			return slices.EqualFunc(want, got, func(a, b store.Record) bool {
				return a.Kind == b.Kind && a.ID == b.ID && a.Version == b.Version
			})
		}, 5*time.Second, 10*time.Millisecond, "%s holds a's records", nd.s.cfg.NodeID)
	}
}

// TestQuotaSetOnOneNodeLimitsOnAnother: a limit set through b's admin API
// is enforced by a's limiter.
func TestQuotaSetOnOneNodeLimitsOnAnother(t *testing.T) {
	nodes := startTestCluster(t, 3, nil)
	c := testClient(t)
	admin := adminKey(t, nodes)
	k := createKey(t, c, nodes[0].base, admin, "metered")
	waitKey(t, c, nodes, k.Key, true, revocationBound)
	resp, b := call(t, c, http.MethodPut, nodes[1].base+"/v1/admin/quotas/metered", admin, `{"rpm":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Eventually(t, func() bool {
		q, err := nodes[0].s.deps.Store.Quota(t.Context(), "metered")
		require.NoError(t, err)
		return q.Limits.RPM == 1
	}, revocationBound, 5*time.Millisecond, "the limit reached a")
	body := chatJSON(false, api.Message{Role: "user", Content: "hi"})
	resp, b = callPost(t, c, nodes[0].base+"/v1/chat/completions", k.Key, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = callPost(t, c, nodes[0].base+"/v1/chat/completions", k.Key, body)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
}

func callPost(t *testing.T, c *http.Client, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	return call(t, c, http.MethodPost, url, key, body)
}

// TestNodeRestartedAfterChangesConverges: node c stops (same data
// directory kept); meanwhile a key is created, another revoked and a
// quota set elsewhere; restarted, c holds all of it without anyone acting.
// A node joining for the first time gets everything through push/pull.
func TestNodeRestartedAfterChangesConverges(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startTestCluster(t, 3, func(i int, c *Config) { c.DataDir = dirs[i] })
	c := testClient(t)
	admin := adminKey(t, nodes)
	old := createKey(t, c, nodes[0].base, admin, "acme")
	waitKey(t, c, nodes, old.Key, true, revocationBound)

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	require.NoError(t, nodes[2].s.Shutdown(ctx))
	live := nodes[:2]
	fresh := createKey(t, c, nodes[1].base, admin, "beta")
	resp, b := call(t, c, http.MethodDelete, nodes[0].base+"/v1/admin/keys/"+old.ID, admin, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = call(t, c, http.MethodPut, nodes[1].base+"/v1/admin/quotas/beta", admin, `{"tier":"batch","tpm":777}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	waitKey(t, c, live, old.Key, false, revocationBound)

	restart := func(name, dir string) testNode {
		s := newStoreServer(t, func(cfg *Config) {
			cfg.NodeID = name
			cfg.DataDir = dir
			cfg.StepTimeScale = 0.05
			cfg.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", Key: clusterTestKey, Profile: "local",
				Join: []string{nodes[0].s.cluster.Load().Addr()}}
		})
		return testNode{s: s, base: startServer(t, s)}
	}
	for _, nd := range []testNode{restart("node-c", dirs[2]), restart("node-d", t.TempDir())} {
		all := append(slices.Clone(live), nd)
		start := time.Now()
		waitKey(t, c, all, fresh.Key, true, 10*time.Second)
		waitKey(t, c, all, old.Key, false, 10*time.Second)
		require.Eventually(t, func() bool {
			q, err := nd.s.deps.Store.Quota(t.Context(), "beta")
			return err == nil && q.Tier == store.TierBatch && q.Limits.TPM == 777
		}, 10*time.Second, 10*time.Millisecond)
		t.Logf("%s converged %v after it started", nd.s.cfg.NodeID, time.Since(start).Round(time.Millisecond))
		assert.Zero(t, nd.s.cluster.Load().ControlStats().Dropped)
	}
}

// TestInsecureGossipReplicatesNothing: without a gossip key anyone who
// reaches the gossip port could add a key, so control state stays per
// node.
func TestInsecureGossipReplicatesNothing(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, func(i int, c *Config) { c.Cluster.Key, c.Cluster.InsecureGossip = nil, true })
	makeKey(t, nodes[0].s, "ops", store.TierEnterprise, true)
	recs, err := nodes[0].s.deps.Store.Records(t.Context())
	require.NoError(t, err)
	require.NotEmpty(t, recs, "the store records the key")
	for _, nd := range nodes {
		assert.Zero(t, nd.s.cluster.Load().ControlStats().Held, "%s replicates nothing", nd.s.cfg.NodeID)
	}
}
