package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig shrinks the defaults for tests.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.StreamWriteTimeout = 5 * time.Second
	return cfg
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startServer runs s on a loopback port until the test ends and returns its
// base URL.
func startServer(t testing.TB, s *Daemon) string {
	t.Helper()
	addr, err := s.Listen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("server did not stop")
		}
	})
	base := "http://" + addr.String()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateReady }, 5*time.Second, time.Millisecond)
	return base
}

// newModel describes the model served by replica, with tok for its text.
func newModel(replica pipeline.Replica, tok Tokenizer, created time.Time, run func(context.Context) error) *pipeline.Model {
	return pipeline.NewModel(replica, newPlainText(tok), created, run)
}

// newServer composes a daemon over models, with an in-memory quota
// limiter and no store.
func newServer(tb testing.TB, cfg Config, logger *slog.Logger, models []*pipeline.Model) *Daemon {
	tb.Helper()
	return newDaemon(tb, cfg, logger, Deps{Models: models})
}

// newDaemon composes a daemon over deps, with an in-memory quota limiter
// when deps has none.
func newDaemon(tb testing.TB, cfg Config, logger *slog.Logger, deps Deps) *Daemon {
	tb.Helper()
	if deps.Limiter == nil {
		deps.Limiter = quota.NewMemory(quota.MemoryConfig{})
	}
	d, err := New(cfg, deps, logger)
	require.NoError(tb, err)
	return d
}

// startFake serves fakes with cfg.
func startFake(t *testing.T, cfg Config, fakes ...*fakeReplica) string {
	t.Helper()
	models := make([]*pipeline.Model, len(fakes))
	for i, f := range fakes {
		models[i] = newModel(f, byteTokenizer{}, time.Unix(1700000000, 0), nil)
	}
	return startServer(t, newServer(t, cfg, testLogger(t), models))
}

// testClient returns an HTTP client whose connections close with the test.
func testClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// post sends body as JSON and returns the response with its whole body.
func post(t *testing.T, c *http.Client, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// sseEvent is one parsed SSE event (or comment) with its raw lines.
type sseEvent struct {
	comment string
	id      string
	event   string
	data    string
	lines   []string
}

// parseSSE splits a whole stream into events. It fails the test on an
// unterminated event.
func parseSSE(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	var (
		evs []sseEvent
		cur sseEvent
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			require.NotEmpty(t, cur.lines, "empty event")
			evs = append(evs, cur)
			cur = sseEvent{}
			continue
		}
		cur.lines = append(cur.lines, line)
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "":
			cur.comment = value
		case "id":
			cur.id = value
		case "event":
			cur.event = value
		case "data":
			require.Empty(t, cur.data, "one data line per event")
			cur.data = value
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	require.Empty(t, cur.lines, "unterminated final event")
	return evs
}

// dataEvents drops comments.
func dataEvents(evs []sseEvent) []sseEvent {
	var out []sseEvent
	for _, e := range evs {
		if e.comment == "" {
			out = append(out, e)
		}
	}
	return out
}

// jsonMap decodes s into a generic map.
func jsonMap(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), "json: %s", s)
	return m
}

// errorOf decodes an OpenAI error body and checks its shape.
func errorOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	m := jsonMap(t, string(b))
	e, ok := m["error"].(map[string]any)
	require.True(t, ok, "error body: %s", b)
	for _, k := range []string{"message", "type", "param", "code"} {
		require.Contains(t, e, k, "error body: %s", b)
	}
	require.NotEmpty(t, e["message"])
	return e
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newBufferLogger logs at debug level as JSON into b.
func newBufferLogger(b *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
