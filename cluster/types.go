package cluster

import (
	"time"

	"github.com/llmd/llmd/engine/kvcache"
)

// The cluster's view of its members: their status, the load and prefixes
// they gossip.

// Status is a member's liveness as this node sees it (see the package doc).
type Status string

// Member statuses.
const (
	StatusAlive   Status = "alive"
	StatusSuspect Status = "suspect"
	StatusDead    Status = "dead"
	StatusLeft    Status = "left"
)

// maxNodes bounds the member table: records about unknown nodes are
// dropped once it is full.
const maxNodes = 4096

// ModelLoad is one model's load on a node.
type ModelLoad struct {
	// Running and Waiting count sequences in the batch and in the queue.
	Running, Waiting int
	// KVUsage is the fraction of KV cache blocks in use, 0..1.
	KVUsage float64
	// TokensPerSecond is the recent output rate.
	TokensPerSecond float64
	// WaitingByTier splits Waiting by priority class, in the engine's
	// order: batch, free, paid, enterprise.
	WaitingByTier [NumTiers]int
	// QueuedPromptTokens is the prompt tokens the node still has to
	// prefill (queued requests' prompts, before prefix-cache hits, and
	// the rest of the running ones'); 0 from a node that does not say.
	QueuedPromptTokens int
	// PrefillTokensPerSecond is the node's measured prefill rate (travels
	// rounded to a whole token); 0 unknown.
	PrefillTokensPerSecond float64
	// BlockTokens is the model's KV block size in tokens; 0 unknown.
	BlockTokens int
}

// NumTiers is the number of priority classes a load reports.
const NumTiers = 4

// State is what a node gossips about itself.
type State struct {
	// Load is per model.
	Load map[string]ModelLoad
	// Prefixes is per model a bounded summary of cached prefixes: chained
	// block hashes, the most valuable (most recently used) first; for
	// example the first-block and depth-4/8/16 hashes of the most recently
	// used prefixes. Holding the hash of block i claims blocks 0..i. The
	// first MaxPrefixKeys per model are kept; the first BroadcastPrefixKeys
	// in all (one per model in turn) travel in every gossip message, the
	// rest in push/pull. Remote summaries carry 64 bits per hash: in a
	// remote Member's State only Hi is set.
	Prefixes map[string][]kvcache.Hash
	// Draining is set while the node finishes its work before leaving; it
	// gets no new requests.
	Draining bool
}

// Member is one node as this node sees it.
type Member struct {
	ID, APIAddr, Version string
	Models               []string
	// Zone is the member's zone label ("" for none).
	Zone string
	// Role is the member's part in disaggregated prefill and decode.
	Role Role
	// Status is alive, suspect, dead or left (see the package doc).
	Status Status
	// Local is set for this node.
	Local bool
	// State is the latest gossiped state, zero until the first arrives. Its
	// maps are shared and must not be modified.
	State State
	// Updated is when State arrived (for the local node: when it was
	// sampled), on this node's clock.
	Updated time.Time
}
