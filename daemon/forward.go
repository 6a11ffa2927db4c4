package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/store"
)

// Headers that name a conversation, for session affinity (the request's
// "user" field is the fallback).
var affinityHeaders = []string{"X-Conversation-Id", "X-Session-Id"}

// Request headers a forwarded request keeps; the client's Authorization is
// replaced by the peer signature.
var forwardedHeaders = []string{"Content-Type", "Accept", "User-Agent", resumeHeader, "X-Conversation-Id", "X-Session-Id"}

// Response headers not copied from a peer's JSON answer.
var hopHeaders = map[string]bool{"Connection": true, "Content-Length": true, "Keep-Alive": true, "Trailer": true,
	"Transfer-Encoding": true, "Te": true, "Upgrade": true}

var (
	errPeerTimeout = errors.New("daemon: the peer did not accept the request within the forward timeout")
	errPeerStalled = errors.New("daemon: the peer sent nothing within the stall timeout")
	// errPeerLost ends a forwarded stream whose peer failed after its
	// first token (the request cannot be retried then).
	errPeerLost = &requestError{Status: http.StatusBadGateway, Type: typeServer, Code: "peer_failed",
		Message: "the node serving this request failed during generation; please retry"}
)

// maxForwardedJSON bounds a peer's JSON answer held before it is passed on.
const maxForwardedJSON = 64 << 20

