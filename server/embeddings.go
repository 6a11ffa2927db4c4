package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// embedRequest starts the record of an embeddings call: an id (in the
// X-Request-Id header) and the principal.
func embedRequest(w http.ResponseWriter, r *http.Request) *pipeline.Request {
	req := &pipeline.Request{ID: pipeline.NewID(pipeline.EndpointEmbeddings.IDPrefix()), Endpoint: pipeline.EndpointEmbeddings,
		Principal: principalFrom(r.Context()), Start: time.Now(),
		ClientID: capText(r.Header.Get("X-Request-Id"), MaxClientRequestIDLen)}
	w.Header().Set("X-Request-Id", req.ID)
	return req
}

// handleEmbeddings serves POST /v1/embeddings in OpenAI's shape, through
// the pipeline's embeddings stages.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	req := embedRequest(w, r)
	ew := &openAIEmbedWriter{w: w, id: req.ID}
	var er api.EmbeddingRequest
	err := s.decodeBody(w, r, &er)
	if err == nil {
		req.Model, req.User = er.Model, capText(er.User, 256)
		req.Embed, err = decodeEmbeddingInput(er.Input)
	}
	if err == nil {
		switch er.EncodingFormat {
		case "", "float":
		case "base64":
			ew.base64 = true
		default:
			err = pipeline.InvalidParam("encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", er.EncodingFormat)
		}
	}
	if err != nil {
		s.pipe.Record(req, nil, ew.Fail(err), err)
		return
	}
	req.Embed.Dimensions = er.Dimensions
	req.Embed.Truncate = er.Truncate != nil && *er.Truncate
	if req.Forwarded() {
		w.WriteHeader(http.StatusEarlyHints) // accepted: the entry node stops its forward timeout
	}
	s.pipe.Embed(r.Context(), req, ew)
}

// decodeEmbeddingInput reads OpenAI's input: a string, an array of
// strings, an array of token ids or an array of arrays of token ids.
func decodeEmbeddingInput(raw json.RawMessage) (*pipeline.EmbedRequest, error) {
	bad := pipeline.InvalidParam("input", "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, pipeline.InvalidParam("input", "you must provide an input")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return &pipeline.EmbedRequest{Texts: []string{one}}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, bad
	}
	if len(items) == 0 {
		return nil, pipeline.InvalidParam("input", "input must not be an empty array")
	}
	if len(items) > pipeline.MaxEmbedInputs {
		return nil, pipeline.InvalidParam("input", "input may hold at most %d items, got %d", pipeline.MaxEmbedInputs, len(items))
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		return &pipeline.EmbedRequest{Texts: texts}, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		toks, err := tokenIDs(ids, "input")
		if err != nil {
			return nil, err
		}
		return &pipeline.EmbedRequest{Tokens: [][]int32{toks}}, nil
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) != nil {
		return nil, bad
	}
	out := &pipeline.EmbedRequest{Tokens: make([][]int32, len(lists))}
	for i, l := range lists {
		toks, err := tokenIDs(l, fmt.Sprintf("input[%d]", i))
		if err != nil {
			return nil, err
		}
		out.Tokens[i] = toks
	}
	return out, nil
}

// tokenIDs narrows token ids to int32, refusing those that do not fit.
func tokenIDs(ids []int64, param string) ([]int32, error) {
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return nil, pipeline.InvalidParam(param, "%s holds %d, not a token id", param, id)
		}
		out[i] = int32(id)
	}
	return out, nil
}

// openAIEmbedWriter writes /v1/embeddings answers.
type openAIEmbedWriter struct {
	w      http.ResponseWriter
	id     string
	base64 bool
}

// Answer implements pipeline.EmbedWriter.
func (ew *openAIEmbedWriter) Answer(res *pipeline.EmbedResult) error {
	out := api.EmbeddingResponse{Object: "list", Model: res.Model, Data: make([]api.Embedding, len(res.Vectors)),
		Usage: api.EmbeddingsUsage{PromptTokens: res.InputTokens, TotalTokens: res.InputTokens}}
	for i, v := range res.Vectors {
		var raw []byte
		var err error
		if ew.base64 {
			raw, err = json.Marshal(api.EncodeBase64Floats(v))
		} else {
			raw, err = json.Marshal(v)
		}
		if err != nil {
			return err
		}
		out.Data[i] = api.Embedding{Object: "embedding", Index: i, Embedding: raw}
	}
	return writeJSONErr(ew.w, http.StatusOK, out)
}

// Fail implements pipeline.EmbedWriter.
func (ew *openAIEmbedWriter) Fail(err error) int { return writeError(ew.w, ew.id, err) }

// writeJSONErr writes v as a JSON answer and reports a failed write (the
// client gone).
func writeJSONErr(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(body, '\n'))
	return err
}

