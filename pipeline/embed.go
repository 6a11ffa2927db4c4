package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/llmd/llmd/engine"
)

// EndpointEmbeddings is OpenAI's /v1/embeddings and Ollama's /api/embed
// and /api/embeddings.
const EndpointEmbeddings Endpoint = "embeddings"

// Limits of one embeddings request (OpenAI's: 2048 inputs).
const (
	MaxEmbedInputs = 2048
	// MaxEmbedTokens bounds the tokens of all of a request's inputs.
	MaxEmbedTokens = 1 << 20
)

// EmbedModel is the embedding side of a Model (Model.Embed): what the
// model makes and the batcher that runs its requests.
type EmbedModel struct {
	// Dim is the length of its embeddings; Pooling how token states
	// become one ("mean", "cls", "last").
	Dim     int
	Pooling string
	// Matryoshka allows a request's dimensions below Dim: the embedding's
	// leading dimensions, renormalised.
	Matryoshka bool
	Batcher    *EmbedBatcher
}

// NewEmbedModel describes an embedding model: its id, text side (the
// tokenizer), the batcher over its embedder, its context length and its
// embeddings' shape. The returned Model's Run is the batcher's.
func NewEmbedModel(id string, text TextModel, b *EmbedBatcher, contextLength int, em EmbedModel, created time.Time) *Model {
	em.Batcher = b
	r := embedReplica{id: id, ctx: contextLength, b: b}
	return &Model{ID: id, Info: r.Info(), Replica: r, Text: text, EOS: map[int32]bool{}, Limit: contextLength,
		Executor: ExecutorCPU, Created: created.Unix(), Run: b.Run, Embed: &em}
}

// Kind is "embedding" for an embedding model, "" for a generative one.
func (m *Model) Kind() string {
	if m.Embed != nil {
		return "embedding"
	}
	return ""
}

// EmbedRequest is an embeddings request's input (Request.Embed): texts,
// or inputs already tokenized.
type EmbedRequest struct {
	Texts  []string
	Tokens [][]int32
	// Dimensions asks for embeddings of that many leading dimensions,
	// renormalised (Matryoshka models only); nil is the model's own.
	Dimensions *int
	// Truncate cuts an input longer than the model's context to fit,
	// keeping its end-of-input token (Ollama's truncate); false refuses
	// it (OpenAI).
	Truncate bool
}

// EmbedResult is an answered embeddings request.
type EmbedResult struct {
	// Model is the model that made the vectors.
	Model string
	// Vectors has one unit-length embedding per input, in order.
	Vectors [][]float32
	// InputTokens counts the tokens of all inputs (what is metered).
	InputTokens int
	// Compute is the time from admission to the vectors (queue and
	// forward pass); LoadDuration is 0 (models are loaded before).
	Compute time.Duration
}

// EmbedWriter writes an embeddings answer in its API's shape.
type EmbedWriter interface {
	// Answer writes the result; an error means the client is gone.
	Answer(res *EmbedResult) error
	// Fail writes err as the API's error and returns the status sent.
	Fail(err error) int
}

// errNoEmbeddings refuses an embeddings request for a generative model.
func errNoEmbeddings(id string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "model", Code: "embeddings_unsupported",
		Message: fmt.Sprintf("The model `%s` does not support embeddings: it is a generative model (use the chat or completions endpoints).", id)}
}

// errNotGenerative refuses a generation request for an embedding model.
func errNotGenerative(id string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "model", Code: "generation_unsupported",
		Message: fmt.Sprintf("The model `%s` is an embedding model: it does not support chat or completions (use /v1/embeddings).", id)}
}

