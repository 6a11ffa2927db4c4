package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/relay"
	"github.com/llmd/llmd/store"
)

// The tests in this file cover the streams' event logs: resuming a stream
// (GET /v1/requests/{id}/stream) and cancelling a request (DELETE
// /v1/requests/{id}).

// liveSSE reads a streaming response event by event, as a client does.
type liveSSE struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// openSSE sends a request and returns its response for reading event by
// event; the caller checks the status. hdr holds extra headers.
func openSSE(t *testing.T, c *http.Client, method, url, key, body string, hdr map[string]string) *liveSSE {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	st := &liveSSE{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(st.close)
	return st
}

// close drops the connection.
func (s *liveSSE) close() {
	s.cancel()
	_ = s.resp.Body.Close()
}

// next returns the next event or comment; io.EOF at a clean end of stream,
// io.ErrUnexpectedEOF when the stream stops inside an event.
func (s *liveSSE) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if len(ev.lines) == 0 && line == "" && errors.Is(err, io.EOF) {
				return ev, io.EOF
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if len(ev.lines) == 0 {
				continue
			}
			return ev, nil
		}
		ev.lines = append(ev.lines, line)
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "":
			ev.comment = value
		case "id":
			ev.id = value
		case "event":
			ev.event = value
		case "data":
			ev.data = value
		}
	}
}

// rest reads every remaining event until the stream ends; a stream cut
// inside an event fails the test.
func (s *liveSSE) rest(t *testing.T) []sseEvent {
	t.Helper()
	var evs []sseEvent
	for {
		ev, err := s.next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		require.NoError(t, err)
		evs = append(evs, ev)
	}
}

// take reads n data events (comments are skipped).
func (s *liveSSE) take(t *testing.T, n int) []sseEvent {
	t.Helper()
	var evs []sseEvent
	for len(evs) < n {
		ev, err := s.next()
		require.NoError(t, err)
		if ev.comment == "" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// nativeBody is a native /v1/chat request.
func nativeBody(seed int64, maxTokens int, content string) string {
	return fmt.Sprintf(`{"model":"sim/small","seed":%d,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		seed, maxTokens, content)
}

// openaiBody is a streamed /v1/chat/completions request with the usage
// chunk.
func openaiBody(model string, seed int64, maxTokens int, content string) string {
	return fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"seed":%d,"max_tokens":%d,`+
		`"messages":[{"role":"user","content":%q}]}`, model, seed, maxTokens, content)
}

// nativeText joins the deltas of native token events.
func nativeText(t *testing.T, evs []sseEvent) string {
	t.Helper()
	var sb strings.Builder
	for _, e := range evs {
		if e.comment != "" || e.event != "" {
			continue
		}
		var d api.NativeDelta
		require.NoError(t, json.Unmarshal([]byte(e.data), &d), e.data)
		sb.WriteString(d.Delta)
	}
	return sb.String()
}

// openaiText joins the content of OpenAI chat chunks, and counts them.
func openaiText(t *testing.T, evs []sseEvent) (string, int) {
	t.Helper()
	var sb strings.Builder
	n := 0
	for _, e := range evs {
		if e.comment != "" || e.data == "[DONE]" {
			continue
		}
		var ch api.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(e.data), &ch), e.data)
		for _, c := range ch.Choices {
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				sb.WriteString(*c.Delta.Content)
				n++
			}
		}
	}
	return sb.String(), n
}

// eventIDs returns the ids of the data events, failing on a data event
// without one unless it is [DONE].
func eventIDs(t *testing.T, evs []sseEvent) []int {
	t.Helper()
	var ids []int
	for _, e := range evs {
		if e.comment != "" || e.data == "[DONE]" {
			continue
		}
		n, err := strconv.Atoi(e.id)
		require.NoError(t, err, "event without an id: %q", e.lines)
		ids = append(ids, n)
	}
	return ids
}

