package server

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/catalog"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// The rollout routes change the models config: a canary, a shadow, a
// promotion; each change is saved to llmd's models config file (so that a
// reload keeps it). `llmctl models apply` (PUT /v1/admin/models/config)
// replaces the whole config and saves it.

// errNoCatalog refuses a rollout route on a node without a models config.
var errNoCatalog = &pipeline.Error{Status: http.StatusConflict, Type: pipeline.TypeInvalidRequest,
	Message: "llmd runs without a models config, so it has no aliases to roll out; start it with --models-config " +
		"or send one with `llmctl models apply FILE`"}

// catalogError maps a refused change to a 400 (unknown alias: 404).
func catalogError(err error, alias string, cat *catalog.Catalog) error {
	if _, ok := cat.Config().Aliases[alias]; !ok {
		return &pipeline.Error{Status: http.StatusNotFound, Type: pipeline.TypeInvalidRequest, Param: "alias",
			Message: "no alias " + alias + " in the models config"}
	}
	return pipeline.InvalidParam("", "%v", err)
}

func (s *Server) needCatalog(h func(http.ResponseWriter, *http.Request, *catalog.Catalog)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cat := s.pipe.Catalog()
		if cat == nil {
			writeError(w, "", errNoCatalog)
			return
		}
		h(w, r, cat)
	}
}

func (s *Server) handleRollouts(w http.ResponseWriter, _ *http.Request, cat *catalog.Catalog) {
	now := time.Now()
	cfg := cat.Config()
	out := api.RolloutList{Aliases: []api.CanaryStatus{}}
	for _, st := range cat.Canaries(now) {
		out.Aliases = append(out.Aliases, apiCanary(st, cfg))
	}
	writeJSON(w, http.StatusOK, out)
}

// saveConfig saves a rollout change; a failure is logged (the change
// holds until the next reload).
func (s *Server) saveConfig(what string) {
	if s.fleet == nil {
		return
	}
	if _, err := s.fleet.SaveConfig(); err != nil {
		s.log.Error("models config changed but not saved; a reload will undo the change", "change", what, "err", err)
	}
}

// aliasStatus answers with alias's rollout as it is now.
func (s *Server) aliasStatus(w http.ResponseWriter, cat *catalog.Catalog, alias string) {
	cfg := cat.Config()
	for _, st := range cat.Canaries(time.Now()) {
		if st.Alias == alias {
			writeJSON(w, http.StatusOK, apiCanary(st, cfg))
			return
		}
	}
	writeError(w, "", catalogError(errors.New("no such alias"), alias, cat))
}

func (s *Server) handleSetCanary(w http.ResponseWriter, r *http.Request, cat *catalog.Catalog) {
	alias := r.PathValue("alias")
	var req api.CanaryRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	if err := cat.SetCanary(alias, req.Version, req.Percent); err != nil {
		writeError(w, "", catalogError(err, alias, cat))
		return
	}
	s.log.Info("canary set", "alias", alias, "version", req.Version, "percent", req.Percent, "by", principalFrom(r.Context()).KeyID)
	s.saveConfig("canary set")
	s.aliasStatus(w, cat, alias)
}

func (s *Server) handleClearCanary(w http.ResponseWriter, r *http.Request, cat *catalog.Catalog) {
	alias := r.PathValue("alias")
	if err := cat.ClearCanary(alias); err != nil {
		writeError(w, "", catalogError(err, alias, cat))
		return
	}
	s.log.Info("canary cleared", "alias", alias, "by", principalFrom(r.Context()).KeyID)
	s.saveConfig("canary cleared")
	s.aliasStatus(w, cat, alias)
}

func (s *Server) handleSetShadow(w http.ResponseWriter, r *http.Request, cat *catalog.Catalog) {
	alias := r.PathValue("alias")
	var req api.ShadowRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	if err := cat.SetShadow(alias, req.Version, req.Percent); err != nil {
		writeError(w, "", catalogError(err, alias, cat))
		return
	}
	s.log.Info("shadow set", "alias", alias, "version", req.Version, "percent", req.Percent, "by", principalFrom(r.Context()).KeyID)
	s.saveConfig("shadow set")
	s.aliasStatus(w, cat, alias)
}

func (s *Server) handleClearShadow(w http.ResponseWriter, r *http.Request, cat *catalog.Catalog) {
	alias := r.PathValue("alias")
	if err := cat.ClearShadow(alias); err != nil {
		writeError(w, "", catalogError(err, alias, cat))
		return
	}
	s.log.Info("shadow cleared", "alias", alias, "by", principalFrom(r.Context()).KeyID)
	s.saveConfig("shadow cleared")
	s.aliasStatus(w, cat, alias)
}

// parseDate reads a date ("2006-01-02") or an RFC 3339 time; "" is zero.
func parseDate(param, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, pipeline.InvalidParam(param, "%s must be a date (2026-12-31) or an RFC 3339 time, got %q", param, v)
	}
	return t, nil
}

