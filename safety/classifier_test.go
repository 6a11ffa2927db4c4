package safety_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/safety"
)

// mode is how the test classifier answers.
type mode int

const (
	normal    mode = iota // block "forbidden", flag "sketchy", allow the rest
	hold                  // answer normally once release is closed
	hang                  // never answer; note when the client gives up
	status500             // answer 500
	garbage               // answer 200 with a body that is not JSON
	unknown               // answer 200 with an unknown verdict
	noVerdict             // answer 200 with {}
	huge                  // answer 200 with a valid verdict in a 1 MiB body
)

// received is one request as the classifier saw it.
type received struct {
	method, contentType string
	req                 safety.Request
	raw                 map[string]any
}

// classifier is a fake safety classifier on loopback.
type classifier struct {
	*httptest.Server
	// arrived gets a value as each request arrives (dropped if full).
	arrived chan struct{}
	// release lets held requests be answered.
	release chan struct{}
	// gone gets a value each time a hung request's client gives up.
	gone chan struct{}
	stop chan struct{}

	mu   sync.Mutex
	mode mode
	reqs []received
}

func newClassifier(t *testing.T) *classifier {
	t.Helper()
	c := &classifier{
		arrived: make(chan struct{}, 64),
		release: make(chan struct{}),
		gone:    make(chan struct{}, 64),
		stop:    make(chan struct{}),
	}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serveHTTP))
	// Cleanups run last first: unblock the handlers, then close.
	t.Cleanup(c.Close)
	t.Cleanup(func() { close(c.stop) })
	return c
}

func (c *classifier) setMode(m mode) {
	c.mu.Lock()
	c.mode = m
	c.mu.Unlock()
}

func (c *classifier) received() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.reqs...)
}

func (c *classifier) serveHTTP(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	got := received{method: r.Method, contentType: r.Header.Get("Content-Type")}
	_ = json.Unmarshal(data, &got.req)
	_ = json.Unmarshal(data, &got.raw)
	c.mu.Lock()
	c.reqs = append(c.reqs, got)
	m := c.mode
	c.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}

	switch m {
	case hold:
		select {
		case <-c.release:
		case <-r.Context().Done():
			return
		case <-c.stop:
			return
		}
	case hang:
		select {
		case <-r.Context().Done():
			c.gone <- struct{}{}
		case <-c.stop:
		}
		return
	case status500:
		http.Error(w, "classifier broke", http.StatusInternalServerError)
		return
	case garbage:
		_, _ = io.WriteString(w, `{"verdict": allow`)
		return
	case unknown:
		_, _ = io.WriteString(w, `{"verdict": "maybe"}`)
		return
	case noVerdict:
		_, _ = io.WriteString(w, `{}`)
		return
	case huge:
		_, _ = io.WriteString(w, `{"verdict": "allow", "reason": "`+strings.Repeat("a", 1<<20)+`"}`)
		return
	}
	resp := safety.Response{Verdict: safety.Allow}
	switch {
	case strings.Contains(got.req.Text, "forbidden"):
		resp = safety.Response{Verdict: safety.Block, Category: "forbidden_word", Reason: "the text says forbidden"}
	case strings.Contains(got.req.Text, "sketchy"):
		resp = safety.Response{Verdict: safety.Flag, Category: "sketchy_word"}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// newChecker returns a Checker of cls with cfg (URL set to cls's) and its
// own client, whose idle connections are closed at cleanup.
func newChecker(t *testing.T, cls *classifier, cfg safety.Config) *safety.Checker {
	t.Helper()
	cfg.URL = cls.URL
	c, err := safety.New(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// waitFor fails the test unless ch yields within a generous time.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