// Embed runs an embeddings request through the same stages as a
// generation: the tenant, the model (the models config's choice, its
// Embed side required), the inputs tokenized and checked, admission (tier
// priority, shedding, the quota reserving the inputs' tokens), the
// in-flight usage row, the batcher, then the final usage row (before the
// answer: billing fails closed), the reservation reconciled with the
// tokens computed, and the log line. Embeddings are metered as input
// tokens only. w writes the answer or the error. It returns the request's
// Outcome.
func (p *Pipeline) Embed(ctx context.Context, req *Request, w EmbedWriter) Outcome {
	plan := &Plan{Req: req, Model: capText(req.Model, maxLoggedModelLen)}
	res, err := p.embedPrepare(ctx, plan)
	if err != nil {
		return p.Record(req, plan, w.Fail(err), err)
	}
	start := time.Now()
	var vecs [][]float32
	tokens := len(plan.Job.Prompt)
	if res.remote != nil {
		vecs, tokens, err = p.embedRemote(ctx, plan, res.remote)
	} else {
		vecs, err = plan.held.Embed.Batcher.Embed(ctx, res.inputs)
		if err == nil {
			vecs, err = cutDimensions(vecs, req.Embed.Dimensions)
		}
	}
	result := Result{Usage: Usage{InputTokens: tokens}, Finish: "stop"}
	if err != nil {
		result = Result{Err: err, Finish: string(engine.FinishError)}
		if ctx.Err() != nil {
			result.Finish, result.ClientGone, result.Err = string(engine.FinishCancelled), true, nil
		}
	}
	out := p.outcome(plan, result)
	switch {
	case result.ClientGone:
		plan.settle(out.Usage)
		out.Status = StatusClientClosed
		p.meter(out)
	case err != nil:
		plan.settle(out.Usage)
		out.Status = w.Fail(err)
		p.meter(out)
	default:
		out.Status = http.StatusOK
		if err := p.meter(out); err != nil {
			out.Err = err
			plan.settle(out.Usage)
			out.Status = w.Fail(err)
			break
		}
		plan.settle(out.Usage)
		if err := w.Answer(&EmbedResult{Model: plan.Model, Vectors: vecs, InputTokens: out.Usage.InputTokens,
			Compute: time.Since(start)}); err != nil {
			out.Status, out.Err = StatusClientClosed, err
		}
	}
	p.observe(plan, out, result)
	plan.release()
	p.record(out)
	return out
}

// embedPrep is what embedPrepare decided beyond the plan: the inputs
// tokenized for the model here, or the peers that serve it.
type embedPrep struct {
	inputs [][]int32
	remote []Target
}

// EmbedTarget is a Target that can also answer an embeddings request: a
// peer serving the model.
type EmbedTarget interface {
	Target
	// Embed runs er on the target's model job.ModelID and returns one
	// vector per input and the tokens the inputs took. An *Error is the
	// client's to see; any other error lets the next target be tried.
	Embed(ctx context.Context, job *Job, er *EmbedRequest) (vecs [][]float32, inputTokens int, err error)
}

// embedRemote runs plan's embeddings request on the first of targets that
// answers; a peer that fails is taken out of routing and the next tried.
func (p *Pipeline) embedRemote(ctx context.Context, plan *Plan, targets []Target) ([][]float32, int, error) {
	for _, t := range targets {
		et, ok := t.(EmbedTarget)
		if !ok {
			continue
		}
		vecs, n, err := et.Embed(ctx, plan.Job, plan.Req.Embed)
		if err == nil {
			return vecs, n, nil
		}
		var final *Error
		if errors.As(err, &final) || ctx.Err() != nil {
			return nil, 0, err
		}
		p.targetFailed(plan, t, err)
	}
	return nil, 0, ErrNoNodeAnswered
}

// estimateEmbedTokens over-estimates the tokens of er's inputs for a model
// this node cannot tokenize for (the reservation; the serving node's
// count is billed): token lists exactly, texts at a token per 3 bytes
// plus the model's added tokens.
func estimateEmbedTokens(er *EmbedRequest) int {
	n := 0
	for _, t := range er.Texts {
		n += len(t)/3 + 3
	}
	for _, ids := range er.Tokens {
		n += len(ids)
	}
	return n
}

