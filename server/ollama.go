package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// ollamaErrors is the Ollama API's error shape: {"error": "..."} with
// llmd's status; an unknown model is worded as Ollama words it.
type ollamaErrors struct{}

func (ollamaErrors) errorBody(ae apiError) (int, any) {
	msg := ae.Detail.Message
	if ae.Detail.Code != nil && *ae.Detail.Code == pipeline.CodeModelNotFound {
		if _, rest, ok := strings.Cut(msg, "`"); ok {
			if name, _, ok := strings.Cut(rest, "`"); ok {
				msg = fmt.Sprintf("model %q not found, try pulling it first (llmd: load it with `llmctl models load`)", name)
			}
		}
	}
	return ae.Status, api.OllamaError{Error: msg}
}

// errKeepAliveAdmin refuses keep_alive from a key that may not load and
// unload models.
var errKeepAliveAdmin = &pipeline.Error{Status: http.StatusForbidden, Type: pipeline.TypeInvalidRequest,
	Code: "permission_denied", Param: "keep_alive",
	Message: "keep_alive loads and unloads models for every client of this llmd, which needs an admin key; leave it out"}

// ollamaState is what the Ollama API remembers between requests: the
// sources of the models a keep_alive of 0 unloaded, so that a later
// request loads them again, as Ollama does.
//
// Locking: mu guards unloaded.
type ollamaState struct {
	mu       sync.Mutex
	unloaded map[string]string // model id -> its source
}

// ollamaCall is an /api/chat or /api/generate request as decoded, before
// it becomes a pipeline request.
type ollamaCall struct {
	generate bool
	// asked is the model as the client named it (answers echo it); model
	// the llmd id it maps to.
	asked, model string
	keep         keepAlive
	// empty is a request with nothing to generate: it loads the model (or
	// unloads it, with keep_alive 0).
	empty bool
	apply func(req *pipeline.Request) error
	// load is how long loading the model took before the request.
	load time.Duration
}

// decodeOllama decodes an /api/chat or /api/generate body.
func decodeOllama(body []byte, generate bool) (*ollamaCall, error) {
	c := &ollamaCall{generate: generate}
	if generate {
		var gr api.OllamaGenerateRequest
		if err := decodeStrict(body, &gr); err != nil {
			return nil, err
		}
		c.asked = gr.Model
		switch {
		case gr.Suffix != "":
			return nil, pipeline.InvalidParam("suffix", "suffix (fill in the middle) is not supported")
		case gr.Template != "":
			return nil, pipeline.InvalidParam("template", "a request's own template is not supported; the model's chat template is used")
		case len(gr.Context) > 0:
			return nil, pipeline.InvalidParam("context", "context is not supported: llmd keeps no conversation state; send the whole conversation to /api/chat")
		case len(gr.Images) > 0:
			return nil, pipeline.InvalidParam("images", "images are not supported: llmd serves text models")
		case gr.Raw && gr.System != "":
			return nil, pipeline.InvalidParam("system", "system has no place in a raw prompt")
		}
		if err := ollamaThink(gr.Think); err != nil {
			return nil, err
		}
		if err := ollamaControls(gr.Truncate, gr.Shift, gr.Logprobs); err != nil {
			return nil, err
		}
		var err error
		if c.keep, err = parseKeepAlive(gr.KeepAlive); err != nil {
			return nil, err
		}
		c.empty = gr.Prompt == ""
		c.apply = func(req *pipeline.Request) error {
			if gr.Raw {
				req.Endpoint, req.Prompt = pipeline.EndpointCompletions, gr.Prompt
			} else {
				if gr.System != "" {
					req.Messages = append(req.Messages, api.Message{Role: "system", Content: api.Content(gr.System)})
				}
				req.Messages = append(req.Messages, api.Message{Role: "user", Content: api.Content(gr.Prompt)})
			}
			req.Stream = gr.Stream == nil || *gr.Stream
			return ollamaCommon(req, gr.Format, gr.Options)
		}
		return c, nil
	}
	var cr api.OllamaChatRequest
	if err := decodeStrict(body, &cr); err != nil {
		return nil, err
	}
	c.asked = cr.Model
	if err := ollamaThink(cr.Think); err != nil {
		return nil, err
	}
	if err := ollamaControls(cr.Truncate, cr.Shift, cr.Logprobs); err != nil {
		return nil, err
	}
	msgs, err := ollamaMessages(cr.Messages)
	if err != nil {
		return nil, err
	}
	if c.keep, err = parseKeepAlive(cr.KeepAlive); err != nil {
		return nil, err
	}
	c.empty = len(msgs) == 0
	c.apply = func(req *pipeline.Request) error {
		req.Messages, req.Tools, req.ParallelToolCalls = msgs, ollamaTools(cr.Tools), true
		req.Stream = cr.Stream == nil || *cr.Stream
		return ollamaCommon(req, cr.Format, cr.Options)
	}
	return c, nil
}

