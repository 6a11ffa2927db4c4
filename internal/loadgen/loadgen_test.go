package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Script timings of the fake server: the first token after ttft, then one
// every itl.
const (
	ttft   = 80 * time.Millisecond
	itl    = 25 * time.Millisecond
	tokens = 5
)

// fakeServer streams scripted OpenAI chat completions. The API key picks
// the script: "ok" (ttft, then tokens tokens itl apart, a usage chunk),
// "nousage" (the same without usage), "429", "500", "err" (two tokens then
// an in-stream error), "slow" (waits for the client to go away),
// "cut" (two tokens then the connection ends without [DONE]).
type fakeServer struct {
	*httptest.Server
	inFlight, maxInFlight atomic.Int64
	disconnects           atomic.Int64 // streams the client closed early
	// served counts the requests that arrived; the one numbered drop
	// (from 1) finds its connection closed unanswered, as a server's
	// idle keep-alive timeout crossing the request closes it.
	served, drop atomic.Int64

	mu     sync.Mutex
	bodies []api.ChatCompletionRequest
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) requests() []api.ChatCompletionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.ChatCompletionRequest(nil), f.bodies...)
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	if f.served.Add(1) == f.drop.Load() {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = c.Close()
		}
		return
	}
	n := f.inFlight.Add(1)
	// finish leaves the count before the client can see the end of the
	// response, so that its next request never overlaps this one here.
	finish := sync.OnceFunc(func() { f.inFlight.Add(-1) })
	defer finish()
	for {
		m := f.maxInFlight.Load()
		if n <= m || f.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req api.ChatCompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream ||
		req.StreamOptions == nil || !req.StreamOptions.IncludeUsage || req.MaxTokens == nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, req)
	f.mu.Unlock()

	script := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch script {
	case "429":
		finish()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
		return
	case "500":
		finish()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"engine broke","type":"server_error","code":null}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	send := func(s string) bool {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", s); err != nil {
			return false
		}
		http.NewResponseController(w).Flush()
		return true
	}
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			f.disconnects.Add(1)
			return false
		}
	}
	chunk := func(content string) string {
		return fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}],"usage":null}`, req.Model, content)
	}
	// The role chunk comes at once: TTFT must wait for content.
	send(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`)
	fmt.Fprint(w, ": keepalive\n\n")
	if script == "slow" {
		<-ctx.Done()
		f.disconnects.Add(1)
		return
	}
	for i := range tokens {
		d := itl
		if i == 0 {
			d = ttft
		}
		if !wait(d) || !send(chunk(fmt.Sprintf(" word%d", i))) {
			return
		}
		if i == 1 && script == "err" {
			finish()
			send(`{"error":{"message":"engine stopped","type":"server_error","param":null,"code":"engine_failed"}}`)
			send("[DONE]")
			return
		}
		if i == 1 && script == "cut" {
			finish()
			return
		}
	}
	if !wait(itl / 5) {
		return
	}
	send(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}`)
	finish()
	if script != "nousage" {
		send(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":16}}}`, tokens, 50+tokens))
	}
	send("[DONE]")
	// The chunked body's end follows [DONE] a moment later, as it can from
	// a real server: a client that stops reading at [DONE] loses the
	// connection instead of reusing it.
	time.Sleep(5 * time.Millisecond)
}

// spec is a small closed-loop workload.
func spec(requests, concurrency int) workload.Spec {
	return workload.Spec{
		Requests: requests, Concurrency: concurrency,
		Input: workload.Fixed(20), Output: workload.Fixed(tokens), Seed: 7,
	}
}

func run(t *testing.T, cfg Config, s workload.Spec) (*Report, *Runner) {
	t.Helper()
	r, err := New(cfg, s)
	require.NoError(t, err)
	rep, err := r.Run(t.Context())
	require.NoError(t, err)
	return rep, r
}

const ms = float64(time.Millisecond)

