package daemon

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/internal/redistest"
	"github.com/llmd/llmd/relay/redislog"
)

// TestResumeAfterTheOwnerDies: with --redis, a resumable stream's events
// are copied to Redis as they come, so once the node it entered is gone a
// resume through another node still gets them: all of a finished stream,
// and, of one cut off by its node's death, those recorded and an error
// event saying the rest is lost.
func TestResumeAfterTheOwnerDies(t *testing.T) {
	rs := redistest.Start(t)
	nodes := startTestCluster(t, 2, func(_ int, c *Config) {
		c.RedisURL = rs.URL()
		c.StepTimeScale = 0.3
	})
	rl, err := redislog.New(redislog.Config{URL: rs.URL()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	c := testClient(t)
	resumable := map[string]string{"X-Resumable": "true"}
	const tokens = 60
	body := openaiBody("sim/small", longSeed(t, tokens), tokens, "Go on")
	uncut := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat/completions", "", body, resumable)
	want, _ := openaiText(t, uncut.rest(t))

	// A stream that finishes, and one that will not.
	done := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat/completions", "", body, resumable)
	doneID := done.resp.Header.Get("X-Request-Id")
	head := done.take(t, 5)
	done.close()
	live := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat/completions", "",
		`{"model":"sim/small","stream":true,"max_tokens":3000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on"}]}`,
		resumable)
	liveID := live.resp.Header.Get("X-Request-Id")
	live.take(t, 3)
	live.close()
	require.Eventually(t, func() bool {
		rec, err := rl.Read(context.Background(), doneID)
		return err == nil && rec.Done
	}, 10*time.Second, 10*time.Millisecond, "the finished stream reaches Redis")

	// Node a dies as far as the cluster knows.
	nodes[0].s.cluster.Load().Kill()
	require.Eventually(t, func() bool {
		for _, m := range nodes[1].s.cluster.Load().Members() {
			if m.ID == "node-a" {
				return m.Status != cluster.StatusAlive
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond)

	again := openSSE(t, c, http.MethodGet, resumeURL(nodes[1].base, doneID), "", "",
		map[string]string{"Last-Event-ID": head[len(head)-1].id})
	require.Equal(t, http.StatusOK, again.resp.StatusCode)
	require.Equal(t, doneID, again.resp.Header.Get("X-Request-Id"))
	tail := again.rest(t)
	headText, _ := openaiText(t, head)
	tailText, _ := openaiText(t, tail)
	require.Equal(t, want, headText+tailText, "the whole finished stream, from Redis")
	require.Equal(t, 1, terminalCount(tail))
	require.Zero(t, countErrors(tail))

	cut := openSSE(t, c, http.MethodGet, resumeURL(nodes[1].base, liveID), "", "", nil)
	require.Equal(t, http.StatusOK, cut.resp.StatusCode)
	evs := cut.rest(t)
	text, n := openaiText(t, evs)
	require.NotEmpty(t, text)
	require.Positive(t, n)
	require.Equal(t, 1, terminalCount(evs), "%v", tailLines(evs))
	require.Equal(t, 1, countErrors(evs))
	require.Contains(t, evs[len(evs)-2].data, "node_lost")

	// An id nothing recorded: 404.
	resp, _ := call(t, c, http.MethodGet, resumeURL(nodes[1].base, "chatcmpl-00000000000000000000000000000000"), "", "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
