package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
)

// kvReplica is a Replica with a prefix cache of held hashes and a record
// of the transfers it imported.
type kvReplica struct {
	held     map[kvcache.Hash]bool
	running  int
	imported [][]byte
}

func (r *kvReplica) Submit(context.Context, engine.Request) (EventStream, error) {
	return nil, errors.New("not here")
}
func (r *kvReplica) Info() engine.ExecutorInfo { return engine.ExecutorInfo{Model: "m", BlockSize: 4} }
func (r *kvReplica) MaxSeqTokens() int         { return 1000 }
func (r *kvReplica) Stats() engine.Stats       { return engine.Stats{Running: r.running} }
func (r *kvReplica) Requests(context.Context) ([]engine.RequestState, error) {
	return nil, nil
}
func (r *kvReplica) BlockSize() int                     { return 4 }
func (r *kvReplica) CachedPrefix(h []kvcache.Hash) int  { return len(h) - len(r.MissingBlocks(h)) }
func (r *kvReplica) RecentPrefixes(int) []kvcache.Hash  { return nil }
func (r *kvReplica) KVLayout() (engine.KVLayout, error) { return engine.KVLayout{Model: "m"}, nil }
func (r *kvReplica) ExportKV(context.Context, []kvcache.Hash) ([]byte, int, error) {
	return nil, 0, nil
}
func (r *kvReplica) MissingBlocks(chain []kvcache.Hash) []int {
	var out []int
	for i, h := range chain {
		if !r.held[h] {
			out = append(out, i)
		}
	}
	return out
}

func (r *kvReplica) ImportKV(_ context.Context, data []byte, _ []kvcache.Hash) (engine.KVImport, error) {
	r.imported = append(r.imported, data)
	return engine.KVImport{Imported: len(data)}, nil
}

// prefillRouter is a Router that knows the prefill nodes.
type prefillRouter struct{ nodes []cluster.Member }

func (prefillRouter) Route(cluster.RouteRequest, func([]kvcache.Hash) int) []cluster.Candidate {
	return nil
}
func (prefillRouter) MarkFailed(string)                      {}
func (prefillRouter) Models() []string                       { return nil }
func (r prefillRouter) PrefillNodes(string) []cluster.Member { return r.nodes }

// okTarget accepts every job with an execution that ends at once.
type okTarget struct{ started *int }

func (okTarget) Name() string { return "local" }
func (t okTarget) Start(context.Context, *Job) (Execution, error) {
	*t.started++
	return okRun{}, nil
}

type okRun struct{}

func (okRun) Relay(context.Context, Sink, *Progress) Result { return Result{Note: "ran"} }

func tokens(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i % 97)
	}
	return p
}

// TestPlanDisagg: a request is disaggregated when a prefill node exists
// and the prompt tokens this node lacks reach the threshold (or a quarter
// of it under ITL pressure); it asks only for the blocks it lacks, never
// for the block holding the prompt's last token.
func TestPlanDisagg(t *testing.T) {
	t.Parallel()
	pull := func(context.Context, cluster.Member, *Job, KVPrefillRequest) ([]byte, error) { return nil, nil }
	nodes := []cluster.Member{{ID: "p1", Role: cluster.RolePrefill}}
	rep := &kvReplica{held: map[kvcache.Hash]bool{}}
	newP := func(cfg Config, router Router, pull KVPuller) *Pipeline {
		return &Pipeline{cfg: cfg, router: router, pullKV: pull}
	}
	job := func(n int) *Job { return &Job{Model: &Model{ID: "m", Replica: rep}, Prompt: tokens(n)} }
	policy := Config{Disagg: cluster.DisaggPolicy{MinPromptTokens: 16, BusyRunning: 4}}

	p := newP(policy, prefillRouter{nodes}, pull)
	plan := p.planDisagg(job(41)) // ten full blocks, the last token in an eleventh
	require.NotNil(t, plan)
	require.Equal(t, "p1", plan.from.ID)
	require.Equal(t, cluster.DisaggLongPrompt, plan.reason)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, plan.want)
	require.Len(t, plan.chain, 10)
	// 40 tokens: the tenth block holds the last token; nine are asked for.
	require.Len(t, p.planDisagg(job(40)).want, 9)

	// The first six blocks held here: 17 tokens lacking, four blocks asked.
	for _, h := range kvcache.HashChain(tokens(24), 4) {
		rep.held[h] = true
	}
	plan = p.planDisagg(job(41))
	require.NotNil(t, plan)
	require.Equal(t, []int{6, 7, 8, 9}, plan.want)
	// 33 tokens: nine lacking, under the threshold...
	require.Nil(t, p.planDisagg(job(33)))
	// ...but enough under ITL pressure (four running here).
	rep.running = 4
	plan = p.planDisagg(job(33))
	require.NotNil(t, plan)
	require.Equal(t, cluster.DisaggITLPressure, plan.reason)
	require.Equal(t, []int{6, 7}, plan.want)
	rep.running = 0

	require.Nil(t, newP(policy, prefillRouter{nil}, pull).planDisagg(job(41)), "no prefill node")
	require.Nil(t, newP(policy, prefillRouter{nodes}, nil).planDisagg(job(41)), "no puller")
	prefillRole := policy
	prefillRole.Role = cluster.RolePrefill
	require.Nil(t, newP(prefillRole, prefillRouter{nodes}, pull).planDisagg(job(41)), "a prefill node pulls nothing")
	require.Nil(t, p.planDisagg(job(24)), "everything usable is held")
}

// TestDisaggTargetFallsBack: a failed pull still runs the job here, its
// note saying the prompt was recomputed; a pull imports what came and
// notes the blocks and bytes.
func TestDisaggTargetFallsBack(t *testing.T) {
	t.Parallel()
	rep := &kvReplica{held: map[kvcache.Hash]bool{}}
	job := &Job{ID: "r1", Model: &Model{ID: "m", Replica: rep}, Prompt: tokens(41)}
	plan := &disaggPlan{from: cluster.Member{ID: "p1"}, chain: kvcache.HashChain(tokens(40), 4), want: []int{0, 1}, reason: "long_prompt"}
	started := 0
	var asked KVPrefillRequest
	fail := func(_ context.Context, _ cluster.Member, _ *Job, req KVPrefillRequest) ([]byte, error) {
		asked = req
		return nil, errors.New("connection refused")
	}
	p := &Pipeline{pullKV: fail, log: slog.New(slog.DiscardHandler)}
	ex, err := (&disaggTarget{p: p, local: okTarget{&started}, plan: plan}).Start(t.Context(), job)
	require.NoError(t, err)
	require.Equal(t, 1, started)
	require.Equal(t, KVPrefillRequest{Model: "m", Prompt: job.Prompt, Want: []int{0, 1}}, asked)
	res := ex.Relay(t.Context(), nil, nil)
	require.Contains(t, res.Note, "disagg long_prompt from p1 failed after")
	require.True(t, strings.HasSuffix(res.Note, "recomputed; ran"), res.Note)
	require.Empty(t, rep.imported)

	p.pullKV = func(context.Context, cluster.Member, *Job, KVPrefillRequest) ([]byte, error) {
		return []byte("kv"), nil
	}
	ex, err = (&disaggTarget{p: p, local: okTarget{&started}, plan: plan}).Start(t.Context(), job)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("kv")}, rep.imported)
	require.Contains(t, ex.Relay(t.Context(), nil, nil).Note, "disagg long_prompt from p1: 2/2 blocks 2B")
}
