package pipeline

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/store"
)

// Endpoint names the API endpoint a request came in on. Its values are
// stable: they appear in logs and usage rows.
type Endpoint string

// Endpoints.
const (
	EndpointChatCompletions Endpoint = "chat.completions"
	EndpointCompletions     Endpoint = "completions"
	EndpointChat            Endpoint = "chat" // the native API
	EndpointTokenize        Endpoint = "tokenize"
	EndpointDetokenize      Endpoint = "detokenize"
)

// IDPrefix is the prefix of the ids of e's requests.
func (e Endpoint) IDPrefix() string {
	switch e {
	case EndpointChatCompletions:
		return "chatcmpl-"
	case EndpointCompletions:
		return "cmpl-"
	case EndpointTokenize:
		return "tok-"
	case EndpointDetokenize:
		return "detok-"
	}
	return "req_"
}

// NewID returns prefix followed by 32 random hex digits (128 bits: ids are
// unguessable, and the resume and cancel routes rely on that).
func NewID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

// nodeTagLen is the hex digits of a node's tag in the ids it makes.
const nodeTagLen = 8

// NewNodeID is NewID for an id that names the node that made it: its
// first 8 hex digits are NodeTag(node), the other 24 random (96 bits,
// still unguessable), so a resume or cancel that reaches another node of
// the cluster can be sent to the owner. An empty node makes a NewID.
func NewNodeID(prefix, node string) string {
	if node == "" {
		return NewID(prefix)
	}
	id := NewID(prefix)
	return id[:len(prefix)] + NodeTag(node) + id[len(prefix)+nodeTagLen:]
}

// NodeTag is the tag of node's ids: 8 hex digits of a hash of its name.
func NodeTag(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:nodeTagLen/2])
}

// IDTag is the node tag in id (see NewNodeID): the 8 hex digits after its
// prefix, "" when it has none of that shape.
func IDTag(id string) string {
	i := strings.LastIndexAny(id, "-_")
	if i < 0 || len(id)-i-1 != 32 {
		return ""
	}
	tag := id[i+1 : i+1+nodeTagLen]
	if _, err := hex.DecodeString(tag); err != nil {
		return ""
	}
	return tag
}

// Principal is who a request acts for.
type Principal struct {
	Tenant string
	// KeyID is the API key's id; "" for anonymous (local) requests.
	KeyID string
	Admin bool
	// Peer is the id of the node that forwarded the request ("" for a
	// client's own request); Tier and RequestID are what that node
	// decided: this node serves it under that tier and id, and that node
	// holds its reservation and bills it.
	Peer, Tier, RequestID string
}

// Forward is what a peer needs to serve the request as it came: the path,
// the headers it keeps, and the body as read.
type Forward struct {
	Path   string
	Header http.Header
	Body   []byte
}

// Request is one generation request as an API codec decoded it: the
// request's fields in API-neutral form, before any check that needs a
// model. Prepare reads it and never changes it.
type Request struct {
	// ID is the request's id (the entry node's, for a forwarded request);
	// ClientID is the client's own X-Request-Id, for the log.
	ID, ClientID string
	Endpoint     Endpoint
	Principal    Principal
	// Start is when the request arrived.
	Start time.Time
	// Model is the model asked for.
	Model string
	// Messages (chat endpoints) or Prompt (completions) is the input;
	// PromptIDs, when set, is a completion prompt given as token ids
	// (Prompt is then empty), checked against the model's vocabulary.
	Messages  []api.Message
	Prompt    string
	PromptIDs []int32
	Sampling  api.Sampling
	// N is the number of choices; nil is one.
	N *int
	// MaxTokens is the most output tokens per choice; nil is the
	// endpoint's default (16 for completions, else the room left in the
	// context). MaxTokensParam names it in errors.
	MaxTokens      *int
	MaxTokensParam string
	Stream         bool
	// Logprobs asks for each token's log-probability and TopLogprobs
	// alternatives.
	Logprobs    bool
	TopLogprobs int
	// Priority is the class the request asks for (native API); nil is
	// its tenant's tier.
	Priority *engine.Priority
	// AffinityKey names the conversation (a header, else the "user"
	// field), for session affinity.
	AffinityKey string
	// User is the client's tag for its end user (the "user" field), kept
	// in the usage row.
	User string
	// Mode is the caller's product mode (the "mode" field or the
	// X-LLMD-Mode header), for the models config's routers.
	Mode string
	// Structured constrains the output to a grammar; nil is free text.
	Structured *Structured
	// Tools are the tools the model may call (chat endpoints), ToolChoice
	// whether and which it must call (the zero value: auto), and
	// ParallelToolCalls whether it may make several calls in one answer.
	Tools             []api.Tool
	ToolChoice        api.ToolChoice
	ParallelToolCalls bool
	// MinTokens, IgnoreEOS and StopTokenIDs are the engine's controls
	// (engine.Request); ShowSpecial keeps special tokens in the text
	// (skip_special_tokens false); Echo starts each choice's text with
	// the prompt (completions).
	MinTokens    int
	IgnoreEOS    bool
	StopTokenIDs []int32
	ShowSpecial  bool
	Echo         bool
	// Reasoning splits a reasoning model's answers into their reasoning
	// section and content (the "reasoning_format" field; see
	// reasoning.go). TemplateKwargs is a JSON object of extra variables
	// for the chat template (chat_template_kwargs); nil for none.
	Reasoning      bool
	TemplateKwargs json.RawMessage
	// Forward is the request as it came, for a peer.
	Forward Forward
	// Embed is an embeddings request's input (EndpointEmbeddings); nil
	// for the others.
	Embed *EmbedRequest
	// OnStopString, when set, is called with the stop string that ended
	// choice i, on the relaying goroutine just before that choice's
	// Sink.Finish ("stop"): an API that names the matched stop sequence
	// (Anthropic's stop_sequence) tells it from an end-of-generation
	// token. Only this node's engine reports it; a peer or an upstream
	// engine does not.
	OnStopString func(i int, stop string)
}