func TestMetrics(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}, SLO: SLO{TTFT: 2 * time.Second, ITL: time.Second}}
	rep, _ := run(t, cfg, spec(6, 2))

	require.Equal(t, 6, rep.Requests)
	require.Equal(t, 6, rep.Completed)
	require.Zero(t, rep.Failed)
	require.Empty(t, rep.Errors)
	require.Equal(t, 6*tokens, rep.OutputTokens)
	require.Equal(t, 6*50, rep.InputTokens)
	require.Equal(t, 6*16, rep.CachedTokens)
	require.Equal(t, 6, rep.UsageReported)
	require.NotNil(t, rep.PrefixHitRate)
	assert.InDelta(t, 16.0/50, *rep.PrefixHitRate, 1e-9)

	// Timings: at least the script's, and not much more (a loaded
	// machine under -race may add some).
	slack := 400.0
	require.Equal(t, 6, rep.TTFT.N)
	assert.GreaterOrEqual(t, rep.TTFT.P50, float64(ttft)/ms)
	assert.Less(t, rep.TTFT.P50, float64(ttft)/ms+slack)
	require.Equal(t, 6*(tokens-1), rep.ITL.N, "one gap per token after the first")
	assert.GreaterOrEqual(t, rep.ITL.P50, float64(itl)/ms*0.9)
	assert.Less(t, rep.ITL.P50, float64(itl)/ms+slack)
	require.Equal(t, 6, rep.TPOT.N)
	// TPOT = (E2E - TTFT) / (n-1): the gaps plus the tail to [DONE].
	assert.GreaterOrEqual(t, rep.TPOT.Mean, float64(itl)/ms*0.9)
	require.Equal(t, 6, rep.E2E.N)
	assert.GreaterOrEqual(t, rep.E2E.P50, float64(ttft+(tokens-1)*itl)/ms)
	assert.LessOrEqual(t, rep.TTFT.P50, rep.TTFT.P90)
	assert.LessOrEqual(t, rep.TTFT.P90, rep.TTFT.P99)
	assert.LessOrEqual(t, rep.TTFT.P99, rep.TTFT.Max)

	// Throughputs are per second of the run.
	require.Positive(t, rep.DurationS)
	assert.InDelta(t, 6/rep.DurationS, rep.RequestThroughput, 1e-9)
	assert.InDelta(t, float64(6*tokens)/rep.DurationS, rep.OutputThroughput, 1e-9)
	assert.InDelta(t, float64(6*(tokens+50))/rep.DurationS, rep.TotalThroughput, 1e-9)
	require.NotNil(t, rep.Goodput)
	require.Equal(t, 6, rep.Good)
	assert.InDelta(t, rep.RequestThroughput, *rep.Goodput, 1e-9)

	// Two users over six requests: three rounds of one request each.
	assert.GreaterOrEqual(t, rep.DurationS, 3*float64(ttft+(tokens-1)*itl)/float64(time.Second))

	var out strings.Builder
	require.NoError(t, rep.WriteText(&out))
	for _, want := range []string{"6 sent, 6 completed", "request throughput", "goodput", "TTFT", "ITL", "32.0% of input tokens cached"} {
		assert.Contains(t, out.String(), want)
	}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	require.EqualValues(t, 6, back["completed"])
	require.Contains(t, back, "ttft")
}

func TestGoodputSLO(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cases := map[string]struct {
		slo  SLO
		good int
	}{
		"ttft missed": {slo: SLO{TTFT: ttft / 4}, good: 0},
		"itl missed":  {slo: SLO{TTFT: time.Minute, ITL: itl / 4}, good: 0},
		"e2e met":     {slo: SLO{E2E: time.Minute}, good: 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rep, _ := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}, SLO: tc.slo}, spec(4, 4))
			require.Equal(t, tc.good, rep.Good)
			require.NotNil(t, rep.Goodput)
		})
	}
	rep, _ := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}}, spec(1, 1))
	require.Nil(t, rep.Goodput, "no SLO, no goodput")
}

