package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/store"
)

// The tests in this file cover routing and forwarding between the nodes of
// a cluster (in one process, real memberlist on loopback, real HTTP).

var clusterTestKey = []byte("0123456789abcdef0123456789abcdef")

// testNode is one llmd of a test cluster.
type testNode struct {
	s    *Daemon
	base string
}

// startTestCluster starts n clustered servers with the local gossip
// profile and waits until each sees all n alive. mutate may change node
// i's config.
func startTestCluster(t *testing.T, n int, mutate func(i int, c *Config)) []testNode {
	t.Helper()
	nodes := make([]testNode, n)
	for i := range n {
		s := newStoreServer(t, func(c *Config) {
			c.NodeID = fmt.Sprintf("node-%c", 'a'+i)
			c.StepTimeScale = 0.05
			c.Cluster = &ClusterConfig{GossipAddr: "127.0.0.1:0", Key: clusterTestKey, Profile: "local"}
			if i > 0 {
				c.Cluster.Join = []string{nodes[0].s.cluster.Load().Addr()}
			}
			if mutate != nil {
				mutate(i, c)
			}
		})
		nodes[i] = testNode{s: s, base: startServer(t, s)}
	}
	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			alive := 0
			for _, m := range nd.s.cluster.Load().Members() {
				if m.Status == "alive" && len(m.State.Load) > 0 {
					alive++
				}
			}
			return alive == n
		}, 10*time.Second, 10*time.Millisecond)
	}
	return nodes
}

// longSystem is a system prompt of many KV blocks, shared by the
// conversations of the tests.
var longSystem = strings.Repeat("You are the support assistant of a large hardware shop; answer briefly and politely. ", 12)

func chatJSON(stream bool, msgs ...api.Message) string {
	b, _ := json.Marshal(map[string]any{"model": "sim/small", "max_tokens": 4, "seed": 7, "stream": stream,
		"stream_options": map[string]any{"include_usage": stream}, "messages": msgs})
	if !stream {
		b, _ = json.Marshal(map[string]any{"model": "sim/small", "max_tokens": 4, "seed": 7, "messages": msgs})
	}
	return string(b)
}

// postHdr posts body with extra headers.
func postHdr(t *testing.T, c *http.Client, url, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp, buf.Bytes()
}

