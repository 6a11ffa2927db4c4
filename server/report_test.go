package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// reportServer is a Server with only what the usage report needs: a store
// in a temporary directory and prices for models small and big.
func reportServer(t *testing.T) (*Server, *store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	models, err := pipeline.NewModels(nil)
	require.NoError(t, err)
	return &Server{store: st, models: models, started: time.Now().Add(-time.Hour), cfg: Config{
		Currency: "USD",
		Prices: map[string]Price{
			"small": {Input: 1, Cached: 0.5, Output: 2},
			"big":   {Input: 10, Cached: 5, Output: 20},
		},
	}}, st
}

// record writes evs to st's usage ledger.
func record(t *testing.T, st *store.Store, evs ...store.UsageEvent) {
	t.Helper()
	w, err := st.NewUsageWriter(store.UsageWriterConfig{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for _, ev := range evs {
		require.NoError(t, w.Record(t.Context(), ev))
	}
	cancel()
	require.NoError(t, <-done)
}

// TestUsageReportByDecision: by=decision gives one row per decision ("" for
// none), merging its models: counts add up, latencies are averaged over
// finished requests, and the cost per million tokens follows from the
// prices.
func TestUsageReportByDecision(t *testing.T) {
	t.Parallel()
	s, st := reportServer(t)
	started := time.Now().Add(-time.Minute).UTC()
	ev := func(id, decision, model string, status store.UsageStatus, in, out int64, ttft, itl time.Duration) store.UsageEvent {
		return store.UsageEvent{RequestID: id, Tenant: "acme", Model: model, Tier: "paid", Node: "n1",
			Status: status, InputTokens: in, OutputTokens: out, TTFT: ttft, MeanITL: itl,
			Decision: decision, Started: started, Ended: started.Add(time.Second)}
	}
	ms := time.Millisecond
	record(t, st,
		ev("a1", "auto/short-chat", "small", store.UsageFinished, 1000, 500, 100*ms, 10*ms),
		ev("a2", "auto/short-chat", "big", store.UsageFinished, 1000, 500, 400*ms, 40*ms),
		ev("a3", "auto/short-chat", "big", store.UsageFinished, 1000, 500, 400*ms, 40*ms),
		ev("a4", "auto/short-chat", "small", store.UsageCancelled, 1000, 0, 0, 0),
		ev("b1", "", "small", store.UsageFinished, 2000, 1000, 50*ms, 5*ms),
	)

	req := httptest.NewRequest(http.MethodGet, "/v1/admin/usage?by=decision", nil)
	rec := httptest.NewRecorder()
	s.handleUsage(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var rep api.UsageReport
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rep))
	require.Equal(t, "decision", rep.By)
	require.Len(t, rep.Rows, 2)

	none, short := rep.Rows[0], rep.Rows[1]
	require.Equal(t, "", none.Key)
	require.EqualValues(t, 1, none.Finished)
	require.InDelta(t, 50, none.MeanTTFTMs, 1e-9)
	require.InDelta(t, 5, none.MeanITLMs, 1e-9)
	require.NotNil(t, none.Cost)
	require.InDelta(t, (2000*1+1000*2)/1e6, *none.Cost, 1e-12)

	require.Equal(t, "auto/short-chat", short.Key)
	require.EqualValues(t, 4, short.Requests)
	require.EqualValues(t, 1, short.Cancelled)
	require.EqualValues(t, 3, short.Finished)
	require.InDelta(t, 300, short.MeanTTFTMs, 1e-9, "(100 + 2 x 400) / 3")
	require.InDelta(t, 30, short.MeanITLMs, 1e-9, "(10 + 2 x 40) / 3")
	// small: 2,000 input, 500 output; big: 2,000 input, 1,000 output.
	wantCost := (2000*1+500*2)/1e6 + (2000*10+1000*20)/1e6
	require.NotNil(t, short.Cost)
	require.InDelta(t, wantCost, *short.Cost, 1e-12)
	cpm := short.CostPerMillionTokens()
	require.NotNil(t, cpm)
	require.InDelta(t, wantCost/5500*1e6, *cpm, 1e-9)

	require.EqualValues(t, 4, rep.Total.Finished)
	require.InDelta(t, (50+3*300)/4.0, rep.Total.MeanTTFTMs, 1e-9)
}

func TestUsageReportRefusesUnknownBy(t *testing.T) {
	t.Parallel()
	s, _ := reportServer(t)
	rec := httptest.NewRecorder()
	s.handleUsage(rec, httptest.NewRequest(http.MethodGet, "/v1/admin/usage?by=rule", nil))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "day, tenant, model, tier, decision")
}
