package daemon

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// resumeHeader opts an OpenAI-format stream in to resuming: its events then
// carry ids and it outlives a dropped connection.
const resumeHeader = "X-Resumable"

// openaiResumable reports whether an OpenAI-format request asked for a
// resumable stream.
func openaiResumable(r *http.Request) bool {
	v := strings.ToLower(strings.TrimSpace(r.Header.Get(resumeHeader)))
	return v == "true" || v == "1" || v == "yes"
}

// streamWriter returns the writer of a new stream's event log; resumable
// streams number their events.
func (s *Server) streamWriter(rl *reqLog, resumable bool) *sseWriter {
	l := newEventLog(rl.id, rl.tenant, resumable, s.cfg.ResumeMaxEvents, s.cfg.ResumeMaxBytes, func() {})
	return newSSEWriter(l, resumable)
}

// follow copies l's events from number from to the client until the log
// ends, the client leaves, or the client falls more than MaxClientLag
// bytes behind (then its connection is closed: it can resume). It writes a
// heartbeat comment whenever the stream has been silent for the heartbeat
// interval.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, l *eventLog, from int) {
	conn := newSSEConn(w, s.cfg.StreamWriteTimeout)
	l.attach()
	defer func() { l.detach(time.Now()) }() // the time of leaving, not of arriving
	if err := conn.start(); err != nil {
		return
	}
	ctx := r.Context()
	ping := time.NewTimer(s.cfg.HeartbeatInterval)
	defer ping.Stop()
	for {
		evs, next, done, gone, wait := l.read(from)
		if gone {
			return // evicted while this client lagged: it can resume no further back than the log
		}
		if err := conn.write(evs); err != nil {
			return
		}
		from = next
		if l.lag(from) > s.cfg.MaxClientLag { // what piled up during the write: a resumed backlog does not count
			s.log.Info("closing a client that fell behind", "request_id", l.id, "lag_bytes", l.lag(from))
			return
		}
		if done && len(evs) == 0 {
			return
		}
		if len(evs) > 0 {
			continue // read again: done is only final once nothing is left
		}
		ping.Reset(time.Until(conn.lastWrite.Add(s.cfg.HeartbeatInterval)))
		select {
		case <-ctx.Done():
			return
		case <-wait:
		case <-ping.C:
			if err := conn.comment("ping"); err != nil {
				return
			}
		}
	}
}

// notFound is the answer for a request id that does not exist, has expired,
// or belongs to another tenant: the same in every case.
func notFound(w http.ResponseWriter, id string) {
	writeError(w, "", &requestError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "request_not_found",
		Message: fmt.Sprintf("no request %q", capHeader(id, 64))})
}

// findLog returns the live or recent request id that the caller may see:
// its own tenant's, or any for an admin key (llmctl top follows and
// cancels requests of every tenant).
func (s *Server) findLog(r *http.Request, id string) *eventLog {
	p := principalFrom(r.Context())
	if p.admin && p.keyID != "" {
		return s.logs.lookup(id)
	}
	return s.logs.get(id, p.tenant)
}

// handleResume serves GET /v1/requests/{id}/stream: the stream's events
// after Last-Event-ID (or ?after=N), then the rest live.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	id := r.PathValue("id")
	l := s.findLog(r, id)
	if l == nil || !l.resumable {
		notFound(w, id)
		return
	}
	w.Header().Set("X-Request-Id", l.id)
	after := r.Header.Get("Last-Event-ID")
	param := "Last-Event-ID"
	if after == "" {
		after, param = r.URL.Query().Get("after"), "after"
	}
	from := 0
	if after != "" {
		n, err := strconv.Atoi(strings.TrimSpace(after))
		if err != nil || n < -1 || n == math.MaxInt { // n+1 must not overflow
			writeError(w, "", invalidParam(param, "%s must be an event id (an integer), got %q", param, capHeader(after, 32)))
			return
		}
		from = n + 1
	}
	if _, _, _, gone, _ := l.read(from); gone {
		writeError(w, "", &requestError{Status: http.StatusGone, Type: typeInvalidRequest, Code: "events_expired",
			Message: fmt.Sprintf("events before id %d are no longer kept; the stream cannot be resumed from there", l.next()-1)})
		return
	}
	s.follow(w, r, l, from)
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
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	id := r.PathValue("id")
	l := s.findLog(r, id)
	if l == nil {
		notFound(w, id)
		return
	}
	w.Header().Set("X-Request-Id", l.id)
	if l.isDone() {
		writeError(w, "", &requestError{Status: http.StatusConflict, Type: typeInvalidRequest, Code: "request_finished",
			Message: fmt.Sprintf("request %s has already finished", l.id)})
		return
	}
	l.cancel()
	s.log.Info("request cancelled by the client", "request_id", l.id, "tenant", l.tenant)
	writeJSON(w, http.StatusOK, cancelBody{ID: l.id, Object: "request", Status: "cancelled"})
}

// sweepStreams runs until ctx ends: once a second it cancels resumable
// streams that have had no reader for ResumeGrace and forgets streams that
// ended more than ResumeTTL ago.
func (s *Server) sweepStreams(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.logs.sweep(now.Add(-s.cfg.ResumeGrace), now.Add(-s.cfg.ResumeTTL))
		}
	}
}
