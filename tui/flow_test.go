package tui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// fakeNode is an llmd serving GET /v1/admin/snapshot with its live
// requests, DELETE /v1/requests/{id} (the request leaves the next
// snapshot) and GET /v1/requests/{id}/stream for the resumable ones. It
// checks the admin key.
type fakeNode struct {
	key string

	mu        sync.Mutex
	snap      *api.Snapshot
	cancelled []string
}

func newFakeNode(t *testing.T, key string, snap *api.Snapshot) (*fakeNode, *api.Client) {
	t.Helper()
	f := &fakeNode{key: key, snap: snap}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/snapshot", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		f.mu.Lock()
		b, err := json.Marshal(f.snap)
		f.mu.Unlock()
		require.NoError(t, err)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("DELETE /v1/requests/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		id := r.PathValue("id")
		f.mu.Lock()
		defer f.mu.Unlock()
		i := slices.IndexFunc(f.snap.Requests, func(rs api.RequestSnapshot) bool { return rs.ID == id })
		if i < 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no request %q", id))
			return
		}
		f.snap.Requests = slices.Delete(f.snap.Requests, i, i+1)
		f.cancelled = append(f.cancelled, id)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"object":"request","status":"cancelled"}`, id)
	})
	mux.HandleFunc("GET /v1/requests/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		id := r.PathValue("id")
		f.mu.Lock()
		i := slices.IndexFunc(f.snap.Requests, func(rs api.RequestSnapshot) bool { return rs.ID == id && rs.Resumable })
		f.mu.Unlock()
		if i < 0 || r.Header.Get("Last-Event-ID") != "" {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no request %q", id))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for n, d := range []string{"The ", "quick ", "brown ", "fox"} {
			b, _ := json.Marshal(api.NativeDelta{Delta: d})
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", n, b)
		}
		b, _ := json.Marshal(api.NativeDone{ID: id, FinishReason: "length", Usage: api.NativeUsage{OutputTokens: 4}})
		fmt.Fprintf(w, "event: done\ndata: %s\n\n", b)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := api.NewClient(srv.URL, nil)
	require.NoError(t, err)
	c.SetAPIKey(key)
	return f, c
}

func (f *fakeNode) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		writeError(w, http.StatusUnauthorized, "invalid API key")
		return false
	}
	return true
}

func (f *fakeNode) cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cancelled)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Message: msg, Type: "invalid_request_error"}})
}

// waitScreen waits until the program's output contains each of want.
func waitScreen(t *testing.T, tm *teatest.TestModel, want ...string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(out []byte) bool {
		for _, w := range want {
			if !bytes.Contains(out, []byte(w)) {
				return false
			}
		}
		return true
	}, teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
}

// TestTopFlow runs llmctl top's model in a real program against a fake
// llmd: it shows the requests, follows one, cancels one after confirming,
// and sees it leave the table.
func TestTopFlow(t *testing.T) {
	node, client := newFakeNode(t, "llmd-admin", fixture(t0, 1000))
	m := NewTop(client, TopOptions{Interval: MinInterval}, testStyles(), DefaultKeyMap())
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(120, 40))

	waitScreen(t, tm, idDecode, idSwapped, "[1 requests 5]", "sim/small", "enterprise")

	// Follow the decoding request's tokens (the third row), then go back.
	tm.Send(tea.KeyMsg{Type: tea.KeyDown})
	tm.Send(tea.KeyMsg{Type: tea.KeyDown})
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	waitScreen(t, tm, "The quick brown fox", "done: length, 4 tokens")
	tm.Send(tea.KeyMsg{Type: tea.KeyEsc})

	// Cancel it: K asks, y confirms.
	tm.Type("K")
	waitScreen(t, tm, "cancel "+idDecode+" (acme, sim/small, decode)? [y/n]")
	tm.Type("y")
	waitScreen(t, tm, "cancelled "+idDecode, "[1 requests 4]")
	require.Equal(t, []string{idDecode}, node.cancels())

	tm.Type("q")
	final := tm.FinalModel(t, teatest.WithFinalTimeout(10*time.Second)).(*Top)
	final.Close()
	require.Nil(t, findRequest(final.Snapshot(), idDecode))
	_, total := final.tables[viewRequests].Len()
	require.Equal(t, 4, total)
}

// TestTopFlowUnauthorized shows a refused key in the status line and goes
// on polling.
func TestTopFlowUnauthorized(t *testing.T) {
	_, client := newFakeNode(t, "llmd-admin", fixture(t0, 1000))
	client.SetAPIKey("llmd-wrong")
	m := NewTop(client, TopOptions{Interval: MinInterval}, testStyles(), DefaultKeyMap())
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(80, 24))
	waitScreen(t, tm, "error: llmd: 401 invalid_request_error: invalid API key; retrying every 250ms")
	tm.Type("q")
	tm.FinalModel(t, teatest.WithFinalTimeout(10*time.Second)).(*Top).Close()
}
