package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// cutServer serves a native stream of 10 deltas that drops its connection
// after every 3 events; GET /v1/requests/{id}/stream resumes after
// Last-Event-ID.
func cutServer(t *testing.T, cancels *atomic.Int32) *httptest.Server {
	write := func(w http.ResponseWriter, from int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "req_1")
		for i := from; i < from+3 && i <= 10; i++ {
			if i == 10 {
				fmt.Fprintf(w, "id: 10\nevent: done\ndata: {\"id\":\"req_1\",\"finish_reason\":\"stop\",\"usage\":{\"output_tokens\":10}}\n\n")
				return
			}
			fmt.Fprintf(w, "id: %d\ndata: {\"delta\":\"t%d \",\"index\":0}\n\n", i, i)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drop the connection mid-answer
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat", func(w http.ResponseWriter, r *http.Request) { write(w, 0) })
	mux.HandleFunc("GET /v1/requests/req_1/stream", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.Header.Get("Last-Event-ID"))
		require.NoError(t, err)
		write(w, n+1)
	})
	mux.HandleFunc("DELETE /v1/requests/req_1", func(w http.ResponseWriter, r *http.Request) {
		cancels.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"req_1","object":"request","status":"cancelled"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestChatResumesADroppedStream(t *testing.T) {
	var cancels atomic.Int32
	srv := cutServer(t, &cancels)
	c, err := NewClient(srv.URL, nil)
	require.NoError(t, err)
	var got strings.Builder
	done, err := c.Chat(context.Background(), NativeChatRequest{Model: "m"}, func(d NativeDelta) error {
		got.WriteString(d.Delta)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 ", got.String(), "every delta exactly once, in order")
	require.Equal(t, 10, done.Usage.OutputTokens)
	require.Zero(t, cancels.Load())
}

func TestChatCancelsWhenTheCallerStops(t *testing.T) {
	var cancels atomic.Int32
	srv := cutServer(t, &cancels)
	c, err := NewClient(srv.URL, nil)
	require.NoError(t, err)
	stop := errors.New("enough")
	n := 0
	_, err = c.Chat(context.Background(), NativeChatRequest{Model: "m"}, func(d NativeDelta) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Same(t, stop, err, "the callback's error comes back unchanged")
	require.EqualValues(t, 1, cancels.Load(), "llmd is told to stop generating")
}
