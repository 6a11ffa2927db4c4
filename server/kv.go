package server

import (
	"io"
	"net/http"
	"strconv"

	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
)

// handleKVPrefill is a prefill node's side of disaggregated prefill and
// decode: a peer's signed request to prefill a prompt and answer the KV
// blocks it asks for (pipeline.ServeKVPrefill). Only peers may call it.
func (s *Server) handleKVPrefill(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	if p.Peer == "" {
		writeError(w, "", errKVPeerOnly)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		writeError(w, "", err)
		return
	}
	var req pipeline.KVPrefillRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, "", err)
		return
	}
	w.WriteHeader(http.StatusEarlyHints) // accepted: the decode node stops its forward timeout
	data, err := s.pipe.ServeKVPrefill(r.Context(), p, req)
	if err != nil {
		s.log.Warn("KV prefill for a peer failed", "peer", p.Peer, "request_id", p.RequestID, "err", err)
		writeError(w, "", err)
		return
	}
	w.Header().Set("Content-Type", peer.KVContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

var errKVPeerOnly = &pipeline.Error{Status: http.StatusNotFound, Type: pipeline.TypeInvalidRequest,
	Message: pipeline.KVPrefillPath + " is for the cluster's nodes only"}
