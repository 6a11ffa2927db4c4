package peer

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// Config configures a Forwarder.
type Config struct {
	// NodeID is this node's id, sent with every forwarded request.
	NodeID string
	// Auth signs forwarded requests.
	Auth *Auth
	// ForwardTimeout bounds connecting to a peer and its acceptance of a
	// request (an informational 103, or the response's headers); a peer
	// that misses it is skipped.
	ForwardTimeout time.Duration
	// Stall is how long a peer's stream may stay silent (it writes
	// heartbeat comments) before it counts as failed.
	Stall time.Duration
	// TLS, when set, forwards over HTTPS with it (peers serve TLS too).
	TLS    *tls.Config
	Logger *slog.Logger
}

// Forwarder sends requests to peers. It is safe for concurrent use.
type Forwarder struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger
	// scheme is "https" with TLS, else "http".
	scheme string
}

// NewForwarder returns a forwarder with its own HTTP client: no overall
// timeout (streams are long), a dial timeout of ForwardTimeout, and
// keep-alive connections.
func NewForwarder(cfg Config) *Forwarder {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Forwarder{cfg: cfg, log: log.With("component", "peer"), scheme: "http", client: &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.ForwardTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg.TLS,
		TLSHandshakeTimeout: cfg.ForwardTimeout,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}}
	if cfg.TLS != nil {
		f.scheme = "https"
	}
	return f
}

// Close closes the forwarder's idle connections.
func (f *Forwarder) Close() { f.client.CloseIdleConnections() }

// Target is member c as a place to run jobs.
func (f *Forwarder) Target(c cluster.Candidate) pipeline.Target { return &target{f: f, c: c} }

var errPeerTimeout = errors.New("peer: the peer did not accept the request within the forward timeout")

// maxJSON bounds a peer's JSON answer held before it is passed on.
const maxJSON = 64 << 20

type target struct {
	f *Forwarder
	c cluster.Candidate
}

func (t *target) Name() string { return t.c.Member.ID }

