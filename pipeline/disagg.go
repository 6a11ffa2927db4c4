package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/store"
)

// Disaggregated prefill and decode: a decode node (role decode or both)
// that is about to run a request whose prompt it mostly lacks asks a
// prefill node, over the signed peer channel, to prefill the prompt and
// send the KV blocks of the prompt's full blocks it does not hold; it
// installs them as cached prefix blocks (engine.ImportKV) and then runs
// the request as usual, its prefix cache serving the prompt. A transfer
// that fails or is refused leaves a shorter prefix hit: the decode node
// computes the rest.

// KVPrefillPath is the peer-only route on which a prefill node prefills a
// prompt and answers its KV blocks in engine's transfer format.
const KVPrefillPath = "/v1/internal/kv/prefill"

// KVPrefillRequest is the body of a KVPrefillPath request.
type KVPrefillRequest struct {
	Model string `json:"model"`
	// Prompt is the tokenized prompt; the prefill node does not tokenize.
	Prompt []int32 `json:"prompt"`
	// Want are the indices, ascending, of the prompt's full blocks (its
	// kvcache.HashChain) the decode node lacks and asks for.
	Want []int `json:"want"`
}

// DefaultDisaggTimeout is Config.DisaggTimeout's default.
const DefaultDisaggTimeout = 60 * time.Second

// KVReplica is a Replica whose engine exchanges KV blocks with other
// nodes'; EngineReplica implements it.
type KVReplica interface {
	KVLayout() (engine.KVLayout, error)
	MissingBlocks(chain []kvcache.Hash) []int
	ExportKV(ctx context.Context, want []kvcache.Hash) ([]byte, int, error)
	ImportKV(ctx context.Context, data []byte, expect []kvcache.Hash) (engine.KVImport, error)
}

var _ KVReplica = EngineReplica{}

// KVLayout implements KVReplica.
func (r EngineReplica) KVLayout() (engine.KVLayout, error) { return r.E.KVLayout() }

// MissingBlocks implements KVReplica.
func (r EngineReplica) MissingBlocks(chain []kvcache.Hash) []int { return r.E.MissingBlocks(chain) }

// ExportKV implements KVReplica.
func (r EngineReplica) ExportKV(ctx context.Context, want []kvcache.Hash) ([]byte, int, error) {
	return r.E.ExportKV(ctx, want)
}

// ImportKV implements KVReplica.
func (r EngineReplica) ImportKV(ctx context.Context, data []byte, expect []kvcache.Hash) (engine.KVImport, error) {
	return r.E.ImportKV(ctx, data, expect)
}

// PrefillFinder lists the prefill nodes of a model; *cluster.Cluster
// implements it. A Router without it disaggregates nothing.
type PrefillFinder interface {
	PrefillNodes(model string) []cluster.Member
}

// KVPuller asks prefill node m to prefill req's prompt and returns its
// answer: the KV transfer of the blocks req wants (engine's format). It
// acts for job's principal. peer.Forwarder implements it.
type KVPuller func(ctx context.Context, m cluster.Member, job *Job, req KVPrefillRequest) ([]byte, error)

// disaggPlan is a decision to pull a job's prompt KV from a prefill node.
type disaggPlan struct {
	from   cluster.Member
	chain  []kvcache.Hash
	want   []int
	reason string
}

