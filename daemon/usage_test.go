package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/store"
)

// TestUsageAgreesWithClientsAndQuota is ME-3: after a load of streamed and
// non-streamed requests from several tenants (some cancelled, some
// refused), the ledger's tokens equal what the clients were told, token
// for token, and what the quota settled.
func TestUsageAgreesWithClientsAndQuota(t *testing.T) {
	s := newStoreServer(t, nil)
	keys := map[string]string{}
	for _, tenant := range []string{"acme", "globex", "initech"} {
		keys[tenant] = makeKey(t, s, tenant, store.TierPaid, false)
	}
	setQuota(t, s, "initech", store.QuotaUpdate{RPM: i64(5)})
	base := startServer(t, s)
	c := testClient(t)

	var (
		mu     sync.Mutex
		client = map[string][2]int64{} // tenant -> input, output
		wg     sync.WaitGroup
	)
	for tenant, key := range keys {
		for i := range 12 {
			wg.Go(func() {
				body := fmt.Sprintf(`{"model":"sim/small","max_tokens":%d,"stream":%v,"stream_options":{"include_usage":true},`+
					`"messages":[{"role":"user","content":"request %d of %s"}]}`, 5+i*3, i%2 == 0, i, tenant)
				resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", key, body)
				if resp.StatusCode != http.StatusOK {
					require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
					return
				}
				var u api.Usage
				if i%2 == 0 {
					for _, ev := range dataEvents(parseSSE(t, b)) {
						if ev.data == "[DONE]" {
							continue
						}
						var chunk api.ChatCompletionChunk
						require.NoError(t, json.Unmarshal([]byte(ev.data), &chunk))
						if chunk.Usage != nil {
							u = *chunk.Usage
						}
					}
				} else {
					var cc api.ChatCompletion
					require.NoError(t, json.Unmarshal(b, &cc))
					u = *cc.Usage
				}
				require.Positive(t, u.CompletionTokens)
				mu.Lock()
				v := client[tenant]
				client[tenant] = [2]int64{v[0] + int64(u.PromptTokens), v[1] + int64(u.CompletionTokens)}
				mu.Unlock()
			})
		}
	}
	wg.Wait()

	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	resp, b := call(t, c, http.MethodGet, base+"/v1/admin/usage?by=tenant", admin, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var rep api.UsageReport
	require.NoError(t, json.Unmarshal(b, &rep))
	var settled int64
	for _, row := range rep.Rows {
		want := client[row.Key]
		require.Equal(t, want[0], row.InputTokens, "tenant %s input", row.Key)
		require.Equal(t, want[1], row.OutputTokens, "tenant %s output", row.Key)
		settled += row.InputTokens + row.OutputTokens
		if row.Key == "initech" {
			require.EqualValues(t, 7, row.Rejected, "12 requests, 5 per minute")
			require.EqualValues(t, 5, row.Requests)
		} else {
			require.EqualValues(t, 12, row.Requests)
		}
	}
	require.Len(t, rep.Rows, 3)
	require.Equal(t, settled, s.pipe.Settled(), "the quota settled exactly the ledger's tokens")
}

// TestUsageReportCosts: prices from the configuration price each row, and
// the cost per million output tokens splits the model's GPU time by tier.
func TestUsageReportCosts(t *testing.T) {
	s := newStoreServer(t, func(c *Config) {
		c.Prices = map[string]Price{"sim/small": {Input: 1, Cached: 0.5, Output: 2}}
		c.GPUHourPrice = 3
	})
	paid := makeKey(t, s, "acme", store.TierPaid, false)
	free := makeKey(t, s, "cheap", store.TierFree, false)
	admin := makeKey(t, s, "ops", store.TierEnterprise, true)
	base := startServer(t, s)
	c := testClient(t)
	for _, k := range []string{paid, free, free} {
		resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", k, chatBody("sim/small", 10))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	resp, b := call(t, c, http.MethodGet, base+"/v1/admin/usage?by=tier&since="+since, admin, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var rep api.UsageReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, "tier", rep.By)
	require.Len(t, rep.Rows, 2, "%s", b)
	require.Equal(t, "free", rep.Rows[0].Key)
	require.EqualValues(t, 2, rep.Rows[0].Requests)
	require.Equal(t, "paid", rep.Rows[1].Key)
	var total float64
	for _, r := range rep.Rows {
		want := (float64(r.InputTokens-r.CachedTokens)*1 + float64(r.CachedTokens)*0.5 + float64(r.OutputTokens)*2) / 1e6
		require.NotNil(t, r.Cost)
		require.InDelta(t, want, *r.Cost, 1e-12)
		total += want
	}
	require.InDelta(t, total, *rep.Total.Cost, 1e-12)

	require.Len(t, rep.OutputCosts, 2)
	window := rep.Until.Sub(s.started).Hours() // since is an hour ago, before llmd started
	var hours float64
	for _, oc := range rep.OutputCosts {
		require.Equal(t, "sim/small", oc.Model)
		require.Equal(t, 1, oc.GPUs)
		hours += oc.GPUHours
		require.NotNil(t, oc.CostPerMillion)
		require.InDelta(t, oc.GPUHours*3/float64(oc.OutputTokens)*1e6, *oc.CostPerMillion, 1e-6)
	}
	require.InDelta(t, window, hours, 1e-9, "the model's GPU time is shared out completely")
}

func TestUsageReportBadParams(t *testing.T) {
	s := newStoreServer(t, nil)
	base := startServer(t, s)
	c := testClient(t)
	for q, param := range map[string]string{"by=week": "by", "since=yesterday": "since", "until=tomorrow": "until"} {
		resp, b := call(t, c, http.MethodGet, base+"/v1/admin/usage?"+q, "", "")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
		require.Equal(t, param, errorOf(t, b)["param"])
	}
}

// TestMetricsEndpoint: /metrics shows the vLLM-named series for the served
// models after some traffic.
func TestMetricsEndpoint(t *testing.T) {
	s := newStoreServer(t, nil)
	base := startServer(t, s)
	c := testClient(t)
	resp, b := call(t, c, http.MethodPost, base+"/v1/chat/completions", "", chatBody("sim/small", 5))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	resp, b = call(t, c, http.MethodGet, base+"/metrics", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text := string(b)
	for _, series := range []string{
		`vllm:num_requests_running{engine="0",model_name="sim/small"}`,
		`vllm:num_requests_waiting{engine="0",model_name="sim/small"}`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="sim/small"}`,
		`vllm:cache_config_info{`,
		`vllm:time_to_first_token_seconds_bucket{`,
		`vllm:request_success_total{`,
		`llmd_quota_decisions_total{result="allow"} 1`,
		`llmd_gpu_memory_total_bytes{gpu="0",name="H100 SXM 80GB x1 (sim/small)",simulated="true"}`,
	} {
		require.True(t, strings.Contains(text, series), "missing %s in:\n%s", series, text)
	}
}