// ollamaCommon fills what /api/chat and /api/generate share: format and
// options.
func ollamaCommon(req *pipeline.Request, format json.RawMessage, opts map[string]any) error {
	s, err := ollamaStructured(format)
	if err != nil {
		return err
	}
	req.Structured = s
	return ollamaOptions(opts, req)
}

// ollamaModelID maps a model name an Ollama client sends onto llmd's ids:
// a name served (or known to the models config) as it is; else, without
// a ":latest" tag, the name without it ("qwen3:latest" is "qwen3").
func (s *Server) ollamaModelID(name string) string {
	name = strings.TrimSpace(name)
	if s.known(name) {
		return name
	}
	if base, ok := strings.CutSuffix(name, ":latest"); ok && base != "" {
		return base
	}
	return name
}

// known reports whether id names a model this node serves, remembers, or
// its models config knows.
func (s *Server) known(id string) bool {
	if s.models.Get(id) != nil {
		return true
	}
	if cat := s.pipe.Catalog(); cat != nil && cat.Knows(id) {
		return true
	}
	s.ollama.mu.Lock()
	defer s.ollama.mu.Unlock()
	_, ok := s.ollama.unloaded[id]
	return ok
}

// ollamaEnsure loads a model a keep_alive of 0 unloaded earlier, as
// Ollama loads a model on its first request, and says how long that took.
func (s *Server) ollamaEnsure(ctx context.Context, id string) (time.Duration, error) {
	if m := s.models.Get(id); m != nil && !m.Draining() {
		return 0, nil
	}
	s.ollama.mu.Lock()
	src, ok := s.ollama.unloaded[id]
	s.ollama.mu.Unlock()
	if !ok || s.fleet == nil {
		return 0, nil // the pipeline's 404, or the models config's on-demand load
	}
	start := time.Now()
	if _, err := s.fleet.Load(ctx, api.ModelLoadRequest{Source: src, ID: id}, func(api.ModelLoadProgress) {}); err != nil {
		if m := s.models.Get(id); m == nil { // not a concurrent request's load
			return 0, err
		}
	}
	s.ollama.mu.Lock()
	delete(s.ollama.unloaded, id)
	s.ollama.mu.Unlock()
	s.log.Info("model loaded again for the Ollama API", "model", id, "load_ms", time.Since(start).Milliseconds())
	return time.Since(start), nil
}

// keepAliver is a Fleet that can change a loaded model's keep_alive.
type keepAliver interface {
	SetKeepAlive(id string, d time.Duration) error
}