func TestErrorKinds(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	keys := []string{"ok", "429", "500", "err", "nousage", "cut"}
	s := spec(60, 6)
	s.Tenants = keys
	rep, r := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: keys}, s)

	want := map[string]string{
		"ok": "", "nousage": "", "429": "http_429", "500": "http_500",
		"err": "stream_error:engine_failed", "cut": KindIncomplete,
	}
	counts := map[string]int{}
	for _, res := range r.Results() {
		key := keys[res.Item.Tenant]
		require.Equal(t, want[key], res.Kind, "tenant %s: %s", key, res.Message)
		if want[key] != "" {
			counts[want[key]]++
		}
		switch key {
		case "nousage":
			require.False(t, res.Usage)
			require.Equal(t, tokens, res.OutputTokens, "counted from the chunks")
			require.Positive(t, res.PromptTokens, "estimated")
		case "429":
			require.Equal(t, 429, res.Status)
			require.Equal(t, "slow down", res.Message)
		case "err":
			require.Equal(t, "engine stopped", res.Message)
			require.Len(t, res.ITL, 1)
		}
	}
	require.Equal(t, counts, rep.Errors)
	require.Equal(t, 60, rep.Requests)
	require.Equal(t, rep.Requests, rep.Completed+rep.Failed)
	require.Len(t, rep.Errors, 4, "every failing script was drawn")
	require.Equal(t, "slow down", rep.FirstErrors["http_429"])
	require.Equal(t, "engine broke", rep.FirstErrors["http_500"])

	var out strings.Builder
	require.NoError(t, rep.WriteText(&out))
	assert.Contains(t, out.String(), "http_429")
}

func TestCancelAfterFirstToken(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	s := spec(4, 2)
	s.CancelRatio = 1
	rep, r := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}}, s)
	require.Equal(t, 4, rep.Cancelled)
	require.Zero(t, rep.Failed)
	require.Zero(t, rep.Completed)
	require.Equal(t, 4, rep.TTFT.N, "cancelled requests count in TTFT")
	require.Zero(t, rep.E2E.N)
	for _, res := range r.Results() {
		require.Equal(t, 1, res.OutputTokens)
		require.GreaterOrEqual(t, res.TTFT, ttft)
	}
	require.Eventually(t, func() bool { return f.disconnects.Load() == 4 }, 5*time.Second, 10*time.Millisecond,
		"the server saw every connection close")
}

func TestMultiTurn(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	s := spec(6, 2)
	s.Turns = workload.Fixed(3)
	s.SharedPrefix, s.SystemPrompts, s.SystemTokens = 1, 1, workload.Fixed(30)
	rep, _ := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}}, s)
	require.Equal(t, 6, rep.Completed)
	answer := " word0 word1 word2 word3 word4"
	byLen := map[int]int{}
	for _, req := range f.requests() {
		byLen[len(req.Messages)]++
		require.Equal(t, "system", req.Messages[0].Role)
		require.Equal(t, s.SystemText(0), string(req.Messages[0].Content))
		for i, m := range req.Messages[1:] {
			if i%2 == 0 {
				require.Equal(t, "user", m.Role)
			} else {
				require.Equal(t, "assistant", m.Role)
				require.Equal(t, answer, string(m.Content), "the real answer is sent back")
			}
		}
	}
	require.Equal(t, map[int]int{2: 2, 4: 2, 6: 2}, byLen, "two conversations of three turns")
}

func TestOpenLoop(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	s := spec(20, 3)
	s.Rate = 200
	s.Turns = workload.Uniform(1, 3)
	rep, r := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}}, s)
	require.Equal(t, "open", rep.Mode)
	require.Equal(t, 20, rep.Completed)
	require.LessOrEqual(t, f.maxInFlight.Load(), int64(3), "Concurrency bounds requests in flight")
	// Turns of a conversation ran in order, each after the previous ended.
	ends := map[int]time.Duration{}
	turn := map[int]int{}
	results := r.Results()
	for _, res := range results {
		if res.Item.Turn > 0 {
			require.Equal(t, turn[res.Item.Conversation]+1, res.Item.Turn)
			require.GreaterOrEqual(t, res.Sent, ends[res.Item.Conversation])
		}
		turn[res.Item.Conversation] = res.Item.Turn
		ends[res.Item.Conversation] = res.Sent + res.E2E
	}
	p := r.Progress()
	require.Equal(t, Progress{Total: 20, Sent: 20, Done: 20, OutputTokens: 20 * tokens, Elapsed: p.Elapsed}, p)
}

