package daemon

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/store"
)

// TestResumeAndCancelThroughAnyNode: a resumable stream that entered
// node a, cut by its client, is resumed through each node with no gap and
// no duplicate, as a load balancer in front of the cluster would send the
// retry anywhere; another tenant's key gets 404 through any node; a
// cancel through another node stops the stream on its owner.
func TestResumeAndCancelThroughAnyNode(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 3, func(_ int, c *Config) { c.StepTimeScale = 0.3 })
	ctx := context.Background()
	// The same keys on every node (as keys create --key-stdin makes them).
	keys := map[string]string{"acme": makeKey(t, nodes[0].s, "acme", store.TierPaid, false),
		"evil": makeKey(t, nodes[0].s, "evil", store.TierPaid, false)}
	for _, nd := range nodes[1:] {
		for tenant, secret := range keys {
			_, err := nd.s.deps.Store.EnsureTenant(ctx, tenant, store.TierPaid)
			require.NoError(t, err)
			_, err = nd.s.deps.Store.ImportKey(ctx, tenant, false, "test", secret)
			require.NoError(t, err)
		}
	}
	c := testClient(t)
	const tokens = 80
	body := openaiBody("sim/small", longSeed(t, tokens), tokens, "Go on")
	resumable := map[string]string{"X-Resumable": "true"}
	uncut := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat/completions", keys["acme"], body, resumable)
	require.Equal(t, http.StatusOK, uncut.resp.StatusCode)
	want, _ := openaiText(t, uncut.rest(t))

	for i, nd := range nodes {
		first := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat/completions", keys["acme"], body, resumable)
		require.Equal(t, http.StatusOK, first.resp.StatusCode)
		id := first.resp.Header.Get("X-Request-Id")
		head := first.take(t, 5)
		first.close()

		resp, _ := call(t, c, http.MethodGet, resumeURL(nd.base, id), keys["evil"], "")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "another tenant's resume through node %d", i)

		again := openSSE(t, c, http.MethodGet, resumeURL(nd.base, id), keys["acme"], "",
			map[string]string{"Last-Event-ID": head[len(head)-1].id})
		require.Equal(t, http.StatusOK, again.resp.StatusCode, "resume through node %d", i)
		require.Equal(t, id, again.resp.Header.Get("X-Request-Id"))
		require.Equal(t, "text/event-stream", again.resp.Header.Get("Content-Type"))
		tail := again.rest(t)
		headText, _ := openaiText(t, head)
		tailText, _ := openaiText(t, tail)
		require.Equal(t, want, headText+tailText, "resumed through node %d", i)
		require.Equal(t, 1, terminalCount(tail))
	}

	// Cancel through node c a stream that entered node a.
	long := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat/completions", keys["acme"],
		`{"model":"sim/small","stream":true,"max_tokens":3000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on"}]}`,
		resumable)
	require.Equal(t, http.StatusOK, long.resp.StatusCode)
	id := long.resp.Header.Get("X-Request-Id")
	long.take(t, 2)
	resp, raw := call(t, c, http.MethodDelete, requestURL(nodes[2].base, id), keys["evil"], "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", raw)
	resp, raw = call(t, c, http.MethodDelete, requestURL(nodes[2].base, id), keys["acme"], "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	require.Contains(t, string(raw), `"cancelled"`)
	done := make(chan []sseEvent, 1)
	go func() { done <- long.rest(t) }()
	select {
	case evs := <-done:
		require.Equal(t, 1, terminalCount(evs))
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled stream did not end")
	}
	resp, _ = call(t, c, http.MethodDelete, requestURL(nodes[1].base, "chatcmpl-00000000000000000000000000000000"), keys["acme"], "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
