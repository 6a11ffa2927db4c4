package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// maxDetokenizeTokens bounds one /detokenize request.
const maxDetokenizeTokens = 1 << 20

// tokenizerRequest starts the record of a /tokenize or /detokenize call:
// it gets an id and a log line like a generation request.
func tokenizerRequest(w http.ResponseWriter, r *http.Request, e pipeline.Endpoint) *pipeline.Request {
	req := &pipeline.Request{ID: pipeline.NewID(e.IDPrefix()), Endpoint: e, Principal: principalFrom(r.Context()),
		Start: time.Now(), ClientID: capText(r.Header.Get("X-Request-Id"), MaxClientRequestIDLen)}
	w.Header().Set("X-Request-Id", req.ID)
	return req
}

// handleTokenize serves POST /tokenize in vLLM's shape, for every model.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	req := tokenizerRequest(w, r, pipeline.EndpointTokenize)
	toks, m, err := s.tokenize(w, r, req)
	if err != nil {
		s.pipe.Record(req, nil, writeError(w, req.ID, err), err)
		return
	}
	writeJSON(w, http.StatusOK, api.TokenizeResponse{Tokens: toks, Count: len(toks), MaxModelLen: m.Limit})
	s.pipe.Record(req, nil, http.StatusOK, nil)
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, req *pipeline.Request) ([]int32, *pipeline.Model, error) {
	var tr api.TokenizeRequest
	if err := s.decodeBody(w, r, &tr); err != nil {
		return nil, nil, err
	}
	req.Model = tr.Model
	m, err := s.models.Lookup(tr.Model)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case tr.Prompt != nil && tr.Messages != nil:
		return nil, nil, pipeline.InvalidParam("messages", "give either prompt or messages, not both")
	case tr.Prompt != nil:
		return m.Text.Prompt(*tr.Prompt, tr.AddSpecialTokens == nil || *tr.AddSpecialTokens), m, nil
	case tr.Messages != nil:
		if err := pipeline.CheckMessages(tr.Messages); err != nil {
			return nil, nil, err
		}
		toks, err := m.Text.ChatPrompt(pipeline.ChatInput{Messages: tr.Messages,
			AddGenerationPrompt: tr.AddGenerationPrompt == nil || *tr.AddGenerationPrompt})
		return toks, m, err
	}
	return nil, nil, pipeline.InvalidParam("prompt", "you must provide a prompt or messages")
}

// handleDetokenize serves POST /detokenize in vLLM's shape.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	req := tokenizerRequest(w, r, pipeline.EndpointDetokenize)
	var dr api.DetokenizeRequest
	err := s.decodeBody(w, r, &dr)
	var m *pipeline.Model
	if err == nil {
		req.Model = dr.Model
		if m, err = s.models.Lookup(dr.Model); err == nil {
			err = checkTokens(dr.Tokens, m.Text.VocabSize())
		}
	}
	if err != nil {
		s.pipe.Record(req, nil, writeError(w, req.ID, err), err)
		return
	}
	writeJSON(w, http.StatusOK, api.DetokenizeResponse{Prompt: m.Text.Decode(dr.Tokens)})
	s.pipe.Record(req, nil, http.StatusOK, nil)
}

// checkTokens refuses token ids outside [0, vocab) and oversized lists.
func checkTokens(toks []int32, vocab int) error {
	if toks == nil {
		return pipeline.InvalidParam("tokens", "you must provide tokens")
	}
	if len(toks) > maxDetokenizeTokens {
		return pipeline.InvalidParam("tokens", "at most %d tokens per request, got %d", maxDetokenizeTokens, len(toks))
	}
	for i, t := range toks {
		if t < 0 || (vocab > 0 && int(t) >= vocab) {
			return pipeline.InvalidParam(fmt.Sprintf("tokens[%d]", i), "token id %d is outside the vocabulary (0 to %d)", t, vocab-1)
		}
	}
	return nil
}
