package daemon

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/internal/redistest"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// startFakeWithStore serves fakes with a store in a temporary data
// directory.
func startFakeWithStore(t *testing.T, cfg Config, fakes ...*fakeReplica) (*Daemon, string) {
	t.Helper()
	models := make([]*pipeline.Model, len(fakes))
	for i, f := range fakes {
		models[i] = newModel(f, byteTokenizer{}, time.Unix(1700000000, 0), nil)
	}
	st, err := store.Open(context.Background(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	s := newDaemon(t, cfg, testLogger(t), Deps{Store: st, Models: models})
	return s, startServer(t, s)
}

func setQuota(t *testing.T, s *Daemon, tenant string, u store.QuotaUpdate) {
	t.Helper()
	_, err := s.deps.Store.UpdateQuota(context.Background(), tenant, u)
	require.NoError(t, err)
}

func i64(v int64) *int64 { return &v }

func chatBody(model string, maxTokens int) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":` + strconv.Itoa(maxTokens) + `}`
}

// TestTenantOverTPMGets429WhileOthersServed: a tenant over its tokens per
// minute gets 429 with Retry-After, retry-after-ms and x-ratelimit-*
// headers, decided before any compute; another tenant is still served.
func TestTenantOverTPMGets429WhileOthersServed(t *testing.T) {
	f := newFake("m", 4096, strings.Repeat("x", 300)) // uses all of max_tokens
	s, base := startFakeWithStore(t, testConfig(), f)
	small := makeKey(t, s, "small", store.TierPaid, false)
	big := makeKey(t, s, "big", store.TierPaid, false)
	setQuota(t, s, "small", store.QuotaUpdate{TPM: i64(300)})
	c := testClient(t)

	resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", small, chatBody("m", 200))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "300", resp.Header.Get("x-ratelimit-limit-tokens"))
	require.NotEmpty(t, resp.Header.Get("x-ratelimit-remaining-tokens"))
	require.NotEmpty(t, resp.Header.Get("x-ratelimit-reset-tokens"))

	before := len(f.requests())
	resp, b = call(t, c, http.MethodPost, base+"/v1/chat/completions", small, chatBody("m", 200))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	e := errorOf(t, b)
	require.Equal(t, "tokens", e["type"])
	require.Equal(t, "rate_limit_exceeded", e["code"])
	require.Contains(t, e["message"], "tokens per minute")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, ra)
	ms, err := strconv.ParseInt(resp.Header.Get("retry-after-ms"), 10, 64)
	require.NoError(t, err)
	require.Positive(t, ms)
	require.LessOrEqual(t, ms, int64(ra)*1000)
	require.Equal(t, "true", resp.Header.Get("x-should-retry"))
	require.Equal(t, "300", resp.Header.Get("x-ratelimit-limit-tokens"))
	require.Equal(t, before, len(f.requests()), "refused before reaching the engine")

	resp, b = call(t, c, http.MethodPost, base+"/v1/chat/completions", big, chatBody("m", 200))
	require.Equal(t, http.StatusOK, resp.StatusCode, "another tenant is served: %s", b)

	// The refusal shows in the tenant's quota.
	resp, b = call(t, c, http.MethodGet, base+"/v1/admin/quotas/small", "", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", b)
	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	resp, b = call(t, c, http.MethodGet, base+"/v1/admin/quotas/small", admin, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	q := jsonMap(t, string(b))
	require.EqualValues(t, 1, q["usage"].(map[string]any)["rejected"])
	require.Equal(t, []any{"tpm"}, q["overridden"])
}

// TestReconcileRefundsUnusedTokens: the reservation is prompt plus
// max_tokens, but only what was used stays charged, so a tenant whose
// answers are short keeps being served.
func TestReconcileRefundsUnusedTokens(t *testing.T) {
	f := newFake("m", 4096, "ok") // two output tokens
	s, base := startFakeWithStore(t, testConfig(), f)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{TPM: i64(1000)})
	c := testClient(t)
	// Each request reserves prompt (29) + 500 but uses 31: ten of them fit
	// in 1000 only because each reservation is settled to what was used.
	for i := range 10 {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", 500))
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, b)
	}
}

// TestDailyBudgetIsHard: a spent daily budget gets 429 with
// x-should-retry: false and code insufficient_quota; a request larger
// than the tokens per minute can never pass and says so.
func TestDailyBudgetIsHard(t *testing.T) {
	f := newFake("m", 4096, "ok")
	s, base := startFakeWithStore(t, testConfig(), f)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{DailyTokens: i64(100), TPM: i64(0)})
	c := testClient(t)
	resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", 500))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	require.Equal(t, "false", resp.Header.Get("x-should-retry"))
	require.Equal(t, "insufficient_quota", errorOf(t, b)["code"])

	setQuota(t, s, "acme", store.QuotaUpdate{DailyTokens: i64(-1), TPM: i64(100)})
	resp, b = call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", 500))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	require.Equal(t, "false", resp.Header.Get("x-should-retry"))
	require.Contains(t, errorOf(t, b)["message"], "lower max_tokens")
}