// embedPrepare runs the stages before the batcher; plan holds what was
// decided (for Record on a refusal).
func (p *Pipeline) embedPrepare(ctx context.Context, plan *Plan) (embedPrep, error) {
	req := plan.Req
	er := req.Embed
	if er == nil {
		return embedPrep{}, InvalidParam("input", "you must provide an input")
	}
	tenant, err := p.tenant(ctx, req.Principal)
	if err != nil {
		return embedPrep{}, err
	}
	plan.Tenant = tenant
	switch n := len(er.Texts) + len(er.Tokens); {
	case n == 0:
		return embedPrep{}, InvalidParam("input", "input must hold at least one text or token list")
	case n > MaxEmbedInputs:
		return embedPrep{}, InvalidParam("input", "input may hold at most %d items, got %d", MaxEmbedInputs, n)
	}
	if d := er.Dimensions; d != nil && *d < 1 {
		return embedPrep{}, InvalidParam("dimensions", "dimensions must be at least 1, got %d", *d)
	}
	c, err := p.choose(ctx, req, tenant)
	plan.route, plan.degraded, plan.Choice = c.route, c.degraded, c.decision
	if err != nil {
		return embedPrep{}, err
	}
	m := c.model
	if m == nil {
		return p.embedPrepareRemote(ctx, plan, tenant, c)
	}
	plan.Model = m.ID
	if m.Embed == nil {
		return embedPrep{}, errNoEmbeddings(m.ID)
	}
	if !m.tryAcquire() {
		return embedPrep{}, errModelUnloading(m.ID)
	}
	plan.held = m
	if d := er.Dimensions; d != nil && *d != m.Embed.Dim {
		switch {
		case *d > m.Embed.Dim:
			return embedPrep{}, InvalidParam("dimensions", "dimensions %d exceeds the model's %d", *d, m.Embed.Dim)
		case !m.Embed.Matryoshka:
			return embedPrep{}, InvalidParam("dimensions", "The model `%s` does not support dimensions: it was not trained "+
				"with Matryoshka representation learning, so a shortened embedding would be poor (its embeddings have %d).", m.ID, m.Embed.Dim)
		}
	}
	inputs, total, err := embedInputs(er, m)
	if err != nil {
		return embedPrep{}, err
	}
	prompt := make([]int32, 0, total)
	for _, in := range inputs {
		prompt = append(prompt, in...)
	}
	job := &Job{ID: req.ID, Endpoint: req.Endpoint, Principal: req.Principal, Tier: tenant.Tier, Model: m, ModelID: m.ID,
		Prompt: prompt, N: 1, AffinityKey: req.AffinityKey}
	if err := p.embedAdmit(ctx, plan, tenant, c, job); err != nil {
		return embedPrep{}, err
	}
	p.beginRow(ctx, plan)
	return embedPrep{inputs: inputs}, nil
}

// embedAdmit admits job, an embeddings request's, as plan's: the tier's
// priority, shedding and the quota reservation; a refusal is recorded.
func (p *Pipeline) embedAdmit(ctx context.Context, plan *Plan, tenant Tenant, c choice, job *Job) error {
	plan.Job = job
	adm, err := p.admit(ctx, plan.Req, tenant, c, job)
	plan.Decision, plan.degraded = adm.decision, appendNote(plan.degraded, adm.degraded)
	if err != nil {
		if reason := RejectReason(err); reason != "" {
			p.rejectedRow(plan, reason)
		}
		return err
	}
	plan.Job, plan.settle, plan.metered = adm.job, adm.settle, true
	return nil
}

// embedPrepareRemote prepares an embeddings request for a model only peers
// serve: a job of the estimated input tokens admitted here (the quota
// reserves them; the serving node's count is billed), then the peers.
func (p *Pipeline) embedPrepareRemote(ctx context.Context, plan *Plan, tenant Tenant, c choice) (embedPrep, error) {
	req := plan.Req
	if len(c.peers) == 0 || p.peer == nil {
		return embedPrep{}, &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Param: "model", Code: "no_node_available",
			Message: fmt.Sprintf("No node serving the model `%s` is reachable.", c.id)}
	}
	plan.Model = c.id
	job := &Job{ID: req.ID, Endpoint: req.Endpoint, Principal: req.Principal, Tier: tenant.Tier, ModelID: c.id,
		Prompt: make([]int32, estimateEmbedTokens(req.Embed)), N: 1, AffinityKey: req.AffinityKey}
	if err := p.embedAdmit(ctx, plan, tenant, c, job); err != nil {
		return embedPrep{}, err
	}
	targets := make([]Target, len(c.peers))
	for i, pc := range c.peers {
		targets[i] = p.peer(pc)
	}
	p.observeRoute(true, c.peers[0].CrossZone)
	plan.route = appendNote(plan.route, c.peers[0].Member.ID+" "+c.peers[0].Reason+crossZoneNote(c.peers[0]))
	p.beginRow(ctx, plan)
	return embedPrep{remote: targets}, nil
}

