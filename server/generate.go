package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// codec is one generation API: how its request body decodes into a
// pipeline.Request, and the format its answer is written in.
type codec struct {
	endpoint pipeline.Endpoint
	// decode reads body into req (the checks particular to the API
	// included) and returns the answer's format.
	decode func(body []byte, req *pipeline.Request) (format, error)
}

// format writes one request's answer in its API's format.
type format interface {
	// streamSink writes the answer's events into st; jsonSink collects the
	// answer and writes it as one JSON body with writeJSON.
	streamSink(st *relay.Stream, m meta) pipeline.Sink
	jsonBody(m meta, c *collected) any
	// resumable reports whether a streamed answer keeps its events for a
	// client that reconnects (and numbers them).
	resumable(r *http.Request) bool
}

// follower is a format whose streams are not Server-Sent Events (Ollama's
// NDJSON): it copies the stream's log to the client itself.
type follower interface {
	follow(ctx context.Context, w http.ResponseWriter, st *relay.Stream, cfg relay.FollowConfig, log *slog.Logger)
}

// meta is what an answer says about its request.
type meta struct {
	id, model string
	created   int64
	n         int
	logprobs  bool
	// promptTokens is the prompt's length (0 when only peers serve it).
	promptTokens int
}

// Headers that name a conversation, for session affinity (the request's
// "user" field is the fallback).
var affinityHeaders = []string{"X-Conversation-Id", "X-Session-Id"}

// Request headers a forwarded request keeps; the client's Authorization is
// replaced by the peer signature.
var forwardedHeaders = []string{"Content-Type", "Accept", "User-Agent", resumeHeader, "X-Conversation-Id", "X-Session-Id",
	userHeader}

// userHeader names the end user of a request whose API has no field for it
// (the native and Ollama APIs); the body's field (OpenAI "user",
// Anthropic metadata.user_id) wins when both are given.
const userHeader = "X-LLMD-User"

// MaxClientRequestIDLen bounds the client's X-Request-Id in logs.
const MaxClientRequestIDLen = 128

// generate is the handler of every generation endpoint: it decodes the
// request with c, then runs it through the pipeline, answering in c's
// format: one JSON body, or a stream its relay writes into the request's
// log while this handler follows it.
func (s *Server) generate(c codec) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalFrom(r.Context())
		req := &pipeline.Request{ID: cmp.Or(p.RequestID, pipeline.NewNodeID(c.endpoint.IDPrefix(), s.cfg.NodeID)), Endpoint: c.endpoint,
			Principal: p, Start: time.Now(), ClientID: capText(r.Header.Get("X-Request-Id"), MaxClientRequestIDLen)}
		w.Header().Set("X-Request-Id", req.ID)
		if !s.active.enter() {
			s.pipe.Record(req, nil, writeError(w, req.ID, pipeline.ErrDraining), pipeline.ErrDraining)
			return
		}
		defer s.active.leave()
		f, err := s.decodeRequest(w, r, c, req)
		if err != nil {
			s.pipe.Record(req, nil, writeError(w, req.ID, err), err)
			return
		}
		plan, err := s.pipe.Prepare(r.Context(), req)
		if plan.Decision != nil {
			setRateHeaders(w.Header(), *plan.Decision)
		}
		setDeprecationHeaders(w.Header(), plan)
		if err != nil {
			if pipeline.RejectReason(err) == "" && StatusOf(err) >= 500 {
				s.log.Error("admission failed", "request_id", req.ID, "err", err)
			}
			s.pipe.Record(req, plan, writeError(w, req.ID, err), err)
			return
		}
		if req.Forwarded() {
			// The entry node reads the outcome from the trailer.
			w.Header().Set("Trailer", peer.TrailerUsage)
		}
		m := meta{id: req.ID, model: plan.Model, created: req.Start.Unix(), n: plan.Job.N, logprobs: plan.Job.Logprobs,
			promptTokens: len(plan.Job.Prompt)}
		if req.Stream {
			s.stream(w, r, plan, f, m)
		} else {
			s.answer(w, r, plan, f, m)
		}
	}
}

// decodeRequest reads the body under the size limit, decodes it with c,
// and fills in what the request's headers say.
func (s *Server) decodeRequest(w http.ResponseWriter, r *http.Request, c codec, req *pipeline.Request) (format, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return nil, err
	}
	f, err := c.decode(body, req)
	if err != nil {
		return nil, err
	}
	for _, h := range affinityHeaders {
		if v := r.Header.Get(h); v != "" {
			req.AffinityKey = capText(v, 256)
			break
		}
	}
	if req.Mode == "" {
		req.Mode = capText(r.Header.Get("X-LLMD-Mode"), 64)
	}
	if req.User == "" {
		req.User = capText(r.Header.Get(userHeader), 256)
	}
	fwd := pipeline.Forward{Path: r.URL.RequestURI(), Body: body}
	if req.Forward.Path != "" {
		// The codec translated the request into OpenAI's (Ollama,
		// Anthropic): peers and upstream engines get that.
		fwd = req.Forward
	}
	fwd.Header = http.Header{}
	req.Forward = fwd
	for _, h := range forwardedHeaders {
		if v := r.Header.Get(h); v != "" {
			req.Forward.Header.Set(h, v)
		}
	}
	return f, nil
}

