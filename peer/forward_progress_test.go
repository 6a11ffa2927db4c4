package peer

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/pipeline"
)

// discardSink takes an answer and keeps nothing.
type discardSink struct{}

func (discardSink) Begin() error                                 { return nil }
func (discardSink) Text(int, string, []api.TokenLogprob) error   { return nil }
func (discardSink) ToolCall(int, api.ToolCallDelta) error        { return nil }
func (discardSink) Finish(int, string, []api.TokenLogprob) error { return nil }
func (discardSink) End(pipeline.Usage) error                     { return nil }
func (discardSink) Fail(error) int                               { return http.StatusOK }

// TestRelayReportsProgress: the entry node counts each text event it
// relays from a peer's stream as one output token for the usage row's
// checkpoints.
func TestRelayReportsProgress(t *testing.T) {
	t.Parallel()
	var body strings.Builder
	for i := range 5 {
		fmt.Fprintf(&body, "id: %d\ndata: {\"delta\":\"t%d\",\"index\":0}\n\n", i, i)
	}
	body.WriteString("id: 5\nevent: done\ndata: {\"finish_reason\":\"stop\"}\n\n")
	resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body.String())),
		Trailer: http.Header{TrailerUsage: {`{"input_tokens":3,"output_tokens":5,"finish":"stop"}`}}}
	r := &run{t: &target{f: NewForwarder(Config{Stall: time.Minute}), c: cluster.Candidate{Member: cluster.Member{ID: "b"}}},
		job: &pipeline.Job{ID: "r1", Stream: true, Endpoint: pipeline.EndpointChat}, resp: resp, release: func() {}}

	var saved []int
	res := r.Relay(t.Context(), discardSink{}, pipeline.NewProgress(0, func(n int) { saved = append(saved, n) }))
	require.NoError(t, res.Err)
	require.Equal(t, 5, res.Usage.OutputTokens)
	require.Equal(t, []int{1, 2, 3, 4, 5}, saved)
}
