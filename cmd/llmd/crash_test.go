package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/store"
)

// llmdProc is an llmd process started by a test.
type llmdProc struct {
	id     string // its --node-id, when the test set one
	cmd    *exec.Cmd
	base   string
	stderr *syncBuffer
	exited chan error
}

// startLLMD runs bin with args (plus --listen 127.0.0.1:0) and waits until
// it is ready.
func startLLMD(t *testing.T, bin string, args ...string) *llmdProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &llmdProc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case line := <-first:
		m := regexp.MustCompile(`^llmd listening on http://(\S+) `).FindStringSubmatch(line)
		require.NotNil(t, m, "startup line %q", line)
		p.base = "http://" + m[1]
	case <-time.After(30 * time.Second):
		t.Fatalf("no startup line; stderr:\n%s", p.stderr.String())
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	return p
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *llmdProc) kill9(t *testing.T) {
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (p *llmdProc) stop(t *testing.T) {
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		require.NoError(t, err, "stderr:\n%s", p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("llmd did not stop; stderr:\n%s", p.stderr.String())
	}
}

// buildLLMD builds the llmd binary into a temporary directory.
func buildLLMD(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "llmd")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// seen is what the load client saw of one request.
type seen struct {
	id       string
	finished bool // the client saw the final done event
	input    int64
	output   int64
	// received counts the text events (one token each) the client read.
	received int64
}

// streamOne sends one native streaming request and reports what the client
// saw; a dropped connection is not an error here.
func streamOne(ctx context.Context, c *http.Client, base string, maxTokens int) seen {
	body := fmt.Sprintf(`{"model":"sim/small","max_tokens":%d,"messages":[{"role":"user","content":"count for me"}]}`, maxTokens)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return seen{}
	}
	defer resp.Body.Close()
	s := seen{id: resp.Header.Get("X-Request-Id")}
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "":
			s.received++
		case strings.HasPrefix(line, "data: ") && event == "done":
			var done struct {
				Usage struct {
					Input  int64 `json:"input_tokens"`
					Output int64 `json:"output_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &done) == nil {
				s.finished, s.input, s.output = true, done.Usage.Input, done.Usage.Output
			}
		case line == "":
			event = ""
		}
	}
	return s
}

// TestKill9LosesNoFinishedRequest is ME-1: llmd is killed with SIGKILL at
// random points while streaming requests run; after a restart every
// request the client saw finish has exactly one usage row with the tokens
// the client counted, and no row is left in flight.
func TestKill9LosesNoFinishedRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds llmd and kills it repeatedly; make test runs it")
	}
	rounds := 5
	if os.Getenv("LLMD_LONG_TESTS") != "" {
		rounds = 50
	}
	bin := buildLLMD(t)
	dataDir := t.TempDir()
	args := []string{"--models", "small", "--data-dir", dataDir, "--log-level", "warn"}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	t.Logf("%d rounds", rounds)

	var all []seen
	for round := range rounds {
		p := startLLMD(t, bin, args...)
		c := &http.Client{Transport: &http.Transport{}}
		ctx, cancel := context.WithCancel(context.Background())
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for range 20 {
			wg.Go(func() {
				for ctx.Err() == nil {
					s := streamOne(ctx, c, p.base, 5+rand.IntN(60))
					if s.id == "" {
						return // llmd is gone
					}
					mu.Lock()
					all = append(all, s)
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond)
		p.kill9(t)
		cancel()
		wg.Wait()
		c.CloseIdleConnections()
		t.Logf("round %d: killed after %d requests", round, len(all))
	}
	// One clean start recovers the ledger; SIGTERM flushes it.
	p := startLLMD(t, bin, args...)
	p.stop(t)

	st, err := store.Open(context.Background(), dataDir)
	require.NoError(t, err)
	defer st.Close()
	finished := 0
	for _, s := range all {
		ev, err := st.UsageEvent(context.Background(), s.id)
		if !s.finished {
			if err == nil {
				require.NotEqual(t, store.UsageInFlight, ev.Status, "request %s left in flight", s.id)
			}
			continue
		}
		finished++
		require.NoError(t, err, "request %s finished for the client but has no usage row", s.id)
		require.Equal(t, store.UsageFinished, ev.Status, s.id)
		require.Equal(t, s.input, ev.InputTokens, s.id)
		require.Equal(t, s.output, ev.OutputTokens, s.id)
	}
	require.Positive(t, finished)
	t.Logf("%d requests, %d finished for the client, every one with its row", len(all), finished)
}

// TestKill9BillsStreamedTokens is issue 18's measure of billing across
// kill -9: in each trial 24 clients stream requests of 64 to 512 tokens
// (about 1 to 4 s each) for a few seconds, llmd is killed with SIGKILL, and
// the next trial starts it again on the same data directory. At the end,
// per request, the tokens the client received are compared with its row's
// output tokens: every request the client saw finish has its finished row
// with the client's counts (none lost, none in flight, none twice), and the
// streamed tokens no row bills (those of the last checkpoint interval of
// the requests cut short, all those of a request cut before its first row
// was committed) are under 1% of all streamed tokens.
// LLMD_LONG_TESTS=1 runs 20 trials of 4 to 8 s; make test 2 of 2 to 3 s,
// against a bound of 3%.
func TestKill9BillsStreamedTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds llmd and kills it repeatedly; make test runs it")
	}
	const clients = 24
	// What a kill leaves unbilled is about the same whatever the trial's
	// length (half a checkpoint interval and a commit of each request in
	// flight), so that short trials have a looser bound.
	trials, window, spread, bound := 2, 2*time.Second, time.Second, 3.0
	if os.Getenv("LLMD_LONG_TESTS") != "" {
		trials, window, spread, bound = 20, 4*time.Second, 4*time.Second, 1.0
	}
	bin := buildLLMD(t)
	dataDir := t.TempDir()
	args := []string{"--models", "small", "--data-dir", dataDir, "--log-level", "warn", "--node-id", "crash-node"}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))

	var runs [][]seen // each trial's requests
	for range trials {
		p := startLLMD(t, bin, args...)
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
		ctx, cancel := context.WithCancel(context.Background())
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			reqs []seen
		)
		for range clients {
			wg.Go(func() {
				for ctx.Err() == nil {
					s := streamOne(ctx, c, p.base, 64+rand.IntN(449))
					if s.id == "" {
						return // llmd is gone
					}
					mu.Lock()
					reqs = append(reqs, s)
					mu.Unlock()
				}
			})
		}
		time.Sleep(window + time.Duration(rng.Int64N(int64(spread))))
		p.kill9(t)
		cancel()
		wg.Wait()
		c.CloseIdleConnections()
		runs = append(runs, reqs)
	}
	// One clean start recovers the ledger; SIGTERM flushes it.
	p := startLLMD(t, bin, args...)
	p.stop(t)

	st, err := store.Open(context.Background(), dataDir)
	require.NoError(t, err)
	defer st.Close()
	// cut is what the requests cut short streamed: all unbilled without
	// checkpoints.
	var streamed, unbilled, overbilled, cut, finished, interrupted, rowless, rowlessTokens int64
	ids := map[string]bool{}
	for i, reqs := range runs {
		var tStreamed, tUnbilled int64
		for _, s := range reqs {
			require.False(t, ids[s.id], "request id %s twice", s.id)
			ids[s.id] = true
			ev, err := st.UsageEvent(context.Background(), s.id)
			if err != nil {
				require.ErrorIs(t, err, store.ErrNotFound)
				require.False(t, s.finished, "request %s finished for the client but has no usage row", s.id)
				// Killed before its first row was committed.
				rowless++
				rowlessTokens += s.received
				cut += s.received
				tStreamed += s.received
				tUnbilled += s.received
				continue
			}
			require.NotEqual(t, store.UsageInFlight, ev.Status, "request %s left in flight", s.id)
			tStreamed += s.received
			if !s.finished {
				cut += s.received
			}
			if s.finished {
				finished++
				require.Equal(t, store.UsageFinished, ev.Status, s.id)
				require.Equal(t, s.input, ev.InputTokens, s.id)
				require.Equal(t, s.output, ev.OutputTokens, s.id)
			} else if ev.Status == store.UsageInterrupted {
				interrupted++
			}
			if d := s.received - ev.OutputTokens; d > 0 {
				tUnbilled += d
			} else {
				overbilled -= d
			}
		}
		t.Logf("trial %d: %d requests, %d tokens streamed, %d unbilled (%.2f%%)", i, len(reqs), tStreamed,
			tUnbilled, percent(tUnbilled, tStreamed))
		streamed += tStreamed
		unbilled += tUnbilled
	}
	require.Positive(t, finished)
	require.Positive(t, interrupted)
	t.Logf("%d trials: %d requests (%d finished, %d interrupted, %d without a row, with %d tokens), %d tokens streamed, "+
		"%d unbilled (%.3f%%; %.1f%% without checkpoints), %d billed beyond what the clients read", len(runs), len(ids),
		finished, interrupted, rowless, rowlessTokens, streamed, unbilled, percent(unbilled, streamed), percent(cut, streamed),
		overbilled)
	require.Less(t, percent(unbilled, streamed), bound, "unbilled streamed tokens, %% of all streamed")
}

// percent is part as a percentage of whole.
func percent(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}
