package daemon

import (
	"fmt"
	"net/http"

	"github.com/llmd/llmd/api"
)

// maxDetokenizeTokens bounds one /detokenize request.
const maxDetokenizeTokens = 1 << 20

// handleTokenize serves POST /tokenize in vLLM's shape, for every model.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	var req api.TokenizeRequest
	toks, m, err := s.tokenize(w, r, rl, &req)
	if err != nil {
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	writeJSON(w, http.StatusOK, api.TokenizeResponse{Tokens: toks, Count: len(toks), MaxModelLen: m.limit})
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, rl *reqLog, req *api.TokenizeRequest) ([]int32, *model, error) {
	if err := s.decode(w, r, req); err != nil {
		return nil, nil, err
	}
	rl.model = capHeader(req.Model, maxLoggedModelLen)
	m, err := s.lookup(req.Model)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case req.Prompt != nil && req.Messages != nil:
		return nil, nil, invalidParam("messages", "give either prompt or messages, not both")
	case req.Prompt != nil:
		return m.text.Prompt(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens), m, nil
	case req.Messages != nil:
		if err := checkMessages(req.Messages); err != nil {
			return nil, nil, err
		}
		toks, err := m.text.ChatPrompt(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
		return toks, m, err
	}
	return nil, nil, invalidParam("prompt", "you must provide a prompt or messages")
}

// handleDetokenize serves POST /detokenize in vLLM's shape.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	var req api.DetokenizeRequest
	if err := s.decode(w, r, &req); err != nil {
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	rl.model = capHeader(req.Model, maxLoggedModelLen)
	m, err := s.lookup(req.Model)
	if err == nil {
		err = checkTokens(req.Tokens, m.text.VocabSize())
	}
	if err != nil {
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	writeJSON(w, http.StatusOK, api.DetokenizeResponse{Prompt: m.text.Decode(req.Tokens)})
}

// checkTokens refuses token ids outside [0, vocab) and oversized lists.
func checkTokens(toks []int32, vocab int) error {
	if toks == nil {
		return invalidParam("tokens", "you must provide tokens")
	}
	if len(toks) > maxDetokenizeTokens {
		return invalidParam("tokens", "at most %d tokens per request, got %d", maxDetokenizeTokens, len(toks))
	}
	for i, t := range toks {
		if t < 0 || (vocab > 0 && int(t) >= vocab) {
			return invalidParam(fmt.Sprintf("tokens[%d]", i), "token id %d is outside the vocabulary (0 to %d)", t, vocab-1)
		}
	}
	return nil
}
