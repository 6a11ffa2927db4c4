package probe

import (
	"context"
	"fmt"
	"net/http"
)

// Health reports whether the engine at base, of kind k, is ready to
// serve: nil when it is.
//
// It asks GET /health for vLLM, SGLang, llama.cpp and TGI (llama.cpp
// answers 503 "Loading model" until its model is loaded; vLLM 503 once its
// engine died), GET /readyz for llmd (503 while starting or draining;
// /healthz, liveness only, where /readyz is missing), GET /api/version for
// Ollama, and GET /health for other kinds. A route that answers 404 falls
// back to GET /v1/models, which every kind serves.
//
// Any other status is a [*StatusError] carrying the engine's message, so
// callers can tell "still loading" (503) from "refused" (401); a transport
// failure is the client's error, which names the URL. Each request is
// bounded by ctx and by its own timeout.
func Health(ctx context.Context, hc *http.Client, base string, k Kind) error {
	c, err := newClient(hc, base)
	if err != nil {
		return err
	}
	var paths []string
	switch k {
	case KindLLMD:
		paths = []string{"/readyz", "/healthz"}
	case KindOllama:
		paths = []string{"/api/version"}
	default:
		paths = []string{"/health"}
	}
	paths = append(paths, "/v1/models")
	for _, path := range paths {
		_, err = c.get(ctx, path, acceptJSON, maxJSONBytes)
		if err == nil {
			return nil
		}
		if !isStatus(err, http.StatusNotFound) {
			break
		}
	}
	return fmt.Errorf("check health: %w", err)
}
