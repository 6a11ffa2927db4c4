// Package cluster joins llmd nodes into one memberlist (SWIM) cluster,
// gossips each node's load and a compact summary of its cached prefixes,
// and routes a request to the member best placed to serve it.
//
// It owns: the memberlist instance and its delegates, the table of known
// members with their latest gossiped [State], the goroutine that publishes
// the local state every [Config.StateInterval] and the one that reconnects
// to lost members (both run by [Cluster.Run]), and the router
// ([Cluster.Route]): prefix affinity first, then a consistent-hash ring
// with bounded load, then the least loaded members.
//
// Forwarding a request to the chosen peer is not done here: the request
// pipeline asks Route for an ordered list of candidates (Route applies the
// request's routing Policy), and package peer forwards to them, reading
// the answer with api.SSEReader.
//
// Imports: engine/kvcache (the block hash type) only; never the request
// path (pipeline, server, peer, daemon) or store.
//
// # Lifecycle
//
// [New] validates the [Config], creates memberlist, publishes the first
// local state and joins the given members; it starts no goroutine of this
// package, and the node is usable (Addr, Members, Route, NumAlive,
// MarkFailed) as soon as it returns. [Cluster.Run] blocks until its ctx
// ends, running the state and reconnect loops; then it leaves gracefully
// (a final state marked leaving and draining, then memberlist's leave,
// within [Config.LeaveTimeout]) and shuts memberlist down. The daemon calls
// New before serving, runs Run in its errgroup, and cancels Run's ctx when
// it starts draining. [Cluster.Kill] stops a node without leaving, as a
// crash would (peers see it dead): for tests, and to release a Cluster
// whose Run never started. A Cluster runs once.
//
// # Membership status
//
// memberlist does not expose whether it suspects a node (its Node.State is
// not kept up to date), so Status is derived here: "dead" or "left" once
// memberlist reports the node gone ("left" when the node's last state said
// it was leaving), "suspect" when no newer state of the node has arrived for
// [Config.SuspectAfter] or the caller evicted it with [Cluster.MarkFailed],
// and "alive" otherwise.
//
// # Reconnecting
//
// memberlist never contacts a node again once it has declared it dead, so
// after a partition heals the two halves would stay apart. As in serf, the
// Cluster keeps the lost members (declared dead, not left: a node whose
// last state said it was leaving is not lost) with their address and the
// time they went, and one goroutine tries a memberlist Join of their
// addresses every [Config.ReconnectInterval] (10 s; 500 ms with
// ProfileLocal): up to 8 at random per round, all at once, the next round
// starting when these are done. A member is given up after
// [Config.ReconnectTimeout] (24 h; 1 min with ProfileLocal), and dropped at
// once when it comes back, when a late state says it was leaving, or when an
// alive member now has its address. The Join addresses (seeds) are tried
// too in a round while fewer members are alive than at the peak (the most
// alive at once, lowered when a member leaves or is given up), except the
// seeds that are alive members: a seed is worth a try when it is a name
// that resolves to new addresses, or a node this one no longer sees. One
// join is a TCP push/pull of the member tables; the node that learns it was
// declared dead refutes it, and both halves converge by gossip. The loop
// runs outside the delegates and without locks held; it stops when Run's
// ctx ends (a leaving node dials no one), and the shutdown that follows
// ends a dial in flight (the transport's dials end at shutdown).
//
// # Control state
//
// With [Config.Control], the node also replicates the control state (API
// keys, tenants, tiers, quota limits) that the ControlStore holds as
// versioned records (a hybrid logical clock timestamp and the origin node;
// the store decides the merge, the cluster only compares versions). A
// local change is gossiped at once ([Cluster.PublishControl]) through the
// same TransmitLimitedQueue as the state, where a newer record about the
// same thing replaces a queued one; every push/pull carries the records
// (paged, see below), so a node that joins late, restarts or comes back
// from a partition converges at its next push/pull. The delegates keep no
// I/O: they compare received records with an in-memory copy of the
// store's, and queue those that differ (older ones too: the store keeps a
// key revocation that an older record carries) for Run's control
// goroutine, which applies them in one store transaction and gossips those
// that changed the store (so each change is relayed once per node, never
// endlessly). That goroutine also reads the store again every 10
// StateIntervals, to send what another process (an offline llmctl) wrote.
// A full queue drops received records (counted in [ControlStats]); the
// next push/pull brings them again.
//
// # Wire formats
//
// All integers are unsigned varints (encoding/binary) unless said otherwise;
// strings are a varint length then the bytes.
//
// Node metadata (memberlist NodeMeta, at most 512 bytes, checked by
// [Config.Validate]): a format byte (1), then id, API address, build version,
// a count of models and each model name.
//
// A state record: a kind byte (1), node id, epoch, seq, a flags byte
// (1 draining, 2 leaving), a count of models and for each: name, running,
// waiting, KV usage and tokens per second (IEEE float32, little endian), a
// count of load counters and each: the waiting sequences of each tier
// (batch, free, paid, enterprise), then the prompt tokens queued for
// prefill, the measured prefill rate in tokens per second and the KV block
// size in tokens (at least the 4 tiers; trailing zeros past them left out,
// so a load has one encoding; a decoder keeps the counters it knows, so a
// node of the 4-tier format reads newer records), a count of prefix keys and the keys (8 bytes little endian each: the Hi half
// of the kvcache.Hash). The pair (epoch, seq) is the version: epoch is the
// node's start time in nanoseconds (raised past any later version of itself
// that it hears of, so a restarted node always wins), seq counts
// publications since start.
//
// A summary record: a kind byte (2), node id, epoch, seq, a count of models
// and for each: name, a count of prefix keys and the keys.
//
// A gossip message (a memberlist user message from a TransmitLimitedQueue,
// where a newer message about a node replaces the queued one): one state
// record whose prefix keys are capped at [BroadcastPrefixKeys] in all and
// whose encoding is at most [MaxBroadcastBytes], so it fits one UDP packet
// with memberlist's headers and encryption. A node sends its own when the
// state changes and at least every 4 StateIntervals as a heartbeat; each
// receiver that finds a message newer than what it has queues it for relay
// (memberlist's retransmit limit, RetransmitMult x log(N+1), applies), as
// serf does, so news reaches every node in a few gossip rounds.
//
// The push/pull state (LocalState/MergeRemoteState, over TCP): a kind byte
// (3), a count of records, then each record as a length and its bytes: for
// every known node its latest state record and its latest summary record,
// which carries up to [MaxPrefixKeys] keys per model.
//
// A control gossip message: a kind byte (5), then one control record: kind,
// id, wall (Unix milliseconds), logical, origin node, a flags byte (1
// deleted), the payload (a length and bytes, at most 16 KiB); at most
// [MaxBroadcastBytes] in all, else the record travels in push/pull only.
// The push/pull state of a node with control records is a kind byte (4),
// the state above (kind 3) as a length and its bytes, then a count of
// control records and each as a length and its bytes: all of them when
// they fit 1 MiB, else the next page of them in (kind, id) order from
// where the last push/pull stopped, so that successive push/pulls carry
// every record. A kind 3 state is still accepted.
//
// Receivers keep two registers per node, the state (load, flags, the capped
// keys) and the summary (all keys), each replaced only by a strictly newer
// version; merging is idempotent and order-independent. Decoding bounds every
// count and length by the bytes left and by fixed limits, and never panics.
package cluster