// requireConsecutive checks that ids run from first up by one.
func requireConsecutive(t *testing.T, first int, ids []int) {
	t.Helper()
	for i, id := range ids {
		require.Equal(t, first+i, id, "ids %v: a gap or a duplicate at %d", ids, i)
	}
}

// resumeURL is the resume route of request id.
func resumeURL(base, id string) string { return base + "/v1/requests/" + id + "/stream" }

// requestURL is the cancel route of request id.
func requestURL(base, id string) string { return base + "/v1/requests/" + id }

// terminalCount counts the terminal events of a stream: native done and
// error events, or OpenAI [DONE]s.
func terminalCount(evs []sseEvent) int {
	n := 0
	for _, e := range evs {
		if e.event == "done" || e.event == "error" || e.data == "[DONE]" {
			n++
		}
	}
	return n
}

// countErrors counts OpenAI in-band error chunks.
func countErrors(evs []sseEvent) int {
	n := 0
	for _, e := range evs {
		if e.event == "" && strings.HasPrefix(e.data, `{"error"`) {
			n++
		}
	}
	return n
}

// tailLines shows the last events of a stream in failure messages.
func tailLines(evs []sseEvent) [][]string {
	var out [][]string
	for _, e := range evs[max(0, len(evs)-3):] {
		out = append(out, e.lines)
	}
	return out
}

// TestResumeNativeStream: a native stream cut after a few events and
// resumed with Last-Event-ID, or with ?after=, yields the rest with no gap
// and no duplicate, and the whole text is the uncut run's (same seed);
// resuming after the end replays the tail and the terminal event.
func TestResumeNativeStream(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 0.3 })
	acme := makeKey(t, s, "acme", store.TierPaid, false)
	base := startServer(t, s)
	t.Cleanup(func() { requireIdle(t, s) })
	c := testClient(t)
	const tokens = 120
	body := nativeBody(longSeed(t, tokens), tokens, "Tell me a long story")

	uncut := openSSE(t, c, http.MethodPost, base+"/v1/chat", acme, body, nil)
	require.Equal(t, http.StatusOK, uncut.resp.StatusCode)
	full := dataEvents(uncut.rest(t))
	require.Len(t, full, tokens+1, "the tokens and the done event")
	requireConsecutive(t, 0, eventIDs(t, full))
	require.Equal(t, "done", full[len(full)-1].event)
	want := nativeText(t, full)

	for _, how := range []string{"Last-Event-ID", "after"} {
		t.Run(how, func(t *testing.T) {
			first := openSSE(t, c, http.MethodPost, base+"/v1/chat", acme, body, nil)
			require.Equal(t, http.StatusOK, first.resp.StatusCode)
			id := first.resp.Header.Get("X-Request-Id")
			head := first.take(t, 5)
			first.close()
			last := head[len(head)-1].id
			require.Equal(t, "4", last)

			url, hdr := resumeURL(base, id), map[string]string{"Last-Event-ID": last}
			if how == "after" {
				url, hdr = url+"?after="+last, nil
			}
			again := openSSE(t, c, http.MethodGet, url, acme, "", hdr)
			require.Equal(t, http.StatusOK, again.resp.StatusCode)
			require.Equal(t, "text/event-stream", again.resp.Header.Get("Content-Type"))
			require.Equal(t, id, again.resp.Header.Get("X-Request-Id"))
			tail := dataEvents(again.rest(t))
			requireConsecutive(t, 5, eventIDs(t, tail))
			require.Equal(t, want, nativeText(t, head)+nativeText(t, tail), "resumed text is the uncut run's")
			require.Equal(t, 1, terminalCount(tail))
			require.Equal(t, "done", tail[len(tail)-1].event)
			done := jsonMap(t, tail[len(tail)-1].data)
			require.Equal(t, id, done["id"])
			require.Equal(t, float64(tokens), done["usage"].(map[string]any)["output_tokens"])

			// After the end: the tail and the terminal event again.
			end := openSSE(t, c, http.MethodGet, resumeURL(base, id), acme, "",
				map[string]string{"Last-Event-ID": strconv.Itoa(tokens - 3)})
			require.Equal(t, http.StatusOK, end.resp.StatusCode)
			replay := dataEvents(end.rest(t))
			require.Equal(t, []int{tokens - 2, tokens - 1, tokens}, eventIDs(t, replay))
			require.Equal(t, full[tokens-1].data, replay[1].data)
			require.Equal(t, "done", replay[2].event)

			// Without an id: from the start.
			all := openSSE(t, c, http.MethodGet, resumeURL(base, id), acme, "", nil)
			require.Equal(t, want, nativeText(t, dataEvents(all.rest(t))))
		})
	}
}