func TestTimeoutAndTransport(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	rep, _ := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"slow"}, Timeout: 100 * time.Millisecond}, spec(2, 2))
	require.Equal(t, map[string]int{KindTimeout: 2}, rep.Errors)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	rep, _ = run(t, Config{BaseURL: "http://" + addr, Model: "m"}, spec(2, 1))
	require.Equal(t, map[string]int{KindTransport: 2}, rep.Errors)
}

// TestClosedKeepAliveRetried: a request whose kept-alive connection the
// server closes unanswered is sent again on a new one, not counted as the
// server's failure.
func TestClosedKeepAliveRetried(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.drop.Store(2) // the second request: the first one's connection, reused
	rep, _ := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}}, spec(3, 1))
	require.Equal(t, 3, rep.Completed)
	require.Empty(t, rep.Errors)
	require.Equal(t, int64(4), f.served.Load())
	require.Len(t, f.requests(), 3)
}

func TestStop(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	s := spec(0, 4)
	s.Duration = time.Hour
	r, err := New(Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"slow"}}, s)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	type out struct {
		rep *Report
		err error
	}
	done := make(chan out, 1)
	go func() {
		rep, err := r.Run(ctx)
		done <- out{rep, err}
	}()
	require.Eventually(t, func() bool { return f.inFlight.Load() == 4 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case o := <-done:
		require.NoError(t, o.err)
		require.True(t, o.rep.Stopped)
		require.Equal(t, 4, o.rep.Interrupted)
		require.Zero(t, o.rep.Failed)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	_, err = r.Run(t.Context())
	require.Error(t, err, "a Runner runs once")
}

func TestDurationClosedLoop(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	s := spec(0, 2)
	s.Duration = 300 * time.Millisecond
	start := time.Now()
	rep, _ := run(t, Config{BaseURL: f.URL, Model: "m", APIKeys: []string{"ok"}}, s)
	require.Less(t, time.Since(start), 3*time.Second)
	require.Positive(t, rep.Completed)
	require.Zero(t, rep.Failed)
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	_, err := New(Config{BaseURL: "http://x", Model: ""}, spec(1, 1))
	require.Error(t, err)
	_, err = New(Config{BaseURL: "x:1", Model: "m"}, spec(1, 1))
	require.Error(t, err)
	_, err = New(Config{BaseURL: "http://x", Model: "m"}, workload.Spec{})
	require.Error(t, err)
	r, err := New(Config{BaseURL: "http://h/v1/", Model: "m"}, spec(1, 1))
	require.NoError(t, err)
	require.Equal(t, "http://h/v1/chat/completions", r.url)
}

func TestStats(t *testing.T) {
	t.Parallel()
	require.Equal(t, Stats{}, NewStats(nil))
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	st := NewStats(ds)
	require.Equal(t, 100, st.N)
	assert.InDelta(t, 50.5, st.Mean, 1e-9)
	assert.InDelta(t, 50.5, st.P50, 1e-9)  // numpy.percentile(range(1,101), 50)
	assert.InDelta(t, 90.1, st.P90, 1e-9)  // 90.1
	assert.InDelta(t, 99.01, st.P99, 1e-9) // 99.01
	assert.InDelta(t, 100, st.Max, 1e-9)
	one := NewStats([]time.Duration{3 * time.Millisecond})
	require.Equal(t, Stats{N: 1, Mean: 3, P50: 3, P90: 3, P99: 3, Max: 3}, one)
}
