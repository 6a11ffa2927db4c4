package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// The tests in this file are the malformed-input and limits rows (IN-2 to
// IN-5) of the reliability plan, scaled down; IN-1 is in
// fuzz_decoders_test.go.

// hostile is one request that must be refused before admission.
type hostile struct {
	name, path, body string
	status           int
}

// hostileRequests returns hostile bodies for a server serving model m
// (context 4096, MaxN 8, a 256-token vocabulary, no logprobs).
func hostileRequests() []hostile {
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	compl := func(extra string) string { return `{"model":"m","prompt":"hi"` + extra + `}` }
	const cc, co, na, tk, dt = "/v1/chat/completions", "/v1/completions", "/v1/chat", "/tokenize", "/detokenize"
	deep := `{"model":"m","messages":` + strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001) + `}`
	var bias strings.Builder
	bias.WriteString(`,"logit_bias":{`)
	for i := range 1025 {
		if i > 0 {
			bias.WriteString(",")
		}
		fmt.Fprintf(&bias, `"%d":1`, i%256+i/256*1000)
	}
	bias.WriteString(`}`)
	return []hostile{
		{"max_tokens negative", cc, chat(`,"max_tokens":-1`), 400},
		{"max_tokens zero", cc, chat(`,"max_tokens":0`), 400},
		{"max_tokens past the context", cc, chat(`,"max_tokens":4096`), 400},
		{"max_tokens huge", cc, chat(`,"max_tokens":9223372036854775807`), 400},
		{"max_tokens past int64", cc, chat(`,"max_tokens":99999999999999999999999`), 400},
		{"max_tokens float", cc, chat(`,"max_tokens":2.5`), 400},
		{"max_tokens string", cc, chat(`,"max_tokens":"5"`), 400},
		{"max_tokens bool", cc, chat(`,"max_tokens":true`), 400},
		{"max_completion_tokens negative", cc, chat(`,"max_completion_tokens":-7`), 400},
		{"n zero", cc, chat(`,"n":0`), 400},
		{"n negative", cc, chat(`,"n":-3`), 400},
		{"n a million", cc, chat(`,"n":1000000`), 400},
		{"n past MaxN", cc, chat(`,"n":9`), 400},
		{"n float", cc, chat(`,"n":1.5`), 400},
		{"top_k negative", cc, chat(`,"top_k":-2`), 400},
		{"top_k very negative", cc, chat(`,"top_k":-9223372036854775808`), 400},
		{"top_k float", cc, chat(`,"top_k":0.5`), 400},
		{"temperature negative", cc, chat(`,"temperature":-1`), 400},
		{"temperature huge", cc, chat(`,"temperature":1e308`), 400},
		{"temperature overflow", cc, chat(`,"temperature":1e400`), 400},
		{"temperature string", cc, chat(`,"temperature":"NaN"`), 400},
		{"temperature NaN literal", cc, chat(`,"temperature":NaN`), 400},
		{"top_p zero", cc, chat(`,"top_p":0`), 400},
		{"top_p negative", cc, chat(`,"top_p":-0.1`), 400},
		{"min_p above one", cc, chat(`,"min_p":1.0001`), 400},
		{"repetition_penalty negative", cc, chat(`,"repetition_penalty":-1`), 400},
		{"repetition_penalty huge", cc, chat(`,"repetition_penalty":1e9`), 400},
		{"presence_penalty", cc, chat(`,"presence_penalty":-2.01`), 400},
		{"frequency_penalty", cc, chat(`,"frequency_penalty":1e10`), 400},
		{"logit_bias negative id", cc, chat(`,"logit_bias":{"-1":1}`), 400},
		{"logit_bias past the vocabulary", cc, chat(`,"logit_bias":{"256":1}`), 400},
		{"logit_bias value", cc, chat(`,"logit_bias":{"1":-101}`), 400},
		{"logit_bias too many", cc, chat(bias.String()), 400},
		{"logit_bias wrong type", cc, chat(`,"logit_bias":[1,2]`), 400},
		{"seed float", cc, chat(`,"seed":1.5`), 400},
		{"seed past int64", cc, chat(`,"seed":18446744073709551616`), 400},
		{"stop five", cc, chat(`,"stop":["a","b","c","d","e"]`), 400},
		{"stop empty string", cc, chat(`,"stop":[""]`), 400},
		{"stop number", cc, chat(`,"stop":7`), 400},
		{"stop numbers", cc, chat(`,"stop":[1,2]`), 400},
		{"logprobs on a model without", cc, chat(`,"logprobs":true`), 400},
		{"top_logprobs without logprobs", cc, chat(`,"top_logprobs":2`), 400},
		{"top_logprobs too many", cc, chat(`,"logprobs":true,"top_logprobs":21`), 400},
		{"stream_options wrong type", cc, chat(`,"stream":true,"stream_options":"yes"`), 400},
		{"stream wrong type", cc, chat(`,"stream":"true"`), 400},
		{"messages empty", cc, `{"model":"m","messages":[]}`, 400},
		{"messages null", cc, `{"model":"m","messages":null}`, 400},
		{"messages string", cc, `{"model":"m","messages":"hi"}`, 400},
		{"messages nested past the decoder's depth", cc, deep, 400},
		{"message role", cc, `{"model":"m","messages":[{"role":"root","content":"hi"}]}`, 400},
		{"message content number", cc, `{"model":"m","messages":[{"role":"user","content":5}]}`, 400},
		{"message content object", cc, `{"model":"m","messages":[{"role":"user","content":{"a":1}}]}`, 400},
		{"model number", cc, `{"model":5,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"model missing", cc, `{"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"model unknown and long", cc, `{"model":"` + strings.Repeat("x", 5000) + `","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"duplicate keys", cc, `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2,"n":0}`, 400},
		{"not an object", cc, `"hello"`, 400},
		{"null body", cc, `null`, 400},
		{"two objects", cc, chat(``) + chat(``), 400},
		{"binary", cc, "\x00\x01\x02\xff", 400},
		{"completions prompt token past vocab", co, `{"model":"m","prompt":[1,2,2000000000]}`, 400},
		{"completions prompt object", co, `{"model":"m","prompt":{}}`, 400},
		{"completions prompts", co, `{"model":"m","prompt":["a","b"]}`, 400},
		{"completions logprobs", co, compl(`,"logprobs":5`), 400},
		{"completions max_tokens", co, compl(`,"max_tokens":-1`), 400},
		{"completions n", co, compl(`,"n":100`), 400},
		{"native priority", na, chat(`,"priority":"root"`), 400},
		{"native priority number", na, chat(`,"priority":1`), 400},
		{"native max_tokens", na, chat(`,"max_tokens":100000`), 400},
		{"native top_k", na, chat(`,"top_k":-5`), 400},
		{"tokenize nothing", tk, `{"model":"m"}`, 400},
		{"tokenize both", tk, `{"model":"m","prompt":"a","messages":[{"role":"user","content":"b"}]}`, 400},
		{"tokenize prompt number", tk, `{"model":"m","prompt":5}`, 400},
		{"detokenize negative", dt, `{"model":"m","tokens":[-1]}`, 400},
		{"detokenize past the vocabulary", dt, `{"model":"m","tokens":[256]}`, 400},
		{"detokenize past int32", dt, `{"model":"m","tokens":[4294967296]}`, 400},
		{"detokenize string", dt, `{"model":"m","tokens":"abc"}`, 400},
		{"detokenize missing", dt, `{"model":"m"}`, 400},
	}
}