// TestConcurrencyLimitIsExact is RL-8 over HTTP: 1,000 requests at once for
// a tenant with 10 concurrent slots: exactly 10 stream, the others get 429
// with Retry-After.
func TestConcurrencyLimitIsExact(t *testing.T) {
	f := newFake("m", 8192, strings.Repeat("x", 4000))
	f.delay = 5 * time.Millisecond // 4000 tokens: far longer than the burst
	s, base := startFakeWithStore(t, testConfig(), f)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{Concurrency: i64(10), RPM: i64(0), TPM: i64(0)})
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1000}}
	defer c.CloseIdleConnections()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		open     []*http.Response
		wg       sync.WaitGroup
	)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}],"max_tokens":4000}`
	for range 1000 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusOK {
				open = append(open, resp)
				return
			}
			if resp.Header.Get("Retry-After") == "" {
				statuses[-1]++
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	require.Equal(t, map[int]int{http.StatusOK: 10, http.StatusTooManyRequests: 990}, statuses)
	cancel()
	for _, r := range open {
		r.Body.Close()
	}
	// The slots come back once the streams end.
	require.Eventually(t, func() bool {
		u, err := s.deps.Limiter.Usage(context.Background(), "acme", pipeline.LimitsOf(store.Limits{Concurrency: 10}))
		return err == nil && u.InFlight == 0
	}, 5*time.Second, 5*time.Millisecond)
}

// TestShadowModeAdmitsAndLogs: in shadow mode a refusal is logged and
// counted, and the request is served.
func TestShadowModeAdmitsAndLogs(t *testing.T) {
	f := newFake("m", 4096, "ok")
	cfg := testConfig()
	cfg.QuotaShadow = true
	var logs syncBuffer
	models := []*pipeline.Model{newModel(f, byteTokenizer{}, time.Unix(1700000000, 0), nil)}
	st, err := store.Open(context.Background(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	s := newDaemon(t, cfg, newBufferLogger(&logs), Deps{Store: st, Models: models})
	base := startServer(t, s)
	key := makeKey(t, s, "acme", store.TierPaid, false)
	setQuota(t, s, "acme", store.QuotaUpdate{RPM: i64(1)})
	c := testClient(t)
	for range 3 {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", 5))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	require.Contains(t, logs.String(), "quota would refuse (shadow mode)")
	rejected, _ := s.pipe.Rejected("acme", time.Now())
	require.EqualValues(t, 2, rejected)
}

// TestTierSetsPriority: a tenant's requests run at its tier's priority; it
// may ask for a lower one but not a higher one.
func TestTierSetsPriority(t *testing.T) {
	f := newFake("m", 4096, "ok")
	s, base := startFakeWithStore(t, testConfig(), f)
	free := makeKey(t, s, "cheap", store.TierFree, false)
	ent := makeKey(t, s, "bigco", store.TierEnterprise, false)
	c := testClient(t)

	resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", free, chatBody("m", 3))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = call(t, c, http.MethodPost, base+"/v1/chat/completions", ent, chatBody("m", 3))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	native := func(prio string) string {
		return `{"model":"m","stream":false,"messages":[{"role":"user","content":"x"}],"max_tokens":3,"priority":"` + prio + `"}`
	}
	resp, b = call(t, c, http.MethodPost, base+"/v1/chat", free, native("paid"))
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
	require.Equal(t, "priority", errorOf(t, b)["param"])
	resp, b = call(t, c, http.MethodPost, base+"/v1/chat", ent, native("batch"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	reqs := f.requests()
	require.Len(t, reqs, 3)
	require.Equal(t, engine.PriorityFree, reqs[0].Priority)
	require.Equal(t, "cheap", reqs[0].Tenant)
	require.Equal(t, engine.PriorityEnterprise, reqs[1].Priority)
	require.Equal(t, engine.PriorityBatch, reqs[2].Priority)
}

// TestDegradationLadderInTheDaemon: at limit_free a free tenant's request
// is capped and routed to the smaller model; at shed_free it gets 429 with
// Retry-After; paid tenants are untouched; it undoes itself when the level
// falls.
func TestDegradationLadderInTheDaemon(t *testing.T) {
	big := newFake("big", 4096, strings.Repeat("b", 600))
	small := newFake("small", 4096, strings.Repeat("s", 600))
	cfg := testConfig()
	cfg.DegradeRoutes = map[string]string{"big": "small"}
	cfg.DegradeFreeMaxTokens = 100
	s, base := startFakeWithStore(t, cfg, big, small)
	free := makeKey(t, s, "cheap", store.TierFree, false)
	paid := makeKey(t, s, "acme", store.TierPaid, false)
	c := testClient(t)
	ask := func(key string) (*http.Response, map[string]any) {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("big", 500))
		return resp, jsonMap(t, string(b))
	}

	resp, body := ask(free)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "big", body["model"])

	big.setDegrade(engine.DegradeLimitFree)
	resp, body = ask(free)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "small", body["model"], "routed to the smaller model")
	require.EqualValues(t, 100, body["usage"].(map[string]any)["completion_tokens"], "max_tokens capped")
	resp, body = ask(paid)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "big", body["model"], "paid tenants keep their model")
	require.EqualValues(t, 500, body["usage"].(map[string]any)["completion_tokens"])

	big.setDegrade(engine.DegradeShedFree)
	resp, body = ask(free)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, "true", resp.Header.Get("x-should-retry"))
	require.Contains(t, body["error"].(map[string]any)["message"], "overloaded")
	resp, _ = ask(paid)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	big.setDegrade(engine.DegradeNone)
	resp, body = ask(free)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "big", body["model"])
}

// TestRedisQuotaSharedByTwoServers: two llmd servers (one data directory
// each, as two nodes would have) share a real Redis for quotas: what a
// tenant uses on one counts on the other.
func TestRedisQuotaSharedByTwoServers(t *testing.T) {
	rs := redistest.Start(t)
	var bases []string
	var keys []string
	for range 2 {
		s := newStoreServer(t, func(c *Config) { c.RedisURL = rs.URL(); c.QuotaTimeout = time.Second })
		keys = append(keys, makeKey(t, s, "acme", store.TierPaid, false))
		setQuota(t, s, "acme", store.QuotaUpdate{RPM: i64(3)})
		bases = append(bases, startServer(t, s))
	}
	c := testClient(t)
	var codes []int
	for i := range 6 {
		resp, _ := call(t, c, http.MethodPost, bases[i%2]+"/v1/chat/completions", keys[i%2], chatBody("sim/small", 2))
		codes = append(codes, resp.StatusCode)
	}
	require.Equal(t, []int{200, 200, 200, 429, 429, 429}, codes, "3 requests per minute across both nodes")

	resp, b := call(t, c, http.MethodGet, bases[0]+"/v1/stats", keys[0], "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
}

// TestQuotaEstimateReservesLearnedLength: with QuotaEstimate, once a tenant
// has answered 8 times, a request reserves its usual answer length rather
// than max_tokens.
func TestQuotaEstimateReservesLearnedLength(t *testing.T) {
	for _, estimate := range []bool{false, true} {
		f := newFake("m", 4096, "ok") // 2 output tokens
		cfg := testConfig()
		cfg.QuotaEstimate = estimate
		s, base := startFakeWithStore(t, cfg, f)
		key := makeKey(t, s, "acme", store.TierPaid, false)
		setQuota(t, s, "acme", store.QuotaUpdate{TPM: i64(100000)})
		c := testClient(t)
		var remaining int
		for range 10 {
			resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, chatBody("m", 900))
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			var err error
			remaining, err = strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-tokens"))
			require.NoError(t, err)
		}
		// Nine settled requests of 31 tokens, then the tenth's reservation:
		// 929 tokens (prompt + max_tokens), or 31 with the estimate.
		if estimate {
			require.Greater(t, remaining, 99500, "estimate")
		} else {
			require.Less(t, remaining, 99000, "max_tokens")
		}
	}
}

// TestSequentialClientNeverSeesItsOwnSlot: with one concurrent request
// allowed, a client that sends its next request the moment it has read the
// previous answer is never refused: the slot is freed before the end is
// sent.
func TestSequentialClientNeverSeesItsOwnSlot(t *testing.T) {
	f := newFake("m", 4096, "ok")
	models := []*pipeline.Model{newModel(f, byteTokenizer{}, time.Unix(1700000000, 0), nil)}
	st, err := store.Open(context.Background(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	// A slow settlement (Redis on a bad day) widens the window in which a
	// slot freed after the end would still be held.
	s := newDaemon(t, testConfig(), testLogger(t), Deps{Store: st, Models: models,
		Limiter: slowReconcile{Limiter: quota.NewMemory(quota.MemoryConfig{}), delay: 20 * time.Millisecond}})
	base := startServer(t, s)
	key := makeKey(t, s, "solo", store.TierPaid, false)
	setQuota(t, s, "solo", store.QuotaUpdate{Concurrency: i64(1), RPM: i64(0), TPM: i64(0)})
	c := testClient(t)
	for i := range 40 {
		stream := i%2 == 0
		body := `{"model":"m","max_tokens":2,"stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"x"}]}`
		if !stream {
			resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, body)
			require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, b)
			continue
		}
		// Like the SDKs, stop at [DONE], not at the end of the body.
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && sc.Text() != "data: [DONE]" {
		}
		resp.Body.Close()
	}
}

// slowReconcile delays every settlement.
type slowReconcile struct {
	quota.Limiter
	delay time.Duration
}

func (l slowReconcile) Reconcile(ctx context.Context, tenant, id string, actual int64) error {
	time.Sleep(l.delay)
	return l.Limiter.Reconcile(ctx, tenant, id, actual)
}