// usageRows finds request id's final usage rows in every node's ledger,
// waiting a little for one to be written.
func usageRows(t *testing.T, nodes []testNode, id string) map[string]store.UsageEvent {
	t.Helper()
	rows := map[string]store.UsageEvent{}
	require.Eventually(t, func() bool {
		clear(rows)
		for _, nd := range nodes {
			ev, err := nd.s.deps.Store.UsageEvent(t.Context(), id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			require.NoError(t, err)
			if ev.Status == store.UsageInFlight {
				return false
			}
			rows[nd.s.cfg.NodeID] = ev
		}
		return len(rows) > 0
	}, 5*time.Second, 2*time.Millisecond, "no final usage row for %s", id)
	return rows
}

// waitForSummary waits until every node's router knows a peer's cached
// prefix of model sim/small.
func waitForSummary(t *testing.T, nodes []testNode, holder string) {
	t.Helper()
	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			for _, m := range nd.s.cluster.Load().Members() {
				if m.ID == holder && len(m.State.Prefixes["sim/small"]) > 0 {
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "node %s never heard of %s's prefixes", nd.s.cfg.NodeID, holder)
	}
}

// TestTurnTwoFindsItsPrefixWhereverItEnters is the acceptance in
// one process: turn 1 of a conversation served anywhere, turn 2 entering
// at each node is routed to the node holding the prefix (cached_tokens >
// 0), JSON and streamed, and billed once, by the node it entered.
func TestTurnTwoFindsItsPrefixWhereverItEnters(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 3, nil)
	c := testClient(t)
	sys := api.Message{Role: "system", Content: api.Content(longSystem)}
	turn1 := []api.Message{sys, {Role: "user", Content: "Do you sell soldering irons?"}}
	resp, b := post(t, c, nodes[0].base+"/v1/chat/completions", chatJSON(false, turn1...))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var first api.ChatCompletion
	require.NoError(t, json.Unmarshal(b, &first))
	rows := usageRows(t, nodes, first.ID)
	require.Len(t, rows, 1, "turn 1 billed once")
	holder := ""
	for _, nd := range nodes {
		if nd.s.Stats()[0].Completed > 0 {
			holder = nd.s.cfg.NodeID
		}
	}
	require.NotEmpty(t, holder)
	waitForSummary(t, nodes, holder)

	turn2 := append(turn1, api.Message{Role: "assistant", Content: api.Content(first.Choices[0].Message.Content)},
		api.Message{Role: "user", Content: "And the tips for them?"})
	for _, nd := range nodes {
		for _, stream := range []bool{false, true} {
			resp, b := post(t, c, nd.base+"/v1/chat/completions", chatJSON(stream, turn2...))
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			id := resp.Header.Get("X-Request-Id")
			var u *api.Usage
			if stream {
				evs := parseSSE(t, b)
				require.Equal(t, 1, terminalCount(evs), "%v", tailLines(evs))
				require.Zero(t, countErrors(evs))
				text, n := openaiText(t, evs)
				require.NotEmpty(t, text)
				require.Positive(t, n)
				var last api.ChatCompletionChunk
				require.NoError(t, json.Unmarshal([]byte(evs[len(evs)-2].data), &last))
				u = last.Usage
			} else {
				var cc api.ChatCompletion
				require.NoError(t, json.Unmarshal(b, &cc))
				require.Equal(t, id, cc.ID)
				u = cc.Usage
			}
			require.NotNil(t, u)
			require.NotNil(t, u.PromptTokensDetails)
			require.Positive(t, u.PromptTokensDetails.CachedTokens, "turn 2 entering at %s (stream %v) missed the prefix",
				nd.s.cfg.NodeID, stream)
			rows := usageRows(t, nodes, id)
			require.Len(t, rows, 1, "billed once")
			row, ok := rows[nd.s.cfg.NodeID]
			require.True(t, ok, "billed by the entry node %s: %v", nd.s.cfg.NodeID, rows)
			require.Equal(t, store.UsageFinished, row.Status)
			require.EqualValues(t, u.PromptTokens, row.InputTokens)
			require.EqualValues(t, u.CompletionTokens, row.OutputTokens)
			require.EqualValues(t, u.PromptTokensDetails.CachedTokens, row.CachedTokens)
			if nd.s.cfg.NodeID == holder {
				require.True(t, strings.HasPrefix(row.Route, "local prefix:"), row.Route)
			} else {
				require.True(t, strings.HasPrefix(row.Route, holder+" prefix:"), row.Route)
			}
		}
	}
	for _, nd := range nodes {
		requireIdle(t, nd.s)
	}
}

// stallListener accepts connections and never answers.
func stallListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestForwardSkipsAStalledPeer (CL-4): a peer that accepts connections and
// never answers is given up after the forward timeout and the request is
// served by the next node, billed once; the stalled peer is then left out
// of routing.
func TestForwardSkipsAStalledPeer(t *testing.T) {
	t.Parallel()
	stalled := stallListener(t)
	nodes := startTestCluster(t, 3, func(i int, c *Config) {
		c.Cluster.ForwardTimeout = 300 * time.Millisecond
		c.Cluster.RoutePolicy = cluster.PolicyRoundRobin
		if i == 2 {
			c.Cluster.APIAddr = stalled // peers reach node-c's API at a black hole
		}
	})
	c := testClient(t)
	failed := 0
	for i := range 6 {
		stream := i%2 == 1
		msgs := []api.Message{{Role: "user", Content: api.Content(fmt.Sprintf("question %d", i))}}
		resp, b := post(t, c, nodes[0].base+"/v1/chat/completions", chatJSON(stream, msgs...))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		if stream {
			evs := parseSSE(t, b)
			require.Equal(t, 1, terminalCount(evs))
			require.Zero(t, countErrors(evs), "%v", tailLines(evs))
		}
		rows := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))
		require.Len(t, rows, 1, "billed once")
		row := rows["node-a"]
		require.Equal(t, store.UsageFinished, row.Status)
		if strings.Contains(row.Route, "node-c failed") {
			failed++
			require.Regexp(t, `; served (by node-b|locally)$`, row.Route)
		} else {
			require.NotContains(t, row.Route, "node-c", "served by the stalled peer?")
		}
	}
	require.Equal(t, 1, failed, "node-c is tried once, then left out until gossip clears it")
}

