package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/upstream/probe"
)

// fakeEngine is a vLLM-like engine: /v1/models, /health, /metrics (its
// waiting count settable) and streamed chat completions that wait for
// release before answering, recording the order they arrived in.
type fakeEngine struct {
	srv     *httptest.Server
	waiting atomic.Int64
	healthy atomic.Bool
	mu      sync.Mutex
	order   []string                 // request ids, in arrival order
	gates   map[string]chan struct{} // closed when the request may answer
	// drop is a request id whose first arrival finds its connection
	// closed unanswered, as a server closing an idle keep-alive
	// connection does when a request crosses the close.
	drop string
}

// gate is the channel request id waits on.
func (f *fakeEngine) gate(id string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gates[id]
	if g == nil {
		g = make(chan struct{})
		f.gates[id] = g
	}
	return g
}

// open lets request id answer.
func (f *fakeEngine) open(id string) { close(f.gate(id)) }

func newFakeEngine(t *testing.T) *fakeEngine {
	f := &fakeEngine{gates: map[string]chan struct{}{}}
	f.healthy.Store(true)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","max_model_len":2048}]}`)
		case "/version":
			_, _ = io.WriteString(w, `{"version":"0.9.2"}`)
		case "/health":
			if !f.healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/metrics":
			fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\n"+
				"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n"+
				"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n", f.waiting.Load())
		case "/v1/chat/completions":
			id := r.Header.Get("X-Request-Id")
			f.mu.Lock()
			f.order = append(f.order, id)
			drop := id == f.drop
			if drop {
				f.drop = ""
			}
			f.mu.Unlock()
			if drop {
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_ = c.Close()
				}
				return
			}
			gate := f.gate(id)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n")
			fmt.Fprint(w, "data: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngine) arrived() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.order...)
}

