package server

import (
	"net/http"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
)

func (s *Server) handleNodes(w http.ResponseWriter, _ *http.Request) {
	members, clustered := s.members()
	out := api.NodeList{Nodes: make([]api.NodeInfo, 0, len(members)), Clustered: clustered}
	for _, m := range members {
		out.Nodes = append(out.Nodes, nodeInfo(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// nodeInfo is a member on the wire.
func nodeInfo(m cluster.Member) api.NodeInfo {
	n := api.NodeInfo{ID: m.ID, APIAddr: m.APIAddr, Version: m.Version, Models: m.Models, Role: m.Role.String(), Status: string(m.Status),
		Local: m.Local, Draining: m.State.Draining, Load: map[string]api.NodeModelLoad{}, Updated: m.Updated.UTC()}
	for model, l := range m.State.Load {
		byTier := map[string]int{}
		for p, w := range l.WaitingByTier {
			if w > 0 {
				byTier[gossipTierNames[p]] = w
			}
		}
		n.Load[model] = api.NodeModelLoad{Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage,
			TokensPerSecond: l.TokensPerSecond, WaitingByTier: byTier}
	}
	for _, keys := range m.State.Prefixes {
		n.PrefixKeys += len(keys)
	}
	return n
}
