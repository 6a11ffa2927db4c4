package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
)

// EmbeddingRequest is the body of POST /v1/embeddings (OpenAI's shape).
// Input is a string, an array of strings, an array of token ids or an
// array of arrays of token ids.
type EmbeddingRequest struct {
	Model string          `json:"model"`
	Input json.RawMessage `json:"input"`
	// EncodingFormat is "float" (the default) or "base64": each vector as
	// the base64 of its little-endian float32 values.
	EncodingFormat string `json:"encoding_format,omitempty"`
	// Dimensions asks for shortened embeddings (Matryoshka models only).
	Dimensions *int   `json:"dimensions,omitempty"`
	User       string `json:"user,omitempty"`
	// Truncate, an llmd extension (Ollama's truncate), cuts an input
	// longer than the model's context to fit instead of refusing it.
	Truncate *bool `json:"truncate,omitempty"`
}

// EmbeddingResponse is the answer of POST /v1/embeddings.
type EmbeddingResponse struct {
	Object string          `json:"object"` // "list"
	Data   []Embedding     `json:"data"`
	Model  string          `json:"model"`
	Usage  EmbeddingsUsage `json:"usage"`
}

// Embedding is one input's embedding: Embedding is a JSON array of
// numbers, or a base64 string with encoding_format "base64" (Floats reads
// either).
type Embedding struct {
	Object    string          `json:"object"` // "embedding"
	Index     int             `json:"index"`
	Embedding json.RawMessage `json:"embedding"`
}

// EmbeddingsUsage counts an embeddings request's tokens: all input.
type EmbeddingsUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// Floats decodes e's vector from either encoding.
func (e Embedding) Floats() ([]float32, error) {
	var v []float32
	if err := json.Unmarshal(e.Embedding, &v); err == nil {
		return v, nil
	}
	var s string
	if err := json.Unmarshal(e.Embedding, &s); err != nil {
		return nil, errors.New("api: embedding is neither an array of numbers nor a base64 string")
	}
	return DecodeBase64Floats(s)
}

// EncodeBase64Floats is OpenAI's base64 encoding of a vector: its
// little-endian float32 bytes in standard base64.
func EncodeBase64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// DecodeBase64Floats reverses EncodeBase64Floats.
func DecodeBase64Floats(s string) ([]float32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("api: embedding: %w", err)
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("api: embedding of %d bytes is not float32 values", len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// Embeddings sends POST /v1/embeddings.
func (c *Client) Embeddings(ctx context.Context, req EmbeddingRequest) (*EmbeddingResponse, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/embeddings", req, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out EmbeddingResponse
	if err := decodeJSON(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// OllamaEmbedRequest is the body of Ollama's POST /api/embed: Input is a
// string or an array of strings. Truncate (default true) cuts inputs
// longer than the context instead of refusing them; Dimensions shortens
// the embeddings (Matryoshka models only).
type OllamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Truncate   *bool           `json:"truncate,omitempty"`
	Dimensions int             `json:"dimensions,omitempty"`
	KeepAlive  json.RawMessage `json:"keep_alive,omitempty"`
	Options    map[string]any  `json:"options,omitempty"`
}

// OllamaEmbedResponse is the answer of /api/embed; durations are
// nanoseconds.
type OllamaEmbedResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	TotalDuration   int64       `json:"total_duration"`
	LoadDuration    int64       `json:"load_duration"`
	PromptEvalCount int         `json:"prompt_eval_count"`
}

// OllamaEmbeddingRequest is the body of Ollama's legacy POST
// /api/embeddings: one Prompt.
type OllamaEmbeddingRequest struct {
	Model     string          `json:"model"`
	Prompt    string          `json:"prompt"`
	KeepAlive json.RawMessage `json:"keep_alive,omitempty"`
	Options   map[string]any  `json:"options,omitempty"`
}

// OllamaEmbeddingResponse is the answer of /api/embeddings.
type OllamaEmbeddingResponse struct {
	Embedding []float64 `json:"embedding"`
}
