package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// Fleet loads and unloads models while llmd runs; the daemon implements
// it. Its errors are *pipeline.Error for what the caller can act on.
type Fleet interface {
	Load(ctx context.Context, req api.ModelLoadRequest, progress func(api.ModelLoadProgress)) (api.ModelState, error)
	Unload(ctx context.Context, id string, timeout time.Duration) (api.ModelUnloadResult, error)
	States() api.ModelStateList
	// Apply replaces the models config with yaml: loads what it adds,
	// unloads what it drops, saves it.
	Apply(ctx context.Context, yaml []byte) (api.ModelsApplied, error)
	// SaveConfig writes the models config in force, with the changes the
	// rollout routes made, to llmd's models config file (false: none).
	SaveConfig() (bool, error)
}

func (s *Server) handleListLoaded(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.fleet.States())
}

// handleLoadModel loads a model. A streamed load answers 200 at once and
// writes newline-delimited progress, the last line "ready" or "error" (as
// Ollama's pull does); otherwise the answer waits for the load.
func (s *Server) handleLoadModel(w http.ResponseWriter, r *http.Request) {
	var req api.ModelLoadRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	by := principalFrom(r.Context()).KeyID
	s.log.Info("loading a model", "source", req.Source, "id", req.ID, "by", by)
	if !req.Stream {
		st, err := s.fleet.Load(r.Context(), req, func(api.ModelLoadProgress) {})
		if err != nil {
			writeError(w, "", err)
			return
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	write := func(p api.ModelLoadProgress) {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.Follow.WriteTimeout))
		if enc.Encode(p) == nil {
			_ = rc.Flush()
		}
	}
	st, err := s.fleet.Load(r.Context(), req, write)
	if err != nil {
		ae := apiErrorFor(err, "")
		write(api.ModelLoadProgress{Status: api.LoadError, Model: req.ID, Error: &ae.Detail, HTTPStatus: ae.Status})
		return
	}
	write(api.ModelLoadProgress{Status: api.LoadReady, Model: st.ID, State: &st})
}

func (s *Server) handleUnloadModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var timeout time.Duration
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			writeError(w, "", pipeline.InvalidParam("timeout", "timeout must be a positive duration such as 30s, got %q", v))
			return
		}
		timeout = d
	}
	res, err := s.fleet.Unload(r.Context(), strings.TrimSpace(id), timeout)
	if err != nil {
		writeError(w, "", err)
		return
	}
	s.log.Info("model unloaded by the admin API", "model", id, "by", principalFrom(r.Context()).KeyID)
	writeJSON(w, http.StatusOK, res)
}

// needFleet answers 503 when the server has no fleet (tests).
func (s *Server) needFleet(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.fleet == nil {
			writeError(w, "", &pipeline.Error{Status: http.StatusServiceUnavailable, Type: pipeline.TypeServer,
				Message: "this server cannot load or unload models"})
			return
		}
		h(w, r)
	}
}
