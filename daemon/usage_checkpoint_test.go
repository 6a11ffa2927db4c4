package daemon

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// TestStreamUsageCheckpoints (issue 18): while an answer streams, its
// in-flight usage row shows the output tokens sent so far, growing, never
// more than the engine produced; the final row replaces it.
func TestStreamUsageCheckpoints(t *testing.T) {
	const answer = 120
	f := newFake("m", 4096, strings.Repeat("x", answer))
	f.delay = 10 * time.Millisecond // 1.2 s of tokens
	st, err := store.Open(context.Background(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	w, err := st.NewUsageWriter(store.UsageWriterConfig{})
	require.NoError(t, err)
	s := newDaemon(t, testConfig(), testLogger(t), Deps{Store: st, Usage: w,
		Models: []*pipeline.Model{newModel(f, byteTokenizer{}, time.Unix(1700000000, 0), nil)}})
	base := startServer(t, s)
	key := makeKey(t, s, "acme", store.TierPaid, false)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := testClient(t).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	id := resp.Header.Get("X-Request-Id")
	require.NotEmpty(t, id)

	received := 0 // content chunks read
	sc := bufio.NewScanner(resp.Body)
	readUntil := func(n int) {
		t.Helper()
		for received < n && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") && strings.Contains(sc.Text(), `"content":"x"`) {
				received++
			}
		}
		require.Equal(t, n, received)
	}
	// row waits for the in-flight row to count at least min output tokens.
	row := func(min int64) store.UsageEvent {
		t.Helper()
		var ev store.UsageEvent
		require.Eventually(t, func() bool {
			ev, err = st.UsageEvent(context.Background(), id)
			return err == nil && ev.OutputTokens >= min
		}, 5*time.Second, 5*time.Millisecond, "row %+v, err %v", ev, err)
		return ev
	}

	readUntil(20)
	first := row(15)
	require.Equal(t, store.UsageInFlight, first.Status)
	require.Positive(t, first.InputTokens)
	require.LessOrEqual(t, first.OutputTokens, int64(answer))

	readUntil(80)
	later := row(first.OutputTokens + 30)
	require.Equal(t, store.UsageInFlight, later.Status, "still streaming")
	require.Equal(t, first.InputTokens, later.InputTokens)
	require.Less(t, later.OutputTokens, int64(answer), "the engine has not produced the rest yet")

	readUntil(answer)
	require.Eventually(t, func() bool {
		ev, err := st.UsageEvent(context.Background(), id)
		return err == nil && ev.Status == store.UsageFinished && ev.OutputTokens == answer
	}, 5*time.Second, 5*time.Millisecond)
	require.Positive(t, w.Stats().Committed)
}