// TestHostileParameters is IN-2: every hostile request is refused with a
// 4xx and an OpenAI error body before admission; after 10,000 of them a
// valid request still succeeds, and only it reached the engine.
func TestHostileParameters(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, "fine")
	s, base := startReplicas(t, testConfig(), f)
	c := testClient(t)
	table := hostileRequests()
	for _, h := range table {
		t.Run(h.name, func(t *testing.T) {
			resp, b := post(t, c, base+h.path, h.body)
			require.Equal(t, h.status, resp.StatusCode, "%s", b)
			require.Equal(t, "invalid_request_error", errorOf(t, b)["type"])
		})
	}

	// 10,000 more, through the handler (no sockets), four at a time.
	var next atomic.Int64
	var mu sync.Mutex
	bad := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < 10_000; i = next.Add(1) - 1 {
				h := table[int(i)%len(table)]
				if w := serve(t.Context(), s, http.MethodPost, h.path, h.body, nil, 10*time.Second); w.Code != h.status {
					mu.Lock()
					bad[fmt.Sprintf("%s: %d", h.name, w.Code)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, bad)
	require.Empty(t, f.requests(), "no hostile request reached the engine")

	resp, b := post(t, c, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Len(t, f.requests(), 1)
}

// TestBodyOverLimit is IN-3: a body past MaxBodyBytes gets 413 without the
// server reading all of it.
func TestBodyOverLimit(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, "x")
	cfg := testConfig()
	cfg.MaxBodyBytes = 1 << 20
	_, base := startReplicas(t, cfg, f)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/chat", "/tokenize"} {
		t.Run(path, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			const declared = 256 << 20
			_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"+
				`{"model":"m","messages":[{"role":"user","content":"`, path, declared)
			require.NoError(t, err)
			var sent atomic.Int64
			go func() {
				chunk := []byte(strings.Repeat("a", 64<<10))
				for sent.Load() < declared {
					n, err := conn.Write(chunk)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", b)
			require.Equal(t, "request_too_large", errorOf(t, b)["code"])
			// The server hangs up; what it took is the limit plus socket
			// buffers, far from the 256 MiB announced.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.Copy(io.Discard, conn)
			_ = conn.Close()
			t.Logf("client wrote %d KiB of 256 MiB", sent.Load()>>10)
			require.Less(t, sent.Load(), int64(32<<20))
		})
	}
}

