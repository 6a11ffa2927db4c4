package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
)

// The tests in this file run the real engine over the simulated executor,
// behind a server on a loopback port.

// startSim starts a server for sim/small on a virtual clock (steps take no
// wall time) unless edit says otherwise. Each test ends by checking the
// idle invariant: no block used, nothing running or waiting.
func startSim(t *testing.T, edit func(*Config)) (*Daemon, string) {
	t.Helper()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.Clock = engine.NewVirtualClock(time.Unix(1_700_000_000, 0))
	cfg.MaxBodyBytes = 512 << 10
	if edit != nil {
		edit(&cfg)
	}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	t.Cleanup(func() { requireIdle(t, s) }) // runs before the server stops
	return s, base
}

// requireIdle waits for every engine of s to be idle: the invariant every
// test ends with.
func requireIdle(t *testing.T, s *Daemon) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, st := range s.Stats() {
			if st.BlocksUsed != 0 || st.Running != 0 || st.Waiting != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 2*time.Millisecond, "engines not idle: %+v", s.Stats())
}

func sdkClient(t *testing.T, base string) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(base+"/v1"),
		option.WithAPIKey("unused"),
		option.WithHTTPClient(testClient(t)),
		option.WithMaxRetries(0),
	)
}

func TestSDKStreamingUsage(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := sdkClient(t, base)
	params := openai.ChatCompletionNewParams{
		Model: "sim/small",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage("Tell me about paged attention."),
		},
		MaxTokens:     openai.Int(40),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	var usageChunks, chunks int
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		require.True(t, acc.AddChunk(chunk))
		if len(chunk.Choices) == 0 {
			usageChunks++
			require.Positive(t, chunk.Usage.TotalTokens)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, 1, usageChunks, "exactly one usage chunk")

	require.Len(t, acc.Choices, 1)
	content := acc.Choices[0].Message.Content
	require.NotEmpty(t, content)
	require.Contains(t, []string{"stop", "length"}, acc.Choices[0].FinishReason)
	u := acc.Usage
	require.Positive(t, u.PromptTokens)
	require.Positive(t, u.CompletionTokens)
	require.LessOrEqual(t, u.CompletionTokens, int64(40))
	require.Equal(t, u.PromptTokens+u.CompletionTokens, u.TotalTokens)
	require.Equal(t, "sim/small", acc.Model)
	require.True(t, strings.HasPrefix(acc.ID, "chatcmpl-"))

	// The same request unstreamed gives the same answer: the seed comes
	// from the prompt and the simulated tokens from the seed.
	resp, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, content, resp.Choices[0].Message.Content)
	assert.Equal(t, acc.Choices[0].FinishReason, resp.Choices[0].FinishReason)
	assert.Equal(t, u.PromptTokens, resp.Usage.PromptTokens)
	assert.Equal(t, u.CompletionTokens, resp.Usage.CompletionTokens)
	assert.Equal(t, "chat.completion", string(resp.Object))
	// The second request's prompt was served from the prefix cache.
	assert.Positive(t, resp.Usage.PromptTokensDetails.CachedTokens)
}

func TestSDKErrors(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	client := sdkClient(t, base)
	_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "gpt-nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.Equal(t, pipeline.CodeModelNotFound, apiErr.Code)

	_, err = client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:     "sim/small",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(40000),
	})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, pipeline.CodeContextLength, apiErr.Code)
	require.Equal(t, "messages", apiErr.Param)

	models, err := client.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, models.Data, 1)
	require.Equal(t, "sim/small", models.Data[0].ID)
}