// TestResumeOpenAIStream: with X-Resumable an OpenAI stream numbers its
// JSON events (never [DONE]), can be resumed, and still parses with the
// official SDK; without the header it has no ids and cannot be resumed.
func TestResumeOpenAIStream(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 0.3 })
	acme := makeKey(t, s, "acme", store.TierPaid, false)
	base := startServer(t, s)
	t.Cleanup(func() { requireIdle(t, s) })
	c := testClient(t)
	const tokens = 80
	seed := longSeed(t, tokens)
	body := openaiBody("sim/small", seed, tokens, "Go on")
	resumable := map[string]string{"X-Resumable": "true"}

	t.Run("ids only on JSON events", func(t *testing.T) {
		st := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", acme, body, resumable)
		require.Equal(t, http.StatusOK, st.resp.StatusCode)
		evs := dataEvents(st.rest(t))
		last := evs[len(evs)-1]
		require.Equal(t, []string{"data: [DONE]"}, last.lines, "no id on [DONE]")
		requireConsecutive(t, 0, eventIDs(t, evs))
		for _, e := range evs[:len(evs)-1] {
			require.Len(t, e.lines, 2, "an id line and a data line: %q", e.lines)
			require.True(t, strings.HasPrefix(e.lines[0], "id: "), e.lines)
			jsonMap(t, e.data)
		}
	})

	t.Run("cut and resumed", func(t *testing.T) {
		uncut := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", acme, body, resumable)
		want, n := openaiText(t, uncut.rest(t))
		require.Equal(t, tokens, n)

		first := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", acme, body, resumable)
		id := first.resp.Header.Get("X-Request-Id")
		head := first.take(t, 4)
		first.close()
		again := openSSE(t, c, http.MethodGet, resumeURL(base, id), acme, "", map[string]string{"Last-Event-ID": head[3].id})
		require.Equal(t, http.StatusOK, again.resp.StatusCode)
		tail := dataEvents(again.rest(t))
		requireConsecutive(t, 4, eventIDs(t, tail))
		a, _ := openaiText(t, head)
		b, _ := openaiText(t, tail)
		require.Equal(t, want, a+b)
		require.Equal(t, "[DONE]", tail[len(tail)-1].data)
		require.Equal(t, 1, terminalCount(tail))
	})

	t.Run("official SDK", func(t *testing.T) {
		client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(acme),
			option.WithHTTPClient(testClient(t)), option.WithMaxRetries(0), option.WithHeader("X-Resumable", "true"))
		stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model:         "sim/small",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Go on")},
			MaxTokens:     openai.Int(tokens),
			Seed:          openai.Int(seed),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			require.True(t, acc.AddChunk(stream.Current()))
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		require.Len(t, acc.Choices, 1)
		require.Equal(t, int64(tokens), acc.Usage.CompletionTokens)
		require.NotEmpty(t, acc.Choices[0].Message.Content)
	})

	t.Run("not resumable without the header", func(t *testing.T) {
		st := openSSE(t, c, http.MethodPost, base+"/v1/chat/completions", acme, body, nil)
		id := st.resp.Header.Get("X-Request-Id")
		head := st.take(t, 2)
		for _, e := range head {
			require.Empty(t, e.id)
		}
		// Live, then ended: 404 both times.
		resp, b := call(t, c, http.MethodGet, resumeURL(base, id), acme, "")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
		evs := dataEvents(st.rest(t))
		for _, e := range evs {
			require.Empty(t, e.id)
			require.Len(t, e.lines, 1)
		}
		resp, b = call(t, c, http.MethodGet, resumeURL(base, id), acme, "")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
		require.Equal(t, "request_not_found", errorOf(t, b)["code"])
	})
}