// TestHeaderLimits is IN-3: headers over 1 MiB get 431; a 100 KB
// X-Request-Id is accepted but capped in the log and never echoed.
func TestHeaderLimits(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	f := newFake("m", 4096, "ok")
	s := newServer(t, testConfig(), newBufferLogger(&logs), []*pipeline.Model{newModel(f, byteTokenizer{}, time.Unix(0, 0), nil)})
	base := startServer(t, s)
	c := testClient(t)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("b", 1<<20+8192))
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	huge := strings.Repeat("r", 100_000)
	req, err = http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", huge)
	resp, err = c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	id := resp.Header.Get("X-Request-Id")
	require.True(t, strings.HasPrefix(id, "chatcmpl-"), "the server's own id, not the client's")
	require.Len(t, id, len("chatcmpl-")+32, "128 random bits in hex")

	require.Eventually(t, func() bool { return strings.Contains(logs.String(), id) }, 5*time.Second, time.Millisecond)
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		require.Less(t, len(line), 4096, "a log line holds the client's header: %.200s", line)
		m := jsonMap(t, line)
		if m["request_id"] == id {
			require.Equal(t, huge[:server.MaxClientRequestIDLen], m["client_request_id"])
		}
	}
}

// TestEveryResponseHasRequestID: every answer of the API, errors
// included, carries an X-Request-Id with 128 random bits.
func TestEveryResponseHasRequestID(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, nil)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	base := startServer(t, s)
	c := testClient(t)
	for _, tc := range []struct{ name, method, path, key, body string }{
		{"models", http.MethodGet, "/v1/models", key, ""},
		{"healthz", http.MethodGet, "/healthz", "", ""},
		{"chat", http.MethodPost, "/v1/chat/completions", key, `{"model":"sim/small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`},
		{"bad request", http.MethodPost, "/v1/chat/completions", key, `{`},
		{"unknown route", http.MethodGet, "/v2/nothing", key, ""},
		{"unknown request", http.MethodGet, "/v1/requests/req_x/stream", key, ""},
		{"not admin", http.MethodGet, "/v1/admin/keys", key, ""},
		{"no key", http.MethodGet, "/v1/models", "", ""},
		{"bad key", http.MethodPost, "/v1/chat/completions", "llmd-nope", `{}`},
		{"wrong method", http.MethodGet, "/v1/chat/completions", key, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := call(t, c, tc.method, base+tc.path, tc.key, tc.body)
			id := resp.Header.Get("X-Request-Id")
			assert.Regexp(t, `^[a-z]+[-_][0-9a-f]{32}$`, id, "status %d: %s", resp.StatusCode, b)
		})
	}
}