// Start sends job, as its client sent it, to the peer and waits for the
// peer to accept it. An answer the next node may do better with (5xx,
// 429, or 403: the peer refused this node's signature) is an error; any
// other refusal is the client's (a *pipeline.Error with the peer's status
// and body).
func (t *target) Start(ctx context.Context, job *pipeline.Job) (pipeline.Execution, error) {
	resp, release, err := t.f.do(ctx, t.c.Member.APIAddr, http.MethodPost, job.Forward.Path, job.Forward.Header,
		job.Forward.Body, job)
	if err != nil {
		return nil, err
	}
	switch st := resp.StatusCode; {
	case st >= 500 || st == http.StatusTooManyRequests || st == http.StatusForbidden:
		release()
		return nil, fmt.Errorf("peer answered %s", resp.Status)
	case st != http.StatusOK:
		defer release()
		return nil, refusal(resp)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if job.Stream != (mt == "text/event-stream") {
		release()
		return nil, fmt.Errorf("peer answered %s (%s)", resp.Status, resp.Header.Get("Content-Type"))
	}
	return &run{t: t, job: job, resp: resp, release: release}, nil
}

// refusal is a peer's refusal of a request as its client sent it.
func refusal(resp *http.Response) error {
	var eb api.ErrorBody
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Message == "" {
		return &pipeline.Error{Status: resp.StatusCode, Type: pipeline.TypeInvalidRequest,
			Message: fmt.Sprintf("the serving node refused the request: %s", resp.Status)}
	}
	return errorOf(resp.StatusCode, eb.Error)
}

// errorOf is an error detail as a *pipeline.Error with status.
func errorOf(status int, d api.ErrorDetail) *pipeline.Error {
	e := &pipeline.Error{Status: status, Type: d.Type, Message: d.Message}
	if d.Code != nil {
		e.Code = *d.Code
	}
	if d.Param != nil {
		e.Param = *d.Param
	}
	return e
}

// do sends a request to the peer at addr, signed for job's principal. The
// peer must accept it (an informational 103, or the response's headers)
// within ForwardTimeout, or the attempt is abandoned with errPeerTimeout.
// The caller calls release when done with the response, which closes its
// body.
func (f *Forwarder) do(ctx context.Context, addr, method, path string, hdr http.Header, body []byte, job *pipeline.Job) (
	resp *http.Response, release func(), err error) {
	actx, cancel := context.WithCancelCause(ctx)
	var (
		mu       sync.Mutex
		accepted bool
	)
	accept := func() {
		mu.Lock()
		accepted = true
		mu.Unlock()
	}
	trace := &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error {
		accept()
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(actx, trace), method, f.scheme+"://"+addr+path,
		bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return nil, nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	p := job.Principal
	f.cfg.Auth.Sign(req, Identity{Node: f.cfg.NodeID, Tenant: p.Tenant, Tier: cmp.Or(string(job.Tier), string(store.TierPaid)),
		KeyID: p.KeyID, RequestID: job.ID}, body, time.Now())
	timer := time.AfterFunc(f.cfg.ForwardTimeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if !accepted {
			cancel(errPeerTimeout)
		}
	})
	resp, err = f.client.Do(req)
	accept()
	timer.Stop()
	if err != nil {
		if cause := context.Cause(actx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		cancel(nil)
		return nil, nil, err
	}
	return resp, func() {
		_ = resp.Body.Close()
		cancel(nil)
	}, nil
}

// Send sends a request (no body) to the peer at addr, signed for p and
// naming request id: a resume or cancel of a request that peer owns. The
// peer must accept it within ForwardTimeout. The caller calls release
// when done with the response.
func (f *Forwarder) Send(ctx context.Context, addr, method, path string, hdr http.Header, p pipeline.Principal, id string) (
	resp *http.Response, release func(), err error) {
	return f.do(ctx, addr, method, path, hdr, nil, &pipeline.Job{ID: id, Principal: p})
}

// run is a job a peer accepted.
type run struct {
	t       *target
	job     *pipeline.Job
	resp    *http.Response
	release func()
	// relayed counts the text events passed on.
	relayed int
	// progress takes relayed as it grows (the entry node's checkpoints of
	// the usage row); nil for none.
	progress *pipeline.Progress
}

// Relay reads the peer's answer into sink. A stream reports each text
// event it passes on to progress, as one output token (the estimate
// relayedUsage bills when the peer's count is lost); a whole answer
// reports nothing (its client gets nothing before the end).
func (r *run) Relay(ctx context.Context, sink pipeline.Sink, progress *pipeline.Progress) pipeline.Result {
	defer r.release()
	r.progress = progress
	if r.job.Stream {
		return r.relayStream(ctx, sink)
	}
	return r.relayJSON(sink)
}

// relayJSON reads the peer's whole answer, then passes it on: a failure
// before that may be retried elsewhere.
func (r *run) relayJSON(sink pipeline.Sink) pipeline.Result {
	res := pipeline.Result{ServedBy: r.t.c.Member.ID}
	body, err := io.ReadAll(io.LimitReader(r.resp.Body, maxJSON))
	if err != nil {
		res.Err, res.Retry = err, true
		return res
	}
	if !takeUsage(r.resp, &res) {
		res.Err, res.Retry = errors.New("peer: the answer has no usage trailer"), true
		return res
	}
	res.Finish = cmp.Or(res.Finish, string(engine.FinishStop))
	choices, err := decodeJSON(r.job.Endpoint, body)
	if err != nil {
		res.Err, res.Retry = err, true
		return res
	}
	for i, c := range choices {
		if c.text != "" {
			if err := sink.Text(i, c.text, c.lps); err != nil {
				res.ClientGone = true
				return res
			}
			c.lps = nil
		}
		for k, tc := range c.calls {
			if err := sink.ToolCall(i, api.ToolCallDelta{Index: k, ID: tc.ID, Type: tc.Type,
				Function: api.FunctionCallDelta{Name: tc.Function.Name, Arguments: tc.Function.Arguments}}); err != nil {
				res.ClientGone = true
				return res
			}
		}
		if err := sink.Finish(i, c.finish, c.lps); err != nil {
			res.ClientGone = true
			return res
		}
	}
	return res
}

// relayStream passes the peer's events on as they come. A failure before
// the first may be retried elsewhere; after it, it ends the answer with
// ErrPeerLost.
func (r *run) relayStream(ctx context.Context, sink pipeline.Sink) pipeline.Result {
	res := pipeline.Result{ServedBy: r.t.c.Member.ID}
	// The peer's stream is silent at most a heartbeat interval (it writes
	// comments); allow a few before calling it stalled.
	stall := r.t.f.cfg.Stall
	watch := time.AfterFunc(stall, func() { _ = r.resp.Body.Close() })
	defer watch.Stop()
	sr := api.NewSSEReader(&ProgressReader{R: r.resp.Body, Progress: func() { watch.Reset(stall) }})
	dec := streamDecoder{endpoint: r.job.Endpoint}
	for {
		ev, err := sr.Next()
		if err == nil {
			var out []delta
			var end bool
			out, end, err = dec.decode(ev)
			if err == nil {
				for _, d := range out {
					if werr := r.emit(sink, d, &res); werr != nil {
						return r.cancelled(res)
					}
				}
				if !end {
					continue
				}
				return r.ended(res, dec.failure)
			}
		}
		// The peer failed, stalled or was cut off, or this request was
		// cancelled here.
		if ctx.Err() != nil {
			return r.cancelled(res)
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if r.relayed == 0 {
			res.Err, res.Retry = err, true
			return res
		}
		res.Err = fmt.Errorf("peer %s: %w: %w", r.t.c.Member.ID, pipeline.ErrPeerLost, err)
		res.Finish, res.Usage = string(engine.FinishError), r.relayedUsage()
		r.t.f.log.Warn("peer failed after the first token", "request_id", r.job.ID, "peer", r.t.c.Member.ID, "err", err)
		return res
	}
}

// emit passes one piece of the answer on.
func (r *run) emit(sink pipeline.Sink, d delta, res *pipeline.Result) error {
	if d.text != "" || (len(d.lps) > 0 && d.finish == "") {
		// Tokens without text of their own come with their
		// log-probabilities alone.
		now := time.Now()
		if res.FirstToken.IsZero() {
			res.FirstToken = now
		}
		res.Times.Token(now)
		r.relayed++
		if err := sink.Text(d.index, d.text, d.lps); err != nil {
			return err
		}
		r.progress.Delivered(r.relayed, now)
		d.lps = nil
	}
	for _, c := range d.calls {
		now := time.Now()
		if res.FirstToken.IsZero() {
			res.FirstToken = now
		}
		r.relayed++
		if err := sink.ToolCall(d.index, c); err != nil {
			return err
		}
		r.progress.Delivered(r.relayed, now)
	}
	if d.finish != "" {
		return sink.Finish(d.index, d.finish, d.lps)
	}
	return nil
}

// ended finishes a stream whose terminal event came: the usage from the
// trailer (after the body), the peer's in-stream error if it sent one.
func (r *run) ended(res pipeline.Result, failure *pipeline.Error) pipeline.Result {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.resp.Body, 1<<20))
	if !takeUsage(r.resp, &res) {
		res.Usage = r.relayedUsage()
		res.Err = errors.New("peer: the stream ended without its usage")
	}
	if failure != nil {
		res.Err = failure
		res.Finish = cmp.Or(res.Finish, string(engine.FinishError))
	}
	if res.Err == nil && res.Finish != string(engine.FinishError) && res.Finish != string(engine.FinishCancelled) {
		res.Finish = cmp.Or(res.Finish, string(engine.FinishStop))
	}
	return res
}

// cancelled stops the request on the peer (a resumable stream would
// otherwise run on there for its resume grace) after its client here left.
func (r *run) cancelled(res pipeline.Result) pipeline.Result {
	f := r.t.f
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.ForwardTimeout)
	defer cancel()
	resp, release, err := f.do(ctx, r.t.c.Member.APIAddr, http.MethodDelete, "/v1/requests/"+r.job.ID, nil, nil, r.job)
	if err != nil {
		f.log.Warn("could not cancel a forwarded request on its peer", "request_id", r.job.ID, "peer", r.t.c.Member.ID,
			"err", err)
	} else {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		release()
	}
	res.ClientGone, res.Finish, res.Usage = true, string(engine.FinishCancelled), r.relayedUsage()
	return res
}