// TestResumeLimits: a resume before the kept window is 410; another
// tenant, a guessed id and an expired stream all get the same 404 body
// (SE-3); after ResumeTTL the stream is gone.
func TestResumeLimits(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, strings.Repeat("abcdefghij", 5))
	f.delay = 2 * time.Millisecond // the client keeps up with the kept window
	cfg := testConfig()
	cfg.ResumeMaxEvents = 8
	cfg.ResumeTTL = 300 * time.Millisecond
	s, base := startFakeWithStore(t, cfg, f)
	acme := makeKey(t, s, "acme", store.TierPaid, false)
	globex := makeKey(t, s, "globex", store.TierPaid, false)
	c := testClient(t)

	resp, b := call(t, c, http.MethodPost, base+"/v1/chat", acme, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	id := resp.Header.Get("X-Request-Id")
	evs := dataEvents(parseSSE(t, b))
	require.Len(t, evs, 51, "%s", b)

	// Only the last 8 events (43 to 50) are kept.
	resp, b = call(t, c, http.MethodGet, resumeURL(base, id)+"?after=10", acme, "")
	require.Equal(t, http.StatusGone, resp.StatusCode, "%s", b)
	require.Equal(t, "events_expired", errorOf(t, b)["code"])
	resp, b = call(t, c, http.MethodGet, resumeURL(base, id)+"?after=41", acme, "")
	require.Equal(t, http.StatusGone, resp.StatusCode, "%s", b)
	resp, b = call(t, c, http.MethodGet, resumeURL(base, id)+"?after=42", acme, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	tail := dataEvents(parseSSE(t, b))
	requireConsecutive(t, 43, eventIDs(t, tail))
	require.Equal(t, evs[43:], tail)

	for _, bad := range []string{"x", "1.5", "-2", "1e3", "9223372036854775807"} {
		resp, b = call(t, c, http.MethodGet, resumeURL(base, id)+"?after="+bad, acme, "")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "after=%q: %s", bad, b)
	}

	// Another tenant: 404, for reading and for cancelling.
	other, otherBody := call(t, c, http.MethodGet, resumeURL(base, id), globex, "")
	require.Equal(t, http.StatusNotFound, other.StatusCode)
	del, delBody := call(t, c, http.MethodDelete, requestURL(base, id), globex, "")
	require.Equal(t, http.StatusNotFound, del.StatusCode)
	require.Equal(t, string(otherBody), string(delBody))
	// A guessed id: the same body but for the id.
	guess := pipeline.NewID("req_")
	resp, b = call(t, c, http.MethodGet, resumeURL(base, guess), acme, "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, strings.ReplaceAll(string(otherBody), id, guess), string(b))
	require.Equal(t, other.Header.Get("Content-Type"), resp.Header.Get("Content-Type"))
	require.Equal(t, other.Header.Get("Content-Length"), resp.Header.Get("Content-Length"))

	// After ResumeTTL the stream is forgotten: its owner now gets exactly
	// what the other tenant got.
	require.Eventually(t, func() bool {
		resp, _ := call(t, c, http.MethodGet, resumeURL(base, id), acme, "")
		return resp.StatusCode == http.StatusNotFound
	}, 5*time.Second, 50*time.Millisecond)
	resp, b = call(t, c, http.MethodGet, resumeURL(base, id), acme, "")
	require.Equal(t, string(otherBody), string(b))
	require.Zero(t, s.streams.Len(), "expired logs are dropped")
}

// TestResumeGraceCountsFromDisconnect: a resumable stream whose client
// leaves keeps generating for ResumeGrace counted from the disconnect, not
// from when the client attached; then it is cancelled.
func TestResumeGraceCountsFromDisconnect(t *testing.T) {
	t.Parallel()
	f := newFake("m", 4096, strings.Repeat("x", 400))
	f.delay = 10 * time.Millisecond // 4 s of tokens
	cfg := testConfig()
	cfg.ResumeGrace = 1100 * time.Millisecond
	base := startFake(t, cfg, f)
	c := testClient(t)

	st := openSSE(t, c, http.MethodPost, base+"/v1/chat", "", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, http.StatusOK, st.resp.StatusCode)
	// Attached for longer than the grace...
	deadline := time.Now().Add(cfg.ResumeGrace + 100*time.Millisecond)
	for time.Now().Before(deadline) {
		_, err := st.next()
		require.NoError(t, err)
	}
	st.close()
	left := time.Now()
	// ...then gone: the sweeper (once a second) runs at least once within
	// the grace, and the request must still be generating.
	time.Sleep(1020 * time.Millisecond)
	require.Zero(t, f.cancellations(), "cancelled %v after the client left; the grace is %v", time.Since(left), cfg.ResumeGrace)
	require.Eventually(t, func() bool { return f.cancellations() == 1 }, 3*time.Second, 10*time.Millisecond)
	waited := time.Since(left)
	require.GreaterOrEqual(t, waited, cfg.ResumeGrace)
	t.Logf("cancelled %v after the client left", waited)
}

// TestCancelStream: DELETE /v1/requests/{id} ends a live stream with one
// terminal error event (request_cancelled), frees its KV blocks at the next
// step, and bills only the tokens generated; a second DELETE is 409 and
// another tenant's is 404.
func TestCancelStream(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 0.5 })
	acme := makeKey(t, s, "acme", store.TierPaid, false)
	globex := makeKey(t, s, "globex", store.TierPaid, false)
	base := startServer(t, s)
	t.Cleanup(func() { requireIdle(t, s) })
	c := testClient(t)

	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
	}{
		{"native", "/v1/chat", nativeBody(longSeed(t, 400), 2000, "Go on and on"), nil},
		{"openai", "/v1/chat/completions", openaiBody("sim/small", longSeed(t, 400), 2000, "Go on"), nil},
		{"openai resumable", "/v1/chat/completions", openaiBody("sim/small", longSeed(t, 400), 2000, "Go on"),
			map[string]string{"X-Resumable": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats()[0]
			st := openSSE(t, c, http.MethodPost, base+tc.path, acme, tc.body, tc.hdr)
			require.Equal(t, http.StatusOK, st.resp.StatusCode)
			id := st.resp.Header.Get("X-Request-Id")
			head := st.take(t, 6)
			now := s.Stats()[0]
			require.Equal(t, 1, now.Running)
			require.Positive(t, now.BlocksUsed)

			resp, b := call(t, c, http.MethodDelete, requestURL(base, id), globex, "")
			require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
			resp, b = call(t, c, http.MethodDelete, requestURL(base, id), acme, "")
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			require.JSONEq(t, fmt.Sprintf(`{"id":%q,"object":"request","status":"cancelled"}`, id), string(b))
			cancelled := time.Now()
			// Freed at the next step (milliseconds), long before the stream
			// would have ended.
			require.Eventually(t, func() bool {
				st := s.Stats()[0]
				return st.Running == 0 && st.BlocksUsed == 0
			}, 2*time.Second, time.Millisecond)
			t.Logf("freed %v after DELETE", time.Since(cancelled))

			evs := append(head, dataEvents(st.rest(t))...)
			require.Equal(t, 1, terminalCount(evs), "exactly one terminal event: %v", tailLines(evs))
			var code any
			var deltas int
			if tc.path == "/v1/chat" {
				last := evs[len(evs)-1]
				require.Equal(t, "error", last.event)
				code = jsonMap(t, last.data)["error"].(map[string]any)["code"]
				deltas = len(evs) - 1
			} else {
				require.Equal(t, "[DONE]", evs[len(evs)-1].data)
				require.Equal(t, 1, countErrors(evs), "one error chunk before [DONE]")
				code = errorOf(t, []byte(evs[len(evs)-2].data))["code"]
				_, deltas = openaiText(t, evs[:len(evs)-2])
			}
			require.Equal(t, "request_cancelled", code)

			after := s.Stats()[0]
			generated := int64(after.GeneratedTokens - before.GeneratedTokens)
			ev, err := s.deps.Store.UsageEvent(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, store.UsageCancelled, ev.Status)
			require.Equal(t, generated, ev.OutputTokens, "billed exactly what the engine generated")
			require.GreaterOrEqual(t, ev.OutputTokens, int64(deltas))
			require.Less(t, ev.OutputTokens, int64(400))

			resp, b = call(t, c, http.MethodDelete, requestURL(base, id), acme, "")
			if tc.hdr == nil && tc.path != "/v1/chat" {
				// A non-resumable stream is forgotten once it ends.
				require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
				return
			}
			require.Equal(t, http.StatusConflict, resp.StatusCode, "%s", b)
			require.Equal(t, "request_finished", errorOf(t, b)["code"])
		})
	}
}

