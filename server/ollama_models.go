package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// ollamaName is the name an Ollama client sees for model id: the id,
// tagged ":latest" when it has no tag (ollamaModelID maps it back).
func ollamaName(id string) string {
	base := id[strings.LastIndex(id, "/")+1:]
	if strings.Contains(base, ":") {
		return id
	}
	return id + ":latest"
}

// ollamaDigest stands for the digest of Ollama's manifest: a hash of the
// model's id and source (llmd keeps no manifests), stable while both are.
func ollamaDigest(id, source string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + source))
	return hex.EncodeToString(sum[:])
}

// parameterSize writes a parameter count as Ollama does: "3.2B", "135M".
func parameterSize(n int64) string {
	switch {
	case n <= 0:
		return ""
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + "B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 0, 64) + "M"
	}
	return strconv.FormatFloat(float64(n)/1e3, 'f', 0, 64) + "K"
}

func ollamaDetails(m *pipeline.Model) api.OllamaModelDetails {
	d := api.OllamaModelDetails{Format: "gguf", Family: m.Arch, ParameterSize: parameterSize(m.Params),
		QuantizationLevel: m.Quantization}
	switch {
	case m.Executor == pipeline.ExecutorSimulated:
		d.Format = "simulated"
	case m.Target != nil:
		d.Format = m.Executor // an upstream engine's
	}
	if m.Arch != "" {
		d.Families = []string{m.Arch}
	}
	return d
}

func ollamaListed(m *pipeline.Model) api.OllamaModel {
	name := ollamaName(m.ID)
	return api.OllamaModel{Name: name, Model: name, ModifiedAt: time.Unix(m.Created, 0).UTC(), Size: m.Memory,
		Digest: ollamaDigest(m.ID, m.Source), Details: ollamaDetails(m)}
}

// handleOllamaTags serves GET /api/tags: the models this node serves, and
// those it loads on request (the models config's names, and the models a
// keep_alive of 0 unloaded).
func (s *Server) handleOllamaTags(w http.ResponseWriter, _ *http.Request) {
	out := api.OllamaModelList{Models: []api.OllamaModel{}}
	seen := map[string]bool{}
	for _, m := range s.models.List() {
		seen[m.ID] = true
		out.Models = append(out.Models, ollamaListed(m))
	}
	var more []string
	if cat := s.pipe.Catalog(); cat != nil {
		more = cat.Names()
	}
	s.ollama.mu.Lock()
	sources := maps.Clone(s.ollama.unloaded)
	s.ollama.mu.Unlock()
	more = slices.AppendSeq(more, maps.Keys(sources))
	slices.Sort(more)
	for _, id := range slices.Compact(more) {
		if seen[id] {
			continue
		}
		name := ollamaName(id)
		out.Models = append(out.Models, api.OllamaModel{Name: name, Model: name, ModifiedAt: s.started.UTC(),
			Digest: ollamaDigest(id, sources[id]), Details: api.OllamaModelDetails{Families: []string{}}})
	}
	writeJSON(w, http.StatusOK, out)
}

// forever is the expiry /api/ps shows for a model without keep_alive, as
// Ollama does for a negative keep_alive.
var forever = time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC)

// handleOllamaPS serves GET /api/ps: the loaded models, with when their
// keep_alive unloads them.
func (s *Server) handleOllamaPS(w http.ResponseWriter, _ *http.Request) {
	keep := map[string]time.Duration{}
	if s.fleet != nil {
		for _, st := range s.fleet.States().Models {
			if d, err := time.ParseDuration(st.KeepAlive); err == nil {
				keep[st.ID] = d
			}
		}
	}
	out := api.OllamaModelList{Models: []api.OllamaModel{}}
	for _, m := range s.models.List() {
		if m.Draining() {
			continue
		}
		om := ollamaListed(m)
		exp := forever
		if d, ok := keep[m.ID]; ok && d > 0 {
			exp = m.LastUsed().Add(d).UTC()
			if m.LastUsed().IsZero() {
				exp = time.Now().Add(d).UTC()
			}
		}
		var vram int64
		if m.Sim != nil {
			vram = m.Sim.Memory
		}
		om.ExpiresAt, om.SizeVRAM, om.ContextLength = &exp, &vram, m.Limit
		out.Models = append(out.Models, om)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleOllamaShow serves POST /api/show: a model's details, chat
// template (the GGUF's Jinja source, not a Go template), parameters and
// metadata (model_info).
func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req api.OllamaShowRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	asked := req.Model
	if asked == "" {
		asked = req.Name
	}
	if asked == "" {
		writeError(w, "", pipeline.InvalidParam("model", "model is required"))
		return
	}
	id := s.ollamaModelID(asked)
	m := s.models.Get(id)
	if m == nil {
		if !s.known(id) {
			var others []string
			if cat := s.pipe.Catalog(); cat != nil {
				others = cat.Names()
			}
			writeError(w, "", s.models.NotFound(id, others))
			return
		}
		// Known, not loaded: what can be said without loading it.
		writeJSON(w, http.StatusOK, api.OllamaShowResponse{Modelfile: "# served by llmd; loaded on its first request\n",
			Details: api.OllamaModelDetails{Families: []string{}}, ModelInfo: map[string]any{},
			Capabilities: []string{"completion", "tools"}, ModifiedAt: s.started.UTC()})
		return
	}
	info := m.Metadata
	if len(info) == 0 {
		info = map[string]any{"general.architecture": m.Arch, "general.parameter_count": m.Params}
		if m.Arch != "" {
			info[m.Arch+".context_length"] = m.Limit
		}
	}
	var params strings.Builder
	fmt.Fprintf(&params, "num_ctx %d\n", m.Limit)
	eos := make([]int32, 0, len(m.EOS))
	for t := range m.EOS {
		eos = append(eos, t)
	}
	slices.Sort(eos)
	for _, t := range eos {
		if txt := m.Text.TokenText(t); txt != "" {
			fmt.Fprintf(&params, "stop %s\n", strconv.Quote(txt))
		}
	}
	writeJSON(w, http.StatusOK, api.OllamaShowResponse{
		Modelfile:    fmt.Sprintf("# served by llmd\nFROM %s\n", m.Source),
		Parameters:   strings.TrimRight(params.String(), "\n"),
		Template:     m.Template,
		Details:      ollamaDetails(m),
		ModelInfo:    info,
		Capabilities: ollamaCapabilities(m),
		ModifiedAt:   time.Unix(m.Created, 0).UTC(),
	})
}

// ollamaAPIVersion is the Ollama API version llmd speaks: clients that
// check the server's version for a feature find the ones it serves.
const ollamaAPIVersion = "0.12.0"

func (s *Server) handleOllamaVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.OllamaVersion{Version: ollamaAPIVersion})
}

// ollamaCapabilities are what a model does, as /api/show lists them: an
// embedding model only "embedding".
func ollamaCapabilities(m *pipeline.Model) []string {
	if m.Embed != nil {
		return []string{"embedding"}
	}
	return []string{"completion", "tools"}
}
