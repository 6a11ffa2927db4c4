package server

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// notFound is the answer for a request id that does not exist, has expired,
// or belongs to another tenant: the same in every case.
func notFound(w http.ResponseWriter, id string) {
	writeError(w, "", &pipeline.Error{Status: http.StatusNotFound, Type: pipeline.TypeInvalidRequest,
		Code: "request_not_found", Message: fmt.Sprintf("no request %q", capText(id, 64))})
}

// findStream returns the live or recent request id that the caller may
// see: its own tenant's, or any for an admin key (llmctl top follows and
// cancels requests of every tenant).
func (s *Server) findStream(r *http.Request, id string) *relay.Stream {
	p := principalFrom(r.Context())
	if p.Admin && p.KeyID != "" {
		return s.streams.Lookup(id)
	}
	return s.streams.Get(id, p.Tenant)
}

// handleResume serves GET /v1/requests/{id}/stream: the stream's events
// after Last-Event-ID (or ?after=N), then the rest live.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.findStream(r, id)
	if st == nil && s.fromOwner(w, r, id) {
		return
	}
	if st == nil {
		var err error
		if st, err = s.recorded(r, id); err != nil {
			writeError(w, "", err)
			return
		}
	}
	if st == nil || !st.Resumable {
		notFound(w, id)
		return
	}
	w.Header().Set("X-Request-Id", st.ID)
	after := r.Header.Get("Last-Event-ID")
	param := "Last-Event-ID"
	if after == "" {
		after, param = r.URL.Query().Get("after"), "after"
	}
	from := 0
	if after != "" {
		n, err := strconv.Atoi(strings.TrimSpace(after))
		if err != nil || n < -1 || n == math.MaxInt { // n+1 must not overflow
			writeError(w, "", pipeline.InvalidParam(param, "%s must be an event id (an integer), got %q", param, capText(after, 32)))
			return
		}
		from = n + 1
	}
	if _, _, _, gone, _ := st.Read(from); gone {
		writeError(w, "", &pipeline.Error{Status: http.StatusGone, Type: pipeline.TypeInvalidRequest, Code: "events_expired",
			Message: fmt.Sprintf("events before id %d are no longer kept; the stream cannot be resumed from there", st.Next()-1)})
		return
	}
	relay.Follow(r.Context(), w, st, from, s.cfg.Follow, s.log)
}

// cancelBody answers DELETE /v1/requests/{id}.
type cancelBody struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
}

// handleCancel serves DELETE /v1/requests/{id}: the request leaves the
// batch at the next engine step and its KV blocks are freed; only the
// tokens generated so far are billed.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.findStream(r, id)
	if st == nil && s.fromOwner(w, r, id) {
		return
	}
	if st == nil {
		notFound(w, id)
		return
	}
	w.Header().Set("X-Request-Id", st.ID)
	if st.Done() {
		writeError(w, "", &pipeline.Error{Status: http.StatusConflict, Type: pipeline.TypeInvalidRequest, Code: "request_finished",
			Message: fmt.Sprintf("request %s has already finished", st.ID)})
		return
	}
	st.Cancel()
	s.log.Info("request cancelled by the client", "request_id", st.ID, "tenant", st.Tenant)
	writeJSON(w, http.StatusOK, cancelBody{ID: st.ID, Object: "request", Status: "cancelled"})
}
