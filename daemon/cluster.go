package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
	"github.com/llmd/llmd/relay/redislog"
	"github.com/llmd/llmd/server"
	"github.com/llmd/llmd/store"
)

// ClusterConfig joins llmd to a cluster: membership, the gossip of each
// node's load and cached prefixes, and routing each request to the node
// best placed to serve it (forwarded with a peer signature).
type ClusterConfig struct {
	// GossipAddr is the memberlist address (host:port); default
	// 127.0.0.1:7946.
	GossipAddr string
	// Join are members to join (host:port of their gossip address). The
	// node serves alone and keeps trying them until one answers.
	Join []string
	// RetryJoinMax bounds the join attempts: past it the node stops with
	// an error. 0 retries for as long as the node runs.
	RetryJoinMax int
	// Zone labels the node's zone; requests entering it prefer nodes of
	// the same zone. "" for none.
	Zone string
	// Role is the node's part in disaggregated prefill and decode:
	// cluster.RoleBoth (default), RolePrefill (prefills prompts for
	// decode nodes; routed requests only as the last resort) or
	// RoleDecode. A decode or both node pulls a request's prompt KV from a
	// prefill node when Disagg decides it pays (its MinPromptTokens: the
	// prompt tokens not cached here; BusyRunning: ITL pressure); a pull
	// is bounded by DisaggTimeout (0: pipeline.DefaultDisaggTimeout).
	Role          cluster.Role
	Disagg        cluster.DisaggPolicy
	DisaggTimeout time.Duration
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

// leaveTimeout bounds leaving the cluster at the start of the drain.
const leaveTimeout = 2 * time.Second

// startCluster joins the cluster configured in cfg.Cluster, if any, with
// apiAddr as the address peers reach this node's API at (unless the config
// names one).
func (d *Daemon) startCluster(apiAddr string) error {
	cc := d.cfg.Cluster
	if cc == nil {
		return nil
	}
	if cc.APIAddr != "" {
		apiAddr = cc.APIAddr
	}
	ccfg := cluster.Config{NodeID: d.cfg.NodeID, BindAddr: cc.GossipAddr, Join: cc.Join, Key: cc.Key,
		InsecureGossip: cc.InsecureGossip, APIAddr: apiAddr, Models: d.models.IDs(), Version: Version,
		Profile: cc.Profile, LocalState: d.clusterState, Logger: d.rootLog, LeaveTimeout: leaveTimeout,
		RetryJoinMax: cc.RetryJoinMax, Zone: cc.Zone, Role: cc.Role}
	// Keys, tenants and quotas are replicated, only over encrypted gossip
	// (d.auth is set with a key): without one, anyone reaching the gossip
	// port could add an admin key. Versions made here name this node, and
	// each local change is gossiped once committed.
	replicate := d.deps.Store != nil && d.auth != nil
	if replicate {
		d.deps.Store.SetNode(d.cfg.NodeID)
		ccfg.Control = controlStore{d.deps.Store}
	}
	cl, err := cluster.New(ccfg)
	if err != nil {
		return fmt.Errorf("daemon: cluster: %w", err)
	}
	d.cluster.Store(cl)
	if replicate {
		// Changes committed before this point are read from the store by
		// New, or by the cluster's next refresh.
		d.deps.Store.OnChange(func(recs []store.Record) { cl.PublishControl(toControl(recs)) })
	}
	if d.auth == nil {
		d.log.Warn("the cluster has no key (--insecure-gossip): this node serves every request itself, " +
			"forwards none and refuses forwarded ones")
	}
	d.log.Info("cluster started", "gossip", cl.Addr(), "members", len(cl.Members()))
	return nil
}

// clusterState is what this node gossips: each model's load and its most
// recently used cached prefixes.
func (d *Daemon) clusterState() cluster.State {
	models := d.models.List()
	st := cluster.State{Load: make(map[string]cluster.ModelLoad, len(models)),
		Prefixes: make(map[string][]kvcache.Hash, len(models)), Draining: d.srv.State() == server.StateDraining}
	for _, m := range models {
		es := m.Replica.Stats()
		kv := 0.0
		if es.BlocksTotal > 0 {
			kv = float64(es.BlocksUsed) / float64(es.BlocksTotal)
		}
		// The gossip counts the tiers batch to enterprise by position; the
		// shadow class (below batch) stays local.
		var byTier [cluster.NumTiers]int
		copy(byTier[:], es.WaitingByPriority[engine.PriorityBatch:])
		st.Load[m.ID] = cluster.ModelLoad{Running: es.Running, Waiting: es.Waiting, KVUsage: kv,
			TokensPerSecond: d.rates.rate(m.ID, es.GeneratedTokens, time.Now()), WaitingByTier: byTier,
			QueuedPromptTokens: es.QueuedPromptTokens, PrefillTokensPerSecond: roundRate(es.PrefillTokensPerSecond),
			BlockTokens: es.BlockSize}
		if d.cluster.Load() != nil {
			st.Prefixes[m.ID] = m.Replica.RecentPrefixes(cluster.MaxPrefixKeys)
		}
	}
	return st
}

// roundRate keeps two significant digits of a prefill rate: the router
// needs no more, and a rate that moves with every step would make each
// state differ from the last and go out as news.
func roundRate(r float64) float64 {
	if !(r > 0) || math.IsInf(r, 0) {
		return 0
	}
	scale := math.Pow(10, math.Floor(math.Log10(r))-1)
	return math.Round(r/scale) * scale
}

// members is the cluster as this node sees it, or this node alone.
func (d *Daemon) members() ([]cluster.Member, bool) {
	if cl := d.cluster.Load(); cl != nil {
		return cl.Members(), true
	}
	local := cluster.Member{ID: d.cfg.NodeID, Version: Version, Models: d.models.IDs(), Status: cluster.StatusAlive,
		Local: true, State: d.clusterState(), Updated: time.Now()}
	if a := d.Addr(); a != nil {
		local.APIAddr = a.String()
	}
	return []cluster.Member{local}, false
}

// router is the pipeline's view of the cluster: no candidates until the
// cluster has started.
type router struct {
	cl *atomic.Pointer[cluster.Cluster]
}

func (r router) Route(req cluster.RouteRequest, localPrefix func([]kvcache.Hash) int) []cluster.Candidate {
	if cl := r.cl.Load(); cl != nil {
		return cl.Route(req, localPrefix)
	}
	return nil
}

// Models returns the models the alive peers serve.
func (r router) Models() []string {
	cl := r.cl.Load()
	if cl == nil {
		return nil
	}
	var out []string
	for _, m := range cl.Members() {
		if !m.Local && m.Status == cluster.StatusAlive {
			out = append(out, m.Models...)
		}
	}
	return out
}

// PrefillNodes lists the model's prefill nodes (pipeline.PrefillFinder).
func (r router) PrefillNodes(model string) []cluster.Member {
	if cl := r.cl.Load(); cl != nil {
		return cl.PrefillNodes(model)
	}
	return nil
}

func (r router) MarkFailed(id string) {
	if cl := r.cl.Load(); cl != nil {
		cl.MarkFailed(id)
	}
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

// rate is model's output tokens per second since the previous sample at
// least minRateSpan ago.
func (m *rateMeter) rate(model string, generated uint64, now time.Time) float64 {
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

// requestOwners is the server's way to the node that owns a request id:
// the alive peers whose node tag the id carries, reached through the
// forwarder's signed channel.
type requestOwners struct{ d *Daemon }

func (o requestOwners) Owners(id string) []string {
	cl := o.d.cluster.Load()
	if cl == nil {
		return nil
	}
	tag := pipeline.IDTag(id)
	var out []string
	for _, m := range cl.Members() {
		if !m.Local && m.Status == cluster.StatusAlive && m.APIAddr != "" && pipeline.NodeTag(m.ID) == tag {
			out = append(out, m.APIAddr)
		}
	}
	return out
}

func (o requestOwners) Send(ctx context.Context, addr, method, path string, hdr http.Header, p pipeline.Principal, id string) (
	*http.Response, func(), error) {
	return o.d.forwarder.Send(ctx, addr, method, path, hdr, p, id)
}

// eventLog is the server's view of the Redis event log.
type eventLog struct{ *redislog.Log }

func (e eventLog) Read(ctx context.Context, id string) (relay.Recording, error) {
	rec, err := e.Log.Read(ctx, id)
	if errors.Is(err, redislog.ErrNotFound) {
		return rec, fmt.Errorf("%w: %s", server.ErrNotRecorded, id)
	}
	return rec, err
}

// controlStore is the cluster's view of the store's control records.
type controlStore struct{ s *store.Store }

func (c controlStore) ControlRecords(ctx context.Context) ([]cluster.ControlRecord, error) {
	recs, err := c.s.Records(ctx)
	return toControl(recs), err
}

func (c controlStore) ApplyControl(ctx context.Context, in []cluster.ControlRecord) ([]cluster.ControlRecord, error) {
	recs := make([]store.Record, len(in))
	for i, r := range in {
		recs[i] = store.Record{Kind: store.RecordKind(r.Kind), ID: r.ID, Deleted: r.Deleted, Payload: r.Payload,
			Version: store.Version{Wall: r.Version.Wall, Logical: r.Version.Logical, Node: r.Version.Node}}
	}
	changed, err := c.s.Apply(ctx, recs)
	return toControl(changed), err
}

func toControl(recs []store.Record) []cluster.ControlRecord {
	out := make([]cluster.ControlRecord, len(recs))
	for i, r := range recs {
		out[i] = cluster.ControlRecord{Kind: string(r.Kind), ID: r.ID, Deleted: r.Deleted, Payload: r.Payload,
			Version: cluster.ControlVersion{Wall: r.Version.Wall, Logical: r.Version.Logical, Node: r.Version.Node}}
	}
	return out
}
