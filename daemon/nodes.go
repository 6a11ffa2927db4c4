package daemon

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
)

// ClusterConfig joins llmd to a cluster: membership, the gossip of each
// node's load and cached prefixes, and routing each request to the node
// best placed to serve it (forwarded with a peer signature).
type ClusterConfig struct {
	// GossipAddr is the memberlist address (host:port); default
	// 127.0.0.1:7946.
	GossipAddr string
	// Join are members to join (host:port of their gossip address).
	Join []string
	// Key encrypts gossip (16, 24 or 32 bytes); required unless
	// InsecureGossip.
	Key            []byte
	InsecureGossip bool
	// APIAddr is the address peers reach this node's API at; default the
	// bound listen address.
	APIAddr string
	// Profile is "lan" (default) or "local" (short intervals, for tests).
	Profile string
	// RoutePolicy is how requests are routed: cluster.PolicyPrefix (the
	// default), PolicyAffinity, PolicyRoundRobin, PolicyLeastLoaded or
	// PolicyLocal (never forward).
	RoutePolicy cluster.Policy
	// LoadBound skips a node whose load exceeds LoadBound x the pool's
	// mean for the prefix and affinity picks; 0 means 1.25.
	LoadBound float64
	// LoadSlack: a node counts as over the bound only when its load also
	// exceeds the least loaded node's by this many sequences; 0 means 8,
	// negative none.
	LoadSlack int
	// Fallback maps a model to the one that serves its requests when no
	// alive node serves it.
	Fallback map[string]string
	// ForwardTimeout bounds connecting to a peer and its acceptance of a
	// forwarded request; default 2 s. A peer that misses it is skipped
	// and the request tried on the next node.
	ForwardTimeout time.Duration
}

// DefaultForwardTimeout is ClusterConfig.ForwardTimeout's default.
const DefaultForwardTimeout = 2 * time.Second

func (c *ClusterConfig) forwardTimeout() time.Duration {
	if c == nil || c.ForwardTimeout <= 0 {
		return DefaultForwardTimeout
	}
	return c.ForwardTimeout
}

// startCluster joins the cluster configured in cfg.Cluster, if any.
func (s *Server) startCluster(apiAddr string) error {
	cc := s.cfg.Cluster
	if cc == nil {
		return nil
	}
	if cc.APIAddr != "" {
		apiAddr = cc.APIAddr
	}
	cl, err := cluster.Start(cluster.Config{NodeID: s.cfg.NodeID, BindAddr: cc.GossipAddr, Join: cc.Join, Key: cc.Key,
		InsecureGossip: cc.InsecureGossip, APIAddr: apiAddr, Models: s.Models(), Version: Version,
		Profile: cc.Profile, LocalState: s.clusterState, Logger: s.rootLog})
	if err != nil {
		return fmt.Errorf("daemon: cluster: %w", err)
	}
	s.cluster = cl
	s.peers = newPeerAuth(cc.Key)
	s.peerClient = newPeerClient(cc.forwardTimeout())
	if len(cc.Key) == 0 {
		s.log.Warn("forwarded requests are not authenticated: --insecure-gossip leaves the cluster without a key")
	}
	if s.members != nil {
		s.members.Store(cl)
	}
	s.log.Info("joined the cluster", "gossip", cl.Addr(), "members", len(cl.Members()))
	return nil
}

// clusterState is what this node gossips: each model's load and its most
// recently used cached prefixes.
func (s *Server) clusterState() cluster.State {
	st := cluster.State{Load: make(map[string]cluster.ModelLoad, len(s.models)),
		Prefixes: make(map[string][]kvcache.Hash, len(s.models)), Draining: s.state.Load() == stateDraining}
	for _, m := range s.models {
		es := m.eng.Stats()
		kv := 0.0
		if es.BlocksTotal > 0 {
			kv = float64(es.BlocksUsed) / float64(es.BlocksTotal)
		}
		st.Load[m.id] = cluster.ModelLoad{Running: es.Running, Waiting: es.Waiting, KVUsage: kv,
			TokensPerSecond: s.outputRate(m.id, es.GeneratedTokens, time.Now()), WaitingByTier: es.WaitingByPriority}
		if s.cluster != nil {
			st.Prefixes[m.id] = m.eng.RecentPrefixes(cluster.MaxPrefixKeys)
		}
	}
	return st
}

// rateMeter turns each model's count of generated tokens into a recent
// output rate for the gossip.
type rateMeter struct {
	mu    sync.Mutex
	marks map[string]rateMark
}

type rateMark struct {
	at   time.Time
	gen  uint64
	rate float64
}

// minRateSpan is the shortest span a new rate is computed over; a sample
// sooner than that keeps the last rate.
const minRateSpan = 200 * time.Millisecond

// outputRate is model's output tokens per second since the previous
// sample at least minRateSpan ago.
func (s *Server) outputRate(model string, generated uint64, now time.Time) float64 {
	m := &s.rates
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marks == nil {
		m.marks = map[string]rateMark{}
	}
	last, ok := m.marks[model]
	if !ok || generated < last.gen {
		m.marks[model] = rateMark{at: now, gen: generated}
		return 0
	}
	span := now.Sub(last.at)
	if span < minRateSpan {
		return last.rate
	}
	rate := float64(generated-last.gen) / span.Seconds()
	m.marks[model] = rateMark{at: now, gen: generated, rate: rate}
	return rate
}

// Version is llmd's version in cluster metadata.
const Version = "0.1.0"

func (s *Server) handleNodes(w http.ResponseWriter, _ *http.Request, _ *reqLog) {
	out := api.NodeList{Nodes: []api.NodeInfo{}}
	if s.cluster == nil {
		local := cluster.Member{ID: s.cfg.NodeID, Version: Version, Models: s.Models(), Status: cluster.StatusAlive,
			Local: true, State: s.clusterState(), Updated: time.Now()}
		if a := s.Addr(); a != nil {
			local.APIAddr = a.String()
		}
		out.Nodes = append(out.Nodes, nodeInfo(local))
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Clustered = true
	for _, m := range s.cluster.Members() {
		out.Nodes = append(out.Nodes, nodeInfo(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// nodeInfo is a member on the wire.
func nodeInfo(m cluster.Member) api.NodeInfo {
	n := api.NodeInfo{ID: m.ID, APIAddr: m.APIAddr, Version: m.Version, Models: m.Models, Status: string(m.Status),
		Local: m.Local, Draining: m.State.Draining, Load: map[string]api.NodeModelLoad{}, Updated: m.Updated.UTC()}
	for model, l := range m.State.Load {
		byTier := map[string]int{}
		for p, w := range l.WaitingByTier {
			if w > 0 {
				byTier[engine.Priority(p).String()] = w
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
