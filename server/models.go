package server

import (
	"net/http"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/pipeline"
)

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	list := api.ModelList{Object: "list", Data: make([]api.Model, 0, len(s.models.List()))}
	seen := map[string]int{}
	for _, m := range s.models.List() {
		seen[m.ID] = len(list.Data)
		list.Data = append(list.Data, apiModel(m))
	}
	if cat := s.pipe.Catalog(); cat != nil {
		// The models config's names: aliases, routers, and its versions
		// (those not loaded are loaded on demand).
		for _, e := range cat.Describe() {
			am := api.Model{ID: e.Name, Object: "model", Created: s.started.Unix(), OwnedBy: "llmd", Kind: e.Kind, Target: e.Target}
			if !e.Deprecated.IsZero() {
				am.Deprecated = e.Deprecated.Unix()
			}
			if !e.Sunset.IsZero() {
				am.Sunset = e.Sunset.Unix()
			}
			if i, ok := seen[e.Name]; ok {
				am.Created, am.MaxModelLen = list.Data[i].Created, list.Data[i].MaxModelLen
				am.Architecture, am.ParameterCount, am.Quantization = list.Data[i].Architecture, list.Data[i].ParameterCount, list.Data[i].Quantization
				list.Data[i] = am
				continue
			}
			list.Data = append(list.Data, am)
		}
	}
	if s.members != nil {
		// In a cluster, the models only peers serve: requests for them are
		// forwarded.
		if members, clustered := s.members(); clustered {
			for _, mem := range members {
				if mem.Local || mem.Status != cluster.StatusAlive {
					continue
				}
				for _, id := range mem.Models {
					if _, ok := seen[id]; ok {
						continue
					}
					seen[id] = len(list.Data)
					list.Data = append(list.Data, api.Model{ID: id, Object: "model", Created: s.started.Unix(), OwnedBy: "llmd",
						Kind: "peer", Target: mem.ID})
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" {
		id = "/" // an empty id is an unknown model, not a missing parameter
	}
	m, err := s.models.Lookup(id)
	if err != nil {
		if cat := s.pipe.Catalog(); cat != nil {
			// A name of the models config: an alias, a router, or a
			// version not loaded yet.
			for _, e := range cat.Describe() {
				if e.Name == id {
					am := api.Model{ID: e.Name, Object: "model", Created: s.started.Unix(), OwnedBy: "llmd", Kind: e.Kind, Target: e.Target}
					if !e.Deprecated.IsZero() {
						am.Deprecated = e.Deprecated.Unix()
					}
					if !e.Sunset.IsZero() {
						am.Sunset = e.Sunset.Unix()
					}
					writeJSON(w, http.StatusOK, am)
					return
				}
			}
		}
		writeError(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, apiModel(m))
}

func apiModel(m *pipeline.Model) api.Model {
	return api.Model{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: "llmd", MaxModelLen: m.Limit,
		Architecture: m.Arch, ParameterCount: m.Params, Quantization: m.Quantization, Kind: m.Kind()}
}

type statusBody struct {
	Status string `json:"status"`
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, statusBody{Status: "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	switch s.State() {
	case StateReady:
		writeJSON(w, http.StatusOK, statusBody{Status: "ready"})
	case StateDraining:
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "draining"})
	default:
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "starting"})
	}
}

// tierNames names the engine's priorities on the wire, by priority;
// gossipTierNames the tiers of a member's gossiped load, by position (the
// shadow class stays local).
var (
	tierNames       = [...]string{"shadow", "batch", "free", "paid", "enterprise"}
	gossipTierNames = tierNames[1:]
)

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	resp := api.StatsResponse{Models: make([]api.EngineStats, 0, len(s.models.List()))}
	for _, m := range s.models.List() {
		resp.Models = append(resp.Models, apiEngineStats(m))
	}
	resp.Quota = s.quotaStats()
	writeJSON(w, http.StatusOK, resp)
}

// apiEngineStats is m's engine state on the wire.
func apiEngineStats(m *pipeline.Model) api.EngineStats {
	st := m.Replica.Stats()
	byTier := make(map[string]int, len(tierNames))
	for p, name := range tierNames {
		byTier[name] = st.WaitingByPriority[p]
	}
	return api.EngineStats{
		Model: m.ID, Executor: m.Executor,
		BlocksTotal: st.BlocksTotal, BlocksUsed: st.BlocksUsed, BlocksCached: st.BlocksCached, BlockSize: st.BlockSize,
		Running: st.Running, Waiting: st.Waiting, WaitingByTier: byTier,
		Swapped: st.Swapped, SwapBlocksUsed: st.SwapBlocksUsed, SwapBlocksTotal: st.SwapBlocksTotal,
		Steps: st.Steps, Completed: st.Completed, GeneratedTokens: st.GeneratedTokens, ComputedTokens: st.ComputedTokens,
		PrefixQueryTokens: st.PrefixQueryTokens, PrefixHitTokens: st.PrefixHitTokens,
		Preemptions: st.Preemptions, PreemptionsSwap: st.PreemptionsSwap, PreemptionsRecompute: st.PreemptionsRecompute,
		Evictions: st.Evictions, Degrade: st.Degrade.String(), DegradeLevel: int(st.Degrade),
	}
}

func (s *Server) quotaStats() *api.QuotaStats {
	c := s.limiter.Counters()
	return &api.QuotaStats{Allow: c.Allow, Deny: c.Deny, ErrorAllowed: c.ErrorAllowed, ErrorDenied: c.ErrorDenied,
		Resets: c.Resets, FallbackActive: c.FallbackActive, Backend: s.cfg.QuotaBackend}
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.Handler().ServeHTTP(w, r)
}
