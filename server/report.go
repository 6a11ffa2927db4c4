package server

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// reportBy are the groupings of a usage report.
var reportBy = []string{"day", "tenant", "model", "tier", "decision"}

// parseSince reads the since parameter: a duration back from now (Go
// syntax, or N followed by d for days) or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return now.Add(-24 * time.Hour), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days > 0 {
			return now.Add(-time.Duration(days) * 24 * time.Hour), nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, pipeline.InvalidParam("since", "since must be a positive duration back from now (24h, 7d) or an RFC 3339 time, got %q", v)
	}
	return now.Add(-d), nil
}

// parseWindow reads a report's since (default 24h back) and until
// (default now) parameters.
func parseWindow(qv url.Values, now time.Time) (since, until time.Time, err error) {
	if since, err = parseSince(qv.Get("since"), now); err != nil {
		return since, until, err
	}
	until = now
	if v := qv.Get("until"); v != "" {
		if until, err = time.Parse(time.RFC3339, v); err != nil {
			return since, until, pipeline.InvalidParam("until", "until must be an RFC 3339 time, got %q", v)
		}
	}
	if !until.After(since) {
		return since, until, pipeline.InvalidParam("until", "until must be after since")
	}
	return since, until, nil
}

func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	since, until, err := parseWindow(qv, time.Now().UTC())
	if err != nil {
		writeError(w, "", err)
		return
	}
	by := qv.Get("by")
	if by == "" {
		by = "day"
	}
	if !slices.Contains(reportBy, by) {
		writeError(w, "", pipeline.InvalidParam("by", "by must be one of %s, got %q", strings.Join(reportBy, ", "), by))
		return
	}
	rows, err := s.store.UsageReport(r.Context(), store.UsageQuery{Tenant: qv.Get("tenant"), Model: qv.Get("model"),
		Since: since, Until: until, By: by})
	if err != nil {
		writeError(w, "", err)
		return
	}
	rep := s.buildReport(rows, since.UTC(), until.UTC(), by)
	rep.Tenant, rep.Model = qv.Get("tenant"), qv.Get("model")
	rep.Reservations, err = s.reservationUsage(r.Context(), rep.Tenant, rep.Model, since, until)
	if err != nil {
		writeError(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// buildReport groups the store's (key, model, tier) rows by key, prices
// them, averages their latencies (weighted by finished requests), and
// computes the cost per million output tokens per model and tier. A row's
// cost per million tokens, by decision for instance, is
// [api.UsageRow.CostPerMillionTokens].
func (s *Server) buildReport(rows []store.UsageRow, since, until time.Time, by string) api.UsageReport {
	rep := api.UsageReport{Since: since, Until: until, By: by, Currency: s.cfg.Currency, GPUHourPrice: s.cfg.GPUHourPrice,
		Rows: []api.UsageRow{}, OutputCosts: []api.OutputCost{}}
	rep.Total.Key = "total"
	totalPriced := len(s.cfg.Prices) > 0
	byKey := map[string]int{}
	type mt struct{ model, tier string }
	tokens := map[mt]int64{}  // input + output per model and tier
	outputs := map[mt]int64{} // output per model and tier
	modelTok := map[string]int64{}
	var pairs []mt
	for _, r := range rows {
		i, ok := byKey[r.Key]
		if !ok {
			i = len(rep.Rows)
			byKey[r.Key] = i
			rep.Rows = append(rep.Rows, api.UsageRow{Key: r.Key})
			if len(s.cfg.Prices) > 0 {
				rep.Rows[i].Cost = new(float64)
			}
		}
		row := &rep.Rows[i]
		counts := api.UsageRow{Requests: r.Requests, Cancelled: r.Cancelled, Errors: r.Errors, Rejected: r.Rejected,
			InputTokens: r.InputTokens, CachedTokens: r.CachedTokens, OutputTokens: r.OutputTokens,
			Finished: r.Finished(), MeanTTFTMs: durationMs(r.MeanTTFT), MeanITLMs: durationMs(r.MeanITL)}
		row.AddCounts(counts)
		rep.Total.AddCounts(counts)
		cost, ok := s.price(r)
		switch {
		case ok && row.Cost != nil:
			*row.Cost += cost
		case !ok && r.InputTokens+r.OutputTokens > 0:
			row.Cost = nil
			totalPriced = false
		}
		if ok && totalPriced {
			if rep.Total.Cost == nil {
				rep.Total.Cost = new(float64)
			}
			*rep.Total.Cost += cost
		}
		k := mt{r.Model, r.Tier}
		if _, seen := tokens[k]; !seen {
			pairs = append(pairs, k)
		}
		tokens[k] += r.InputTokens + r.OutputTokens
		outputs[k] += r.OutputTokens
		modelTok[r.Model] += r.InputTokens + r.OutputTokens
	}
	if !totalPriced {
		rep.Total.Cost = nil
	}
	// GPU time: each served model's GPUs over the window, shared among its
	// tiers by their tokens. The window starts no earlier than this llmd:
	// time before its start (or while it was down) is not known to have
	// been spent serving.
	hours := max(0, until.Sub(later(since, s.started)).Hours())
	slices.SortFunc(pairs, func(a, b mt) int {
		if c := strings.Compare(a.model, b.model); c != 0 {
			return c
		}
		return strings.Compare(a.tier, b.tier)
	})
	for _, k := range pairs {
		gpus := s.gpusOf(k.model)
		oc := api.OutputCost{Model: k.model, Tier: k.tier, GPUs: gpus, OutputTokens: outputs[k]}
		if gpus > 0 && modelTok[k.model] > 0 {
			oc.GPUHours = float64(gpus) * hours * float64(tokens[k]) / float64(modelTok[k.model])
		}
		if s.cfg.GPUHourPrice > 0 && oc.OutputTokens > 0 && oc.GPUHours > 0 {
			c := oc.GPUHours * s.cfg.GPUHourPrice / float64(oc.OutputTokens) * 1e6
			oc.CostPerMillion = &c
		}
		rep.OutputCosts = append(rep.OutputCosts, oc)
	}
	return rep
}

// price is the cost of a row's tokens at its model's configured price.
func (s *Server) price(r store.UsageRow) (float64, bool) {
	p, ok := s.cfg.Prices[r.Model]
	if !ok {
		return 0, false
	}
	uncached := max(0, r.InputTokens-r.CachedTokens)
	return (float64(uncached)*p.Input + float64(r.CachedTokens)*p.Cached + float64(r.OutputTokens)*p.Output) / 1e6, true
}

// gpusOf is how many GPUs a served model runs on: its simulated group's
// tensor-parallel degree; 0 for CPU models and models no longer served.
func (s *Server) gpusOf(model string) int {
	m := s.models.Get(model)
	if m == nil || m.Sim == nil {
		return 0
	}
	return m.Sim.TP
}

// durationMs is d in (fractional) milliseconds.
func durationMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
