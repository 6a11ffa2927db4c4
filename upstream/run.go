package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
)

// ErrUpstreamLost ends a stream whose engine failed or went silent after
// its first token.
var ErrUpstreamLost = errors.New("upstream: the engine serving this request failed during generation; please retry")

// prefixBlock is the prompt block size of the approximate prefix index.
const prefixBlock = 16

// Name implements pipeline.Target.
func (s *Set) Name() string { return "upstream" }

// Start implements pipeline.Target: it queues job until a replica may
// take it, then sends it and returns once the engine answered with its
// stream's headers.
func (s *Set) Start(ctx context.Context, job *pipeline.Job) (pipeline.Execution, error) {
	if job.Upstream == nil {
		return nil, errors.New("upstream: the job has no upstream request")
	}
	w := &waiter{id: job.ID, tenant: job.Principal.Tenant, prio: job.Priority, since: time.Now(),
		prefix: pipeline.TextChain(job.Upstream), ready: make(chan *replica, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, engine.ErrClosed
	}
	s.queue.push(w)
	s.releaseLocked()
	s.mu.Unlock()
	var r *replica
	select {
	case r = <-w.ready:
		if r == nil {
			return nil, w.err
		}
	case <-ctx.Done():
		s.mu.Lock()
		queued := s.queue.remove(w)
		s.mu.Unlock()
		if !queued {
			if r := <-w.ready; r != nil {
				s.done(r)
			}
		}
		return nil, ctx.Err()
	}
	resp, err := s.send(ctx, r, job)
	if err != nil {
		s.done(r)
		return nil, err
	}
	x := &run{s: s, r: r, job: job, resp: resp, queued: time.Since(w.since)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = resp.Body.Close()
		s.inflightDoneLocked(r)
		return nil, engine.ErrClosed
	}
	s.runs[x] = struct{}{}
	return x, nil
}

// send posts job to r and checks its answer's status.
func (s *Set) send(ctx context.Context, r *replica, job *pipeline.Job) (*http.Response, error) {
	body := make(map[string]json.RawMessage, len(job.Upstream.Body)+5)
	for k, v := range job.Upstream.Body {
		body[k] = v
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		body[k] = b
	}
	set("model", s.name)
	set("stream", true)
	set("stream_options", map[string]bool{"include_usage": true})
	set("max_tokens", job.MaxTokens)
	delete(body, "max_completion_tokens")
	if job.N > 1 {
		set("n", job.N)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+job.Upstream.Path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Request-Id", job.ID)
	// An engine's server closes idle keep-alive connections (uvicorn after
	// 5 s), and a request sent as it does finds its connection closed
	// before any answer. Go's transport sends such a request again on a
	// new connection only when it is marked replayable: this header does
	// that (engines ignore it). At worst the engine saw the first one and
	// frees it when it finds its client gone.
	req.Header.Set("Idempotency-Key", job.ID)
	resp, err := s.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.markDown(r, err)
		return nil, &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer, Code: "upstream_unavailable",
			Message: "the upstream engine could not be reached; please retry"}
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb api.ErrorBody
	msg := fmt.Sprintf("the upstream engine answered %s", resp.Status)
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Message != "" {
		msg = eb.Error.Message
	} else if len(raw) > 0 && len(raw) < 512 {
		msg += ": " + string(bytes.TrimSpace(raw))
	}
	switch st := resp.StatusCode; {
	case st >= 400 && st < 500 && st != http.StatusTooManyRequests:
		// The request as sent: the client's to see.
		return nil, &pipeline.Error{Status: st, Type: pipeline.TypeInvalidRequest, Message: msg}
	default:
		return nil, &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer, Code: "upstream_error", Message: msg}
	}
}

// run is a job an engine accepted.
type run struct {
	s      *Set
	r      *replica
	job    *pipeline.Job
	resp   *http.Response
	queued time.Duration
	// relayed counts the text and tool-call pieces passed on.
	relayed int
	// closing is set when the Set stops (shutdown) and closes the
	// engine's stream under the relay.
	closing atomic.Bool
}

// close ends the run at shutdown: its engine's stream is closed, which
// frees the request there.
func (x *run) close() {
	x.closing.Store(true)
	_ = x.resp.Body.Close()
}

// streamUsage is the usage of an OpenAI stream's last chunk.
type streamUsage struct {
	Usage *api.Usage `json:"usage"`
}

