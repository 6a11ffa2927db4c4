package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// heldReplica is a fake whose Submit waits, while hold is set, until
// release is closed: the requests it admitted stay in flight, their
// reservations held.
type heldReplica struct {
	*fakeReplica
	hold      atomic.Bool
	release   chan struct{}
	submitted atomic.Int64
}

func (h *heldReplica) Submit(ctx context.Context, req engine.Request) (pipeline.EventStream, error) {
	h.submitted.Add(1)
	if h.hold.Load() {
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.fakeReplica.Submit(ctx, req)
}

// RL-10 through HTTP: with --quota-estimate, after ten short answers, 50
// concurrent requests that each use all of their max_tokens get no more
// than TPM + max(TPM, one request's max_tokens minus its estimate), and the
// tenant is then refused until the bucket refills past the debt.
func TestQuotaEstimateBurstIsBounded(t *testing.T) {
	const (
		tpm       = 2000
		maxTokens = 180
		prompt    = 29 // chatBody's prompt, one token a byte
		learned   = 2  // "ok"
		reserved  = prompt + learned
		most      = prompt + maxTokens
		bound     = tpm + max(tpm, most-reserved)
	)
	var long atomic.Bool
	f := newFake("m", 4096, "ok")
	f.script = func(req engine.Request) []engine.Event {
		if long.Load() {
			return answer(req, strings.Repeat("x", 4*maxTokens)) // cut at max_tokens
		}
		return answer(req, "ok")
	}
	h := &heldReplica{fakeReplica: f, release: make(chan struct{})}
	st, err := store.Open(context.Background(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	// The limiter's clock stands still: no refill, so the counts are exact.
	frozen := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	cfg := testConfig()
	cfg.QuotaEstimate = true
	s := newDaemon(t, cfg, testLogger(t), Deps{Store: st,
		Models:  []*pipeline.Model{newModel(h, byteTokenizer{}, time.Unix(1700000000, 0), nil)},
		Limiter: quota.NewMemory(quota.MemoryConfig{Now: func() time.Time { return frozen }})})
	base := startServer(t, s)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{TPM: i64(tpm)})
	c := testClient(t)

	totalTokens := func(b []byte) int64 {
		var r struct {
			Usage struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		return r.Usage.TotalTokens
	}
	var used int64
	for i := range 10 {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", maxTokens))
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, b)
		used += totalTokens(b)
	}
	require.Equal(t, int64(10*reserved), used)

	long.Store(true)
	h.hold.Store(true)
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		served, refused   int64
		burstUsed, before = int64(0), h.submitted.Load()
	)
	for range 50 {
		wg.Go(func() {
			resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", maxTokens))
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusOK:
				served++
				burstUsed += totalTokens(b)
			case http.StatusTooManyRequests:
				refused++
				assert.Equal(t, "tokens", errorOf(t, b)["type"])
			default:
				t.Errorf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
	// Every request is decided (refused, or admitted and held) before any
	// admitted one runs and settles.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return h.submitted.Load()-before+refused == 50
	}, 10*time.Second, time.Millisecond)
	close(h.release)
	wg.Wait()

	used += burstUsed
	t.Logf("served %d of 50 at once: %d tokens used against a TPM of %d (bound %d)", served, used, tpm, bound)
	// 1690 left after learning; each admitted reserves 31 and holds an
	// overage of 178: admitted while 1690 - 31k >= 31 + max(0, 178k -
	// 1822), k <= 16.
	assert.Equal(t, int64(17), served)
	assert.Equal(t, served*most, burstUsed, "each used all of its max_tokens")
	assert.LessOrEqual(t, used, int64(bound))

	// The debt (1863 tokens) and the next reservation must refill first;
	// the estimator has learned the long answers, so that reservation is
	// prompt + max_tokens again.
	resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", maxTokens))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	assert.Equal(t, "tokens", errorOf(t, b)["type"])
	ms, err := strconv.ParseInt(resp.Header.Get("retry-after-ms"), 10, 64)
	require.NoError(t, err)
	assert.Equal(t, (used-tpm+most)*60_000/tpm, ms)
	assert.Equal(t, "0", resp.Header.Get("x-ratelimit-remaining-tokens"))
}