// TestSlowloris is IN-4, scaled down: 100 connections that send a header
// byte every 200 ms are closed at ReadHeaderTimeout (1 s); a normal client
// is served meanwhile.
func TestSlowloris(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, "ok")
	cfg := testConfig()
	cfg.ReadHeaderTimeout = time.Second
	_, base := startReplicas(t, cfg, f)
	addr := strings.TrimPrefix(base, "http://")
	const conns = 100
	closedAfter := make([]time.Duration, conns)
	var wg sync.WaitGroup
	for i := range conns {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		start := time.Now()
		wg.Go(func() {
			// The reader returns when the server closes the connection.
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				_, _ = io.Copy(io.Discard, conn)
			}()
			header := "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + strings.Repeat("s", 100)
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			giveUp := time.After(10 * time.Second)
			for j := 0; ; j++ {
				select {
				case <-closed:
					closedAfter[i] = time.Since(start)
					return
				case <-tick.C:
					if _, err := conn.Write([]byte{header[j%len(header)]}); err != nil {
						<-closed
						closedAfter[i] = time.Since(start)
						return
					}
				case <-giveUp:
					closedAfter[i] = -1
					_ = conn.Close()
					<-closed
					return
				}
			}
		})
	}
	// A normal client meanwhile.
	c := testClient(t)
	var worst time.Duration
	for range 20 {
		began := time.Now()
		resp, b := post(t, c, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		worst = max(worst, time.Since(began))
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("normal client: slowest answer %v", worst)
	require.Less(t, worst, 500*time.Millisecond)
	for i, d := range closedAfter {
		require.Positive(t, d, "connection %d never closed", i)
		require.GreaterOrEqual(t, d, 900*time.Millisecond, "connection %d", i)
		require.Less(t, d, 3*time.Second, "connection %d", i)
	}
}

// TestLongStreamNotCut is IN-5, scaled down: a 2 s stream, with a silence
// longer than the write timeout in the middle, is not cut by the
// per-write deadlines (StreamWriteTimeout 500 ms).
func TestLongStreamNotCut(t *testing.T) {
	t.Parallel()
	r := newPaced("m", 60, func(i int) time.Duration {
		if i == 30 {
			return 900 * time.Millisecond // no event, no ping: longer than the write timeout
		}
		return 18 * time.Millisecond
	})
	cfg := testConfig()
	cfg.StreamWriteTimeout = 500 * time.Millisecond
	cfg.HeartbeatInterval = 5 * time.Second
	_, base := startReplicas(t, cfg, r)
	c := testClient(t)
	var wg sync.WaitGroup
	for _, path := range []string{"/v1/chat/completions", "/v1/chat"} {
		wg.Go(func() {
			began := time.Now()
			resp, b := post(t, c, base+path, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			took := time.Since(began)
			t.Logf("%s: the stream took %v", path, took)
			require.GreaterOrEqual(t, took, 1800*time.Millisecond)
			kind, problem := terminalShape(path == "/v1/chat", b)
			require.Empty(t, problem, path)
			require.Equal(t, "done", kind, path)
			require.Equal(t, strings.Repeat("z", 60), sseText(b), path)
		})
	}
	wg.Wait()
}