// relayedUsage is what a forwarded stream is billed when its peer's count
// is lost: its prompt, and one output token per event relayed (an
// estimate).
func (r *run) relayedUsage() pipeline.Usage {
	return pipeline.Usage{InputTokens: len(r.job.Prompt), OutputTokens: r.relayed}
}

// ProgressReader calls Progress after each read of R that returned data:
// a stream's stall watch resets on it (the upstream replicas use it too).
type ProgressReader struct {
	R        io.Reader
	Progress func()
}

func (p *ProgressReader) Read(b []byte) (int, error) {
	n, err := p.R.Read(b)
	if n > 0 {
		p.Progress()
	}
	return n, err
}

// delta is one piece of an answer: text and log-probabilities of choice
// index, or its end.
type delta struct {
	index  int
	text   string
	lps    []api.TokenLogprob
	finish string
	// calls are tool-call fragments, in order.
	calls []api.ToolCallDelta
}

// streamDecoder turns a peer's events, in its endpoint's format, into
// deltas.
type streamDecoder struct {
	endpoint pipeline.Endpoint
	// offsets is each choice's text offset (legacy completion logprobs).
	failure *pipeline.Error
}

// decode decodes one event; end reports the stream's terminal event
// (with failure set when it was an error).
func (d *streamDecoder) decode(ev api.SSEEvent) (out []delta, end bool, err error) {
	if d.endpoint == pipeline.EndpointChat {
		switch ev.Event {
		case "done":
			var done api.NativeDone
			if err := json.Unmarshal([]byte(ev.Data), &done); err != nil {
				return nil, false, fmt.Errorf("peer: decode done event: %w", err)
			}
			return []delta{{finish: done.FinishReason}}, true, nil
		case "error":
			var e api.NativeError
			_ = json.Unmarshal([]byte(ev.Data), &e)
			d.failure = errorOf(http.StatusInternalServerError, e.Error)
			return nil, true, nil
		}
		var nd api.NativeDelta
		if err := json.Unmarshal([]byte(ev.Data), &nd); err != nil {
			return nil, false, fmt.Errorf("peer: decode token event: %w", err)
		}
		d := delta{index: nd.Index, text: nd.Delta}
		if nd.ToolCall != nil {
			d.calls = []api.ToolCallDelta{*nd.ToolCall}
		}
		return []delta{d}, false, nil
	}
	if ev.Data == "[DONE]" {
		return nil, true, nil
	}
	if strings.Contains(ev.Data, `"error"`) {
		var eb api.ErrorBody
		if json.Unmarshal([]byte(ev.Data), &eb) == nil && eb.Error.Message != "" {
			d.failure = errorOf(http.StatusInternalServerError, eb.Error)
			return nil, false, nil // [DONE] follows
		}
	}
	return decodeChunk(d.endpoint, []byte(ev.Data))
}