// startSet runs a Set over engines until the test ends.
func startSet(t *testing.T, cfg Config, engines ...*fakeEngine) *Set {
	t.Helper()
	for _, e := range engines {
		cfg.URLs = append(cfg.URLs, e.srv.URL)
	}
	cfg.Model = "model"
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	s, err := New(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, probe.KindVLLM, s.Kind())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// job is a chat job of tenant at priority p with prompt tokens.
func job(id, tenant string, p engine.Priority, prompt []int32) *pipeline.Job {
	return &pipeline.Job{ID: id, Endpoint: pipeline.EndpointChatCompletions, Principal: pipeline.Principal{Tenant: tenant},
		Priority: p, Prompt: prompt, MaxTokens: 4, N: 1,
		Upstream: &pipeline.UpstreamCall{Path: "/v1/chat/completions", Body: map[string]json.RawMessage{
			"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`)}}}
}

// nopSink discards an answer.
type nopSink struct{ text string }

func (s *nopSink) Begin() error { return nil }
func (s *nopSink) Text(_ int, t string, _ []api.TokenLogprob) error {
	s.text += t
	return nil
}
func (s *nopSink) ToolCall(int, api.ToolCallDelta) error        { return nil }
func (s *nopSink) Finish(int, string, []api.TokenLogprob) error { return nil }
func (s *nopSink) End(pipeline.Usage) error                     { return nil }
func (s *nopSink) Fail(error) int                               { return 0 }

// TestSetReleasesByClassThenTenant: with room for one request at a time,
// queued requests reach the engine by class, and tenants take turns
// within one; each answer's usage is the engine's.
func TestSetReleasesByClassThenTenant(t *testing.T) {
	e := newFakeEngine(t)
	s := startSet(t, Config{MaxInflight: 1}, e)
	ctx := t.Context()
	first, err := s.Start(ctx, job("first", "x", engine.PriorityFree, nil))
	require.NoError(t, err) // holds the only slot until released
	type started struct {
		id  string
		run pipeline.Execution
	}
	results := make(chan started, 8)
	queue := []*pipeline.Job{job("a1", "a", engine.PriorityFree, nil), job("a2", "a", engine.PriorityFree, nil),
		job("b1", "b", engine.PriorityFree, nil), job("e1", "e", engine.PriorityEnterprise, nil)}
	for k, j := range queue {
		go func() {
			run, err := s.Start(ctx, j)
			if err == nil {
				results <- started{j.ID, run}
			}
		}()
		// One at a time, so that each tenant's order is known.
		require.Eventually(t, func() bool { return s.Stats().Waiting == k+1 }, 5*time.Second, time.Millisecond)
	}
	require.Equal(t, 1, s.Stats().WaitingByPriority[engine.PriorityEnterprise])
	e.open("first")
	sink := &nopSink{}
	res := first.Relay(ctx, sink, nil)
	require.NoError(t, res.Err)
	require.Equal(t, "hi", sink.text)
	require.Equal(t, pipeline.Usage{InputTokens: 5, OutputTokens: 1}, res.Usage)
	for range queue {
		st := <-results
		e.open(st.id)
		require.NoError(t, st.run.Relay(ctx, &nopSink{}, nil).Err)
	}
	require.Equal(t, []string{"first", "e1", "a1", "b1", "a2"}, e.arrived())
}

// TestSetHoldsBackWhileTheEngineQueues: while the engine's own waiting
// queue is past the bound, nothing more is sent to it.
func TestSetHoldsBackWhileTheEngineQueues(t *testing.T) {
	e := newFakeEngine(t)
	e.waiting.Store(50)
	s := startSet(t, Config{MaxWaiting: 4}, e)
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		run, err := s.Start(ctx, job("j", "a", engine.PriorityPaid, nil))
		if err == nil {
			e.open("j")
			err = run.Relay(ctx, &nopSink{}, nil).Err
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // several polls
	require.Empty(t, e.arrived(), "sent while the engine's queue was past the bound")
	require.Equal(t, 1, s.Stats().Waiting)
	e.waiting.Store(0)
	require.NoError(t, <-got)
	require.Equal(t, []string{"j"}, e.arrived())
}

// TestSetPrefixAffinityAndHealth: a prompt goes back to the replica that
// saw its prefix; a replica whose health check fails is left out until it
// passes again; with none healthy, requests fail with 503.
func TestSetPrefixAffinityAndHealth(t *testing.T) {
	e1, e2 := newFakeEngine(t), newFakeEngine(t)
	s := startSet(t, Config{}, e1, e2)
	ctx := t.Context()
	long := func(word string) *pipeline.Job {
		j := job(word, "a", engine.PriorityPaid, nil)
		j.Upstream.Body["messages"] = json.RawMessage(fmt.Sprintf(`[{"role":"user","content":%q}]`,
			strings.Repeat(word+" ", 64)))
		return j
	}
	// P goes to e1 (both idle: the first); e1 then holds a request.
	p1 := long("apple")
	run, err := s.Start(ctx, p1)
	require.NoError(t, err)
	e1.open("apple")
	require.NoError(t, run.Relay(ctx, &nopSink{}, nil).Err)
	busy, err := s.Start(ctx, long("busy"))
	require.NoError(t, err)
	require.Equal(t, []string{"apple", "busy"}, e1.arrived())
	// P again: back to e1, which holds its prefix, though e2 is idler; a
	// new prompt goes to the idler e2.
	p2 := long("apple")
	p2.ID = "apple-again"
	run, err = s.Start(ctx, p2)
	require.NoError(t, err)
	e1.open("apple-again")
	require.NoError(t, run.Relay(ctx, &nopSink{}, nil).Err)
	run, err = s.Start(ctx, long("cherry"))
	require.NoError(t, err)
	e2.open("cherry")
	require.NoError(t, run.Relay(ctx, &nopSink{}, nil).Err)
	require.Equal(t, []string{"apple", "busy", "apple-again"}, e1.arrived())
	require.Equal(t, []string{"cherry"}, e2.arrived())
	e1.open("busy")
	require.NoError(t, busy.Relay(ctx, &nopSink{}, nil).Err)

	e1.healthy.Store(false)
	e2.healthy.Store(false)
	healthy := func(i int) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.replicas[i].healthy
	}
	require.Eventually(t, func() bool { return !healthy(0) && !healthy(1) }, 5*time.Second, 5*time.Millisecond)
	_, err = s.Start(ctx, job("down", "a", engine.PriorityPaid, nil))
	require.ErrorIs(t, err, errNoReplica)
	e2.healthy.Store(true)
	require.Eventually(t, func() bool { return healthy(1) }, 5*time.Second, 5*time.Millisecond)
	run, err = s.Start(ctx, job("up", "a", engine.PriorityPaid, nil))
	require.NoError(t, err)
	e2.open("up")
	require.NoError(t, run.Relay(ctx, &nopSink{}, nil).Err)
	require.Contains(t, e2.arrived(), "up")
}

// TestSetStalledEngine: an engine that accepts a stream and then says
// nothing for the stall timeout is cut off: the answer ends with
// ErrUpstreamLost and the replica leaves rotation until its health check
// passes.
func TestSetStalledEngine(t *testing.T) {
	e := newFakeEngine(t)
	s := startSet(t, Config{Stall: 150 * time.Millisecond, Poll: time.Hour}, e)
	ctx := t.Context()
	run, err := s.Start(ctx, job("stuck", "a", engine.PriorityPaid, nil))
	require.NoError(t, err)
	res := run.Relay(ctx, &nopSink{}, nil) // the engine never opens "stuck"
	require.ErrorIs(t, res.Err, ErrUpstreamLost)
	require.Equal(t, string(engine.FinishError), res.Finish)
	require.Equal(t, "usage estimated: the upstream sent none", res.Note)
	s.mu.Lock()
	healthy := s.replicas[0].healthy
	s.mu.Unlock()
	require.False(t, healthy)
}

// TestSetRetriesAClosedKeepAliveConnection: a request sent on a kept-alive
// connection that the engine closes unanswered (an idle timeout crossing
// the request, as uvicorn's 5 s one does under vLLM) is sent again on a
// new connection instead of failing the client's request.
func TestSetRetriesAClosedKeepAliveConnection(t *testing.T) {
	e := newFakeEngine(t)
	s := startSet(t, Config{Poll: time.Hour}, e)
	ctx := t.Context()
	for _, id := range []string{"first", "second"} {
		if id == "second" {
			e.mu.Lock()
			e.drop = id
			e.mu.Unlock()
		}
		e.open(id)
		run, err := s.Start(ctx, job(id, "a", engine.PriorityPaid, nil))
		require.NoError(t, err, id)
		sink := &nopSink{}
		res := run.Relay(ctx, sink, nil)
		require.NoError(t, res.Err, id)
		require.Equal(t, "hi", sink.text, id)
	}
	require.Equal(t, []string{"first", "second", "second"}, e.arrived())
}

// TestSetLadder: requests that wait here past the high mark climb the
// degradation ladder (which the pipeline's free-tier limits read from
// Stats), a batch request is held from pause_batch up, and the ladder
// comes down once the queue is calm.
func TestSetLadder(t *testing.T) {
	e := newFakeEngine(t)
	s := startSet(t, Config{MaxInflight: 1, Ladder: engine.LadderConfig{QueueWaitHigh: 40 * time.Millisecond,
		QueueWaitLow: 10 * time.Millisecond, KVHigh: 0.97, KVLow: 0.85, Hold: 30 * time.Millisecond}}, e)
	ctx := t.Context()
	hold, err := s.Start(ctx, job("hold", "a", engine.PriorityPaid, nil))
	require.NoError(t, err)
	free := make(chan pipeline.Execution, 1)
	go func() {
		run, err := s.Start(ctx, job("free", "b", engine.PriorityFree, nil))
		if err == nil {
			free <- run
		}
	}()
	require.Eventually(t, func() bool { return s.Stats().Degrade >= engine.DegradeLimitFree }, 5*time.Second, 5*time.Millisecond)
	batch := make(chan pipeline.Execution, 1)
	go func() {
		run, err := s.Start(ctx, job("batch", "c", engine.PriorityBatch, nil))
		if err == nil {
			batch <- run
		}
	}()
	e.open("hold")
	require.NoError(t, hold.Relay(ctx, &nopSink{}, nil).Err)
	run := <-free // the free request goes; the batch one is held while the level is up
	e.open("free")
	require.NoError(t, run.Relay(ctx, &nopSink{}, nil).Err)
	require.Eventually(t, func() bool { return s.Stats().Degrade == engine.DegradeNone }, 5*time.Second, 5*time.Millisecond)
	run = <-batch
	e.open("batch")
	require.NoError(t, run.Relay(ctx, &nopSink{}, nil).Err)
	require.Equal(t, []string{"hold", "free", "batch"}, e.arrived())
}