func (s *Server) handlePromote(w http.ResponseWriter, r *http.Request, cat *catalog.Catalog) {
	alias := r.PathValue("alias")
	var req api.PromoteRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	dep, err := parseDate("deprecate", req.Deprecate)
	if err != nil {
		writeError(w, "", err)
		return
	}
	sunset, err := parseDate("sunset", req.Sunset)
	if err != nil {
		writeError(w, "", err)
		return
	}
	if !sunset.IsZero() && dep.IsZero() {
		dep = time.Now().UTC().Truncate(time.Second)
	}
	prev := cat.Config().Aliases[alias].Version
	if err := cat.Promote(alias); err != nil {
		writeError(w, "", catalogError(err, alias, cat))
		return
	}
	res := api.PromoteResult{Alias: alias, Stable: cat.Config().Aliases[alias].Version, Previous: prev}
	if !dep.IsZero() {
		if err := cat.Deprecate(prev, dep, sunset, alias); err != nil {
			writeError(w, "", pipeline.InvalidParam("deprecate", "%v", err))
			return
		}
		res.Deprecated = &dep
		if !sunset.IsZero() {
			res.Sunset = &sunset
		}
	}
	s.log.Info("canary promoted", "alias", alias, "stable", res.Stable, "previous", prev, "deprecated", req.Deprecate,
		"sunset", req.Sunset, "by", principalFrom(r.Context()).KeyID)
	s.saveConfig("promote")
	writeJSON(w, http.StatusOK, res)
}

// maxModelsConfigBytes bounds a models config sent by `llmctl models apply`.
const maxModelsConfigBytes = 1 << 20

func (s *Server) handleApplyModels(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxModelsConfigBytes))
	if err != nil {
		writeError(w, "", err)
		return
	}
	res, err := s.fleet.Apply(r.Context(), body)
	if err != nil {
		writeError(w, "", err)
		return
	}
	s.log.Info("models config applied", "loaded", res.Loaded, "unloaded", res.Unloaded, "saved", res.Saved,
		"by", principalFrom(r.Context()).KeyID)
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleShadowReport(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	since, until, err := parseWindow(qv, time.Now().UTC())
	if err != nil {
		writeError(w, "", err)
		return
	}
	q := store.ShadowQuery{Alias: qv.Get("alias"), ShadowModel: qv.Get("shadow_model"), Since: since, Until: until}
	rows, err := s.store.ShadowReport(r.Context(), q)
	if err != nil {
		writeError(w, "", storeError(err, "shadow report"))
		return
	}
	rep := api.ShadowReport{Since: since, Until: until, Alias: q.Alias, ShadowModel: q.ShadowModel, Rows: []api.ShadowSummary{}}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, x := range rows {
		rep.Rows = append(rep.Rows, api.ShadowSummary{Alias: x.Alias, PrimaryModel: x.PrimaryModel, ShadowModel: x.ShadowModel,
			Runs: x.Runs, ShadowErrors: x.ShadowErrors, ShadowSkipped: x.ShadowSkipped, Greedy: x.Greedy, Compared: x.Compared,
			ExactMatches: x.ExactMatches, MeanEditDistance: x.MeanEditDistance,
			PrimaryTTFTP50Ms: ms(x.PrimaryTTFTp50), ShadowTTFTP50Ms: ms(x.ShadowTTFTp50),
			PrimaryTTFTP95Ms: ms(x.PrimaryTTFTp95), ShadowTTFTP95Ms: ms(x.ShadowTTFTp95),
			PrimaryITLMeanMs: ms(x.PrimaryITLMean), ShadowITLMeanMs: ms(x.ShadowITLMean),
			PrimaryTokensMean: x.PrimaryTokensMean, ShadowTokensMean: x.ShadowTokensMean, Scored: x.Scored, MeanScore: x.MeanScore})
	}
	writeJSON(w, http.StatusOK, rep)
}

// apiCanary is st on the wire, with the alias's shadow from cfg.
func apiCanary(st catalog.CanaryStatus, cfg *catalog.Config) api.CanaryStatus {
	out := api.CanaryStatus{Alias: st.Alias, Stable: st.Stable, Canary: st.Canary, Percent: st.Percent, State: st.State,
		Reason: st.Reason, StableStats: apiVersionStats(st.StableStats), CanaryStats: apiVersionStats(st.CanaryStats)}
	if !st.RolledBackAt.IsZero() {
		at := st.RolledBackAt
		out.RolledBackAt = &at
	}
	if a, ok := cfg.Aliases[st.Alias]; ok && a.Shadow != nil {
		out.Shadow, out.ShadowPercent = a.Shadow.Version, a.Shadow.Percent
	}
	return out
}

func apiVersionStats(v catalog.VersionStats) api.VersionStats {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return api.VersionStats{Model: v.Model, Requests: v.Requests, ErrorRate: v.ErrorRate, LengthRate: v.LengthRate,
		CancelRate: v.CancelRate, TTFTP50Ms: ms(v.TTFTp50), TTFTP95Ms: ms(v.TTFTp95), ITLP50Ms: ms(v.ITLp50), ITLP95Ms: ms(v.ITLp95)}
}