// Piece is one piece of an OpenAI streamed answer: text, log-probabilities
// and tool-call fragments of choice Index, or its end (Finish).
type Piece struct {
	Index     int
	Text      string
	Logprobs  []api.TokenLogprob
	Finish    string
	ToolCalls []api.ToolCallDelta
}

// DecodeChunk decodes one OpenAI stream chunk of endpoint (chat or text
// completions) into its pieces; the upstream replicas read engines' streams
// with it.
func DecodeChunk(endpoint pipeline.Endpoint, data []byte) ([]Piece, error) {
	ds, _, err := decodeChunk(endpoint, data)
	out := make([]Piece, len(ds))
	for i, d := range ds {
		out[i] = Piece{Index: d.index, Text: d.text, Logprobs: d.lps, Finish: d.finish, ToolCalls: d.calls}
	}
	return out, err
}

// decodeChunk decodes one OpenAI chunk (chat or text completion).
func decodeChunk(endpoint pipeline.Endpoint, data []byte) ([]delta, bool, error) {
	var out []delta
	if endpoint == pipeline.EndpointCompletions {
		var c api.Completion
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, false, fmt.Errorf("peer: decode chunk: %w", err)
		}
		for _, ch := range c.Choices {
			out = append(out, delta{index: ch.Index, text: ch.Text, lps: fromLegacy(ch.Logprobs),
				finish: deref(ch.FinishReason)})
		}
		return out, false, nil
	}
	var c api.ChatCompletionChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, false, fmt.Errorf("peer: decode chunk: %w", err)
	}
	for _, ch := range c.Choices {
		d := delta{index: ch.Index, finish: deref(ch.FinishReason)}
		if ch.Delta.Content != nil {
			d.text = *ch.Delta.Content
		}
		if ch.Logprobs != nil {
			d.lps = ch.Logprobs.Content
		}
		d.calls = ch.Delta.ToolCalls
		out = append(out, d)
	}
	return out, false, nil
}

