package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
)

// Embed implements pipeline.EmbedTarget: the inputs of er, sent to the
// peer's /v1/embeddings for model job.ModelID (with llmd's truncate
// extension and the dimensions asked for), and the vectors and input
// tokens of its answer. The peer does not bill it (the request is signed
// as forwarded); this node does, with the peer's count.
func (t *target) Embed(ctx context.Context, job *pipeline.Job, er *pipeline.EmbedRequest) ([][]float32, int, error) {
	var input any = er.Texts
	if len(er.Tokens) > 0 {
		input = er.Tokens
	}
	in, err := json.Marshal(input)
	if err != nil {
		return nil, 0, err
	}
	truncate := er.Truncate
	body, err := json.Marshal(api.EmbeddingRequest{Model: job.ModelID, Input: in, Dimensions: er.Dimensions, Truncate: &truncate})
	if err != nil {
		return nil, 0, err
	}
	hdr := http.Header{"Content-Type": []string{"application/json"}}
	resp, release, err := t.f.do(ctx, t.c.Member.APIAddr, http.MethodPost, "/v1/embeddings", hdr, body, job)
	if err != nil {
		return nil, 0, err
	}
	defer release()
	switch st := resp.StatusCode; {
	case st >= 500 || st == http.StatusTooManyRequests || st == http.StatusForbidden:
		return nil, 0, fmt.Errorf("peer answered %s", resp.Status)
	case st != http.StatusOK:
		return nil, 0, refusal(resp)
	}
	var out api.EmbeddingResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSON)).Decode(&out); err != nil {
		return nil, 0, fmt.Errorf("peer %s: embeddings answer: %w", t.c.Member.ID, err)
	}
	n := len(er.Texts) + len(er.Tokens)
	if len(out.Data) != n {
		return nil, 0, fmt.Errorf("peer %s: %d embeddings for %d inputs", t.c.Member.ID, len(out.Data), n)
	}
	vecs := make([][]float32, n)
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= n || vecs[d.Index] != nil {
			return nil, 0, fmt.Errorf("peer %s: embeddings answer: bad index %d", t.c.Member.ID, d.Index)
		}
		if vecs[d.Index], err = d.Floats(); err != nil {
			return nil, 0, fmt.Errorf("peer %s: embeddings answer: %w", t.c.Member.ID, err)
		}
	}
	return vecs, out.Usage.PromptTokens, nil
}
