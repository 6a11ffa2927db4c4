package server

import (
	"context"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// Provisioned throughput as reported: a tenant's reservations against the
// rates the node's engines delivered it.

// delivered is the live delivered output rate of each reserved tenant on
// each model served here: model -> tenant -> tokens per second.
func (s *Server) delivered() map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, m := range s.models.List() {
		for _, st := range pipeline.ReservationsOf(m) {
			if out[m.ID] == nil {
				out[m.ID] = map[string]float64{}
			}
			out[m.ID][st.Tenant] += st.DeliveredTPS
		}
	}
	return out
}

// reservedRate is q's reservation on this node for llmctl top, nil when it
// holds none.
func reservedRate(q store.Quota, delivered map[string]map[string]float64) *api.ReservedRate {
	c := q.Capacity
	if c.ReservedTPS <= 0 {
		return nil
	}
	rr := &api.ReservedRate{Model: c.ReservedModel, ReservedTPS: c.ReservedTPS}
	for model, tenants := range delivered {
		if c.ReservedModel == "" || c.ReservedModel == model {
			rr.DeliveredTPS += tenants[q.Tenant]
		}
	}
	return rr
}

// reservationUsage is the report's section on provisioned throughput: each
// reservation of tenant ("" every tenant) on model ("" every model) served
// here, with its live delivered rate and its window's output.
func (s *Server) reservationUsage(ctx context.Context, tenant, model string, since, until time.Time) ([]api.ReservationUsage, error) {
	qs, err := s.store.Quotas(ctx)
	if err != nil {
		return nil, err
	}
	delivered := s.delivered()
	window := until.Sub(since).Seconds()
	var out []api.ReservationUsage
	for _, q := range qs {
		c := q.Capacity
		if c.ReservedTPS <= 0 || tenant != "" && q.Tenant != tenant {
			continue
		}
		for _, m := range s.models.List() {
			if c.ReservedModel != "" && c.ReservedModel != m.ID || model != "" && m.ID != model {
				continue
			}
			rows, err := s.store.UsageReport(ctx, store.UsageQuery{Tenant: q.Tenant, Model: m.ID, Since: since, Until: until,
				By: "tenant"})
			if err != nil {
				return nil, err
			}
			ru := api.ReservationUsage{Tenant: q.Tenant, Model: m.ID, ReservedTPS: c.ReservedTPS,
				DeliveredTPS: delivered[m.ID][q.Tenant]}
			for _, r := range rows {
				ru.OutputTokens += r.OutputTokens
			}
			if window > 0 {
				ru.MeanTPS = float64(ru.OutputTokens) / window
			}
			out = append(out, ru)
		}
	}
	return out, nil
}