// choice is one choice of a whole JSON answer.
type choice struct {
	text, finish string
	lps          []api.TokenLogprob
	calls        []api.ToolCall
}

// decodeJSON decodes a peer's whole answer in its endpoint's format.
func decodeJSON(endpoint pipeline.Endpoint, body []byte) ([]choice, error) {
	var out []choice
	switch endpoint {
	case pipeline.EndpointChat:
		var d api.NativeDone
		if err := json.Unmarshal(body, &d); err != nil {
			return nil, fmt.Errorf("peer: decode answer: %w", err)
		}
		return []choice{{text: d.Text, finish: d.FinishReason, calls: d.ToolCalls}}, nil
	case pipeline.EndpointCompletions:
		var c api.Completion
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, fmt.Errorf("peer: decode answer: %w", err)
		}
		out = make([]choice, len(c.Choices))
		for _, ch := range c.Choices {
			if ch.Index >= 0 && ch.Index < len(out) {
				out[ch.Index] = choice{text: ch.Text, finish: deref(ch.FinishReason), lps: fromLegacy(ch.Logprobs)}
			}
		}
	default:
		var c api.ChatCompletion
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, fmt.Errorf("peer: decode answer: %w", err)
		}
		out = make([]choice, len(c.Choices))
		for _, ch := range c.Choices {
			if ch.Index >= 0 && ch.Index < len(out) {
				out[ch.Index] = choice{text: ch.Message.Content, finish: ch.FinishReason, calls: ch.Message.ToolCalls}
				if ch.Logprobs != nil {
					out[ch.Index].lps = ch.Logprobs.Content
				}
			}
		}
	}
	return out, nil
}

// fromLegacy converts legacy completion logprobs back to tokens: the
// alternatives' order is lost (the legacy format is a map), which the
// legacy format written from them does not show.
func fromLegacy(l *api.CompletionLogprobs) []api.TokenLogprob {
	if l == nil {
		return nil
	}
	out := make([]api.TokenLogprob, len(l.Tokens))
	for k, tok := range l.Tokens {
		lp := api.TokenLogprob{Token: tok, Bytes: pipeline.TokenBytes(tok)}
		if k < len(l.TokenLogprobs) {
			lp.Logprob = float32(l.TokenLogprobs[k])
		}
		if k < len(l.TopLogprobs) {
			for t, v := range l.TopLogprobs[k] {
				lp.TopLogprobs = append(lp.TopLogprobs, api.TopLogprob{Token: t, Logprob: float32(v), Bytes: pipeline.TokenBytes(t)})
			}
		}
		out[k] = lp
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