// deadAfterFirstToken is a peer that sends one chunk of a stream and dies.
func deadAfterFirstToken(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		id := r.Header.Get(peer.HeaderRequest)
		fmt.Fprintf(w, `data: {"id":%q,"object":"chat.completion.chunk","created":1,"model":"sim/small",`+
			`"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n", id)
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestPeerDyingAfterTheFirstTokenEndsTheStream: a peer that fails after
// its first event cannot be retried; the client gets the token, then a
// terminal error event, and the request is billed once as an error.
func TestPeerDyingAfterTheFirstTokenEndsTheStream(t *testing.T) {
	t.Parallel()
	dying := deadAfterFirstToken(t)
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		c.Cluster.RoutePolicy = cluster.PolicyRoundRobin
		if i == 1 {
			c.Cluster.APIAddr = dying
		}
	})
	c := testClient(t)
	seen := false
	for i := range 4 {
		msgs := []api.Message{{Role: "user", Content: api.Content(fmt.Sprintf("question %d", i))}}
		resp, b := post(t, c, nodes[0].base+"/v1/chat/completions", chatJSON(true, msgs...))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		evs := parseSSE(t, b)
		require.Equal(t, 1, terminalCount(evs), "%v", tailLines(evs))
		row := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))["node-a"]
		if countErrors(evs) == 0 {
			require.Equal(t, store.UsageFinished, row.Status)
			continue
		}
		seen = true
		// The entry node writes the answer in its own framing (its role
		// chunk, then the peer's text), then the error and [DONE].
		text, _ := openaiText(t, evs[:len(evs)-2])
		require.Equal(t, "Hel", text, "the token relayed before the failure")
		errBody := errorOf(t, []byte(evs[len(evs)-2].data))
		require.Equal(t, "peer_failed", errBody["code"], "%v", errBody)
		require.Equal(t, store.UsageError, row.Status)
		require.True(t, strings.HasPrefix(row.Route, "node-b "), row.Route)
	}
	require.True(t, seen, "round robin never sent a request to the dying peer")
	requireIdle(t, nodes[0].s)
}

// TestCancelReachesThePeer: DELETE /v1/requests/{id} on the entry node
// stops a forwarded (resumable) stream on the peer serving it, whose KV
// blocks are freed, and the client gets one terminal event.
func TestCancelReachesThePeer(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		c.Cluster.RoutePolicy = cluster.PolicyRoundRobin
		c.StepTimeScale = 0.5
	})
	c := testClient(t)
	for i := range 4 {
		st := openSSE(t, c, http.MethodPost, nodes[0].base+"/v1/chat", "", nativeBody(int64(i), 2000, "tell me a long story"), nil)
		require.Equal(t, http.StatusOK, st.resp.StatusCode)
		id := st.resp.Header.Get("X-Request-Id")
		ev, err := st.next()
		require.NoError(t, err)
		require.Empty(t, ev.event, "a token first: %v", ev.lines)
		if liveRequestID(nodes[1].s, store.LocalTenant) != id {
			st.close()
			resp, _ := call(t, c, http.MethodDelete, requestURL(nodes[0].base, id), "", "")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			continue
		}
		resp, b := call(t, c, http.MethodDelete, requestURL(nodes[0].base, id), "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		rest := st.rest(t)
		require.Equal(t, 1, terminalCount(rest), "%v", tailLines(rest))
		require.Equal(t, "error", rest[len(rest)-1].event)
		requireIdle(t, nodes[1].s)
		require.Eventually(t, func() bool { return liveRequestID(nodes[1].s, store.LocalTenant) == "" },
			5*time.Second, time.Millisecond)
		row := usageRows(t, nodes, id)["node-a"]
		require.Equal(t, store.UsageCancelled, row.Status)
		return
	}
	t.Fatal("round robin never forwarded a stream to node-b")
}

// TestForgedForwardIsRefused (SE-8 over HTTP): a request claiming to come
// from a peer, without the cluster's key, is refused with 403 by a
// clustered node and by a lone one, and never reaches an engine.
func TestForgedForwardIsRefused(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 1, nil)
	alone := startServer(t, newStoreServer(t, nil))
	c := testClient(t)
	body := chatJSON(false, api.Message{Role: "user", Content: "hi"})
	for _, base := range []string{nodes[0].base, alone} {
		for name, hdr := range map[string]map[string]string{
			"unsigned": {peer.HeaderNode: "evil", peer.HeaderTenant: "acme", peer.HeaderTier: "paid", peer.HeaderRequest: "chatcmpl-x"},
			"bad sig":  {peer.HeaderNode: "evil", peer.HeaderSignature: strings.Repeat("ab", 32)},
		} {
			resp, b := postHdr(t, c, base+"/v1/chat/completions", body, hdr)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, b)
			require.Equal(t, "permission_denied", errorOf(t, b)["code"])
		}
	}
	require.Zero(t, nodes[0].s.Stats()[0].Completed)
}

// TestModelsServedElsewhere: in a cluster whose nodes serve different
// models, a request for a model only a peer serves is relayed there
// (JSON, OpenAI stream, native stream), billed once by the entry node; a
// model no node serves goes to its configured fallback, here or on a peer;
// an unknown model without a fallback stays a 404.
func TestModelsServedElsewhere(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		c.Models = []string{[]string{"small", "mid"}[i]}
		c.Cluster.Fallback = map[string]string{"sim/flagship": "sim/small"}
	})
	c := testClient(t)
	a, b := nodes[0], nodes[1]
	hi := api.Message{Role: "user", Content: "hi"}
	body := func(model string, stream bool) string {
		return strings.Replace(chatJSON(stream, hi), `"sim/small"`, fmt.Sprintf("%q", model), 1)
	}

	resp, raw := post(t, c, a.base+"/v1/chat/completions", body("sim/mid", false))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(raw, &cc))
	require.Equal(t, "sim/mid", cc.Model)
	require.Equal(t, resp.Header.Get("X-Request-Id"), cc.ID)
	rows := usageRows(t, nodes, cc.ID)
	require.Len(t, rows, 1)
	require.Equal(t, store.UsageFinished, rows["node-a"].Status)
	require.EqualValues(t, cc.Usage.PromptTokens, rows["node-a"].InputTokens)
	require.EqualValues(t, cc.Usage.CompletionTokens, rows["node-a"].OutputTokens)
	require.True(t, strings.HasPrefix(rows["node-a"].Route, "node-b "), rows["node-a"].Route)

	resp, raw = post(t, c, a.base+"/v1/chat/completions", body("sim/mid", true))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	evs := parseSSE(t, raw)
	require.Equal(t, 1, terminalCount(evs))
	require.Zero(t, countErrors(evs))
	text, _ := openaiText(t, evs)
	require.NotEmpty(t, text)

	resp, raw = post(t, c, a.base+"/v1/chat", `{"model":"sim/mid","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	evs = parseSSE(t, raw)
	require.Equal(t, "done", evs[len(evs)-1].event, "%v", tailLines(evs))
	require.NotEmpty(t, nativeText(t, evs[:len(evs)-1]))

	// sim/flagship: served nowhere; its fallback sim/small is local on a
	// and a peer's on b.
	for _, entry := range []testNode{a, b} {
		resp, raw = post(t, c, entry.base+"/v1/chat/completions", body("sim/flagship", false))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
		require.NoError(t, json.Unmarshal(raw, &cc))
		require.Equal(t, "sim/small", cc.Model)
		row := usageRows(t, nodes, cc.ID)[entry.s.cfg.NodeID]
		require.Equal(t, "sim/small", row.Model)
		require.Contains(t, row.Route, "fallback from sim/flagship")
	}

	resp, raw = post(t, c, a.base+"/v1/chat/completions", body("sim/nothing", false))
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", raw)
	require.Equal(t, "model_not_found", errorOf(t, raw)["code"])
	require.Contains(t, errorOf(t, raw)["message"], "Available models: sim/mid, sim/small.", "the cluster's models")

	// a lists the model only b serves.
	resp, raw = get(t, c, a.base+"/v1/models")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var ml api.ModelList
	require.NoError(t, json.Unmarshal(raw, &ml))
	require.Len(t, ml.Data, 2)
	require.Equal(t, api.Model{ID: "sim/mid", Object: "model", Created: ml.Data[1].Created, OwnedBy: "llmd", Kind: "peer",
		Target: "node-b"}, ml.Data[1])
	requireIdle(t, a.s)
	requireIdle(t, b.s)
}

// TestSpillWhenTheHolderIsOverloaded: the node holding a prompt's prefix is
// passed over once its load is above the bound (1.25x the mean and 8
// sequences over the least loaded): turn 2 is served elsewhere, cold.
func TestSpillWhenTheHolderIsOverloaded(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		c.StepTimeScale = 1
		if i == 0 {
			c.Cluster.RoutePolicy = cluster.PolicyLocal // node-a serves what enters it
		}
	})
	a, b := nodes[0], nodes[1]
	c := testClient(t)
	sys := api.Message{Role: "system", Content: api.Content(longSystem)}
	turn1 := []api.Message{sys, {Role: "user", Content: "Do you sell soldering irons?"}}
	resp, raw := post(t, c, a.base+"/v1/chat/completions", chatJSON(false, turn1...))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	waitForSummary(t, nodes, "node-a")

	// Load node-a with long streams until node-b hears of it.
	var streams []*liveSSE
	for i := range 14 {
		st := openSSE(t, c, http.MethodPost, a.base+"/v1/chat", "", nativeBody(int64(i), 5000, "a long story please"), nil)
		require.Equal(t, http.StatusOK, st.resp.StatusCode)
		streams = append(streams, st)
	}
	require.Eventually(t, func() bool {
		for _, m := range b.s.cluster.Load().Members() {
			if m.ID == "node-a" && m.State.Load["sim/small"].Running+m.State.Load["sim/small"].Waiting >= 10 {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)

	turn2 := append(slices.Clone(turn1), api.Message{Role: "assistant", Content: "Yes."},
		api.Message{Role: "user", Content: "Which ones?"})
	resp, raw = post(t, c, b.base+"/v1/chat/completions", chatJSON(false, turn2...))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	row := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))["node-b"]
	require.True(t, strings.HasPrefix(row.Route, "local "), "spilled to node-b: %q", row.Route)
	require.Zero(t, row.CachedTokens, "cold on node-b")
	for _, st := range streams {
		st.close()
	}
}

// TestSDKThroughAPeer: the official OpenAI Go SDK streams and fetches
// answers served by a peer (round robin sends every other request there)
// as it does from the node itself.
func TestSDKThroughAPeer(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, func(i int, c *Config) { c.Cluster.RoutePolicy = cluster.PolicyRoundRobin })
	client := sdkClient(t, nodes[0].base)
	params := openai.ChatCompletionNewParams{
		Model:         "sim/small",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about paged attention.")},
		MaxTokens:     openai.Int(20),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for range 2 {
		stream := client.Chat.Completions.NewStreaming(t.Context(), params)
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			require.True(t, acc.AddChunk(stream.Current()))
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		require.NotEmpty(t, acc.Choices[0].Message.Content)
		require.Positive(t, acc.Usage.CompletionTokens)

		cc, err := client.Chat.Completions.New(t.Context(), params)
		require.NoError(t, err)
		require.NotEmpty(t, cc.Choices[0].Message.Content)
		require.Equal(t, cc.Usage.PromptTokens+cc.Usage.CompletionTokens, cc.Usage.TotalTokens)
	}
	require.Positive(t, nodes[1].s.Stats()[0].Completed, "node-b served some")
}
