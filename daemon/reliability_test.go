package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// The tests in this file are the engine, streaming and cancellation rows
// (EN-1 to EN-12) of the reliability plan, each scaled down to run in a
// second or two.

// newTunedSim builds an unstarted server for sim/small whose simulated
// executor simEdit may change (KV pool, answer lengths); cfg edits come
// first, and cfg.StepTimeScale becomes the executor's time scale. The
// clock is the real one unless edit sets another.
func newTunedSim(t *testing.T, simEdit func(*sim.Config), edit func(*Config)) *Daemon {
	t.Helper()
	return newTunedSimLogged(t, testLogger(t), simEdit, edit)
}

// newTunedSimLogged is newTunedSim logging to logger.
func newTunedSimLogged(t *testing.T, logger *slog.Logger, simEdit func(*sim.Config), edit func(*Config)) *Daemon {
	t.Helper()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	if edit != nil {
		edit(&cfg)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = engine.RealClock{}
	}
	sc := sim.DefaultConfig()
	sc.TimeScale = cfg.StepTimeScale
	if simEdit != nil {
		simEdit(&sc)
	}
	exec, err := sim.New(sc, clock)
	require.NoError(t, err)
	eng, err := engine.New(exec, clock, cfg.Engine, nil)
	require.NoError(t, err)
	m := newModel(pipeline.EngineReplica{E: eng}, exec.Tokenizer(), time.Now(), eng.Run)
	return newServer(t, cfg, logger, []*pipeline.Model{m})
}

// startChecked starts s and checks the idle invariant when the test ends.
func startChecked(t *testing.T, s *Daemon) string {
	t.Helper()
	base := startServer(t, s)
	t.Cleanup(func() { requireIdle(t, s) })
	return base
}

// startReplicas serves replicas (fakes of any kind) with cfg.
func startReplicas(t *testing.T, cfg Config, reps ...pipeline.Replica) (*Daemon, string) {
	t.Helper()
	models := make([]*pipeline.Model, len(reps))
	for i, r := range reps {
		models[i] = newModel(r, byteTokenizer{}, time.Unix(1700000000, 0), nil)
	}
	s := newServer(t, cfg, testLogger(t), models)
	return s, startServer(t, s)
}

// poolClient is testClient with room for n idle connections, so that n
// concurrent clients reuse their connections.
func poolClient(t *testing.T, n int) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// serve sends one request through s's handler (no socket) and returns the
// whole answer; the client gives up after timeout. It is safe in any
// goroutine.
func serve(ctx context.Context, s *Daemon, method, path, body string, hdr map[string]string, timeout time.Duration) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(ctx, method, "http://localhost"+path, strings.NewReader(body))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	s.Handler().ServeHTTP(w, r)
	return w
}

// seedsLongerThan returns count seeds whose simulated answers (default sim
// config) are longer than n tokens.
func seedsLongerThan(t *testing.T, n, count int) []int64 {
	t.Helper()
	exec, err := sim.New(sim.DefaultConfig(), engine.NewVirtualClock(time.Time{}))
	require.NoError(t, err)
	var seeds []int64
	for seed := int64(1); len(seeds) < count; seed++ {
		require.Less(t, seed, int64(100_000), "not enough long seeds")
		if l, ok := exec.NaturalLength(uint64(seed)); !ok || l > n {
			seeds = append(seeds, seed)
		}
	}
	return seeds
}

// chunkStream is what a client saw of an OpenAI chat stream.
type chunkStream struct {
	id      string // X-Request-Id
	chunkID string // the id inside the chunks (all equal)
	text    string
	content int // content chunks
	finish  string
	usage   *api.Usage
	errCode any // an in-band error's code, nil without one
	done    int // [DONE] events
	// times are the arrival times of the content chunks.
	times []time.Time
}

// readChunks reads an OpenAI chat stream to its end, noting when each
// content chunk arrives; stopAfter > 0 drops the connection after that many
// content chunks.
func readChunks(t *testing.T, st *liveSSE, stopAfter int) chunkStream {
	t.Helper()
	out := chunkStream{id: st.resp.Header.Get("X-Request-Id")}
	var sb strings.Builder
	for {
		ev, err := st.next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if ev.comment != "" {
			continue
		}
		if ev.data == "[DONE]" {
			out.done++
			continue
		}
		require.Zero(t, out.done, "an event after [DONE]")
		var ch struct {
			api.ChatCompletionChunk
			Error *struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &ch), ev.data)
		if ch.Error != nil {
			out.errCode = ch.Error.Code
			continue
		}
		if out.chunkID == "" {
			out.chunkID = ch.ID
		}
		require.Equal(t, out.chunkID, ch.ID, "one id per stream")
		if ch.Usage != nil {
			out.usage = ch.Usage
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil {
				out.finish = *c.FinishReason
			}
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				out.times = append(out.times, time.Now())
				sb.WriteString(*c.Delta.Content)
				out.content++
			}
		}
		if stopAfter > 0 && out.content >= stopAfter {
			st.close()
			break
		}
	}
	out.text = sb.String()
	return out
}