// TestCancelNonStreamed: DELETE also cancels a JSON (non-streamed) request
// in flight: its blocks are freed, its usage row is cancelled with the
// tokens generated, and its client gets an error, not a 200.
func TestCancelNonStreamed(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.StepTimeScale = 0.5 })
	acme := makeKey(t, s, "acme", store.TierPaid, false)
	base := startServer(t, s)
	t.Cleanup(func() { requireIdle(t, s) })
	c := testClient(t)

	type result struct {
		status int
		body   []byte
		id     string
	}
	done := make(chan result, 1)
	body := fmt.Sprintf(`{"model":"sim/small","seed":%d,"max_tokens":2000,"messages":[{"role":"user","content":"Go on"}]}`,
		longSeed(t, 400))
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acme)
		resp, err := c.Do(req)
		if err != nil {
			done <- result{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, b, resp.Header.Get("X-Request-Id")}
	}()
	// A JSON request's id reaches its client only with the answer; a
	// client that wants to cancel one must have learned it some other
	// way (here: the registry).
	var id string
	require.Eventually(t, func() bool {
		id = liveRequestID(s, "acme")
		return id != "" && s.Stats()[0].GeneratedTokens > 5
	}, 5*time.Second, time.Millisecond)
	resp, b := call(t, c, http.MethodDelete, requestURL(base, id), acme, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Eventually(t, func() bool { st := s.Stats()[0]; return st.Running == 0 && st.BlocksUsed == 0 },
		2*time.Second, time.Millisecond)

	r := <-done
	require.Equal(t, id, r.id)
	ev, err := s.deps.Store.UsageEvent(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, store.UsageCancelled, ev.Status)
	require.Equal(t, int64(s.Stats()[0].GeneratedTokens), ev.OutputTokens)
	require.Less(t, ev.OutputTokens, int64(400))
	// The client learns that its request was cancelled: an OpenAI error
	// body, never an empty 200.
	require.NotEqual(t, http.StatusOK, r.status, "body %q", r.body)
	require.Equal(t, "request_cancelled", errorOf(t, r.body)["code"])
}

// liveRequestID returns the id of a live request of tenant, "" if none.
func liveRequestID(s *Daemon, tenant string) string {
	id := ""
	s.streams.Range(func(l *relay.Stream) bool {
		if l.Tenant == tenant && !l.Done() {
			id = l.ID
			return false
		}
		return true
	})
	return id
}
