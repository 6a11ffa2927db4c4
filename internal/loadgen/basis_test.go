package loadgen

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/workload"
)

// tokenServer streams text completions the way two kinds of servers report
// tokens. Its first token decodes to no text, and two tokens arrive in
// one chunk (a character split over them), so counting text chunks gets
// TTFT, ITL and the token count wrong.
//
//   - kind "llamacpp": GET /props answers; each chunk carries
//     timings.predicted_n when the request sent timings_per_token.
//   - kind "logprobs": each chunk carries legacy logprobs (one entry per
//     token) when the request asked for logprobs; /props is 404.
type tokenServer struct {
	*httptest.Server
	kind string

	mu     sync.Mutex
	bodies []map[string]any
}

func newTokenServer(t *testing.T, kind string) *tokenServer {
	s := &tokenServer{kind: kind}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Token script: gaps before each chunk, and the tokens and text each
// brings.
var tokenScript = []struct {
	wait   time.Duration
	tokens int
	text   string
}{
	{60 * time.Millisecond, 1, ""}, // a token with no text of its own
	{30 * time.Millisecond, 2, "é"},
	{30 * time.Millisecond, 1, " x"},
}

func (s *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/props" && s.kind == "llamacpp" {
		fmt.Fprint(w, `{"default_generation_settings":{"n_ctx":4096},"build_info":"b1"}`)
		return
	}
	if r.URL.Path != "/v1/completions" {
		http.NotFound(w, r)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	timings := body["timings_per_token"] == true
	_, logprobs := body["logprobs"]
	w.Header().Set("Content-Type", "text/event-stream")
	n := 0
	for _, c := range tokenScript {
		time.Sleep(c.wait)
		n += c.tokens
		chunk := map[string]any{"object": "text_completion", "choices": []any{map[string]any{"index": 0, "text": c.text}}}
		switch {
		case s.kind == "llamacpp" && timings:
			chunk["timings"] = map[string]any{"predicted_n": n}
		case s.kind == "logprobs" && logprobs:
			toks := make([]string, c.tokens)
			chunk["choices"].([]any)[0].(map[string]any)["logprobs"] = map[string]any{"tokens": toks, "token_logprobs": make([]float64, c.tokens)}
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		http.NewResponseController(w).Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *tokenServer) lastBody() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[len(s.bodies)-1]
}

func TestTokenBasis(t *testing.T) {
	t.Parallel()
	const total = 4 // tokens in tokenScript
	for _, kind := range []string{"llamacpp", "logprobs"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newTokenServer(t, kind)
			cfg := Config{BaseURL: s.URL, Model: "m", Endpoint: EndpointCompletions, PromptIDs: IDRange{1000, 2000}}
			want := map[string]string{"llamacpp": BasisTimings, "logprobs": BasisLogprobs}[kind]
			require.Equal(t, want, DetectBasis(t.Context(), cfg))

			cfg.Basis = want
			rep, _ := run(t, cfg, workload.Spec{Requests: 2, Concurrency: 1, Input: workload.Fixed(32), Output: workload.Fixed(total), Seed: 3})
			require.Equal(t, 2, rep.Completed)
			assert.Equal(t, want, rep.TokenBasis)
			assert.Equal(t, 2*total, rep.OutputTokens, "tokens, not text chunks")
			assert.Equal(t, 2*32, rep.InputTokens, "token-id prompts are exact")
			// The first token came after the first wait, though it had
			// no text; the gaps are one per token after it, the
			// character split over two tokens one gap of zero.
			assert.Less(t, rep.TTFT.P50, float64(60*time.Millisecond+25*time.Millisecond)/ms+300)
			assert.GreaterOrEqual(t, rep.TTFT.P50, float64(60*time.Millisecond)/ms)
			require.Equal(t, 2*(total-1), rep.ITL.N)
			var out strings.Builder
			require.NoError(t, rep.WriteText(&out))
			assert.Contains(t, out.String(), "tokens timed by")

			// The prompt is the workload's token ids, in range.
			body := s.lastBody()
			ids, ok := body["prompt"].([]any)
			require.True(t, ok, "prompt is an array of ids: %v", body["prompt"])
			require.Len(t, ids, 32)
			for _, id := range ids {
				v := id.(float64)
				assert.True(t, v >= 1000 && v < 2000, "id %v outside [1000, 2000)", v)
			}
		})
	}

	t.Run("chunks when nothing is reported", func(t *testing.T) {
		t.Parallel()
		s := newTokenServer(t, "logprobs")
		cfg := Config{BaseURL: s.URL, Model: "m", Endpoint: EndpointCompletions}
		rep, _ := run(t, cfg, workload.Spec{Requests: 1, Concurrency: 1, Input: workload.Fixed(8), Output: workload.Fixed(total), Seed: 3})
		assert.Equal(t, BasisChunks, rep.TokenBasis)
		// Counting text chunks sees two tokens where four came, and the
		// first only after the second wait.
		assert.Equal(t, 2, rep.OutputTokens)
		assert.GreaterOrEqual(t, rep.TTFT.P50, float64(90*time.Millisecond)/ms)
		_, isString := s.lastBody()["prompt"].(string)
		assert.True(t, isString, "text prompt without PromptIDs")
	})
}

func TestTokenBasisGaps(t *testing.T) {
	t.Parallel()
	s := newTokenServer(t, "llamacpp")
	cfg := Config{BaseURL: s.URL, Model: "m", Endpoint: EndpointCompletions, Basis: BasisTimings}
	r, err := New(cfg, workload.Spec{Requests: 1, Concurrency: 1, Input: workload.Fixed(8), Output: workload.Fixed(4), Seed: 3})
	require.NoError(t, err)
	_, err = r.Run(t.Context())
	require.NoError(t, err)
	res := r.Results()
	require.Len(t, res, 1)
	gaps := res[0].ITL
	require.Len(t, gaps, 3)
	// The server sleeps 30 ms between chunks; the client's arrival gaps
	// jitter with scheduling on a busy machine (CI saw 29.9 ms), so the
	// bound is half of that: far from the zero of a token sharing a chunk.
	assert.GreaterOrEqual(t, gaps[0], 15*time.Millisecond, "the gap before the two-token chunk")
	assert.Zero(t, gaps[1], "the second token of that chunk came with it")
	assert.GreaterOrEqual(t, gaps[2], 15*time.Millisecond)
}

func TestConfigEndpointErrors(t *testing.T) {
	t.Parallel()
	s := spec(1, 1)
	for name, cfg := range map[string]Config{
		"bad endpoint":      {Endpoint: "embeddings"},
		"bad basis":         {Basis: "bytes"},
		"ids on chat":       {PromptIDs: IDRange{1, 10}},
		"empty id range":    {Endpoint: EndpointCompletions, PromptIDs: IDRange{10, 1}},
		"negative id range": {Endpoint: EndpointCompletions, PromptIDs: IDRange{-5, 10}},
	} {
		cfg.BaseURL, cfg.Model = "http://127.0.0.1:1", "m"
		_, err := New(cfg, s)
		assert.Error(t, err, name)
	}
	_, err := New(Config{BaseURL: "http://127.0.0.1:1", Model: "m", Endpoint: EndpointCompletions, PromptIDs: IDRange{1, 10}},
		workload.Spec{Requests: 1, Concurrency: 1, Input: workload.Fixed(8), Output: workload.Fixed(4), Turns: workload.Fixed(2)})
	assert.Error(t, err, "token-id prompts are single turns")
}