// handleOllamaEmbed serves Ollama's POST /api/embed: input a string or an
// array of strings (none: the model is loaded and no embeddings are
// made), truncate (default true), dimensions, keep_alive.
func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	req := embedRequest(w, r)
	var er api.OllamaEmbedRequest
	err := s.decodeBody(w, r, &er)
	var texts []string
	if err == nil {
		texts, err = ollamaEmbedInput(er.Input)
	}
	em := &pipeline.EmbedRequest{Texts: texts, Truncate: er.Truncate == nil || *er.Truncate}
	if er.Dimensions < 0 {
		err = pipeline.InvalidParam("dimensions", "dimensions must not be negative, got %d", er.Dimensions)
	} else if er.Dimensions > 0 {
		em.Dimensions = &er.Dimensions
	}
	s.ollamaEmbed(w, r, req, er.Model, er.KeepAlive, em, err, func(res *pipeline.EmbedResult, load time.Duration) any {
		return api.OllamaEmbedResponse{Model: er.Model, Embeddings: res.Vectors, PromptEvalCount: res.InputTokens,
			LoadDuration: load.Nanoseconds(), TotalDuration: time.Since(req.Start).Nanoseconds()}
	}, func(load time.Duration) any {
		return api.OllamaEmbedResponse{Model: er.Model, Embeddings: [][]float32{}, LoadDuration: load.Nanoseconds(),
			TotalDuration: time.Since(req.Start).Nanoseconds()}
	})
}

// handleOllamaEmbeddings serves Ollama's legacy POST /api/embeddings: one
// prompt, one embedding (an empty prompt gives an empty one).
func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	req := embedRequest(w, r)
	var er api.OllamaEmbeddingRequest
	err := s.decodeBody(w, r, &er)
	em := &pipeline.EmbedRequest{Truncate: true}
	if er.Prompt != "" {
		em.Texts = []string{er.Prompt}
	}
	s.ollamaEmbed(w, r, req, er.Model, er.KeepAlive, em, err, func(res *pipeline.EmbedResult, _ time.Duration) any {
		out := api.OllamaEmbeddingResponse{Embedding: make([]float64, len(res.Vectors[0]))}
		for i, x := range res.Vectors[0] {
			out.Embedding[i] = float64(x)
		}
		return out
	}, func(time.Duration) any { return api.OllamaEmbeddingResponse{Embedding: []float64{}} })
}

// ollamaEmbed runs an Ollama embeddings request: the model name mapped
// onto llmd's ids, a model a keep_alive of 0 unloaded loaded again, the
// pipeline's embeddings stages (or, with no input, only the load), then
// the keep_alive applied. answer and loaded build the answer's body.
func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request, req *pipeline.Request, asked string,
	rawKeep json.RawMessage, em *pipeline.EmbedRequest, err error,
	answer func(res *pipeline.EmbedResult, load time.Duration) any, loaded func(load time.Duration) any) {
	ew := &ollamaEmbedWriter{w: w}
	var keep keepAlive
	if err == nil {
		keep, err = parseKeepAlive(rawKeep)
	}
	if err == nil && keep.set && !req.Principal.Admin {
		err = errKeepAliveAdmin
	}
	if err == nil && asked == "" {
		err = pipeline.InvalidParam("model", "model is required")
	}
	req.Model = s.ollamaModelID(asked)
	var load time.Duration
	if err == nil {
		load, err = s.ollamaEnsure(r.Context(), req.Model)
	}
	if err == nil && len(em.Texts) == 0 {
		// Nothing to embed: Ollama loads the model and answers no vectors.
		m, lerr := s.models.Lookup(req.Model)
		switch {
		case lerr != nil:
			err = lerr
		case m.Embed == nil:
			err = &pipeline.Error{Status: http.StatusBadRequest, Type: pipeline.TypeInvalidRequest, Param: "model",
				Code: "embeddings_unsupported", Message: fmt.Sprintf("%q does not support embeddings", asked)}
		default:
			s.pipe.Record(req, nil, http.StatusOK, nil)
			writeJSON(w, http.StatusOK, loaded(load))
			s.ollamaKeepAlive(r.Context(), req.Model, keep)
			return
		}
	}
	if err != nil {
		s.pipe.Record(req, nil, ew.Fail(err), err)
		return
	}
	req.Embed = em
	ew.body = func(res *pipeline.EmbedResult) any { return answer(res, load) }
	if out := s.pipe.Embed(r.Context(), req, ew); out.Status == http.StatusOK {
		s.ollamaKeepAlive(r.Context(), req.Model, keep)
	}
}

// ollamaKeepAlive applies a request's keep_alive once it is answered.
func (s *Server) ollamaKeepAlive(ctx context.Context, id string, keep keepAlive) {
	if err := s.applyKeepAlive(context.WithoutCancel(ctx), id, keep); err != nil {
		s.log.Warn("keep_alive not applied", "model", id, "err", err)
	}
}

// ollamaEmbedInput reads /api/embed's input: a string or an array of
// strings; "", [] and none are no input.
func ollamaEmbedInput(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return nil, pipeline.InvalidParam("input", "input must be a string or an array of strings")
	}
	if len(many) > pipeline.MaxEmbedInputs {
		return nil, pipeline.InvalidParam("input", "input may hold at most %d strings, got %d", pipeline.MaxEmbedInputs, len(many))
	}
	return many, nil
}

// ollamaEmbedWriter writes Ollama's embeddings answers; errors in its
// shape ({"error": ...}, chosen by the route's path).
type ollamaEmbedWriter struct {
	w    http.ResponseWriter
	body func(res *pipeline.EmbedResult) any
}

// Answer implements pipeline.EmbedWriter.
func (ew *ollamaEmbedWriter) Answer(res *pipeline.EmbedResult) error {
	return writeJSONErr(ew.w, http.StatusOK, ew.body(res))
}

// Fail implements pipeline.EmbedWriter.
func (ew *ollamaEmbedWriter) Fail(err error) int { return writeError(ew.w, "", err) }
