package fleet

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/internal/workload"
	"github.com/llmd/llmd/quota"
)

// RoutePolicies lists the routing policies a fleet simulates: the cluster's,
// less PolicyLocal (a fleet has no entry node of its own).
var RoutePolicies = []cluster.Policy{cluster.PolicyPrefix, cluster.PolicyCost, cluster.PolicyAffinity,
	cluster.PolicyRoundRobin, cluster.PolicyLeastLoaded}

// Config describes a simulated fleet and its traffic. Start from
// DefaultConfig.
type Config struct {
	// Nodes is the number of llmd nodes; each runs one engine on TP GPUs.
	Nodes int
	// Sim configures every node's simulated executor: the GPU and model
	// profiles, the tensor-parallel degree and the cost model's knobs.
	// Its MeanOutputTokens should be 0 so that each answer is as long as
	// the workload says (as benchmarks run with ignore_eos); TimeScale
	// must be 1.
	Sim sim.Config
	// Engine configures every node's engine.
	Engine engine.Config
	// Route is the routing policy, one of RoutePolicies.
	Route cluster.Policy
	// LoadBound and LoadSlack are the router's (cluster.RouteRequest); 0
	// means the cluster's defaults.
	LoadBound float64
	LoadSlack int
	// SummaryInterval is how often each node's prefix summary, as the
	// router sees it, is refreshed (the gossip state interval). 0 means
	// cluster.DefaultStateInterval.
	SummaryInterval time.Duration
	// Quota, when not nil, limits every tenant with one fleet-wide
	// in-memory limiter on the virtual clock (what the Redis backend gives
	// a real cluster). A refused request is counted and not sent.
	Quota *quota.Limits
	// Workload is the traffic; it must be open loop (a Rate). The run
	// lasts Workload.Duration of virtual time, or, without one, until
	// every request has finished.
	Workload workload.Spec
	// Warmup is left out of every measurement: the fleet starts empty and
	// cold. 0 measures from the start.
	Warmup time.Duration
	// Zones places node i in zone i % Zones (0 and 1: one zone); each
	// conversation comes from one zone (drawn by a hash of its number),
	// and the router prefers that
	// zone's nodes as a cluster with --zone prefers the entry node's (out
	// of it only when every node there is over the load bound). A request
	// served out of its zone waits InterZoneLatency more for its first
	// token (the request's way there and the first token's way back); the
	// stream's later tokens flow at the same rate.
	Zones            int
	InterZoneLatency time.Duration
	// Workers is how many goroutines step the nodes between two arrivals;
	// 0 means 1. More help only with idle cores to spare: a window
	// between arrivals holds tens of microseconds of work per node, so
	// waking a worker costs about what it saves on a busy machine. The
	// Report does not depend on it.
	Workers int
}

// DefaultConfig returns four nodes of sim/small on one H100 each, with the
// calibrated cost model (sim.CalibratedConfig), routed by prefix, with
// answers exactly as long as the workload asks; the caller sets the
// Workload.
func DefaultConfig() Config {
	sc := sim.CalibratedConfig()
	sc.MeanOutputTokens = 0
	return Config{Nodes: 4, Sim: sc, Engine: engine.DefaultConfig(), Route: cluster.PolicyPrefix}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 1024:
		return fmt.Errorf("fleet: nodes must be from 1 to 1024, got %d", c.Nodes)
	case !slices.Contains(RoutePolicies, c.Route):
		return fmt.Errorf("fleet: unknown routing policy %q (known: %s)", c.Route, cluster.PolicyNames(RoutePolicies))
	case c.Sim.TimeScale != 1:
		return fmt.Errorf("fleet: the sim's time scale must be 1, got %v", c.Sim.TimeScale)
	case c.SummaryInterval < 0:
		return fmt.Errorf("fleet: summary interval must not be negative, got %s", c.SummaryInterval)
	case c.Workers < 0:
		return fmt.Errorf("fleet: workers must not be negative, got %d", c.Workers)
	case c.Zones < 0 || c.Zones > c.Nodes:
		return fmt.Errorf("fleet: zones must be from 0 to the number of nodes (%d), got %d", c.Nodes, c.Zones)
	case c.InterZoneLatency < 0:
		return fmt.Errorf("fleet: the inter-zone latency must not be negative, got %s", c.InterZoneLatency)
	case c.Warmup < 0:
		return fmt.Errorf("fleet: warm-up must not be negative, got %s", c.Warmup)
	case c.Workload.Rate <= 0:
		return errors.New("fleet: the workload needs a rate (the simulation is open loop)")
	case c.Workload.Duration > 0 && c.Warmup >= c.Workload.Duration:
		return fmt.Errorf("fleet: warm-up %s must be shorter than the duration %s", c.Warmup, c.Workload.Duration)
	}
	if err := c.Sim.Validate(); err != nil {
		return err
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if err := c.Workload.Validate(); err != nil {
		return fmt.Errorf("fleet: workload: %w", err)
	}
	return nil
}