// applyKeepAlive does what a request's keep_alive asks once it is over:
// 0 unloads the model (remembering its source, to load it again), a
// positive duration unloads it once idle that long, a negative one keeps
// it loaded.
func (s *Server) applyKeepAlive(ctx context.Context, id string, k keepAlive) error {
	if !k.set || s.fleet == nil || s.models.Get(id) == nil {
		return nil
	}
	if k.d != 0 {
		ka, ok := s.fleet.(keepAliver)
		if !ok {
			return nil
		}
		return ka.SetKeepAlive(id, max(k.d, 0))
	}
	var src string
	for _, st := range s.fleet.States().Models {
		if st.ID == id {
			src = st.Source
		}
	}
	if _, err := s.fleet.Unload(ctx, id, 0); err != nil {
		return err
	}
	if cat := s.pipe.Catalog(); src != "" && (cat == nil || !cat.Knows(id)) {
		s.ollama.mu.Lock()
		if s.ollama.unloaded == nil {
			s.ollama.unloaded = map[string]string{}
		}
		s.ollama.unloaded[id] = src
		s.ollama.mu.Unlock()
	}
	s.log.Info("model unloaded by an Ollama keep_alive of 0", "model", id)
	return nil
}

func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	s.ollamaGenerate(w, r, false)
}

func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	s.ollamaGenerate(w, r, true)
}

// ollamaGenerate serves /api/chat and /api/generate through the one
// generation path (s.generate): the body is decoded here first, for the
// model to load and the keep_alive to apply after the answer.
func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request, generate bool) {
	endpoint := endpointOllamaChat
	if generate {
		endpoint = endpointOllamaGenerate
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var c *ollamaCall
	if err == nil {
		c, err = decodeOllama(body, generate)
	}
	if err == nil {
		c.model = s.ollamaModelID(c.asked)
		if c.keep.set && !principalFrom(r.Context()).Admin {
			err = errKeepAliveAdmin
		}
	}
	if err == nil {
		c.load, err = s.ollamaEnsure(r.Context(), c.model)
	}
	if err == nil && c.empty {
		s.ollamaLoadOnly(w, r, c)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.generate(codec{endpoint: endpoint, decode: func(_ []byte, req *pipeline.Request) (format, error) {
		if err != nil {
			return nil, err
		}
		req.Model = c.model
		if err := c.apply(req); err != nil {
			return nil, err
		}
		fwd, err := openAIForward(req)
		if err != nil {
			return nil, err
		}
		req.Forward = fwd
		return &ollamaFormat{chat: !generate, asked: c.asked, start: req.Start, load: c.load}, nil
	}})(w, r)
	if err == nil {
		if kerr := s.applyKeepAlive(context.WithoutCancel(r.Context()), c.model, c.keep); kerr != nil {
			s.log.Warn("keep_alive not applied", "model", c.model, "err", kerr)
		}
	}
}

// ollamaLoadOnly answers a request with nothing to generate: the model is
// loaded (done_reason "load"), or unloaded with keep_alive 0 ("unload").
func (s *Server) ollamaLoadOnly(w http.ResponseWriter, r *http.Request, c *ollamaCall) {
	m := s.models.Get(c.model)
	if m == nil || m.Draining() {
		others := []string(nil)
		if cat := s.pipe.Catalog(); cat != nil {
			if cat.Knows(c.model) {
				writeError(w, "", &pipeline.Error{Status: http.StatusConflict, Type: pipeline.TypeInvalidRequest,
					Message: fmt.Sprintf("model %s is loaded on its first request; send one with a prompt", c.model)})
				return
			}
			others = cat.Names()
		}
		writeError(w, "", s.models.NotFound(c.model, others))
		return
	}
	reason := "load"
	if c.keep.set && c.keep.d == 0 {
		reason = "unload"
	}
	if err := s.applyKeepAlive(r.Context(), c.model, c.keep); err != nil {
		writeError(w, "", err)
		return
	}
	now := time.Now().UTC()
	metrics := api.OllamaMetrics{LoadDuration: c.load.Nanoseconds(), TotalDuration: c.load.Nanoseconds()}
	if c.generate {
		writeJSON(w, http.StatusOK, api.OllamaGenerateResponse{Model: c.asked, CreatedAt: now, Done: true, DoneReason: reason,
			OllamaMetrics: metrics})
		return
	}
	writeJSON(w, http.StatusOK, api.OllamaChatResponse{Model: c.asked, CreatedAt: now, Done: true, DoneReason: reason,
		Message: api.OllamaMessage{Role: "assistant"}, OllamaMetrics: metrics})
}