// answer serves a request answered with one JSON body: the request's
// client leaving cancels it.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, plan *pipeline.Plan, f format, m meta) {
	req := plan.Req
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	run, err := s.pipe.Start(ctx, plan)
	if err != nil {
		s.pipe.Record(req, plan, writeError(w, req.ID, err), err)
		return
	}
	if req.Forwarded() {
		w.WriteHeader(http.StatusEarlyHints) // accepted: the entry node stops its forward timeout
	}
	// The registry finds it for DELETE /v1/requests/{id} and the snapshot.
	st := s.register(plan, false, cancel)
	defer func() {
		st.End(time.Now())
		s.streams.Remove(req.ID)
	}()
	sink := &jsonSink{w: w, ctx: r.Context(), f: f, m: m, st: st, c: collected{texts: make([]strings.Builder, m.n), reasoning: make([]strings.Builder, m.n),
		calls: make([][]api.ToolCall, m.n), reasons: make([]string, m.n), lps: make([][]api.TokenLogprob, m.n)}}
	out := s.pipe.Finish(ctx, run, sink)
	if req.Forwarded() {
		peer.SetTrailer(w.Header(), out)
	}
}

// stream serves a streamed request: its relay runs in its own goroutine
// and writes the request's event log, while this handler copies the log
// to the client. A resumable stream outlives its connection (see
// relay.Registry); the others are cancelled when their client leaves.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, plan *pipeline.Plan, f format, m meta) {
	req := plan.Req
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	run, err := s.pipe.Start(ctx, plan)
	if err != nil {
		cancel()
		s.pipe.Record(req, plan, writeError(w, req.ID, err), err)
		return
	}
	resumable := f.resumable(r)
	st := s.register(plan, resumable, cancel)
	if style := styleOf(f); resumable && style != "" && s.eventLog != nil {
		st.SetMirror(s.eventLog.Mirror(req.ID, req.Principal.Tenant, style))
	}
	sink := &firstToken{Sink: f.streamSink(st, m), st: st}
	done := make(chan pipeline.Outcome, 1)
	s.active.child()
	go func() {
		defer s.active.leave()
		done <- s.pipe.Finish(ctx, run, sink)
		cancel()
		st.End(time.Now())
		if !resumable {
			s.streams.Remove(req.ID)
		}
	}()
	if fl, ok := f.(follower); ok {
		fl.follow(r.Context(), w, st, s.cfg.Follow, s.log)
	} else {
		relay.Follow(r.Context(), w, st, 0, s.cfg.Follow, s.log)
	}
	if !resumable {
		cancel() // the client left, or the stream is over
	}
	if req.Forwarded() && st.Done() {
		peer.SetTrailer(w.Header(), <-done)
	}
}

// register adds plan's request to the stream registry. A stream numbers
// its events when it is resumable.
func (s *Server) register(plan *pipeline.Plan, resumable bool, cancel func()) *relay.Stream {
	req := plan.Req
	st := relay.NewStream(req.ID, req.Principal.Tenant, resumable, resumable, s.cfg.Resume, cancel)
	st.Model, st.Tier, st.Start = plan.Model, string(plan.Tenant.Tier), req.Start
	s.streams.Add(st)
	return st
}

// firstToken marks a stream's first token, for the snapshot.
type firstToken struct {
	pipeline.Sink
	st *relay.Stream
}

func (f *firstToken) Text(i int, text string, lps []api.TokenLogprob) error {
	f.st.MarkFirstToken()
	return f.Sink.Text(i, text, lps)
}

// Reasoning implements pipeline.ReasoningSink.
func (f *firstToken) Reasoning(i int, text string, lps []api.TokenLogprob) error {
	f.st.MarkFirstToken()
	if rs, ok := f.Sink.(pipeline.ReasoningSink); ok {
		return rs.Reasoning(i, text, lps)
	}
	return f.Sink.Text(i, text, lps)
}

func (f *firstToken) ToolCall(i int, d api.ToolCallDelta) error {
	f.st.MarkFirstToken()
	return f.Sink.ToolCall(i, d)
}

