package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/pipeline"
)

// MaxKVTransfer bounds a KV transfer a decode node reads from a prefill
// node (a 32k-token prompt of a 7B model in F16 KV is about 4 GiB: such a
// prompt is recomputed rather than moved).
const MaxKVTransfer = 2 << 30

// KVContentType is the media type of a KV transfer (engine's format).
const KVContentType = "application/vnd.llmd.kv"

// PullKV asks prefill node m to prefill req's prompt and returns the KV
// transfer it answers, signed for job's principal like a forwarded
// request. It implements pipeline.KVPuller. The prefill node accepts the
// request at once (an informational 103), so ForwardTimeout bounds only
// reaching it; ctx bounds the prefill and the transfer.
func (f *Forwarder) PullKV(ctx context.Context, m cluster.Member, job *pipeline.Job, req pipeline.KVPrefillRequest) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {KVContentType}}
	resp, release, err := f.do(ctx, m.APIAddr, http.MethodPost, pipeline.KVPrefillPath, hdr, body, job)
	if err != nil {
		return nil, fmt.Errorf("peer %s: KV prefill: %w", m.ID, err)
	}
	defer release()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("peer %s: KV prefill answered %s: %s", m.ID, resp.Status, msg)
	}
	if ct := resp.Header.Get("Content-Type"); ct != KVContentType {
		return nil, fmt.Errorf("peer %s: KV prefill answered %q, want %s", m.ID, ct, KVContentType)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxKVTransfer+1))
	if err != nil {
		return nil, fmt.Errorf("peer %s: reading the KV transfer: %w", m.ID, err)
	}
	if len(data) > MaxKVTransfer {
		return nil, fmt.Errorf("peer %s: KV transfer over %d bytes", m.ID, MaxKVTransfer)
	}
	return data, nil
}
