package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// The tests in this file run real llmd processes joined into a cluster on
// loopback and drive them over HTTP as clients do.

// freeAddr returns a loopback address with a port free at the time.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// startNode starts bin as cluster node id with its own data directory.
func startNode(t *testing.T, bin, id string, args ...string) *llmdProc {
	p := startLLMD(t, bin, append([]string{"--node-id", id, "--data-dir", filepath.Join(t.TempDir(), id)}, args...)...)
	p.id = id
	return p
}

// startClusterProcs starts n llmd processes joined with a gossip key.
func startClusterProcs(t *testing.T, bin string, n int, extra ...string) []*llmdProc {
	t.Helper()
	key := "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes, base64
	first := freeAddr(t)
	procs := make([]*llmdProc, n)
	for i := range n {
		gossip := first
		args := []string{"--gossip-key", key}
		if i > 0 {
			gossip = freeAddr(t)
			args = append(args, "--join", first)
		}
		args = append(append(args, "--gossip-addr", gossip), extra...)
		procs[i] = startNode(t, bin, fmt.Sprintf("node-%c", 'a'+i), args...)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	for _, p := range procs {
		require.Eventually(t, func() bool { return aliveNodes(c, p.base) == n }, 20*time.Second, 50*time.Millisecond,
			"%s does not see %d alive nodes", p.id, n)
	}
	return procs
}

// aliveNodes counts the alive members p's /v1/admin/nodes lists.
func aliveNodes(c *http.Client, base string) int {
	resp, err := c.Get(base + "/v1/admin/nodes")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var nl api.NodeList
	if json.NewDecoder(resp.Body).Decode(&nl) != nil {
		return -1
	}
	n := 0
	for _, m := range nl.Nodes {
		if m.Status == "alive" && len(m.Load) > 0 {
			n++
		}
	}
	return n
}

// minPrefixKeys is the fewest prefix keys any member of base's
// /v1/admin/nodes has gossiped; -1 on error.
func minPrefixKeys(c *http.Client, base string) int {
	resp, err := c.Get(base + "/v1/admin/nodes")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var nl api.NodeList
	if json.NewDecoder(resp.Body).Decode(&nl) != nil || len(nl.Nodes) == 0 {
		return -1
	}
	least := nl.Nodes[0].PrefixKeys
	for _, m := range nl.Nodes {
		least = min(least, m.PrefixKeys)
	}
	return least
}

// turnResult is what a client saw of one streamed request.
type turnResult struct {
	kind          string // "" for a normal request; "cancel", "oversized", "malformed"
	id            string
	status        int
	text          string
	ttft          time.Duration
	prompt        int
	cached        int
	errCode       string // an in-band error's code
	done          bool   // [DONE] seen
	transportErr  error
	started, ende time.Time
}

// streamTurn sends one streamed chat request and reads it to the end.
func streamTurn(c *http.Client, base, model, conv string, msgs []api.Message, maxTokens int) turnResult {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "messages": msgs})
	return sendTurn(c, base, conv, string(body), "")
}

// sendTurn sends a request body and reads its stream; kind "cancel" drops
// the connection after the first token.
func sendTurn(c *http.Client, base, conv, body, kind string) turnResult {
	res := turnResult{kind: kind, started: time.Now()}
	defer func() { res.ende = time.Now() }()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if conv != "" {
		req.Header.Set("X-Conversation-Id", conv)
	}
	resp, err := c.Do(req)
	if err != nil {
		res.transportErr = err
		return res
	}
	defer resp.Body.Close()
	res.status, res.id = resp.StatusCode, resp.Header.Get("X-Request-Id")
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var ch struct {
			api.ChatCompletionChunk
			Error *api.ErrorDetail `json:"error"`
		}
		if json.Unmarshal([]byte(data), &ch) != nil {
			continue
		}
		if ch.Error != nil {
			res.errCode = ptrOr(ch.Error.Code)
			continue
		}
		for _, choice := range ch.Choices {
			if choice.Delta.Content != nil && *choice.Delta.Content != "" {
				if res.ttft == 0 {
					res.ttft = time.Since(res.started)
					if kind == "cancel" {
						return res
					}
				}
				sb.WriteString(*choice.Delta.Content)
			}
		}
		if u := ch.Usage; u != nil {
			res.prompt = u.PromptTokens
			if u.PromptTokensDetails != nil {
				res.cached = u.PromptTokensDetails.CachedTokens
			}
		}
	}
	if err := sc.Err(); err != nil && res.transportErr == nil {
		res.transportErr = err
	}
	res.text = sb.String()
	return res
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// systemPrompt is the k-th of the workload's long shared system prompts.
func systemPrompt(k, words int) string {
	r := rand.New(rand.NewPCG(uint64(k), 7))
	vocab := strings.Fields("the shop sells tools parts cables boards kits and ships them to customers in many " +
		"countries with care support returns warranty orders invoices stock prices discounts questions answers")
	var sb strings.Builder
	fmt.Fprintf(&sb, "You are assistant number %d. ", k)
	for range words {
		sb.WriteString(vocab[r.IntN(len(vocab))])
		sb.WriteByte(' ')
	}
	return sb.String()
}