// Relay implements pipeline.Execution: it passes the engine's stream on
// to sink as it comes.
func (x *run) Relay(ctx context.Context, sink pipeline.Sink, progress *pipeline.Progress) pipeline.Result {
	defer func() {
		x.s.mu.Lock()
		delete(x.s.runs, x)
		x.s.mu.Unlock()
		x.s.done(x.r)
	}()
	defer x.resp.Body.Close()
	res := pipeline.Result{Queued: x.queued}
	stall := x.s.cfg.Stall
	watch := time.AfterFunc(stall, func() { _ = x.resp.Body.Close() })
	defer watch.Stop()
	sr := api.NewSSEReader(&peer.ProgressReader{R: x.resp.Body, Progress: func() { watch.Reset(stall) }})
	var usage *api.Usage
	finished := map[int]bool{}
	var err error
	for {
		var ev api.SSEEvent
		if ev, err = sr.Next(); err != nil {
			break
		}
		if ev.Data == "[DONE]" {
			api.DrainAfterDone(x.resp.Body)
			break
		}
		if bytes.Contains([]byte(ev.Data), []byte(`"error"`)) {
			var eb api.ErrorBody
			if json.Unmarshal([]byte(ev.Data), &eb) == nil && eb.Error.Message != "" {
				err = &pipeline.Error{Status: http.StatusBadGateway, Type: pipeline.TypeServer, Code: "upstream_error",
					Message: eb.Error.Message}
				break
			}
		}
		var su streamUsage
		if json.Unmarshal([]byte(ev.Data), &su) == nil && su.Usage != nil {
			usage = su.Usage
		}
		pieces, derr := peer.DecodeChunk(x.endpoint(), []byte(ev.Data))
		if derr != nil {
			err = derr
			break
		}
		for _, p := range pieces {
			if werr := x.emit(sink, progress, p, &res); werr != nil {
				res.ClientGone, res.Finish, res.Usage = true, string(engine.FinishCancelled), x.usage(usage, &res)
				return res
			}
			if p.Finish != "" {
				finished[p.Index] = true
				if p.Index == 0 {
					res.Finish = p.Finish
				}
			}
		}
	}
	res.Usage = x.usage(usage, &res)
	switch {
	case ctx.Err() != nil:
		res.ClientGone, res.Finish = true, string(engine.FinishCancelled)
	case x.closing.Load():
		res.Err, res.Finish = engine.ErrClosed, string(engine.FinishError)
	case err != nil && !errors.Is(err, io.EOF):
		var pe *pipeline.Error
		if !errors.As(err, &pe) {
			x.s.markDown(x.r, err)
			err = fmt.Errorf("%w (%s: %v)", ErrUpstreamLost, x.r.url, err)
		}
		res.Err, res.Finish = err, string(engine.FinishError)
	case len(finished) < max(x.job.N, 1):
		res.Err, res.Finish = fmt.Errorf("%w (%s: the stream ended early)", ErrUpstreamLost, x.r.url), string(engine.FinishError)
	}
	return res
}

// endpoint is the OpenAI endpoint the job was sent to (a native chat goes
// to chat completions).
func (x *run) endpoint() pipeline.Endpoint {
	if x.job.Endpoint == pipeline.EndpointCompletions {
		return pipeline.EndpointCompletions
	}
	return pipeline.EndpointChatCompletions
}

// emit passes one piece on.
func (x *run) emit(sink pipeline.Sink, progress *pipeline.Progress, p peer.Piece, res *pipeline.Result) error {
	now := time.Now()
	if p.Text != "" {
		if res.FirstToken.IsZero() {
			res.FirstToken = now
		}
		if p.Index == 0 {
			res.Times.Token(now)
		}
		x.relayed++
		if err := sink.Text(p.Index, p.Text, p.Logprobs); err != nil {
			return err
		}
		progress.Delivered(x.relayed, now)
		p.Logprobs = nil
	}
	for _, c := range p.ToolCalls {
		if res.FirstToken.IsZero() {
			res.FirstToken = now
		}
		x.relayed++
		if err := sink.ToolCall(p.Index, c); err != nil {
			return err
		}
		progress.Delivered(x.relayed, now)
	}
	if p.Finish != "" {
		return sink.Finish(p.Index, p.Finish, p.Logprobs)
	}
	return nil
}

// usage is the engine's count when it sent one; else the prompt as
// counted here and one output token per piece relayed, noted as an
// estimate.
func (x *run) usage(u *api.Usage, res *pipeline.Result) pipeline.Usage {
	if u != nil {
		out := pipeline.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
		if d := u.PromptTokensDetails; d != nil {
			out.CachedTokens = d.CachedTokens
		}
		return out
	}
	res.Note = "usage estimated: the upstream sent none"
	return pipeline.Usage{InputTokens: len(x.job.Prompt), OutputTokens: x.relayed}
}