// planDisagg decides whether this node, about to run job on its engine,
// pulls the prompt's KV from a prefill node first; nil when not.
func (p *Pipeline) planDisagg(job *Job) *disaggPlan {
	if p.pullKV == nil || p.cfg.Role == cluster.RolePrefill || job.Model == nil || job.Model.Target != nil {
		return nil
	}
	finder, ok := p.router.(PrefillFinder)
	if !ok {
		return nil
	}
	kr, ok := job.Model.Replica.(KVReplica)
	if !ok {
		return nil
	}
	if _, err := kr.KVLayout(); err != nil {
		return nil
	}
	// Nothing more to look at (no hashing) in a cluster without prefill
	// nodes.
	nodes := finder.PrefillNodes(job.Model.ID)
	if len(nodes) == 0 {
		return nil
	}
	bs := job.Model.Replica.BlockSize()
	// The engine computes a prompt's last token whatever it holds, so the
	// block holding it is never served from the cache.
	usable := (len(job.Prompt) - 1) / bs
	if usable < 1 {
		return nil
	}
	chain := kvcache.HashChain(job.Prompt[:usable*bs], bs)
	missing := kr.MissingBlocks(chain)
	if len(missing) == 0 {
		return nil
	}
	uncached := len(job.Prompt) - missing[0]*bs
	ok, reason := p.cfg.Disagg.Decide(uncached, job.Model.Replica.Stats().Running)
	if !ok {
		return nil
	}
	return &disaggPlan{from: nodes[0], chain: chain, want: missing, reason: reason}
}

// disaggTarget runs a job on the local engine after pulling its prompt's
// KV from a prefill node.
type disaggTarget struct {
	p     *Pipeline
	local Target
	plan  *disaggPlan
}

// Name implements Target.
func (t *disaggTarget) Name() string { return t.local.Name() }

// Start implements Target: the pull (which never fails the job: a failed
// transfer means recomputing here), then the local engine's Start.
func (t *disaggTarget) Start(ctx context.Context, job *Job) (Execution, error) {
	note := t.pull(ctx, job)
	ex, err := t.local.Start(ctx, job)
	if err != nil {
		return nil, err
	}
	return &disaggRun{Execution: ex, note: note}, nil
}