// Structured is a constraint on a request's output, from the field Param:
// one of a JSON object (Kind json_object), JSON valid against Schema
// (json_schema), a GBNF grammar (grammar), a regular expression (regex) or
// one of Choices (choice).
type Structured struct {
	Kind    string
	Param   string
	Schema  json.RawMessage
	Text    string
	Choices []string
}

// Structured kinds.
const (
	StructuredJSONObject = "json_object"
	StructuredJSONSchema = "json_schema"
	StructuredGrammar    = "grammar"
	StructuredRegex      = "regex"
	StructuredChoice     = "choice"
)

// Forwarded reports whether a peer forwarded the request to this node.
func (r *Request) Forwarded() bool { return r.Principal.Peer != "" }

// inputParam names the request's input in errors.
func (r *Request) inputParam() string {
	if r.Endpoint == EndpointCompletions {
		return "prompt"
	}
	return "messages"
}

// defaultMaxTokens is max_tokens when the request does not set it: 16 for
// completions (OpenAI's default), else 0 (the room left in the context).
func (r *Request) defaultMaxTokens() int {
	if r.Endpoint == EndpointCompletions {
		return 16
	}
	return 0
}

// priorities names the engine's classes on the wire.
var priorities = map[string]engine.Priority{
	"enterprise": engine.PriorityEnterprise,
	"paid":       engine.PriorityPaid,
	"free":       engine.PriorityFree,
	"batch":      engine.PriorityBatch,
}

// ParsePriority returns the class a request names: "enterprise", "paid",
// "free" or "batch".
func ParsePriority(name string) (engine.Priority, bool) {
	p, ok := priorities[name]
	return p, ok
}

// Tenant is the principal's account: its tier and limits.
type Tenant struct {
	ID     string
	Tier   store.Tier
	Limits quota.Limits
	// Capacity holds its sub-bucket count, per-user limits and
	// reservations.
	Capacity store.Capacity
}

// Job is a request ready to run: its model chosen, its prompt tokenized,
// its output bounded, its priority set. Targets read it and never change
// it.
type Job struct {
	ID        string
	Endpoint  Endpoint
	Stream    bool
	Principal Principal
	Tier      store.Tier
	// Model serves the job here; nil when only peers serve ModelID.
	Model   *Model
	ModelID string
	// Prompt is the tokenized prompt (nil for a job only peers serve).
	Prompt    []int32
	MaxTokens int
	N         int
	Priority  engine.Priority
	Seed      uint64
	Sampling  engine.SamplingParams
	Stops     []string
	// Logprobs asks for each token's log-probability and TopLogprobs
	// alternatives.
	Logprobs    bool
	TopLogprobs int
	// AffinityKey names the conversation, for routing.
	AffinityKey string
	// Grammar constrains the output (structured output, a forced tool
	// call); nil is free text.
	Grammar *grammar.Bound
	// Tools, when set, parses each choice's text into tool calls.
	Tools *ToolPlan
	// Reasoning, when set, splits each choice's text into reasoning and
	// content (before the tool-call parser sees it).
	Reasoning *ReasoningPlan
	// The engine's controls (engine.Request), and the text's: special
	// tokens shown, and the text each choice starts with (echo).
	MinTokens   int
	IgnoreEOS   bool
	StopTokens  []int32
	ShowSpecial bool
	Echo        string
	// Forward is the request as it came, for a peer (with "model"
	// replaced when a fallback serves it).
	Forward Forward
	// Upstream is the engine's request when Model is served by an upstream
	// engine (Model.Target), nil otherwise.
	Upstream *UpstreamCall
	// OnStopString is the request's (see Request.OnStopString).
	OnStopString func(i int, stop string)
	// ReservedTPS is the output tokens per second reserved for the tenant
	// on the model (engine.Request.ReservedTPS; 0: none).
	ReservedTPS float64
}

// EngineRequest is the job as the engine takes it: each call gets its own
// grammar state.
func (j *Job) EngineRequest() engine.Request {
	req := engine.Request{ID: j.ID, Tenant: j.Principal.Tenant, Prompt: j.Prompt, MaxTokens: j.MaxTokens, N: j.N,
		Priority: j.Priority, Seed: j.Seed, Sampling: j.Sampling, Logprobs: j.Logprobs, TopLogprobs: j.TopLogprobs,
		MinTokens: j.MinTokens, IgnoreEOS: j.IgnoreEOS, StopTokens: j.StopTokens, ReservedTPS: j.ReservedTPS}
	if j.Grammar != nil {
		req.Constraint = j.Grammar.Matcher().Constraint()
	}
	return req
}