// TestAbortHundredStreams is EN-1: 100 concurrent streams, all sent with
// the same client X-Request-Id; every tenth asks for a long answer and is
// disconnected early. The others get exactly their token counts and their
// own chunks; the aborted ones are cancelled (usage rows) long before
// their end; the engine ends idle.
func TestAbortHundredStreams(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 0.2 })
	base := startChecked(t, s)
	c := poolClient(t, 100)
	seeds := seedsLongerThan(t, 500, 100)

	type outcome struct {
		chunkStream
		maxTokens int
		aborted   bool
	}
	results := make([]outcome, 100)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			o := outcome{maxTokens: 20 + i%17, aborted: i%10 == 9}
			if o.aborted {
				o.maxTokens = 30000
			}
			st := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", "",
				openaiBody("sim/small", seeds[i], o.maxTokens, fmt.Sprintf("request %d", i)),
				map[string]string{"X-Request-Id": "same-id-for-all"})
			if !assert.Equal(t, http.StatusOK, st.resp.StatusCode) {
				return
			}
			stop := 0
			if o.aborted {
				stop = 3
			}
			o.chunkStream = readChunks(t, st, stop)
			results[i] = o
		})
	}
	wg.Wait()

	ids := map[string]bool{}
	for i, o := range results {
		require.NotEmpty(t, o.id, "request %d", i)
		require.False(t, ids[o.id], "server request ids are unique")
		ids[o.id] = true
		require.Equal(t, o.id, o.chunkID, "request %d got another request's chunks", i)
		if o.aborted {
			continue
		}
		require.Equal(t, o.maxTokens, o.content, "request %d: every token, once", i)
		require.Equal(t, "length", o.finish)
		require.NotNil(t, o.usage)
		require.Equal(t, o.maxTokens, o.usage.CompletionTokens)
		require.Equal(t, 1, o.done)
		require.Nil(t, o.errCode)
	}
	requireIdle(t, s)
	require.Equal(t, uint64(100), s.Stats()[0].Completed)
	for _, o := range results {
		if !o.aborted {
			continue
		}
		var ev store.UsageEvent
		require.Eventually(t, func() bool {
			var err error
			ev, err = s.deps.Store.UsageEvent(t.Context(), o.id)
			return err == nil && ev.Status != store.UsageInFlight
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, store.UsageCancelled, ev.Status)
		// Stopped within steps of the disconnect, far from the 500 or more
		// tokens of its natural end.
		require.Less(t, ev.OutputTokens, int64(300), "aborted request %s", o.id)
		require.GreaterOrEqual(t, ev.OutputTokens, int64(3))
	}
}

// TestDisconnectDuringPrefill is EN-2: a client that leaves during the
// chunked prefill of a long prompt stops the prefill at the next chunk and
// frees every block; no token is generated.
func TestDisconnectDuringPrefill(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, func(c *Config) {
		c.Clock = nil
		c.StepTimeScale = 1
		c.Engine.MaxBatchTokens = 256 // a 12k-token prompt takes about 50 steps
	})
	c := testClient(t)
	var sb strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&sb, "w%d ", i)
	}
	st := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", "",
		openaiBody("sim/small", 1, 10, sb.String()), nil)
	if st.resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(st.resp.Body)
		t.Fatalf("status %d: %s", st.resp.StatusCode, b)
	}
	require.Eventually(t, func() bool {
		st := s.Stats()[0]
		return st.Running == 1 && st.ComputedTokens > 0
	}, 5*time.Second, time.Millisecond)
	require.Zero(t, s.Stats()[0].GeneratedTokens, "still in prefill")
	st.close()
	left := time.Now()
	require.Eventually(t, func() bool {
		st := s.Stats()[0]
		return st.Running == 0 && st.Waiting == 0 && st.BlocksUsed == 0
	}, 2*time.Second, time.Millisecond)
	after := s.Stats()[0]
	t.Logf("freed %v after the disconnect, %d prompt tokens computed", time.Since(left), after.ComputedTokens)
	require.Zero(t, after.GeneratedTokens)
	require.Less(t, after.ComputedTokens, uint64(10000), "the prefill stopped early")
	require.Equal(t, uint64(1), after.Completed)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, after.ComputedTokens, s.Stats()[0].ComputedTokens, "nothing computed after the cancel")
}

// smallBufListener shrinks the send buffer of every accepted connection,
// so that a client that stops reading blocks the server's writes early.
type smallBufListener struct {
	net.Listener
	size int
}

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(l.size)
		}
	}
	return c, err
}

// dialSmallWindow connects with a tiny receive buffer (set before the
// handshake, so the advertised window stays small).
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
		})
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rawStream sends a streaming request on conn and returns the response,
// whose body nobody reads until the test says so.
func rawStream(t *testing.T, conn net.Conn, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	var sb strings.Builder
	fmt.Fprintf(&sb, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, len(body))
	for k, v := range hdr {
		fmt.Fprintf(&sb, "%s: %s\r\n", k, v)
	}
	sb.WriteString("\r\n")
	sb.WriteString(body)
	_, err := io.WriteString(conn, sb.String())
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp
}

// completeEvents parses the whole events at the start of b, dropping a
// trailing partial one.
func completeEvents(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	if i := strings.LastIndex(string(b), "\n\n"); i >= 0 {
		return parseSSE(t, b[:i+2])
	}
	return nil
}