// embedInputs tokenizes er's texts with m's tokenizer (its [CLS] and
// [SEP] added) and checks its token lists: none empty, ids in the
// vocabulary, each within the context (cut to fit when er.Truncate).
func embedInputs(er *EmbedRequest, m *Model) ([][]int32, int, error) {
	vocab := m.Text.VocabSize()
	inputs := make([][]int32, 0, len(er.Texts)+len(er.Tokens))
	total := 0
	for i, text := range er.Texts {
		toks := m.Text.Prompt(text, true)
		if len(toks) == 0 {
			return nil, 0, InvalidParam(fmt.Sprintf("input[%d]", i), "input[%d] gives no tokens", i)
		}
		if len(toks) > m.Limit && er.Truncate {
			toks = truncateInput(toks, m.Text.Prompt(text, false), m.Limit)
		}
		inputs = append(inputs, toks)
	}
	for i, toks := range er.Tokens {
		if len(toks) == 0 {
			return nil, 0, InvalidParam(fmt.Sprintf("input[%d]", i), "input[%d] must hold at least one token", i)
		}
		for _, t := range toks {
			if t < 0 || int(t) >= vocab {
				return nil, 0, InvalidParam(fmt.Sprintf("input[%d]", i), "input[%d] holds %d, not a token id of this model (0 to %d)", i, t, vocab-1)
			}
		}
		if len(toks) > m.Limit && er.Truncate {
			toks = toks[:m.Limit]
		}
		inputs = append(inputs, toks)
	}
	for i, toks := range inputs {
		if len(toks) > m.Limit {
			return nil, 0, &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "input", Code: CodeContextLength,
				Message: fmt.Sprintf("This model's maximum context length is %d tokens, however input[%d] has %d tokens. "+
					"Please shorten it.", m.Limit, i, len(toks))}
		}
		total += len(toks)
	}
	if total > MaxEmbedTokens {
		return nil, 0, InvalidParam("input", "the inputs hold %d tokens, more than the %d one request may", total, MaxEmbedTokens)
	}
	return inputs, total, nil
}

// truncateInput cuts an encoded input (with its special tokens) to limit
// tokens, keeping the special token that ends it ([SEP]) when bare, its
// encoding without special tokens, shows there is one.
func truncateInput(full, bare []int32, limit int) []int32 {
	if limit < 2 || len(bare) == 0 || full[len(full)-1] == bare[len(bare)-1] {
		return full[:limit:limit]
	}
	out := append([]int32(nil), full[:limit-1]...)
	return append(out, full[len(full)-1])
}

// cutDimensions keeps the first *dims values of each vector and scales
// them back to unit length (dims nil, or not shorter: unchanged; a zero
// vector stays zero).
func cutDimensions(vecs [][]float32, dims *int) ([][]float32, error) {
	if dims == nil {
		return vecs, nil
	}
	for i, v := range vecs {
		if *dims >= len(v) {
			continue
		}
		v = v[:*dims]
		var ss float64
		for _, x := range v {
			ss += float64(x) * float64(x)
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) {
			return nil, errors.New("pipeline: the embedding is not finite")
		}
		inv := 0.0
		if ss > 0 {
			inv = 1 / math.Sqrt(ss)
		}
		out := make([]float32, len(v))
		for j, x := range v {
			out[j] = float32(float64(x) * inv)
		}
		vecs[i] = out
	}
	return vecs, nil
}