// peerUsage is a forwarded request's outcome, sent by the serving peer in
// the Llmd-Usage trailer.
type peerUsage struct {
	InputTokens  int    `json:"input_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	OutputTokens int    `json:"output_tokens"`
	Finish       string `json:"finish"`
	QueueUS      int64  `json:"queue_us"`
	TTFTUS       int64  `json:"ttft_us"`
	ITLUS        int64  `json:"itl_us"`
	Error        string `json:"error,omitempty"`
}

// setUsageTrailer sets the Llmd-Usage trailer of a forwarded request from
// rl (declared by generate before the response started).
func setUsageTrailer(w http.ResponseWriter, rl *reqLog) {
	u := peerUsage{InputTokens: rl.usage.InputTokens, CachedTokens: rl.usage.CachedTokens,
		OutputTokens: rl.usage.OutputTokens, Finish: rl.finish, QueueUS: rl.queued.Microseconds(),
		TTFTUS: rl.ttft.Microseconds(), ITLUS: rl.meanITL().Microseconds()}
	if rl.err != nil {
		u.Error = truncate(rl.err.Error(), 200)
	}
	b, _ := json.Marshal(u)
	w.Header().Set(trailerUsage, string(b))
}

// takeUsage reads a peer's Llmd-Usage trailer into rl; false if there is
// none (the peer died, or is not llmd).
func takeUsage(resp *http.Response, rl *reqLog) bool {
	var u peerUsage
	if err := json.Unmarshal([]byte(resp.Trailer.Get(trailerUsage)), &u); err != nil {
		return false
	}
	rl.usage = engine.Usage{InputTokens: max(u.InputTokens, 0), CachedTokens: max(u.CachedTokens, 0),
		OutputTokens: max(u.OutputTokens, 0)}
	rl.finish = u.Finish
	rl.queued = time.Duration(max(u.QueueUS, 0)) * time.Microsecond
	rl.itl = time.Duration(max(u.ITLUS, 0)) * time.Microsecond
	if rl.ttft == 0 {
		rl.ttft = time.Duration(max(u.TTFTUS, 0)) * time.Microsecond
	}
	if u.Error != "" && rl.err == nil {
		rl.err = fmt.Errorf("peer: %s", u.Error)
	}
	return true
}

// recordingBody keeps what a handler reads of a request body, so that the
// request can be forwarded as it came.
type recordingBody struct {
	io.ReadCloser
	buf *[]byte
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	*b.buf = append(*b.buf, p[:n]...)
	return n, err
}

// lazyBegin delays an emitter's begin to its first output, so that a
// forwarded stream's first event is its first token: the entry node may
// retry the request elsewhere until it has relayed an event.
type lazyBegin struct {
	emitter
	begun bool
}

func (e *lazyBegin) begin() error { return nil }

func (e *lazyBegin) start() error {
	if e.begun {
		return nil
	}
	e.begun = true
	return e.emitter.begin()
}

func (e *lazyBegin) addLogprob(i int, lp api.TokenLogprob) {
	if sink, ok := e.emitter.(logprobSink); ok {
		sink.addLogprob(i, lp)
	}
}

func (e *lazyBegin) text(i int, s string) error {
	if err := e.start(); err != nil {
		return err
	}
	return e.emitter.text(i, s)
}

func (e *lazyBegin) finish(i int, reason string) error {
	if err := e.start(); err != nil {
		return err
	}
	return e.emitter.finish(i, reason)
}

func (e *lazyBegin) end(u engine.Usage) error {
	if err := e.start(); err != nil {
		return err
	}
	return e.emitter.end(u)
}

func (e *lazyBegin) fail(err error) error {
	if serr := e.start(); serr != nil {
		return serr
	}
	return e.emitter.fail(err)
}

// affinityKey is the request's conversation: a header, else the "user"
// field.
func affinityKey(r *http.Request, j *job) string {
	for _, h := range affinityHeaders {
		if v := r.Header.Get(h); v != "" {
			return capHeader(v, 256)
		}
	}
	return j.user
}

// peerTargets routes a request: it returns the peers to try, in order,
// before serving it here (none when this node comes first), and records
// the decision in rl.route.
func (s *Server) peerTargets(r *http.Request, rl *reqLog, j *job) []cluster.Candidate {
	if s.cluster == nil || rl.peer != "" {
		return nil
	}
	policy := s.cfg.Cluster.RoutePolicy
	if policy == cluster.PolicyLocal {
		return nil
	}
	hashes := kvcache.HashChain(j.prompt, j.model.eng.BlockSize())
	req := cluster.RouteRequest{Model: j.model.id, Prefix: hashes, AffinityKey: affinityKey(r, j),
		LoadBound: s.cfg.Cluster.LoadBound, LoadSlack: s.cfg.Cluster.LoadSlack, Policy: policy}
	cands := s.cluster.Route(req, func(h []kvcache.Hash) int {
		return cluster.SummaryDepth(j.model.eng.CachedPrefix(h), len(h))
	})
	var peers []cluster.Candidate
	for _, c := range cands {
		if c.Member.Local {
			if len(peers) == 0 {
				rl.route = appendNote(rl.route, "local "+c.Reason)
			}
			break
		}
		if c.Member.APIAddr == "" {
			continue
		}
		peers = append(peers, c)
	}
	if len(peers) > 0 {
		rl.route = appendNote(rl.route, peers[0].Member.ID+" "+peers[0].Reason)
	}
	return peers
}

// peerFailed takes a peer out of routing after a failed forward (gossip
// confirms or clears it later) and notes it in the request's route.
func (s *Server) peerFailed(c cluster.Candidate, rl *reqLog, err error) {
	s.cluster.MarkFailed(c.Member.ID)
	s.log.Warn("forward failed before the first token; trying the next node", "request_id", rl.id,
		"peer", c.Member.ID, "addr", c.Member.APIAddr, "err", err)
	rl.route = appendNote(rl.route, c.Member.ID+" failed")
}

// servedBy records that peer id serves the request, and notes it in
// rl.route when it is not the router's first choice (which failed).
func servedBy(rl *reqLog, id string) {
	rl.servedBy = id
	if !strings.HasPrefix(rl.route, id+" ") && !strings.Contains(rl.route, "; "+id+" ") {
		rl.route = appendNote(rl.route, "served by "+id)
	}
}

// peerDo sends r's request (its method, path and recorded body) to peer
// addr, signed for rl's principal. The peer must accept it (an
// informational 103, or the response's headers) within ForwardTimeout,
// or the attempt is abandoned with errPeerTimeout. The caller closes the
// response's body and then calls release.
func (s *Server) peerDo(ctx context.Context, addr, method, uri string, r *http.Request, rl *reqLog) (
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
	var body []byte
	if method == http.MethodPost {
		body = rl.body
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(actx, trace), method, "http://"+addr+uri,
		bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return nil, nil, err
	}
	for _, h := range forwardedHeaders {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	p := principalFrom(r.Context())
	s.peers.sign(req, peerIdentity{node: s.cfg.NodeID, tenant: p.tenant, tier: cmp.Or(rl.tier, string(store.TierPaid)), keyID: p.keyID,
		admin: p.admin, requestID: rl.id}, body, time.Now())
	timer := time.AfterFunc(s.cfg.Cluster.forwardTimeout(), func() {
		mu.Lock()
		defer mu.Unlock()
		if !accepted {
			cancel(errPeerTimeout)
		}
	})
	resp, err = s.peerClient.Do(req)
	accept()
	timer.Stop()
	if err != nil {
		if cause := context.Cause(actx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		cancel(nil)
		return nil, nil, err
	}
	return resp, func() { cancel(nil) }, nil
}

// askPeer sends r's request to peer c (see peerDo). An answer the next
// node may do better with (5xx, 429, or 403: the peer refused this node's
// signature) is an error. The caller calls release when done with the
// response, which closes its body.
func (s *Server) askPeer(ctx context.Context, r *http.Request, rl *reqLog, c cluster.Candidate) (
	resp *http.Response, release func(), err error) {
	resp, done, err := s.peerDo(ctx, c.Member.APIAddr, r.Method, r.URL.RequestURI(), r, rl)
	if err != nil {
		return nil, nil, err
	}
	release = func() {
		_ = resp.Body.Close()
		done()
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusForbidden {
		release()
		return nil, nil, fmt.Errorf("peer answered %s", resp.Status)
	}
	return resp, release, nil
}

// copyPeerHeaders starts the response to the client with a peer's status
// and headers (less the hop-by-hop ones) under this node's request id.
func copyPeerHeaders(w http.ResponseWriter, resp *http.Response, rl *reqLog) {
	for k, vs := range resp.Header {
		if !hopHeaders[k] {
			w.Header()[k] = vs
		}
	}
	w.Header().Set("X-Request-Id", rl.id)
	w.WriteHeader(resp.StatusCode)
	rl.status = resp.StatusCode
}

// forwardJSON serves a non-streamed request through peer c: the peer's
// answer is read whole, its usage recorded here, then passed on. It
// reports false, having written nothing, when the peer failed and the
// request may go elsewhere.
func (s *Server) forwardJSON(ctx context.Context, w http.ResponseWriter, r *http.Request, rl *reqLog, j *job, c cluster.Candidate,
	settle func(engine.Usage)) (bool, error) {
	resp, release, err := s.askPeer(ctx, r, rl, c)
	if err != nil {
		return false, err
	}
	defer release()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedJSON))
	if err != nil {
		return false, err
	}
	servedBy(rl, c.Member.ID)
	if !takeUsage(resp, rl) && resp.StatusCode == http.StatusOK {
		return false, errors.New("peer's answer has no usage trailer")
	}
	rl.status = resp.StatusCode
	if resp.StatusCode == http.StatusOK {
		if rl.finish == "" {
			rl.finish = string(engine.FinishStop)
		}
		if err := s.recordUsage(ctx, rl, j); err != nil {
			rl.err = err
			settle(rl.usage)
			rl.status = writeError(w, rl.id, err)
			return true, nil
		}
	}
	settle(rl.usage)
	copyPeerHeaders(w, resp, rl)
	_, _ = w.Write(body)
	return true, nil
}

// forwardStream relays peer c's stream of rl's request into the request's
// event log (sw), event by event, as the peer formatted them. It reports
// false, having relayed nothing, when the peer failed before its first
// event and the request may go elsewhere. After the first event, a
// failure ends the stream with a terminal error event.
func (s *Server) forwardStream(ctx context.Context, r *http.Request, rl *reqLog, j *job, em emitter, c cluster.Candidate,
	settle func(engine.Usage)) (bool, error) {
	sw := em.sse()
	resp, release, err := s.peerDo(ctx, c.Member.APIAddr, r.Method, r.URL.RequestURI(), r, rl)
	if err != nil {
		return false, err
	}
	defer release()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return false, fmt.Errorf("peer answered %s (%s)", resp.Status, resp.Header.Get("Content-Type"))
	}
	// The peer's stream is silent at most a heartbeat interval (it writes
	// comments); allow a few before calling it stalled.
	stall := max(3*s.cfg.HeartbeatInterval, s.cfg.Cluster.forwardTimeout())
	watch := time.AfterFunc(stall, func() { _ = resp.Body.Close() })
	defer watch.Stop()

	served := false
	var held [][]byte
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		ev, err := readSSEEvent(br)
		watch.Reset(stall)
		if err == nil && len(ev) > 0 {
			switch {
			case isSSEComment(ev):
			case isTerminalEvent(ev):
				held = append(held, ev)
			default:
				now := time.Now()
				if !served {
					served = true
					servedBy(rl, c.Member.ID)
					rl.ttft = now.Sub(rl.start)
					rl.live.firstToken.Store(now.UnixNano())
				}
				rl.times.token(now)
				sw.log.push(ev)
			}
			continue
		}
		if errors.Is(err, io.EOF) && len(held) > 0 {
			break
		}
		// The peer failed, stalled or was cut off, or this request was
		// cancelled here.
		if ctx.Err() != nil {
			s.cancelOnPeer(c, r, rl)
			rl.servedBy = c.Member.ID
			rl.status, rl.finish = statusClientClosed, string(engine.FinishCancelled)
			rl.usage = relayedUsage(rl, j)
			settle(rl.usage)
			return true, nil
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if !served {
			return false, err
		}
		rl.err = fmt.Errorf("peer %s: %w", c.Member.ID, err)
		rl.finish = string(engine.FinishError)
		rl.usage = relayedUsage(rl, j)
		settle(rl.usage)
		s.log.Warn("peer failed after the first token", "request_id", rl.id, "peer", c.Member.ID, "err", err)
		_ = em.fail(errPeerLost)
		return true, nil
	}
	if !takeUsage(resp, rl) {
		rl.usage = relayedUsage(rl, j)
		rl.err = errors.New("daemon: the peer's stream ended without its usage")
	}
	if rl.err == nil && rl.finish != string(engine.FinishError) && rl.finish != string(engine.FinishCancelled) {
		if err := s.recordUsage(ctx, rl, j); err != nil {
			rl.err = err
			settle(rl.usage)
			_ = em.fail(err) // replaces the peer's terminal events
			return true, nil
		}
	}
	settle(rl.usage)
	for _, ev := range held {
		sw.log.push(ev)
	}
	sw.terminated = true
	return true, nil
}

// relayedUsage is what a forwarded stream is billed when its peer's count
// is lost: its prompt, and one output token per event relayed (an
// estimate).
func relayedUsage(rl *reqLog, j *job) engine.Usage {
	return engine.Usage{InputTokens: len(j.prompt), OutputTokens: rl.times.n}
}

// cancelOnPeer tells the peer serving rl's request to stop it (a resumable
// stream would otherwise run on there for its resume grace).
func (s *Server) cancelOnPeer(c cluster.Candidate, r *http.Request, rl *reqLog) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.Cluster.forwardTimeout())
	defer cancel()
	resp, release, err := s.peerDo(ctx, c.Member.APIAddr, http.MethodDelete, "/v1/requests/"+rl.id, r, rl)
	if err != nil {
		s.log.Warn("could not cancel a forwarded request on its peer", "request_id", rl.id, "peer", c.Member.ID, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	release()
}

// readSSEEvent reads one event (its lines and the blank line that ends
// it) from br, bounded to 1 MiB.
func readSSEEvent(br *bufio.Reader) ([]byte, error) {
	var ev []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(ev)+len(line) > 1<<20 {
			return nil, errors.New("daemon: a peer's event exceeds 1 MiB")
		}
		ev = append(ev, line...)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			return ev, err
		}
		if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
			if len(ev) == len(line) {
				ev = ev[:0] // a stray blank line
				continue
			}
			return ev, nil
		}
	}
}

// isSSEComment reports whether an event has only comment lines (a
// heartbeat).
func isSSEComment(ev []byte) bool {
	for line := range bytes.Lines(ev) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != ':' {
			return false
		}
	}
	return true
}

// isTerminalEvent reports whether an event ends a stream: OpenAI's
// "data: [DONE]" or the native "done" and "error" events.
func isTerminalEvent(ev []byte) bool {
	for line := range bytes.Lines(ev) {
		l := bytes.TrimSpace(line)
		if bytes.Equal(l, []byte("data: [DONE]")) || bytes.Equal(l, []byte("event: done")) ||
			bytes.Equal(l, []byte("event: error")) {
			return true
		}
	}
	return false
}

// newPeerClient is the HTTP client for forwarding: no overall timeout
// (streams are long), a dial timeout, and keep-alive connections.
func newPeerClient(dial time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}