// pull fetches and installs the blocks and returns the route note that
// says what moved ("disagg long_prompt from p1: 12/12 blocks 1048576B
// 140ms").
func (t *disaggTarget) pull(ctx context.Context, job *Job) string {
	p, plan := t.p, t.plan
	start := time.Now()
	timeout := p.cfg.DisaggTimeout
	if timeout <= 0 {
		timeout = DefaultDisaggTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kr := job.Model.Replica.(KVReplica)
	data, err := p.pullKV(pctx, plan.from, job, KVPrefillRequest{Model: job.Model.ID, Prompt: job.Prompt, Want: plan.want})
	var res engine.KVImport
	if err == nil {
		res, err = kr.ImportKV(ctx, data, plan.chain)
	}
	took := time.Since(start).Round(time.Millisecond)
	prefix := "disagg " + plan.reason + " from " + plan.from.ID
	if err != nil {
		p.log.Warn("KV pull failed; recomputing the prompt here", "request_id", job.ID, "prefill_node", plan.from.ID,
			"blocks", len(plan.want), "err", err)
		if p.metrics != nil {
			p.metrics.ObserveDisagg("fallback")
		}
		return fmt.Sprintf("%s failed after %s: recomputed", prefix, took)
	}
	if p.metrics != nil {
		p.metrics.ObserveDisagg("pulled")
		p.metrics.ObserveKVTransfer("imported", res.Imported, "received", len(data))
		p.metrics.ObserveKVTransfer("held", res.Held, "", 0)
	}
	p.log.Debug("KV pulled", "request_id", job.ID, "prefill_node", plan.from.ID, "asked", len(plan.want),
		"imported", res.Imported, "held", res.Held, "bytes", len(data), "took", took)
	return fmt.Sprintf("%s: %d/%d blocks %dB %s", prefix, res.Imported, len(plan.want), len(data), took)
}

// disaggRun is the local execution of a disaggregated job: its result
// carries the pull's note.
type disaggRun struct {
	Execution
	note string
}

// Relay implements Execution.
func (r *disaggRun) Relay(ctx context.Context, sink Sink, progress *Progress) Result {
	res := r.Execution.Relay(ctx, sink, progress)
	res.Note = appendNote(r.note, res.Note)
	return res
}

// maxKVPrefillBlocks bounds the blocks one KV prefill request may ask for.
const maxKVPrefillBlocks = 1 << 16

// ServeKVPrefill is a prefill node's side of a pull, for a peer (pr is a
// peer's principal): it runs req's prompt through the local engine (one
// output token, discarded), which leaves the prompt's full blocks in the
// prefix cache, and returns the blocks req wants in engine's transfer
// format. The prefill runs at the tier's priority; the entry node bills
// the request. Errors are *Error.
func (p *Pipeline) ServeKVPrefill(ctx context.Context, pr Principal, req KVPrefillRequest) ([]byte, error) {
	bad := func(status int, format string, args ...any) error {
		return &Error{Status: status, Type: TypeInvalidRequest, Message: fmt.Sprintf(format, args...)}
	}
	if pr.Peer == "" {
		return nil, bad(http.StatusNotFound, "%s is for the cluster's nodes only", KVPrefillPath)
	}
	m, err := p.models.Lookup(req.Model)
	if err != nil {
		return nil, err
	}
	if m.Target != nil || m.Embed != nil {
		return nil, bad(http.StatusNotFound, "model %q is not served by this node's engine", req.Model)
	}
	kr, ok := m.Replica.(KVReplica)
	if !ok {
		return nil, bad(http.StatusNotImplemented, "model %q does not transfer KV blocks", req.Model)
	}
	if _, err := kr.KVLayout(); err != nil {
		return nil, bad(http.StatusNotImplemented, "model %q does not transfer KV blocks: %v", req.Model, err)
	}
	if len(req.Prompt) == 0 || len(req.Prompt) >= m.Limit {
		return nil, bad(http.StatusBadRequest, "prompt of %d tokens: want 1 to %d", len(req.Prompt), m.Limit-1)
	}
	for _, t := range req.Prompt {
		if t < 0 || int(t) >= m.Info.VocabSize && m.Info.VocabSize > 0 {
			return nil, bad(http.StatusBadRequest, "token %d outside the vocabulary", t)
		}
	}
	chain := kvcache.HashChain(req.Prompt, m.Replica.BlockSize())
	if len(req.Want) > min(len(chain), maxKVPrefillBlocks) {
		return nil, bad(http.StatusBadRequest, "%d blocks wanted of a prompt of %d full blocks", len(req.Want), len(chain))
	}
	want := make([]kvcache.Hash, len(req.Want))
	for i, w := range req.Want {
		if w < 0 || w >= len(chain) || i > 0 && w <= req.Want[i-1] {
			return nil, bad(http.StatusBadRequest, "wanted block %d: want ascending indices below %d", w, len(chain))
		}
		want[i] = chain[w]
	}
	prio, ok := TierPriority[store.Tier(pr.Tier)]
	if !ok {
		prio = engine.PriorityFree
	}
	st, err := m.Replica.Submit(ctx, engine.Request{ID: NewID("kvp-"), Tenant: pr.Tenant, Prompt: req.Prompt,
		MaxTokens: 1, N: 1, Priority: prio})
	if err != nil {
		return nil, submitError(err)
	}
	if err := drainEvents(ctx, st); err != nil {
		return nil, fmt.Errorf("pipeline: prefill for a peer: %w", err)
	}
	data, n, err := kr.ExportKV(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("pipeline: export KV for a peer: %w", err)
	}
	if p.metrics != nil {
		p.metrics.ObserveKVTransfer("sent", n, "sent", len(data))
	}
	p.log.Debug("KV prefilled for a peer", "peer", pr.Peer, "request_id", pr.RequestID, "model", m.ID,
		"prompt_tokens", len(req.Prompt), "asked", len(want), "sent", n, "bytes", len(data))
	return data, nil
}

// drainEvents reads a stream to its end; the error of a failed request.
func drainEvents(ctx context.Context, st EventStream) error {
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if ev.Last() && ev.Err != nil {
			return ev.Err
		}
	}
}