// collected is a whole answer: each choice's text, tool calls, finish
// reason and log-probabilities.
type collected struct {
	texts []strings.Builder
	// reasoning is each choice's reasoning section, when split.
	reasoning []strings.Builder
	calls     [][]api.ToolCall
	reasons   []string
	lps       [][]api.TokenLogprob
	usage     pipeline.Usage
	// first is when the first text or tool call came (zero before).
	first time.Time
}

// addCall adds a tool-call fragment to choice i: a new call when it
// carries an id, else more arguments of call d.Index.
func (c *collected) addCall(i int, d api.ToolCallDelta) {
	if d.ID != "" {
		c.calls[i] = append(c.calls[i], api.ToolCall{ID: d.ID, Type: d.Type,
			Function: api.FunctionCall{Name: d.Function.Name, Arguments: d.Function.Arguments}})
		return
	}
	if k := d.Index; k >= 0 && k < len(c.calls[i]) {
		c.calls[i][k].Function.Arguments += d.Function.Arguments
	}
}

// logprobs returns choice i's log-probabilities (never nil, for the JSON
// body).
func (c *collected) logprobs(i int) []api.TokenLogprob {
	if c.lps[i] == nil {
		return []api.TokenLogprob{}
	}
	return c.lps[i]
}

// jsonSink collects an answer and writes it as one JSON body.
type jsonSink struct {
	w http.ResponseWriter
	// ctx is the client's request: a request cancelled while its client
	// waits gets a 409.
	ctx context.Context
	f   format
	m   meta
	st  *relay.Stream
	c   collected
}

func (j *jsonSink) Begin() error { return nil }

func (j *jsonSink) Text(i int, text string, lps []api.TokenLogprob) error {
	j.st.MarkFirstToken()
	j.c.first = cmp.Or(j.c.first, time.Now())
	j.c.texts[i].WriteString(text)
	j.c.lps[i] = append(j.c.lps[i], lps...)
	return nil
}

// Reasoning implements pipeline.ReasoningSink.
func (j *jsonSink) Reasoning(i int, text string, lps []api.TokenLogprob) error {
	j.st.MarkFirstToken()
	j.c.reasoning[i].WriteString(text)
	j.c.lps[i] = append(j.c.lps[i], lps...)
	return nil
}

func (j *jsonSink) ToolCall(i int, d api.ToolCallDelta) error {
	j.st.MarkFirstToken()
	j.c.first = cmp.Or(j.c.first, time.Now())
	j.c.addCall(i, d)
	return nil
}

func (j *jsonSink) Finish(i int, reason string, lps []api.TokenLogprob) error {
	j.c.reasons[i] = reason
	j.c.lps[i] = append(j.c.lps[i], lps...)
	return nil
}

func (j *jsonSink) End(u pipeline.Usage) error {
	j.c.usage = u
	writeJSON(j.w, http.StatusOK, j.f.jsonBody(j.m, &j.c))
	return nil
}

func (j *jsonSink) Fail(err error) int {
	if errors.Is(err, pipeline.ErrRequestCancelled) {
		if j.ctx.Err() != nil {
			return pipeline.StatusClientClosed // nobody to answer
		}
		err = pipeline.ErrCancelledJSON // DELETE /v1/requests/{id} while the client waits
	}
	return writeError(j.w, j.m.id, err)
}

// decodeJSON decodes one JSON object from body into v. Its errors are for
// writeError.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = terr
			if err == nil {
				err = errors.New("unexpected data after the JSON object")
			}
		}
	}
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syn):
		return err
	case errors.As(err, &typ):
		if typ.Field == "" {
			return pipeline.InvalidParam("", "request body must be a JSON object")
		}
		return err
	case errors.Is(err, io.EOF):
		return pipeline.InvalidParam("", "request body is empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return pipeline.InvalidParam("", "request body is not valid JSON: unexpected end of input")
	default:
		return pipeline.InvalidParam("", "invalid request body: %v", err)
	}
}

// decodeBody reads r's body under the size limit into v.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// setDeprecationHeaders announces a deprecated model's retirement: the
// Deprecation header (RFC 9745: "@" and the Unix time it was deprecated),
// the Sunset header (RFC 8594: when it stops answering) and a Link to its
// replacement.
func setDeprecationHeaders(h http.Header, plan *pipeline.Plan) {
	dep, sunset, repl := plan.Deprecation()
	if dep.IsZero() && sunset.IsZero() {
		return
	}
	if !dep.IsZero() {
		h.Set("Deprecation", "@"+strconv.FormatInt(dep.Unix(), 10))
	}
	if !sunset.IsZero() {
		h.Set("Sunset", sunset.UTC().Format(http.TimeFormat))
	}
	if repl != "" {
		h.Set("X-LLMD-Replacement-Model", repl)
	}
}
