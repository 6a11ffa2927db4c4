package server

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// maxSnapshotRequests bounds the requests in a snapshot.
const maxSnapshotRequests = 500

// handleSnapshot serves GET /v1/admin/snapshot: the node's live state for
// llmctl top.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	snap := api.Snapshot{Node: s.cfg.NodeID, Time: now.UTC(), Uptime: now.Sub(s.started).Seconds(),
		Models: []api.ModelSnapshot{}, Requests: []api.RequestSnapshot{}, Tenants: []api.TenantSnapshot{},
		GPUs: s.gpus(), Quota: s.quotaStats()}
	running := map[string]int{}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	for _, m := range s.models.List() {
		ms := api.ModelSnapshot{EngineStats: apiEngineStats(m)}
		ms.TTFTP50, ms.TTFTP95, ms.ITLP50, ms.ITLP95 = m.Latency.Percentiles(now, time.Minute)
		snap.Models = append(snap.Models, ms)

		states, err := m.Replica.Requests(ctx)
		if err != nil {
			continue // stopping; the counters above still stand
		}
		for _, st := range states {
			rs := api.RequestSnapshot{ID: st.ID, Tenant: st.Tenant, Model: m.ID, State: st.State,
				PromptTokens: st.Prompt, CachedTokens: st.Cached, GeneratedTokens: st.Generated}
			start := st.Submitted
			if l := s.streams.Lookup(st.ID); l != nil {
				rs.Tier, rs.Resumable, start = l.Tier, l.Resumable, l.Start
				if first := l.FirstToken(); !first.IsZero() {
					rs.TTFT = first.Sub(l.Start).Seconds()
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
	if cat := s.pipe.Catalog(); cat != nil {
		cfg := cat.Config()
		for _, c := range cat.Canaries(now) {
			b := apiCanary(c, cfg)
			if b.State == "none" && b.Shadow == "" {
				continue
			}
			snap.Rollouts = append(snap.Rollouts, api.RolloutBrief{Alias: b.Alias, Stable: b.Stable, Canary: b.Canary,
				State: b.State, Reason: b.Reason, Percent: b.Percent, Shadow: b.Shadow, ShadowPercent: b.ShadowPercent})
		}
	}
	if sc := s.pipe.Safety(); sc != nil {
		st := sc.Stats()
		snap.Safety = &api.SafetyStats{Checks: st.Checks, Flagged: st.Flagged, Blocked: st.Blocked, Failures: st.Failures,
			P50Ms: float64(st.LatencyP50.Microseconds()) / 1000, P95Ms: float64(st.LatencyP95.Microseconds()) / 1000}
	}
	if members, clustered := s.members(); clustered {
		for _, m := range members {
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
	delivered := s.delivered()
	for _, q := range qs {
		ts := api.TenantSnapshot{Tenant: q.Tenant, Tier: string(q.Tier), Limits: quotaInfo(q).Limits,
			Running: running[q.Tenant], Reserved: reservedRate(q, delivered)}
		var rejected uint64
		rejected, ts.Rejected1 = s.pipe.Rejected(q.Tenant, now)
		if u, err := s.limiter.Usage(ctx, q.Tenant, pipeline.QuotaLimitsOf(q)); err == nil {
			ts.Usage = api.QuotaUsage{InFlight: u.InFlight, RequestsAvailable: u.RequestsAvailable,
				TokensAvailable: u.TokensAvailable, DailyTokensUsed: u.DailyTokensUsed, Rejected: rejected}
		}
		out = append(out, ts)
	}
	return out
}
