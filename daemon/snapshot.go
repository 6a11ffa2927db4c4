package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/llmd/llmd/api"
)

// maxSnapshotRequests bounds the requests in a snapshot.
const maxSnapshotRequests = 500

// handleSnapshot serves GET /v1/admin/snapshot: the node's live state for
// llmctl top.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	now := time.Now()
	snap := api.Snapshot{Node: s.cfg.NodeID, Time: now.UTC(), Uptime: now.Sub(s.started).Seconds(),
		Models: []api.ModelSnapshot{}, Requests: []api.RequestSnapshot{}, Tenants: []api.TenantSnapshot{},
		GPUs: s.gpus(), Quota: s.quotaStats()}
	running := map[string]int{}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	for _, m := range s.models {
		ms := api.ModelSnapshot{EngineStats: apiEngineStats(m)}
		ms.TTFTP50, ms.TTFTP95, ms.ITLP50, ms.ITLP95 = m.lat.percentiles(now, time.Minute)
		snap.Models = append(snap.Models, ms)

		states, err := m.eng.Requests(ctx)
		if err != nil {
			continue // stopping; the counters above still stand
		}
		for _, st := range states {
			rs := api.RequestSnapshot{ID: st.ID, Tenant: st.Tenant, Model: m.id, State: st.State,
				PromptTokens: st.Prompt, CachedTokens: st.Cached, GeneratedTokens: st.Generated}
			start := st.Submitted
			if l := s.logs.lookup(st.ID); l != nil {
				rs.Tier, rs.Resumable, start = l.tier, l.resumable, l.start
				if ft := l.firstToken.Load(); ft != 0 {
					first := time.Unix(0, ft)
					rs.TTFT = first.Sub(l.start).Seconds()
					if el := now.Sub(first).Seconds(); el > 0 && st.Generated > 1 {
						rs.TokensPerSecond = float64(st.Generated-1) / el
					}
				}
			}
			if !start.IsZero() {
				rs.Age = now.Sub(start).Seconds()
			}
			if st.State != "queued" {
				running[st.Tenant]++
			}
			snap.Requests = append(snap.Requests, rs)
		}
	}
	slices.SortFunc(snap.Requests, func(a, b api.RequestSnapshot) int { return cmp.Compare(a.Age, b.Age) })
	snap.Requests = snap.Requests[:min(len(snap.Requests), maxSnapshotRequests)]
	snap.Tenants = s.tenantSnapshots(r.Context(), now, running)
	if s.cluster != nil {
		for _, m := range s.cluster.Members() {
			snap.Cluster = append(snap.Cluster, nodeInfo(m))
		}
	}
	writeJSON(w, http.StatusOK, snap)
}

// tenantSnapshots is every tenant's quota burn (without a store: the local
// tenant's).
func (s *Server) tenantSnapshots(ctx context.Context, now time.Time, running map[string]int) []api.TenantSnapshot {
	out := []api.TenantSnapshot{}
	if s.store == nil {
		return out
	}
	qs, err := s.store.Quotas(ctx)
	if err != nil {
		s.log.Warn("snapshot: quotas unavailable", "err", err)
		return out
	}
	for _, q := range qs {
		ts := api.TenantSnapshot{Tenant: q.Tenant, Tier: string(q.Tier), Limits: quotaInfo(q).Limits,
			Running: running[q.Tenant], Rejected1: s.rejected.lastMinute(q.Tenant, now)}
		if u, err := s.quota.Usage(ctx, q.Tenant, limitsOf(q.Limits)); err == nil {
			ts.Usage = api.QuotaUsage{InFlight: u.InFlight, RequestsAvailable: u.RequestsAvailable,
				TokensAvailable: u.TokensAvailable, DailyTokensUsed: u.DailyTokensUsed, Rejected: s.rejected.get(q.Tenant)}
		}
		out = append(out, ts)
	}
	return out
}

// gpus is the node's GPU telemetry: the real devices (NVML) when there
// are any, and each sim model's simulated group, whose used memory is its
// weights and reserve plus the KV blocks in use.
func (s *Server) gpus() []api.GPUInfo {
	out := s.realGPUs()
	for _, m := range s.models {
		if m.sim == nil {
			continue
		}
		st := m.eng.Stats()
		used := m.sim.memory - m.sim.kvCapacity
		if st.BlocksTotal > 0 {
			used += m.sim.kvCapacity * int64(st.BlocksUsed) / int64(st.BlocksTotal)
		}
		out = append(out, api.GPUInfo{Index: len(out), Name: fmt.Sprintf("%s x%d (%s)", m.sim.name, m.sim.tp, m.id),
			MemoryUsed: used, MemoryTotal: m.sim.memory, Simulated: true})
	}
	return out
}

// realGPUs is the NVML telemetry, nil without a driver.
func (s *Server) realGPUs() []api.GPUInfo { return s.gpu.Devices() }