// TestThreeProcessesRouteAndSurviveKill is the "done when"
// with real processes: three llmd joined with a key route turn 2 of each
// conversation to the node holding turn 1's prefix wherever it enters
// (cached_tokens > 0); then, under load, one node is killed with SIGKILL:
// only requests it was serving fail, each with a clear error event, and
// the rest of the traffic is rerouted.
func TestThreeProcessesRouteAndSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts three llmd processes; make test runs it")
	}
	t.Parallel()
	bin := buildLLMD(t)
	procs := startClusterProcs(t, bin, 3, "--models", "small")
	c := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(c.CloseIdleConnections)

	const convs = 6
	turn1 := make([][]api.Message, convs)
	for k := range convs {
		turn1[k] = []api.Message{{Role: "system", Content: api.Content(systemPrompt(k, 300))},
			{Role: "user", Content: "Hello, what do you sell?"}}
		r := streamTurn(c, procs[k%3].base, "sim/small", "", turn1[k], 8)
		require.NoError(t, r.transportErr)
		require.Equal(t, http.StatusOK, r.status)
		require.True(t, r.done)
		require.Zero(t, r.cached, "turn 1 is cold")
	}
	// Wait until every node has heard each node's prefix summary (published
	// every 500 ms by default): each served two of the six turns.
	for _, p := range procs {
		require.Eventually(t, func() bool { return minPrefixKeys(c, p.base) > 0 }, 10*time.Second, 50*time.Millisecond,
			"%s never heard every node's prefixes", p.id)
	}
	for k := range convs {
		msgs := append(slices.Clone(turn1[k]), api.Message{Role: "assistant", Content: "We sell tools."},
			api.Message{Role: "user", Content: "Which ones?"})
		entry := procs[(k+1)%3]
		r := streamTurn(c, entry.base, "sim/small", "", msgs, 8)
		require.NoError(t, r.transportErr)
		require.Equal(t, http.StatusOK, r.status)
		require.Positive(t, r.cached, "conversation %d: turn 2 entering at %s missed its prefix", k, entry.id)
	}

	// CL-6: mixed load on nodes a and b (their traffic spreads over all
	// three: 10% cancelled after the first token, 5% oversized, 2%
	// malformed), then node c is killed with SIGKILL.
	var (
		mu      sync.Mutex
		results []turnResult
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range 12 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				msgs := []api.Message{{Role: "system", Content: api.Content(systemPrompt(100+w, 200))},
					{Role: "user", Content: api.Content("question " + strconv.Itoa(i))}}
				kind, maxTokens := "", 48
				switch x := (w*31 + i*17) % 100; {
				case x < 10:
					kind = "cancel"
				case x < 15:
					kind, maxTokens = "oversized", 50_000_000
				case x < 17:
					kind = "malformed"
				}
				body, _ := json.Marshal(map[string]any{"model": "sim/small", "max_tokens": maxTokens, "stream": true,
					"stream_options": map[string]any{"include_usage": true}, "messages": msgs})
				if kind == "malformed" {
					body = body[:len(body)/2]
				}
				r := sendTurn(c, procs[w%2].base, fmt.Sprintf("w%d-%d", w, i), string(body), kind)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	// Kill node c once the load has run a while, and stop once plenty of
	// streams that started after the kill have ended.
	finished := func(after time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.started.After(after) {
				n++
			}
		}
		return n
	}
	start := time.Now()
	require.Eventually(t, func() bool { return finished(start) >= 24 }, 30*time.Second, 10*time.Millisecond)
	killedAt := time.Now()
	procs[2].kill9(t)
	require.Eventually(t, func() bool { return finished(killedAt) >= 48 }, 60*time.Second, 10*time.Millisecond)
	stop.Store(true)
	wg.Wait()

	var ok, failed, after, refused, cancelled int
	for _, r := range results {
		require.NoError(t, r.transportErr, "entry nodes are alive: no transport error")
		switch r.kind {
		case "oversized", "malformed":
			require.Equal(t, http.StatusBadRequest, r.status, "%s request", r.kind)
			refused++
			continue
		case "cancel":
			cancelled++
			continue
		}
		require.Equal(t, http.StatusOK, r.status)
		require.True(t, r.done, "every stream ends with [DONE]")
		if r.errCode == "" {
			ok++
			if r.started.After(killedAt) {
				after++
			}
			continue
		}
		failed++
		require.Equal(t, "peer_failed", r.errCode, "the only error is the killed peer's")
		require.True(t, r.started.Before(killedAt), "a request started after the kill failed: %+v", r)
	}
	t.Logf("kill -9 under mixed load: %d streams ok (%d started after the kill), %d lost with the killed node; "+
		"%d cancelled by their clients, %d refused with 400, no other error", ok, after, failed, cancelled, refused)
	require.Positive(t, after, "traffic continued after the kill")
	// The entry nodes stop routing to it at once, and gossip confirms.
	for _, p := range procs[:2] {
		require.Eventually(t, func() bool { return aliveNodes(c, p.base) == 2 }, 30*time.Second, 100*time.Millisecond)
		// Every KV block of the survivors is free again once the load
		// stops (cancelled and forwarded requests included).
		require.Eventually(t, func() bool { return blocksUsed(t, p.base) == 0 }, 10*time.Second, 50*time.Millisecond)
	}
}

// blocksUsed is the KV blocks in use on a node, over its models.
func blocksUsed(t *testing.T, base string) int {
	n := 0
	for _, m := range engineStats(t, base).Models {
		n += m.BlocksUsed
	}
	return n
}

// engineStats is a node's GET /v1/stats.
func engineStats(t *testing.T, base string) api.StatsResponse {
	resp, err := http.Get(base + "/v1/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st api.StatsResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}
