package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
)

// EventLog keeps a copy of resumable streams' events outside this node
// (relay/redislog), so that a stream whose node is gone can still be
// resumed through any node: its finished events, or those recorded before
// the node died, then an error event saying the rest is lost.
type EventLog interface {
	// Mirror is where stream id of tenant, in style ("openai", "native"),
	// copies its events.
	Mirror(id, tenant, style string) relay.Mirror
	// Read returns what the log holds of request id; an error wrapping
	// ErrNotRecorded when it holds nothing.
	Read(ctx context.Context, id string) (relay.Recording, error)
}

// ErrNotRecorded is what an EventLog's Read wraps for an id it has no
// events of.
var ErrNotRecorded = errors.New("server: no recorded events")

// styleOf names the event style a format writes ("" for those not
// recorded).
func styleOf(f format) string {
	switch f.(type) {
	case chatFormat, completionFormat:
		return "openai"
	case nativeFormat:
		return "native"
	}
	return ""
}

// errOwnerUnreachable answers a resume of a live stream whose node is
// alive but did not answer: its recording may not be the whole stream.
var errOwnerUnreachable = &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer,
	Code: "owner_unreachable", Message: "the node serving this request cannot be reached; retry the resume"}

// recorded returns the event log's copy of request id as a stream to
// follow, when the caller may see it: all of it when it ended; else its
// recorded events and an error event (the node that served it is gone,
// and nothing more will come). It returns nil when there is nothing to
// resume here.
func (s *Server) recorded(r *http.Request, id string) (*relay.Stream, error) {
	p := principalFrom(r.Context())
	if s.eventLog == nil || p.Peer != "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	rec, err := s.eventLog.Read(ctx, id)
	if err != nil {
		if !errors.Is(err, ErrNotRecorded) {
			s.log.Warn("could not read the event log", "request_id", id, "err", err)
		}
		return nil, nil
	}
	if rec.Tenant != p.Tenant && !(p.Admin && p.KeyID != "") {
		return nil, nil
	}
	if !rec.Done && s.owners != nil && len(s.owners.Owners(id)) > 0 {
		// Its node is alive: the stream may still be going on there.
		return nil, errOwnerUnreachable
	}
	st := relay.Restore(id, rec, s.cfg.Resume)
	if !rec.Done {
		lost := &pipeline.Error{Status: http.StatusBadGateway, Type: pipeline.TypeServer, Code: "node_lost",
			Message: "the node serving this request stopped before it finished; the events it recorded were resent, the rest is lost"}
		switch rec.Style {
		case "native":
			_ = st.Final("error", api.NativeError{Error: apiErrorFor(lost, id).Detail})
		default:
			_ = st.Data("", api.ErrorBody{Error: apiErrorFor(lost, id).Detail})
			_ = st.Final("", doneData)
		}
	}
	st.End(time.Now())
	s.log.Info("resumed from the event log", "request_id", id, "events", len(rec.Events), "finished", rec.Done)
	return st, nil
}