// logged reports whether a JSON log line has message msg and request id.
func logged(t *testing.T, logs *syncBuffer, msg, id string) bool {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if line == "" {
			continue
		}
		m := jsonMap(t, line)
		if m["msg"] == msg && m["request_id"] == id {
			return true
		}
	}
	return false
}

// TestSlowClientDropped is EN-3: of 12 resumable streams, one client stops
// reading and one reads a few bytes at a time. Each is disconnected (the
// stalled one when a write times out, the trickling one once it lags more
// than MaxClientLag) while its request goes on generating into the log, and
// each can be resumed to the end with the same text as the others. The ten
// others get every token with no stall: nothing upstream waited on the two
// sockets.
func TestSlowClientDropped(t *testing.T) {
	t.Parallel()
	const tokens = 800
	var logs syncBuffer
	s := newTunedSimLogged(t, newBufferLogger(&logs), func(sc *sim.Config) { sc.MeanOutputTokens = 0 }, func(c *Config) {
		c.StepTimeScale = 1 // about 5 ms a step: 4 s for the whole answer
		// About a second and a half of output (chunks of ~180 bytes at
		// ~200 a second): the trickling reader (3 KB/s) falls that far
		// behind long before the end; a normal reader on a loaded CI
		// machine under -race does not (at 12 KiB, one did).
		c.MaxClientLag = 48 << 10
		c.SendBufferBytes = 0 // smallBufListener sets 1 KiB
		c.StreamWriteTimeout = 3 * time.Second
		c.ResumeGrace = time.Minute
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.ln = smallBufListener{Listener: ln, size: 1024}
	base := startChecked(t, s)
	addr := strings.TrimPrefix(base, "http://")
	c := testClient(t)
	body := openaiBody("sim/small", 7, tokens, "Go on")
	resumable := map[string]string{"X-Resumable": "true"}

	start := time.Now()
	stalled := rawStream(t, dialSmallWindow(t, addr), "/v1/chat/completions", body, resumable)
	trickle := rawStream(t, dialSmallWindow(t, addr), "/v1/chat/completions", body, resumable)
	var trickled []byte
	trickleDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := trickle.Body.Read(buf)
			trickled = append(trickled, buf[:n]...)
			if err != nil {
				trickleDone <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	others := make([]chunkStream, 10)
	var wg sync.WaitGroup
	for i := range others {
		wg.Go(func() {
			st := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", "", body, resumable)
			if assert.Equal(t, http.StatusOK, st.resp.StatusCode) {
				others[i] = readChunks(t, st, 0)
			}
		})
	}

	// Both slow clients are dropped while their requests still generate.
	var stalledDrop time.Time
	for _, resp := range []*http.Response{stalled, trickle} {
		id := resp.Header.Get("X-Request-Id")
		l := s.streams.Get(id, store.LocalTenant)
		require.NotNil(t, l)
		require.Eventually(t, func() bool { return l.Readers() == 0 }, 5*time.Second, time.Millisecond,
			"slow client %s never dropped", id)
		require.False(t, l.Done(), "dropped only after its request ended (%v)", time.Since(start))
		if resp == stalled {
			stalledDrop = time.Now()
		}
		t.Logf("%s dropped by %v", id, time.Since(start))
	}
	require.True(t, logged(t, &logs, "closing a client that fell behind", trickle.Header.Get("X-Request-Id")),
		"the trickling client was dropped for its lag")
	wg.Wait()
	require.Error(t, <-trickleDone)

	// The others: every token, the same text, and no stall while the
	// stalled client's writes blocked (a stall behind its socket would last
	// about the write timeout, 3 s; the bound leaves room for a loaded
	// machine).
	want := others[0].text
	var worst time.Duration
	var worstAt time.Time
	for i, o := range others {
		require.Equal(t, tokens, o.content, "stream %d (dropped for lag: %v)", i,
			logged(t, &logs, "closing a client that fell behind", o.id))
		require.Equal(t, want, o.text)
		require.Equal(t, 1, o.done)
		for k := 1; k < len(o.times); k++ {
			if gap := o.times[k].Sub(o.times[k-1]); gap > worst {
				worst, worstAt = gap, o.times[k]
			}
		}
	}
	t.Logf("others: worst gap between tokens %v, ending %v after the start (stalled client dropped at %v)",
		worst, worstAt.Sub(start), stalledDrop.Sub(start))
	require.Less(t, worst, s.cfg.StreamWriteTimeout*2/3, "other streams stalled")

	// Both slow requests ran to their end in the log; each client resumes
	// from the last event it got whole.
	stalledBytes, _ := io.ReadAll(stalled.Body)
	for _, got := range []struct {
		resp *http.Response
		b    []byte
	}{{stalled, stalledBytes}, {trickle, trickled}} {
		id := got.resp.Header.Get("X-Request-Id")
		head := completeEvents(t, got.b)
		require.NotEmpty(t, head)
		last := head[len(head)-1].id
		again := openSSE(t, c, http.MethodGet, resumeURL(base, id), "", "", map[string]string{"Last-Event-ID": last})
		require.Equal(t, http.StatusOK, again.resp.StatusCode)
		tail := again.rest(t)
		a, _ := openaiText(t, head)
		b, _ := openaiText(t, tail)
		require.Equal(t, want, a+b, "request %s resumed after event %s", id, last)
		require.Equal(t, "[DONE]", tail[len(tail)-1].data)
	}
}

// TestOverAdmissionPreempts is EN-4: four times more work than a small KV
// pool holds, admitted optimistically: every request completes through
// preemption, and each answer is the one it gets alone. Then EN-5: a
// request that can never fit is refused at once.
func TestOverAdmissionPreempts(t *testing.T) {
	t.Parallel()
	const blocks, requests, maxTokens = 64, 16, 200
	tiny := func(sc *sim.Config) {
		sc.ReserveFraction = 0
		sc.GPU.MemoryBytes = sc.Model.WeightBytes() + blocks*int64(sc.BlockSize)*sc.Model.KVBytesPerToken()
		sc.MeanOutputTokens = 0 // every answer runs to max_tokens
	}
	bodies := make([]string, requests)
	for i := range bodies {
		var sb strings.Builder
		for j := range 30 {
			fmt.Fprintf(&sb, "r%dw%d ", i, j)
		}
		bodies[i] = fmt.Sprintf(`{"model":"sim/small","seed":%d,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
			i, maxTokens, sb.String())
	}
	type answer struct {
		Text  string
		Usage api.Usage
	}
	run := func(base string, c *http.Client, i int) answer {
		resp, b := post(t, c, base+"/v1/chat/completions", bodies[i])
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		var cc api.ChatCompletion
		require.NoError(t, json.Unmarshal(b, &cc))
		require.Equal(t, "length", cc.Choices[0].FinishReason)
		return answer{Text: cc.Choices[0].Message.Content, Usage: *cc.Usage}
	}

	// Alone, one at a time, on a virtual clock: no preemption.
	ref := newTunedSim(t, tiny, func(c *Config) {
		c.Engine.ExpectedOutputTokens = 1 // admit on the prompt alone
		c.Clock = engine.NewVirtualClock(time.Unix(1_700_000_000, 0))
	})
	refBase := startChecked(t, ref)
	require.Equal(t, blocks, ref.Stats()[0].BlocksTotal)
	c := poolClient(t, requests)
	want := make([]answer, requests)
	for i := range want {
		want[i] = run(refBase, c, i)
	}
	require.Zero(t, ref.Stats()[0].Preemptions)

	// Together, on the real clock.
	s := newTunedSim(t, tiny, func(c *Config) {
		c.Engine.ExpectedOutputTokens = 1
		c.StepTimeScale = 0.1
	})
	base := startChecked(t, s)
	got := make([]answer, requests)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = run(base, c, i) })
	}
	wg.Wait()
	st := s.Stats()[0]
	t.Logf("preemptions: %d (swap %d, recompute %d)", st.Preemptions, st.PreemptionsSwap, st.PreemptionsRecompute)
	require.Positive(t, st.Preemptions)
	require.Equal(t, uint64(requests), st.Completed)
	for i := range got {
		require.Equal(t, want[i].Text, got[i].Text, "request %d", i)
		require.Equal(t, maxTokens, got[i].Usage.CompletionTokens)
	}

	// EN-5: a request that can never fit is refused at once, not queued.
	limit := s.models.List()[0].Limit
	require.LessOrEqual(t, limit, blocks*16)
	steps := s.Stats()[0].Steps
	began := time.Now()
	resp, b := post(t, c, base+"/v1/chat/completions",
		fmt.Sprintf(`{"model":"sim/small","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, limit))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	require.Equal(t, pipeline.CodeContextLength, errorOf(t, b)["code"])
	require.Less(t, time.Since(began), 2*time.Second)
	require.Equal(t, steps, s.Stats()[0].Steps, "never reached the engine")
}

// TestKVExhaustedMidDecode is EN-6 on a fake: a request the engine ends
// with an error mid-decode (no KV block left, nothing to preempt) ends its
// stream with an error event; the next request is served.
func TestKVExhaustedMidDecode(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, "fine")
	f.script = func(req engine.Request) []engine.Event {
		if !strings.Contains(byteTokenizer{}.Decode(req.Prompt), "huge") {
			return answer(req, "fine")
		}
		return []engine.Event{
			{Kind: engine.EventToken, Token: 'a'},
			{Kind: engine.EventToken, Token: 'b'},
			{Kind: engine.EventFinish, Finish: engine.FinishError, Err: fmt.Errorf("engine: grow sequence: %w", kvcache.ErrNoFreeBlocks)},
			{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: len(req.Prompt), OutputTokens: 2}},
		}
	}
	_, base := startReplicas(t, testConfig(), f)
	c := testClient(t)
	for _, path := range []string{"/v1/chat/completions", "/v1/chat"} {
		resp, b := post(t, c, base+path, `{"model":"m","stream":true,"messages":[{"role":"user","content":"huge"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		evs := dataEvents(parseSSE(t, b))
		require.Equal(t, 1, terminalCount(evs))
		if path == "/v1/chat" {
			require.Equal(t, "error", evs[len(evs)-1].event)
			require.Contains(t, evs[len(evs)-1].data, "internal error (request id")
		} else {
			require.Equal(t, "[DONE]", evs[len(evs)-1].data)
			require.Equal(t, "server_error", errorOf(t, []byte(evs[len(evs)-2].data))["type"])
		}
		resp, b = post(t, c, base+path, `{"model":"m","stream":false,"messages":[{"role":"user","content":"small"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
}

// TestOversizedPromptSameError is EN-7: an oversized prompt gets the same
// 400 streamed or not, with the token counts in the message.
func TestOversizedPromptSameError(t *testing.T) {
	t.Parallel()
	f := newFake("m", 64, "x")
	_, base := startReplicas(t, testConfig(), f)
	c := testClient(t)
	long := strings.Repeat("y", 100)
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":%q}]%s}`},
		{"/v1/completions", `{"model":"m","prompt":%q%s}`},
		{"/v1/chat", `{"model":"m","messages":[{"role":"user","content":%q}]%s}`},
	} {
		var bodies []string
		for _, extra := range []string{`,"stream":true`, `,"stream":false`} {
			resp, b := post(t, c, base+tc.path, fmt.Sprintf(tc.body, long, extra))
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			e := errorOf(t, b)
			require.Equal(t, pipeline.CodeContextLength, e["code"])
			require.Regexp(t, `maximum context length is 64 tokens.* resulted in 1\d\d tokens`, e["message"])
			bodies = append(bodies, string(b))
		}
		require.Equal(t, bodies[0], bodies[1], tc.path)
	}
	require.Empty(t, f.requests(), "nothing reached the engine")
}

// pacedReplica answers every request with tokens 'z' tokens, waiting
// pause(i) before token i; a negative pause stalls the request, as a
// wedged decode would: no further event until it is cancelled. Like the
// engine, it finishes a cancelled request at once.
type pacedReplica struct {
	noPrefixCache
	info   engine.ExecutorInfo
	tokens int
	pause  func(i int) time.Duration
	// cancelled counts requests ended by their context.
	cancelled atomic.Int32
}

// newStall returns a replica whose requests stall after tokens tokens.
func newStall(id string, tokens int) *pacedReplica {
	return newPaced(id, tokens+1, func(i int) time.Duration {
		if i < tokens {
			return 0
		}
		return -1
	})
}

func newPaced(id string, tokens int, pause func(i int) time.Duration) *pacedReplica {
	return &pacedReplica{info: engine.ExecutorInfo{Model: id, NumBlocks: 64, BlockSize: 16, ContextLength: 4096},
		tokens: tokens, pause: pause}
}

func (r *pacedReplica) Submit(ctx context.Context, req engine.Request) (pipeline.EventStream, error) {
	return &pacedStream{r: r, sub: ctx, req: req}, nil
}

func (r *pacedReplica) Info() engine.ExecutorInfo { return r.info }
func (r *pacedReplica) MaxSeqTokens() int         { return r.info.ContextLength }
func (r *pacedReplica) Stats() engine.Stats       { return engine.Stats{Model: r.info.Model} }
func (r *pacedReplica) Requests(context.Context) ([]engine.RequestState, error) {
	return nil, nil
}

type pacedStream struct {
	r    *pacedReplica
	sub  context.Context
	req  engine.Request
	sent int
	tail []engine.Event
	ends bool
}

func (s *pacedStream) Next(ctx context.Context) (engine.Event, error) {
	if !s.ends && s.sent < min(s.r.tokens, s.req.MaxTokens) {
		var wait <-chan time.Time // nil: forever
		if d := s.r.pause(s.sent); d >= 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			wait = t.C
		}
		select {
		case <-ctx.Done():
			return engine.Event{}, ctx.Err()
		case <-wait:
			if s.sub.Err() == nil {
				s.sent++
				return engine.Event{Kind: engine.EventToken, Token: 'z', Time: time.Now()}, nil
			}
		case <-s.sub.Done():
		}
		s.ends = true
		s.r.cancelled.Add(1)
		s.tail = []engine.Event{{Kind: engine.EventFinish, Finish: engine.FinishCancelled},
			{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: len(s.req.Prompt), OutputTokens: s.sent}}}
	}
	if !s.ends {
		s.ends = true
		s.tail = []engine.Event{{Kind: engine.EventFinish, Finish: engine.FinishLength},
			{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: len(s.req.Prompt), OutputTokens: s.sent}}}
	}
	if len(s.tail) == 0 {
		return engine.Event{}, io.EOF
	}
	ev := s.tail[0]
	s.tail = s.tail[1:]
	return ev, nil
}

// TestWatchdogEndsStalledStream is EN-9: a request that produced a token
// and then nothing ends with an error event (code stalled) after
// StallTimeout, although heartbeats flowed meanwhile; the engine request is
// cancelled.
func TestWatchdogEndsStalledStream(t *testing.T) {
	t.Parallel()
	r := newStall("m", 1)
	cfg := testConfig()
	cfg.StallTimeout = time.Second
	cfg.HeartbeatInterval = 100 * time.Millisecond
	_, base := startReplicas(t, cfg, r)
	c := testClient(t)
	var wg sync.WaitGroup
	for _, path := range []string{"/v1/chat", "/v1/chat/completions"} {
		wg.Go(func() {
			st := openSSE(t, c, http.MethodPost, base+path, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
			require.Equal(t, http.StatusOK, st.resp.StatusCode)
			var tokenAt, errAt time.Time
			pings := 0
			var evs []sseEvent
			for {
				ev, err := st.next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				evs = append(evs, ev)
				switch {
				case ev.comment == "ping":
					if !tokenAt.IsZero() {
						pings++
					}
				case strings.Contains(ev.data, `"z"`):
					tokenAt = time.Now()
				case strings.Contains(ev.data, `"error"`):
					errAt = time.Now()
				}
			}
			require.False(t, tokenAt.IsZero(), "%s: the token arrived", path)
			require.False(t, errAt.IsZero(), "%s: an error event arrived: %v", path, tailLines(evs))
			stalled := errAt.Sub(tokenAt)
			t.Logf("%s: stopped %v after the token, %d pings meanwhile", path, stalled, pings)
			require.GreaterOrEqual(t, stalled, 900*time.Millisecond)
			require.Less(t, stalled, 5*time.Second)
			require.GreaterOrEqual(t, pings, 2, "heartbeats flowed during the stall")
			data := dataEvents(evs)
			require.Equal(t, 1, terminalCount(data))
			var e map[string]any
			if path == "/v1/chat" {
				require.Equal(t, "error", data[len(data)-1].event)
				e = jsonMap(t, data[len(data)-1].data)["error"].(map[string]any)
			} else {
				require.Equal(t, "[DONE]", data[len(data)-1].data)
				e = errorOf(t, []byte(data[len(data)-2].data))
			}
			require.Equal(t, "stalled", e["code"])
		})
	}
	wg.Wait()
	require.Equal(t, int32(2), r.cancelled.Load(), "both engine requests cancelled")
}

// markerRE finds a request's marker (p<pair>s<side>) in its prompt.
var markerRE = regexp.MustCompile(`p\d+s\d`)

// echoScript answers each request with the marker in its prompt.
func echoScript(req engine.Request) []engine.Event {
	return answer(req, markerRE.FindString(byteTokenizer{}.Decode(req.Prompt)))
}

// TestSameClientRequestID is EN-10: two concurrent streams sent with the
// same X-Request-Id each get only their own tokens, over 1,000 pairs (sent
// through the handler: no sockets, same relays and logs).
func TestSameClientRequestID(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, "")
	f.script = echoScript
	s, _ := startReplicas(t, testConfig(), f)
	const pairs, workers = 1000, 8
	paths := []string{"/v1/chat/completions", "/v1/chat"}
	var next atomic.Int64
	var crossed atomic.Int64
	var mu sync.Mutex
	var problems []string
	fail := func(p string) {
		mu.Lock()
		problems = append(problems, p)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for p := int(next.Add(1)); p <= pairs; p = int(next.Add(1)) {
				var pw sync.WaitGroup
				for side := range 2 {
					pw.Go(func() {
						mine := fmt.Sprintf("p%ds%d", p, side)
						w := serve(t.Context(), s, http.MethodPost, paths[(p+side)%2],
							fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":%q}]}`, mine),
							map[string]string{"X-Request-Id": fmt.Sprintf("dup-%d", p)}, 10*time.Second)
						switch got := sseText(w.Body.Bytes()); {
						case w.Code != http.StatusOK:
							fail(fmt.Sprintf("status %d", w.Code))
						case got != mine && markerRE.MatchString(got) && !strings.Contains(got, mine):
							crossed.Add(1)
						case got != mine:
							fail(fmt.Sprintf("p%d: %q instead of %q (terminal: %s)", p, got, mine, shapeOf(paths[(p+side)%2], w.Body.Bytes())))
						}
					})
				}
				pw.Wait()
			}
		})
	}
	wg.Wait()
	require.Zero(t, crossed.Load(), "streams that got another request's tokens")
	require.Empty(t, problems)
	require.Len(t, f.requests(), 2*pairs)
	ids := map[string]bool{}
	for _, r := range f.requests() {
		require.False(t, ids[r.ID], "engine ids are the server's own")
		ids[r.ID] = true
	}
}

// shapeOf describes how a stream ended, for failure messages.
func shapeOf(path string, b []byte) string {
	kind, problem := terminalShape(path == "/v1/chat", b)
	return kind + " " + problem
}

// sseText joins the text of a stream in either format (safe in any
// goroutine).
func sseText(b []byte) string {
	var sb strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var m struct {
			Delta   string `json:"delta"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &m) != nil {
			continue
		}
		sb.WriteString(m.Delta)
		for _, c := range m.Choices {
			sb.WriteString(c.Delta.Content)
		}
	}
	return sb.String()
}

// terminalShape checks that a whole stream ends with exactly one terminal
// event: native "done" or "error" last; OpenAI "[DONE]" last, preceded by
// at most one error chunk. It returns "done" or "error" and a problem, ""
// if none (safe in any goroutine).
func terminalShape(native bool, b []byte) (string, string) {
	text := string(b)
	if !strings.HasSuffix(text, "\n\n") {
		return "", "the stream does not end with a whole event"
	}
	var evs []sseEvent
	for _, block := range strings.Split(strings.TrimSuffix(text, "\n\n"), "\n\n") {
		var ev sseEvent
		for _, line := range strings.Split(block, "\n") {
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "":
				ev.comment = value
			case "event":
				ev.event = value
			case "data":
				ev.data = value
			}
		}
		if ev.comment == "" {
			evs = append(evs, ev)
		}
	}
	if len(evs) == 0 {
		return "", "no events"
	}
	last := evs[len(evs)-1]
	if native {
		if n := terminalCount(evs); n != 1 {
			return "", fmt.Sprintf("%d terminal events", n)
		}
		if last.event != "done" && last.event != "error" {
			return "", fmt.Sprintf("last event %q", last.event)
		}
		return last.event, ""
	}
	if n := terminalCount(evs); n != 1 || last.data != "[DONE]" {
		return "", fmt.Sprintf("%d [DONE] events, last %q", n, last.data)
	}
	switch errs := countErrors(evs); {
	case errs > 1:
		return "", fmt.Sprintf("%d error chunks", errs)
	case errs == 1 && !strings.HasPrefix(evs[len(evs)-2].data, `{"error"`):
		return "", "the error chunk is not the last before [DONE]"
	case errs == 1:
		return "error", ""
	}
	return "done", ""
}

// TestOneTerminalEventEveryPath is EN-8: over 1,000 short streams on every
// path (natural end, max_tokens, stop string, engine error, stall, DELETE),
// in both formats, each stream ends with exactly one terminal event within
// a 10 s client timeout. The DELETE runs go over sockets (the client reads
// as the stream goes), the others through the handler. Shutdown has its
// own test (TestDrainLiveStreams).
func TestOneTerminalEventEveryPath(t *testing.T) {
	t.Parallel()
	normal := newFake("normal", 4096, "so, fine")
	broken := newFake("broken", 4096, "")
	broken.script = func(req engine.Request) []engine.Event {
		return []engine.Event{
			{Kind: engine.EventToken, Token: 'o'},
			{Kind: engine.EventToken, Token: 'k'},
			{Kind: engine.EventFinish, Finish: engine.FinishError, Err: errors.New("gpu on fire")},
			{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{InputTokens: len(req.Prompt), OutputTokens: 2}},
		}
	}
	slow := newFake("slow", 4096, strings.Repeat("s", 2000))
	slow.delay = time.Millisecond
	stall := newStall("stall", 2)
	cfg := testConfig()
	// Long enough that the slow model's 1 ms gaps never reach it on a
	// loaded machine (a stalled "cancelled" run would be gone before its
	// DELETE), short enough for the 40 stalled runs.
	cfg.StallTimeout = 500 * time.Millisecond
	s, base := startReplicas(t, cfg, normal, broken, slow, stall)
	c := poolClient(t, 8)
	c.Timeout = 10 * time.Second

	type path struct {
		name, model, extra, want string
		runs                     int
	}
	paths := []path{
		{name: "natural end", model: "normal", want: "done", runs: 260},
		{name: "max_tokens", model: "normal", extra: `,"max_tokens":3`, want: "done", runs: 220},
		{name: "stop string", model: "normal", extra: `,"stop":["fi"]`, want: "done", runs: 220},
		{name: "engine error", model: "broken", want: "error", runs: 200},
		{name: "stalled", model: "stall", want: "error", runs: 40},
		{name: "cancelled", model: "slow", want: "error", runs: 60},
	}
	type run struct {
		p      path
		native bool
	}
	var runs []run
	for _, p := range paths {
		for i := range p.runs {
			runs = append(runs, run{p, i%2 == 0})
		}
	}
	require.Len(t, runs, 1000)
	var next atomic.Int64
	var mu sync.Mutex
	problems := map[string]int{}
	fail := func(p string) {
		mu.Lock()
		problems[p]++
		mu.Unlock()
	}
	check := func(r run, b []byte) {
		if got, problem := terminalShape(r.native, b); problem != "" || got != r.p.want {
			fail(fmt.Sprintf("%s native=%v: got %q %s", r.p.name, r.native, got, problem))
		}
	}
	var lateDeletes atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(runs); i = int(next.Add(1)) - 1 {
				r := runs[i]
				path := "/v1/chat/completions"
				if r.native {
					path = "/v1/chat"
				}
				body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]%s}`, r.p.model, r.p.extra)
				if r.p.name != "cancelled" {
					w := serve(t.Context(), s, http.MethodPost, path, body, nil, 10*time.Second)
					if w.Code != http.StatusOK {
						fail(fmt.Sprintf("%s: status %d", r.p.name, w.Code))
						continue
					}
					check(r, w.Body.Bytes())
					continue
				}
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
				resp, err := c.Do(req)
				if err != nil {
					fail(r.p.name + ": " + err.Error())
					continue
				}
				// Read up to the first token, DELETE, then read the tail.
				br := bufio.NewReader(resp.Body)
				for {
					line, err := br.ReadString('\n')
					if err != nil || strings.Contains(line, `"s"`) {
						break
					}
				}
				del, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, requestURL(base, resp.Header.Get("X-Request-Id")), nil)
				if dr, err := c.Do(del); err != nil {
					fail(r.p.name + ": DELETE: " + err.Error())
				} else {
					dr.Body.Close()
					switch dr.StatusCode {
					case http.StatusOK:
					case http.StatusNotFound, http.StatusConflict:
						// On a starved machine the watchdog may end the
						// stream (a gap over the stall timeout) before the
						// DELETE: still one terminal event, checked below.
						lateDeletes.Add(1)
					default:
						fail(fmt.Sprintf("%s: DELETE %d", r.p.name, dr.StatusCode))
					}
				}
				rest, err := io.ReadAll(br)
				resp.Body.Close()
				if err != nil {
					fail(r.p.name + ": " + err.Error())
					continue
				}
				check(r, rest)
			}
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	if n := lateDeletes.Load(); n > 0 {
		t.Logf("%d cancelled runs had already ended (stalled) when their DELETE came", n)
	}
	require.Equal(t, int32(40), stall.cancelled.Load())
	require.Equal(t, 60, slow.cancellations())
}

// TestDrainLiveStreams is EN-12: with 50 live streams, stopping the server
// turns readiness to 503 at once and refuses new requests; every stream
// ends with a terminal event (done for those that finish in time, an error
// for the others) before the drain deadline; every request has its final
// usage row once Run returns.
func TestDrainLiveStreams(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) {
		c.StepTimeScale = 3 // about 20 ms a step
		// The short answers need about 0.5 s; the margin is for a loaded
		// CI machine running the package's other tests beside this one.
		c.ShutdownTimeout = 3 * time.Second
	})
	addr, err := s.Listen()
	require.NoError(t, err)
	base := "http://" + addr.String()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateReady }, 5*time.Second, time.Millisecond)
	c := poolClient(t, 64)

	const streams = 50
	long := seedsLongerThan(t, 500, streams)
	type live struct {
		st     *liveSSE
		short  bool
		native bool
		id     string
	}
	lives := make([]live, streams)
	var opened sync.WaitGroup
	for i := range lives {
		opened.Go(func() {
			l := live{short: i%2 == 0, native: i%4 < 2}
			maxTokens := 30000
			if l.short {
				maxTokens = 25 // about 0.5 s of steps: done within the deadline
			}
			if l.native {
				l.st = openSSE(t, c, http.MethodPost, base+"/v1/chat", "", nativeBody(long[i], maxTokens, fmt.Sprintf("drain %d", i)), nil)
			} else {
				l.st = openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", "",
					openaiBody("sim/small", long[i], maxTokens, fmt.Sprintf("drain %d", i)), nil)
			}
			require.Equal(t, http.StatusOK, l.st.resp.StatusCode)
			l.id = l.st.resp.Header.Get("X-Request-Id")
			l.st.take(t, 1)
			lives[i] = l
		})
	}
	opened.Wait()

	type ending struct {
		kind string
		at   time.Time
		err  string
	}
	endings := make([]ending, streams)
	var wg sync.WaitGroup
	for i, l := range lives {
		wg.Go(func() {
			var all []byte
			for {
				ev, err := l.st.next()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						endings[i].err = err.Error()
					}
					break
				}
				for _, line := range ev.lines {
					all = append(all, line...)
					all = append(all, '\n')
				}
				all = append(all, '\n')
			}
			endings[i].at = time.Now()
			kind, problem := terminalShape(l.native, all)
			endings[i].kind = kind
			if problem != "" {
				endings[i].err += problem
			}
		})
	}

	began := time.Now()
	stop()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateDraining }, time.Second, time.Millisecond)
	t.Logf("draining %v after the stop", time.Since(began))
	w := serve(t.Context(), s, http.MethodGet, "/readyz", "", nil, time.Second)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.JSONEq(t, `{"status":"draining"}`, w.Body.String())
	w = serve(t.Context(), s, http.MethodPost, "/v1/chat/completions",
		`{"model":"sim/small","messages":[{"role":"user","content":"late"}]}`, nil, time.Second)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	// Over the network a new request is refused one way or another.
	if resp, err := c.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim/small","messages":[{"role":"user","content":"late"}]}`)); err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}

	wg.Wait()
	counts := map[string]int{}
	for i, e := range endings {
		require.Empty(t, e.err, "stream %d", i)
		require.Less(t, e.at.Sub(began), s.cfg.ShutdownTimeout+4*time.Second, "stream %d ended late", i)
		want := "error"
		if lives[i].short {
			want = "done"
		}
		require.Equal(t, want, e.kind, "stream %d", i)
		counts[e.kind]++
	}
	t.Logf("endings: %v, last %v after the stop", counts, time.Since(began))
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	requireIdle(t, s)

	st, err := store.Open(context.Background(), s.cfg.DataDir)
	require.NoError(t, err)
	defer st.Close()
	for i, l := range lives {
		ev, err := st.UsageEvent(context.Background(), l.id)
		require.NoError(t, err, "stream %d has no usage row", i)
		want := store.UsageCancelled
		if l.short {
			want = store.UsageFinished
		}
		require.Equal(t, want, ev.Status, "stream %d", i)
		require.Positive(t, ev.OutputTokens)
	}
}
