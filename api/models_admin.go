package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// ModelLoadRequest is the body of POST /v1/admin/models: load a model
// while llmd runs.
type ModelLoadRequest struct {
	// Source is what to load: a GGUF file path (on the llmd host),
	// "ollama:NAME[:TAG]", or "sim:PROFILE" for a simulated model.
	Source string `json:"source"`
	// ID is the id to serve it under; default the file's name, the Ollama
	// name, or the profile's "sim/" id. A simulated model's id must start
	// with "sim/".
	ID string `json:"id,omitempty"`
	// KVCacheBytes and Threads size a GGUF model's CPU executor (0: llmd's
	// --kv-cache and --cpu-threads).
	KVCacheBytes int64 `json:"kv_cache_bytes,omitempty"`
	Threads      int   `json:"threads,omitempty"`
	// KVCacheType is what a GGUF model's KV cache stores keys and values
	// as: f16, f32, q8_0 or q4_0 ("": llmd's --kv-cache-type).
	KVCacheType string `json:"kv_cache_type,omitempty"`
	// GPU and TP place a simulated model ("" and 0: llmd's --gpu and
	// --tp).
	GPU string `json:"gpu,omitempty"`
	TP  int    `json:"tp,omitempty"`
	// KeepAlive unloads the model once idle this long ("5m"; "" keeps it
	// loaded).
	KeepAlive string `json:"keep_alive,omitempty"`
	// Stream asks for progress: newline-delimited ModelLoadProgress
	// objects, the last one with status "ready" or "error".
	Stream bool `json:"stream,omitempty"`
}

// Statuses of a model load's progress.
const (
	LoadChecking = "checking" // resolving the source, accounting its memory
	LoadReading  = "reading"  // reading the file: Completed of Total bytes
	LoadBuilding = "building" // building the executor and engine
	LoadReady    = "ready"
	LoadError    = "error"
)

// ModelLoadProgress is one line of a streamed load.
type ModelLoadProgress struct {
	Status string `json:"status"`
	Model  string `json:"model,omitempty"`
	// Completed and Total count bytes while reading.
	Completed int64 `json:"completed,omitempty"`
	Total     int64 `json:"total,omitempty"`
	// State is the loaded model (status "ready").
	State *ModelState `json:"state,omitempty"`
	// Error says why the load failed (status "error"), and HTTPStatus is
	// the status a load without progress would have answered.
	Error      *ErrorDetail `json:"error,omitempty"`
	HTTPStatus int          `json:"http_status,omitempty"`
}

// ModelState is a served model as the admin API reports it.
type ModelState struct {
	ID       string `json:"id"`
	Source   string `json:"source,omitempty"`
	Executor string `json:"executor"`
	// State is "ready", "draining" (being unloaded) or "loading".
	State string `json:"state"`
	// Memory is the host memory accounted to the model, in bytes.
	Memory int64 `json:"memory_bytes"`
	// Active counts its requests in progress.
	Active int64 `json:"active"`
	// KeepAlive is the idle time after which it is unloaded ("" never).
	KeepAlive string    `json:"keep_alive,omitempty"`
	LastUsed  time.Time `json:"last_used"`
	Created   int64     `json:"created"`
}

// ModelStateList is the response of GET /v1/admin/models.
type ModelStateList struct {
	Models []ModelState `json:"models"`
	// MemoryUsed is the memory accounted to the loaded models, and
	// MemoryBudget what they may use in all (0: no budget but the
	// host's available memory at each load).
	MemoryUsed   int64 `json:"memory_used_bytes"`
	MemoryBudget int64 `json:"memory_budget_bytes"`
}

// ModelUnloadResult is the response of DELETE /v1/admin/models/{id}.
type ModelUnloadResult struct {
	ID string `json:"id"`
	// Finished counts the requests that finished while the model drained,
	// Cancelled those still running at the drain timeout.
	Finished  int64 `json:"finished"`
	Cancelled int64 `json:"cancelled"`
	// DrainMs is how long the drain took; FreedBytes the memory freed.
	DrainMs    int64 `json:"drain_ms"`
	FreedBytes int64 `json:"freed_bytes"`
}

// LoadModel loads a model (POST /v1/admin/models). With progress non-nil
// it asks for a streamed load and calls progress with each line; either
// way it returns the loaded model's state, or the load's error as a
// *StatusError.
func (c *Client) LoadModel(ctx context.Context, req ModelLoadRequest, progress func(ModelLoadProgress)) (*ModelState, error) {
	req.Stream = progress != nil
	resp, err := c.do(ctx, http.MethodPost, "/v1/admin/models", req, "application/x-ndjson, application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !req.Stream {
		var st ModelState
		if err := decodeJSON(resp, &st); err != nil {
			return nil, err
		}
		return &st, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var p ModelLoadProgress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("api: load progress line %q: %w", sc.Text(), err)
		}
		progress(p)
		switch p.Status {
		case LoadReady:
			if p.State == nil {
				return nil, fmt.Errorf("api: load of %s ended ready without a state", p.Model)
			}
			return p.State, nil
		case LoadError:
			se := &StatusError{StatusCode: http.StatusInternalServerError, Message: "the load failed"}
			if p.HTTPStatus != 0 {
				se.StatusCode = p.HTTPStatus
			}
			if d := p.Error; d != nil {
				se.Message, se.Type = d.Message, d.Type
				if d.Code != nil {
					se.Code = *d.Code
				}
			}
			return nil, se
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api: read load progress: %w", err)
	}
	return nil, fmt.Errorf("api: the load's progress ended before it was ready")
}

// UnloadModel drains and unloads a model (DELETE /v1/admin/models/{id}):
// it takes no new requests, its running ones finish within timeout (0:
// llmd's default), then its memory is freed.
func (c *Client) UnloadModel(ctx context.Context, id string, timeout time.Duration) (*ModelUnloadResult, error) {
	p, err := adminPath("/v1/admin/models", "model id", id)
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		p += "?timeout=" + url.QueryEscape(timeout.String())
	}
	var res ModelUnloadResult
	if err := c.doJSON(ctx, http.MethodDelete, p, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// LoadedModels lists the served models with their state and memory (GET
// /v1/admin/models).
func (c *Client) LoadedModels(ctx context.Context) (*ModelStateList, error) {
	var l ModelStateList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/models", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