func TestSimStreamFraming(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, nil)
	c := testClient(t)

	t.Run("openai", func(t *testing.T) {
		resp, body := post(t, c, base+"/v1/chat/completions", `{"model":"sim/small","stream":true,"n":2,"max_tokens":20,
			"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello there"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		evs := parseSSE(t, body)
		for _, e := range evs {
			require.Len(t, e.lines, 1)
			require.True(t, strings.HasPrefix(e.lines[0], "data: "), "no id or event lines: %q", e.lines[0])
		}
		require.Equal(t, "[DONE]", evs[len(evs)-1].data)
		usage := jsonMap(t, evs[len(evs)-2].data)
		require.Empty(t, usage["choices"])
		u := usage["usage"].(map[string]any)
		require.Contains(t, u, "prompt_tokens_details")

		roles, finishes := map[float64]int{}, map[float64]int{}
		tokens := 0
		for i, e := range evs[:len(evs)-2] {
			m := jsonMap(t, e.data)
			require.Nil(t, m["usage"])
			ch := m["choices"].([]any)[0].(map[string]any)
			idx := ch["index"].(float64)
			delta := ch["delta"].(map[string]any)
			switch {
			case delta["role"] == "assistant":
				require.Less(t, i, 2, "role chunks come first")
				require.Zero(t, finishes[idx])
				roles[idx]++
			case ch["finish_reason"] != nil:
				require.Empty(t, delta)
				finishes[idx]++
			default:
				require.Equal(t, 1, roles[idx], "role chunk before content")
				require.Zero(t, finishes[idx], "no content after the finish chunk")
				require.NotEmpty(t, delta["content"])
				tokens++
			}
		}
		require.Equal(t, map[float64]int{0: 1, 1: 1}, roles)
		require.Equal(t, map[float64]int{0: 1, 1: 1}, finishes)
		require.Equal(t, float64(tokens), u["completion_tokens"], "one content chunk per sim token")
	})

	t.Run("native", func(t *testing.T) {
		resp, body := post(t, c, base+"/v1/chat", `{"model":"sim/small","max_tokens":20,
			"messages":[{"role":"user","content":"Hello there"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		evs := parseSSE(t, body)
		last := evs[len(evs)-1]
		require.Equal(t, "done", last.event)
		done := jsonMap(t, last.data)
		require.Equal(t, resp.Header.Get("X-Request-Id"), done["id"])
		u := done["usage"].(map[string]any)
		require.Equal(t, float64(len(evs)-1), u["output_tokens"])
		require.Positive(t, u["input_tokens"])
		require.Contains(t, u, "cached_tokens")
		for i, e := range evs[:len(evs)-1] {
			require.Equal(t, fmt.Sprint(i), e.id)
			require.Empty(t, e.event)
			d := jsonMap(t, e.data)
			require.Equal(t, 0.0, d["index"])
			require.NotEmpty(t, d["delta"])
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, body := post(t, c, base+"/v1/completions", `{"model":"sim/small","prompt":"Once upon a time"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		m := jsonMap(t, string(body))
		require.Equal(t, "text_completion", m["object"])
		require.LessOrEqual(t, m["usage"].(map[string]any)["completion_tokens"], 16.0)
	})
	_ = s
}

func TestSimStopString(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)
	const req = `{"model":"sim/small","stream":false,"max_tokens":60,"messages":[{"role":"user","content":"Write a story"}]%s}`
	resp, body := post(t, c, base+"/v1/chat", fmt.Sprintf(req, ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	full := jsonMap(t, string(body))["text"].(string)
	words := strings.Fields(full)
	require.Greater(t, len(words), 8, full)
	stop := " " + words[6]
	want := full[:strings.Index(full, stop)]

	resp, body = post(t, c, base+"/v1/chat", fmt.Sprintf(req, fmt.Sprintf(`,"stop":[%q]`, stop)))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	m := jsonMap(t, string(body))
	require.Equal(t, want, m["text"])
	require.Equal(t, "stop", m["finish_reason"])
}

// longSeed returns a seed whose simulated answer is longer than n tokens.
func longSeed(t *testing.T, n int) int64 {
	exec, err := sim.New(sim.DefaultConfig(), engine.NewVirtualClock(time.Time{}))
	require.NoError(t, err)
	for seed := int64(1); seed < 10_000; seed++ {
		if l, ok := exec.NaturalLength(uint64(seed)); !ok || l > n {
			return seed
		}
	}
	t.Fatal("no long seed")
	return 0
}

func TestSimDisconnectFreesBlocks(t *testing.T) {
	t.Parallel()
	// Real time, so that the stream is still generating when the client
	// leaves: sim/small takes a few milliseconds per step on an H100.
	s, base := startSim(t, func(c *Config) { c.Clock = nil })
	c := testClient(t)
	seed := longSeed(t, 400)
	for _, path := range []string{"/v1/chat/completions", "/v1/chat"} {
		t.Run(path, func(t *testing.T) {
			before := s.Stats()[0]
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(fmt.Sprintf(
				`{"model":"sim/small","stream":true,"seed":%d,"max_tokens":2000,"messages":[{"role":"user","content":"Go on"}]}`, seed)))
			require.NoError(t, err)
			resp, err := c.Do(req)
			require.NoError(t, err)
			sc := bufio.NewScanner(resp.Body)
			for n := 0; n < 6 && sc.Scan(); {
				if strings.HasPrefix(sc.Text(), "data: ") {
					n++
				}
			}
			st := s.Stats()[0]
			require.Equal(t, 1, st.Running, "still generating")
			require.Positive(t, st.BlocksUsed)
			cancel()
			resp.Body.Close()
			if path == "/v1/chat" {
				// A native stream is resumable: it outlives its connection
				// until cancelled.
				time.Sleep(20 * time.Millisecond)
				require.Equal(t, 1, s.Stats()[0].Running, "a resumable stream goes on without its client")
				del, _ := call(t, c, http.MethodDelete, base+"/v1/requests/"+resp.Header.Get("X-Request-Id"), "", "")
				require.Equal(t, http.StatusOK, del.StatusCode)
			}

			// Freed at the engine's next step; a step takes milliseconds.
			start := time.Now()
			require.Eventually(t, func() bool {
				st := s.Stats()[0]
				return st.Running == 0 && st.BlocksUsed == 0 && st.Completed == before.Completed+1
			}, 5*time.Second, time.Millisecond)
			t.Logf("freed %v after the disconnect", time.Since(start))
			generated := s.Stats()[0].GeneratedTokens
			time.Sleep(50 * time.Millisecond)
			require.Equal(t, generated, s.Stats()[0].GeneratedTokens, "no tokens after the cancel")
			require.Less(t, generated-before.GeneratedTokens, uint64(1000), "stopped long before the end")
		})
	}
}

func TestSimBadRequests(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, nil)
	c := testClient(t)
	long := strings.Repeat("hello ", 33_000)
	for _, tc := range badRequests("sim/small", 32768, s.cfg.MaxBodyBytes, long) {
		t.Run(tc.name, func(t *testing.T) {
			checkBadRequest(t, c, base, tc)
		})
	}
	st := s.Stats()[0]
	require.Zero(t, st.Steps, "no bad request reached the engine")
	require.Zero(t, st.Completed)

	// OpenAI's bookkeeping fields are accepted and ignored (the README
	// lists them); any other unknown field is refused (badRequests).
	resp, body := post(t, c, base+"/v1/chat/completions", `{"model":"sim/small","max_tokens":5,"store":true,"metadata":{"x":"1"},
		"messages":[{"role":"developer","content":"hi"},{"role":"user","content":"hello"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	// The engine counts the request once its step loop has taken the
	// finish in, which may be just after the answer went out.
	require.Eventually(t, func() bool { return s.Stats()[0].Completed == 1 }, 5*time.Second, time.Millisecond)
}

func TestSimContextLimitIsThePool(t *testing.T) {
	t.Parallel()
	// sim/flagship on one H100 has KV room for fewer tokens than its
	// context length: that smaller limit is the one enforced (and reported).
	s, base := startSim(t, func(c *Config) { c.Models = []string{"flagship"} })
	limit := s.models.List()[0].Limit
	require.Less(t, limit, 32768)
	c := testClient(t)
	resp, body := post(t, c, base+"/v1/chat/completions", fmt.Sprintf(
		`{"model":"sim/flagship","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, limit))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	e := errorOf(t, body)
	require.Equal(t, pipeline.CodeContextLength, e["code"])
	require.Contains(t, e["message"], fmt.Sprintf("maximum context length is %d tokens", limit))

	resp, body = get(t, c, base+"/v1/models/sim/flagship")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, float64(limit), jsonMap(t, string(body))["max_model_len"])
}

func TestSimHeartbeat(t *testing.T) {
	t.Parallel()
	// Steps 20x slower than an H100 (about 100 ms each), pings every 10 ms.
	_, base := startSim(t, func(c *Config) {
		c.Clock = nil
		c.StepTimeScale = 20
		c.HeartbeatInterval = 10 * time.Millisecond
	})
	resp, body := post(t, testClient(t), base+"/v1/chat/completions",
		`{"model":"sim/small","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := parseSSE(t, body)
	pings := 0
	for _, e := range evs {
		if e.comment == "ping" {
			pings++
		}
	}
	require.GreaterOrEqual(t, pings, 5, "%s", body)
	require.Equal(t, "[DONE]", evs[len(evs)-1].data)
}

func TestSimShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.ShutdownTimeout = 100 * time.Millisecond
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	addr, err := s.Listen()
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateReady }, 5*time.Second, time.Millisecond)

	c := testClient(t)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr.String()+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":"sim/small","stream":true,"seed":%d,"max_tokens":1000,
			"messages":[{"role":"user","content":"Go on"}]}`, longSeed(t, 300))))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	_, err = r.ReadString('\n') // the role chunk
	require.NoError(t, err)

	stop()
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "data: ") {
			lines = append(lines, l)
		}
	}
	require.GreaterOrEqual(t, len(lines), 2)
	require.Equal(t, "data: [DONE]", lines[len(lines)-1])
	e := errorOf(t, []byte(strings.TrimPrefix(lines[len(lines)-2], "data: ")))
	require.Contains(t, e["message"], "shutting down")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	requireIdle(t, s)
}

func TestNewRefusesWhatDoesNotFit(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.GPU = "l40s"
	cfg.Models = []string{"flagship"}
	_, err := Open(cfg, nil)
	require.ErrorContains(t, err, "cannot serve sim/flagship on 1x")

	cfg = testConfig()
	cfg.Models = []string{"huge"}
	_, err = Open(cfg, nil)
	require.ErrorContains(t, err, `unknown model "huge"`)

	cfg = testConfig()
	cfg.Listen = "0.0.0.0:8700"
	_, err = Open(cfg, nil)
	require.ErrorContains(t, err, "not a loopback address")
}

// TestSimOverloadCompletes runs more work than sim/flagship's KV
// cache holds on one H100, admitted optimistically: every request completes
// and GET /v1/stats counts the preemptions that made room (EN-4 end to end).
func TestSimOverloadCompletes(t *testing.T) {
	t.Parallel()
	s, base := startSim(t, func(c *Config) {
		c.Models = []string{"flagship"}
		c.Engine.ExpectedOutputTokens = 1 // admit on the prompt alone
		// Real time, ten times faster than the GPU: the requests must be in
		// the engine together, which a virtual clock would not give.
		c.Clock = nil
		c.StepTimeScale = 0.1
	})
	const requests = 96
	c := testClient(t)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			var sb strings.Builder
			for j := range 50 {
				fmt.Fprintf(&sb, "r%dw%d ", i, j)
			}
			body, err := json.Marshal(map[string]any{
				"model": "sim/flagship", "max_tokens": 600, "seed": i,
				"messages": []map[string]string{{"role": "user", "content": sb.String()}},
			})
			require.NoError(t, err)
			resp, out := post(t, c, base+"/v1/chat/completions", string(body))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
			var cc api.ChatCompletion
			require.NoError(t, json.Unmarshal(out, &cc))
			require.Positive(t, cc.Usage.CompletionTokens)
			require.Contains(t, []string{"stop", "length"}, cc.Choices[0].FinishReason)
		})
	}
	wg.Wait()

	resp, body := get(t, c, base+"/v1/stats")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st api.StatsResponse
	require.NoError(t, json.Unmarshal(body, &st))
	require.Len(t, st.Models, 1)
	m := st.Models[0]
	require.Equal(t, "simulated", m.Executor)
	require.Equal(t, uint64(requests), m.Completed)
	require.Positive(t, m.Preemptions, "the run should have needed preemption: %+v", m)
	require.Equal(t, m.Preemptions, m.PreemptionsSwap+m.PreemptionsRecompute)
	require.Equal(t, s.Stats()[0].Preemptions, m.Preemptions)
}
