package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/engine"
)

// A request for a model this node does not serve is forwarded to a peer
// that does (a cluster of nodes serving different models), or, when no
// alive node serves it, to the model's configured fallback
// (ClusterConfig.Fallback). Without the model's tokenizer this node cannot
// count the prompt or see its prefix: the peer is chosen by conversation
// affinity and load, the quota reservation is estimated from the body's
// size, and the peer's answer is relayed as it comes (the peer's usage
// trailer settles the reservation and fills the usage row).

// remoteEstimateMaxTokens stands for max_tokens in the reservation of a
// forwarded request that does not set it.
const remoteEstimateMaxTokens = 1024

// errNoNodeAnswered ends a request for a model served only by peers when
// none of them accepted it.
var errNoNodeAnswered = &requestError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "no_node_available",
	Message: "no node serving this model accepted the request; please retry"}

// remoteShape is what this node reads of a request it cannot tokenize.
type remoteShape struct {
	Model               string `json:"model"`
	Stream              *bool  `json:"stream"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	N                   *int   `json:"n"`
}

// serveRemote handles a request whose job could not be built because its
// model is not served here (cause): it forwards it to a peer serving the
// model or its fallback, or re-dispatches it here (again) when the
// fallback is local. It reports false when it did not handle the request
// (not clustered, a forwarded request, another error).
func (s *Server) serveRemote(w http.ResponseWriter, r *http.Request, rl *reqLog, cause error,
	again func(*http.Request)) bool {
	var re *requestError
	if s.cluster == nil || rl.peer != "" || len(rl.body) == 0 || !errors.As(cause, &re) || re.Code != codeModelNotFound {
		return false
	}
	var shape remoteShape
	if err := json.Unmarshal(rl.body, &shape); err != nil || shape.Model == "" {
		return false
	}
	name := shape.Model
	peers := s.remotePeers(r, name)
	if len(peers) == 0 {
		fb := s.cfg.Cluster.Fallback[name]
		if fb == "" || rl.fellBack {
			return false
		}
		body, err := withModel(rl.body, fb)
		if err != nil {
			return false
		}
		rl.fellBack = true
		rl.route = appendNote(rl.route, "fallback from "+name)
		s.log.Info("no node serves the model; using its fallback", "request_id", rl.id, "model", name, "fallback", fb)
		if s.byID[fb] != nil {
			r2 := r.Clone(r.Context())
			rl.body = nil
			r2.Body = &recordingBody{ReadCloser: io.NopCloser(bytes.NewReader(body)), buf: &rl.body}
			r2.ContentLength = int64(len(body))
			again(r2)
			return true
		}
		rl.body, name = body, fb
		if peers = s.remotePeers(r, name); len(peers) == 0 {
			return false
		}
	}
	rl.model = capHeader(name, maxLoggedModelLen)
	// Native requests stream unless they say otherwise.
	rl.stream = shape.Stream != nil && *shape.Stream || shape.Stream == nil && rl.endpoint == "chat"
	s.forwardRemote(w, r, rl, name, shape, peers)
	return true
}

// remotePeers are the alive peers serving model, by affinity and load.
func (s *Server) remotePeers(r *http.Request, model string) []cluster.Candidate {
	cands := s.cluster.Route(cluster.RouteRequest{Model: model, AffinityKey: affinityKey(r, &job{}),
		LoadBound: s.cfg.Cluster.LoadBound, LoadSlack: s.cfg.Cluster.LoadSlack}, nil)
	var peers []cluster.Candidate
	for _, c := range cands {
		if !c.Member.Local && c.Member.APIAddr != "" {
			peers = append(peers, c)
		}
	}
	return peers
}

// withModel returns a JSON request body with its "model" replaced.
func withModel(body []byte, model string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	m["model"] = b
	return json.Marshal(m)
}

// forwardRemote reserves the request's estimated tokens, then relays it to
// the first of peers that accepts it, and meters it.
func (s *Server) forwardRemote(w http.ResponseWriter, r *http.Request, rl *reqLog, name string, shape remoteShape,
	peers []cluster.Candidate) {
	s.active.Add(1)
	defer s.active.Add(-1)
	if s.state.Load() == stateDraining {
		rl.fail(writeError(w, rl.id, errDraining), errDraining)
		return
	}
	maxTokens := remoteEstimateMaxTokens
	for _, v := range []*int{shape.MaxCompletionTokens, shape.MaxTokens} {
		if v != nil && *v > 0 {
			maxTokens = *v
		}
	}
	n := 1
	if shape.N != nil && *shape.N > 1 {
		n = *shape.N
	}
	// The job stands for the model here: its id for the usage row, and the
	// reservation's estimate (about 4 bytes a token).
	j := &job{model: &model{id: name}, maxTokens: maxTokens, n: n}
	settle, err := s.admitRemote(w, r, rl, j, int64(len(rl.body)/4))
	if err != nil {
		if isQuotaDenial(err) {
			s.recordRejected(rl, j, err)
		}
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	s.beginUsage(r.Context(), rl, j)
	defer func() {
		settle(rl.usage)
		s.endUsage(rl, j)
	}()
	first := true
	for _, c := range peers {
		if first {
			rl.route = appendNote(rl.route, c.Member.ID+" "+c.Reason)
			first = false
		}
		rl.servedBy = c.Member.ID
		done, err := s.relayRaw(w, r, rl, c, rl.stream)
		if done {
			return
		}
		s.peerFailed(c, rl, err)
		if r.Context().Err() != nil {
			rl.status, rl.finish = statusClientClosed, string(engine.FinishCancelled)
			return
		}
	}
	rl.fail(writeError(w, rl.id, errNoNodeAnswered), errNoNodeAnswered)
}

// admitRemote reserves quota for a request this node cannot tokenize.
func (s *Server) admitRemote(w http.ResponseWriter, r *http.Request, rl *reqLog, j *job, promptEstimate int64) (
	func(engine.Usage), error) {
	_, limits, err := s.requestQuota(r, rl)
	if err != nil {
		return nil, err
	}
	return s.reserve(w, r, rl, j, limits, promptEstimate+int64(j.maxTokens)*int64(j.n))
}

// relayRaw sends the request to peer c and copies its answer to the client
// as it arrives, flushing each read. It reports false, having written
// nothing, when the peer failed before answering (or answered 5xx, 429 or
// 403) and the next peer may be tried.
func (s *Server) relayRaw(w http.ResponseWriter, r *http.Request, rl *reqLog, c cluster.Candidate, stream bool) (
	bool, error) {
	resp, release, err := s.askPeer(r.Context(), r, rl, c)
	if err != nil {
		return false, err
	}
	defer release()
	copyPeerHeaders(w, resp, rl)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if rl.ttft == 0 && resp.StatusCode == http.StatusOK && stream {
				rl.ttft = time.Since(rl.start)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				rl.status, rl.finish = statusClientClosed, string(engine.FinishCancelled)
				return true, nil
			}
			_ = rc.Flush()
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			rl.err, rl.finish = fmt.Errorf("peer %s: %w", c.Member.ID, rerr), string(engine.FinishError)
			if stream && resp.StatusCode == http.StatusOK {
				_, _ = w.Write(rawErrorEvent(rl, errPeerLost))
				_ = rc.Flush()
			}
			return true, nil
		}
	}
	if resp.StatusCode != http.StatusOK {
		rl.err = fmt.Errorf("peer answered %s", resp.Status)
		return true, nil
	}
	if !takeUsage(resp, rl) {
		rl.err, rl.finish = errors.New("daemon: the peer's answer ended without its usage"), string(engine.FinishError)
		return true, nil
	}
	if rl.finish == "" {
		rl.finish = string(engine.FinishStop)
	}
	return true, nil
}

// rawErrorEvent is the terminal error of a relayed stream in its
// endpoint's format.
func rawErrorEvent(rl *reqLog, err error) []byte {
	detail := apiErrorFor(err, rl.id).Detail
	if rl.endpoint == "chat" {
		b, _ := json.Marshal(api.NativeError{Error: detail})
		return []byte("event: error\ndata: " + string(b) + "\n\n")
	}
	b, _ := json.Marshal(api.ErrorBody{Error: detail})
	return []byte("data: " + string(b) + "\n\ndata: [DONE]\n\n")
}
