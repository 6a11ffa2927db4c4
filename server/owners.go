package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/llmd/llmd/pipeline"
)

// Owners reaches the node that owns a request: the node a client's request
// entered keeps its stream's events (it formats and bills the answer, even
// when a peer generated it), and its id names that node (see
// pipeline.NewNodeID). A resume or cancel that a load balancer sends to
// another node is sent on to the owner over the signed peer channel.
type Owners interface {
	// Owners are the API addresses of the alive peers whose node tag is
	// id's (normally one).
	Owners(id string) []string
	// Send sends a signed request without a body to the peer at addr,
	// acting for p; release closes the response.
	Send(ctx context.Context, addr, method, path string, hdr http.Header, p pipeline.Principal, id string) (
		resp *http.Response, release func(), err error)
}

// ownerHeaders are the request headers a resume or cancel sent on keeps.
var ownerHeaders = []string{"Last-Event-ID", "Accept"}

// ownerAnswerHeaders are the owner's answer headers passed back.
var ownerAnswerHeaders = []string{"Content-Type", "Cache-Control", "X-Request-Id", "Retry-After", "X-Accel-Buffering"}

// fromOwner answers a resume or cancel of request id, which this node does
// not hold, with the owner's answer, and reports whether an owner had it.
// A request a peer sent here is never sent on (no loops), and a request
// without a cluster has no owner elsewhere.
func (s *Server) fromOwner(w http.ResponseWriter, r *http.Request, id string) bool {
	p := principalFrom(r.Context())
	if s.owners == nil || p.Peer != "" || pipeline.IDTag(id) == "" {
		return false
	}
	hdr := http.Header{}
	for _, h := range ownerHeaders {
		if v := r.Header.Get(h); v != "" {
			hdr.Set(h, v)
		}
	}
	for _, addr := range s.owners.Owners(id) {
		resp, release, err := s.owners.Send(r.Context(), addr, r.Method, r.URL.RequestURI(), hdr, p, id)
		if err != nil {
			s.log.Warn("could not reach the request's owner", "request_id", id, "peer", addr, "err", err)
			continue
		}
		if resp.StatusCode == http.StatusNotFound {
			release()
			continue
		}
		defer release()
		for _, h := range ownerAnswerHeaders {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		copyFlushing(w, resp.Body, s.cfg.Follow.WriteTimeout)
		s.log.Info("served from the request's owner", "request_id", id, "peer", addr, "method", r.Method,
			"status", resp.StatusCode)
		return true
	}
	return false
}

// copyFlushing copies src to w, flushing after each read, until src ends
// or the client leaves; each write and flush is bounded by timeout (0:
// none), so a client that stops reading is dropped.
func copyFlushing(w http.ResponseWriter, src io.Reader, timeout time.Duration) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if timeout > 0 {
				_ = rc.SetWriteDeadline(time.Now().Add(timeout))
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
