package peer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/llmd/llmd/pipeline"
)

// Usage is a forwarded request's outcome, sent by the serving node in the
// Llmd-Usage trailer.
type Usage struct {
	InputTokens  int    `json:"input_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	OutputTokens int    `json:"output_tokens"`
	Finish       string `json:"finish"`
	QueueUS      int64  `json:"queue_us"`
	TTFTUS       int64  `json:"ttft_us"`
	ITLUS        int64  `json:"itl_us"`
	Error        string `json:"error,omitempty"`
}

// SetTrailer sets the Llmd-Usage trailer from a forwarded request's
// outcome. The handler must have declared the trailer ("Trailer:
// Llmd-Usage") before the response started.
func SetTrailer(h http.Header, out pipeline.Outcome) {
	u := Usage{InputTokens: out.Usage.InputTokens, CachedTokens: out.Usage.CachedTokens,
		OutputTokens: out.Usage.OutputTokens, Finish: out.Finish, QueueUS: out.Queued.Microseconds(),
		TTFTUS: out.TTFT.Microseconds(), ITLUS: out.ITL.Microseconds()}
	if out.Err != nil {
		u.Error = out.Err.Error()
		if len(u.Error) > 200 {
			u.Error = u.Error[:200]
		}
	}
	b, _ := json.Marshal(u)
	h.Set(TrailerUsage, string(b))
}

// takeUsage reads a peer's Llmd-Usage trailer into res; false if there is
// none (the peer died, or is not llmd).
func takeUsage(resp *http.Response, res *pipeline.Result) bool {
	var u Usage
	if err := json.Unmarshal([]byte(resp.Trailer.Get(TrailerUsage)), &u); err != nil {
		return false
	}
	res.Usage = pipeline.Usage{InputTokens: max(u.InputTokens, 0), CachedTokens: max(u.CachedTokens, 0),
		OutputTokens: max(u.OutputTokens, 0)}
	res.Finish = u.Finish
	res.Queued = time.Duration(max(u.QueueUS, 0)) * time.Microsecond
	res.ITL = time.Duration(max(u.ITLUS, 0)) * time.Microsecond
	res.TTFT = time.Duration(max(u.TTFTUS, 0)) * time.Microsecond
	if u.Error != "" && res.Err == nil {
		res.Err = fmt.Errorf("peer: %s", u.Error)
	}
	return true
}
