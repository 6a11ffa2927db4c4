//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/server"
)

// TestStreamsHeld (issue 11) measures how many concurrent SSE streams one
// llmd holds: LLMD_STREAMS=50000 (make bench STREAMS=50000) opens streams
// in steps (1, 1,000, 5,000, 10,000, 20,000, 50,000: the steps up to
// LLMD_STREAMS, or the comma-separated levels it lists), keeps every one
// open, and at each level measures for LLMD_STREAMS_WINDOW (default 10s)
// the gap between consecutive token events as the clients receive them
// (p50 and p99 over every open stream), against the same figure with one
// stream (the idle figure), plus the server's RSS, goroutines and CPU.
//
// The server is a child process (this test binary re-executed), so that
// its memory, goroutines and CPU are its own; the clients run here, one
// goroutine and one connection per stream, on the same two cores. Its
// model is sim/small whose simulated GPU takes LLMD_STREAMS_STEP (default
// 1s) per step whatever the batch (an H100 would take about 1 s per step at
// 50,000 sequences), so every stream gets one token per step and the idle
// figure is the step; what the gaps gain over it is the daemon's own cost:
// the scheduler's step (O(running)), the relays, the SSE writes and the
// clients' reads.
//
// Each stream holds a socket in the server and one in the client, so the
// open-file limit caps the levels (raised to the hard limit; the hard limit
// itself only by root with CAP_SYS_RESOURCE); the table says so when it
// does.
//
// LLMD_STREAMS_UPSTREAM=1 puts a second llmd in front of that server, in
// the child too, serving the model through it as an upstream engine
// (issue 21): the streams then pass the relay.
//
// LLMD_STREAMS_OUT names a file for the results table (markdown), and
// LLMD_STREAMS_PROFILE a file for the server's CPU profile during the last
// level's window. Skipped without LLMD_STREAMS; run it without -race.
func TestStreamsHeld(t *testing.T) {
	if spec := os.Getenv(streamsServeEnv); spec != "" {
		serveStreamsHeld(t, spec)
		return
	}
	plan, err := streamsPlanFromEnv()
	require.NoError(t, err)
	if plan == nil {
		t.Skip("set LLMD_STREAMS to the most streams to hold (e.g. 10000; make bench STREAMS=50000)")
	}
	// Each stream is a socket in the server and one here: the open-file
	// limit caps the streams one process can hold.
	fds := raiseFileLimit(t, uint64(plan.levels[len(plan.levels)-1])+streamsSpareFiles)
	plan.capLevels(int(fds) - streamsSpareFiles)
	top := plan.levels[len(plan.levels)-1]
	srv := startStreamsServer(t, top, plan.step)
	h := newStreamsHolder(srv.addr, streamsMaxTokens)
	defer h.close()

	var rows []streamsRow
	for i, level := range plan.levels {
		began := time.Now()
		h.openTo(level)
		if !h.waitEstablished(level, 30*time.Second+time.Duration(level)*2*time.Millisecond) {
			t.Logf("level %d: only %d streams established (%d failed: %s)", level, h.established.Load(), h.failed.Load(), h.failures())
		}
		ramp := time.Since(began)
		time.Sleep(max(2*time.Second, 2*plan.step)) // every stream past its first gap
		last := i == len(plan.levels)-1
		if last && plan.profile != "" {
			srv.command(t, "profile-start "+plan.profile)
		}
		row := h.measure(t, srv, level, plan.window)
		if last && plan.profile != "" {
			srv.command(t, "profile-stop")
		}
		row.ramp = ramp
		rows = append(rows, row)
		t.Logf("%s", row.line(rows[0], plan.step))
		if row.open < level*9/10 || rows[0].p99 > 0 && row.p99 > 10*rows[0].p99 {
			t.Logf("stopping at %d streams: %d open, p99 %v", level, row.open, row.p99)
			break
		}
	}
	h.close()
	srv.stop(t)

	table := streamsTable(rows, plan)
	t.Logf("\n%s", table)
	if plan.out != "" {
		require.NoError(t, os.WriteFile(plan.out, []byte(table), 0o644))
	}
}

const (
	// streamsServeEnv, set in the server child, holds "MAXSTREAMS,STEP".
	streamsServeEnv = "LLMD_STREAMS_SERVE"
	// streamsProto prefixes the child's protocol lines on its stdout.
	streamsProto = "streams-held: "
	// streamsPerSource is how many connections share one loopback source
	// address: the ephemeral port range (32768-60999 by default) allows
	// about 28,000 per address and destination.
	streamsPerSource = 20000
	// streamsBlockSize is the KV block size of the streams' model: large,
	// so that the pool's bookkeeping for hundreds of thousands of
	// sequences' worth of tokens stays small.
	streamsBlockSize = 256
	// streamsSpareFiles is the open files a process needs beside the
	// streams' sockets (listener, pipes, profile, the Go runtime's).
	streamsSpareFiles = 128
	// streamsMaxTokens is each stream's max_tokens: long enough that no
	// stream ends during a run (8,192 steps).
	streamsMaxTokens = 8192
)

// streamsLadder is the default ladder of levels.
var streamsLadder = []int{1, 1000, 5000, 10000, 20000, 50000}

// streamsPlan is what the environment asks for.
type streamsPlan struct {
	levels  []int
	step    time.Duration
	window  time.Duration
	out     string
	profile string
	// capped, if set, says why the levels stop below what was asked.
	capped string
}

// streamsPlanFromEnv reads the LLMD_STREAMS* variables; nil without
// LLMD_STREAMS.
func streamsPlanFromEnv() (*streamsPlan, error) {
	spec := strings.TrimSpace(os.Getenv("LLMD_STREAMS"))
	if spec == "" {
		return nil, nil
	}
	p := &streamsPlan{step: time.Second, window: 10 * time.Second, out: os.Getenv("LLMD_STREAMS_OUT"),
		profile: os.Getenv("LLMD_STREAMS_PROFILE")}
	levels, err := streamsLevels(spec)
	if err != nil {
		return nil, err
	}
	p.levels = levels
	for _, d := range []struct {
		env string
		v   *time.Duration
	}{{"LLMD_STREAMS_STEP", &p.step}, {"LLMD_STREAMS_WINDOW", &p.window}} {
		if s := os.Getenv(d.env); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("%s=%q: want a positive duration", d.env, s)
			}
			*d.v = v
		}
	}
	return p, nil
}

// streamsLevels parses LLMD_STREAMS: one number (the ladder's steps up to
// it, and it) or a comma-separated list. The list always starts with 1
// stream, the idle figure.
func streamsLevels(spec string) ([]int, error) {
	var levels []int
	for f := range strings.SplitSeq(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("LLMD_STREAMS=%q: want a positive number of streams or a comma-separated list", spec)
		}
		levels = append(levels, n)
	}
	if len(levels) == 1 {
		top := levels[0]
		levels = levels[:0]
		for _, l := range streamsLadder {
			if l < top {
				levels = append(levels, l)
			}
		}
		levels = append(levels, top)
	}
	levels = append(levels, 1)
	slices.Sort(levels)
	return slices.Compact(levels), nil
}

// raiseFileLimit raises the open-file limit towards n: the soft limit to
// n, and the hard limit too when it is below n (which needs root with
// CAP_SYS_RESOURCE; without it the soft limit stops at the hard one). It
// returns the limit in force.
func raiseFileLimit(t *testing.T, n uint64) uint64 {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur >= n {
		return lim.Cur
	}
	want := syscall.Rlimit{Cur: n, Max: max(lim.Max, n)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
		return n
	}
	lim.Cur = lim.Max
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	return lim.Cur
}

// capLevels keeps the levels at most most streams, ending with most when
// the plan asked for more, and notes why.
func (p *streamsPlan) capLevels(most int) {
	top := p.levels[len(p.levels)-1]
	if top <= most {
		return
	}
	p.capped = fmt.Sprintf("Asked for %s streams; capped at %s by the open-file limit: %s files per process (each stream "+
		"holds a socket in the server and one in the client), a hard limit this process could not raise (that needs "+
		"CAP_SYS_RESOURCE).", thousands(top), thousands(most), thousands(most+streamsSpareFiles))
	var levels []int
	for _, l := range p.levels {
		if l < most {
			levels = append(levels, l)
		}
	}
	p.levels = append(levels, max(most, 1))
}

// serveStreamsHeld is the server child: it serves sim/small with a fixed
// step on a loopback port, prints the port, answers commands on stdin
// (stats, profile-start PATH, profile-stop) and stops when stdin closes.
func serveStreamsHeld(t *testing.T, spec string) {
	maxStr, stepStr, _ := strings.Cut(spec, ",")
	maxStreams, err := strconv.Atoi(maxStr)
	require.NoError(t, err, streamsServeEnv)
	step, err := time.ParseDuration(stepStr)
	require.NoError(t, err, streamsServeEnv)
	// With LLMD_STREAMS_UPSTREAM set, this process also runs an llmd in
	// front of the engine that serves the model as an upstream: every
	// stream then holds two more sockets here.
	viaUpstream := os.Getenv("LLMD_STREAMS_UPSTREAM") != ""
	files := uint64(maxStreams) + streamsSpareFiles
	if viaUpstream {
		files = 3*uint64(maxStreams) + streamsSpareFiles
	}
	require.GreaterOrEqual(t, raiseFileLimit(t, files), files)

	s, timed := newStreamsServer(t, maxStreams, step, streamsMaxTokens)
	addr, err := s.Listen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return s.srv.State() == server.StateReady }, 10*time.Second, time.Millisecond)
	if viaUpstream {
		front := newStreamsFront(t, maxStreams, "http://"+addr.String())
		if addr, err = front.Listen(); err != nil {
			require.NoError(t, err)
		}
		frontDone := make(chan error, 1)
		go func() { frontDone <- front.Run(ctx) }()
		require.Eventually(t, func() bool { return front.srv.State() == server.StateReady }, 10*time.Second, time.Millisecond)
		defer func() { <-frontDone }()
	}

	out := bufio.NewWriter(os.Stdout)
	reply := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(out, "%s%s\n", streamsProto, b)
		_ = out.Flush()
	}
	reply(map[string]string{"addr": addr.String()})
	var prof *os.File
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "stats":
			reply(streamsStats(s, timed))
		case "profile-start":
			prof, err = os.Create(arg)
			if err == nil {
				err = pprof.StartCPUProfile(prof)
			}
			reply(map[string]string{"err": fmt.Sprint(err)})
		case "profile-stop":
			pprof.StopCPUProfile()
			if prof != nil {
				err = prof.Close()
			}
			reply(map[string]string{"err": fmt.Sprint(err)})
		}
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("server did not stop")
	}
}

// newStreamsServer builds the child's server: sim/small on a GPU whose
// bandwidth and FLOP/s are a billion times an H100's, so that every step
// takes its fixed overhead (step) whatever the batch, with a KV pool for
// maxStreams sequences of maxTokens and an engine that runs them all in one
// batch.
func newStreamsServer(t *testing.T, maxStreams int, step time.Duration, maxTokens int) (*Daemon, *timedExecutor) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Models = []string{"small"}
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Engine.MaxRunning = maxStreams + 64
	// Room for every stream to decode and for as many prompts (about 30
	// tokens each) to be prefilled in one step: the ramp is not paced by
	// the step.
	cfg.Engine.MaxBatchTokens = 64*maxStreams + 4096
	cfg.Engine.MaxWaiting = max(cfg.Engine.MaxWaiting, maxStreams)
	// One client (this process) holds every stream.
	cfg.MaxConnections, cfg.MaxClientConnections = 0, 0
	require.NoError(t, cfg.Validate())

	sc := sim.DefaultConfig()
	gpu, err := sim.GPUByName("h100")
	require.NoError(t, err)
	gpu.Name = "streams-held GPU (fixed step)"
	gpu.BandwidthBytesPerSec *= 1e9
	gpu.BF16FLOPS *= 1e9
	gpu.FP8FLOPS *= 1e9
	blockBytes := sc.Model.KVBytesPerToken() * streamsBlockSize
	blocksPerSeq := (64 + maxTokens + streamsBlockSize - 1) / streamsBlockSize
	gpu.MemoryBytes = sc.Model.WeightBytes() + int64(maxStreams*blocksPerSeq+1024)*blockBytes
	sc.GPU = gpu
	sc.ReserveFraction = 0
	sc.BlockSize = streamsBlockSize
	sc.StepOverhead = step
	sc.MeanOutputTokens = 0 // no EOS: every stream runs to max_tokens
	clock := engine.RealClock{}
	exec, err := sim.New(sc, clock)
	require.NoError(t, err)
	timed := &timedExecutor{Executor: exec}
	eng, err := engine.New(timed, clock, cfg.Engine, nil)
	require.NoError(t, err)
	m := newModel(pipeline.EngineReplica{E: eng}, exec.Tokenizer(), time.Now(), eng.Run)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return newServer(t, cfg, logger, []*pipeline.Model{m}), timed
}

// newStreamsFront is an llmd serving sim/small through the engine at
// base as an upstream, with room for maxStreams in flight.
func newStreamsFront(t *testing.T, maxStreams int, base string) *Daemon {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Models = nil
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.MaxConnections, cfg.MaxClientConnections = 0, 0
	cfg.Upstreams = []UpstreamSpec{{Model: "sim/small", URLs: []string{base}, MaxInflight: maxStreams + 64,
		MaxWaiting: maxStreams}}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := Open(cfg, logger)
	require.NoError(t, err)
	return d
}

// timedExecutor times the engine's steps: the time in Forward (the
// simulated step, which sleeps for it) and the engine's own time between
// two Forwards (scheduling the next batch and delivering the last one's
// tokens).
type timedExecutor struct {
	*sim.Executor
	steps, forwardNanos, hostNanos, lastEnd atomic.Int64
}

func (x *timedExecutor) Forward(ctx context.Context, b *engine.Batch) (*engine.Output, error) {
	start := time.Now().UnixNano()
	if last := x.lastEnd.Load(); last != 0 {
		x.hostNanos.Add(start - last)
	}
	out, err := x.Executor.Forward(ctx, b)
	end := time.Now().UnixNano()
	x.forwardNanos.Add(end - start)
	x.steps.Add(1)
	x.lastEnd.Store(end)
	return out, err
}

// streamsServerStats is the child's answer to "stats".
type streamsServerStats struct {
	Goroutines int    `json:"goroutines"`
	HeapBytes  uint64 `json:"heap_bytes"`
	GoBytes    uint64 `json:"go_bytes"` // memory the Go runtime holds from the OS
	Running    int    `json:"running"`
	Waiting    int    `json:"waiting"`
	BlocksUsed int    `json:"blocks_used"`
	Logs       int    `json:"logs"`
	// Steps, ForwardNanos and HostNanos are the timedExecutor's sums.
	Steps        int64 `json:"steps"`
	ForwardNanos int64 `json:"forward_nanos"`
	HostNanos    int64 `json:"host_nanos"`
}

func streamsStats(s *Daemon, x *timedExecutor) streamsServerStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := streamsServerStats{Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc, GoBytes: ms.Sys - ms.HeapReleased,
		Logs: s.streams.Len()}
	st.Steps, st.ForwardNanos, st.HostNanos = x.steps.Load(), x.forwardNanos.Load(), x.hostNanos.Load()
	for _, e := range s.Stats() {
		st.Running += e.Running
		st.Waiting += e.Waiting
		st.BlocksUsed += e.BlocksUsed
	}
	return st
}

// streamsServer is the parent's handle on the server child.
type streamsServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the child's protocol lines
	addr  string
	pid   int
}

// startStreamsServer starts the server child for at most maxStreams
// streams and waits for its address.
func startStreamsServer(t *testing.T, maxStreams int, step time.Duration) *streamsServer {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStreamsHeld$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%s", streamsServeEnv, maxStreams, step))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	srv := &streamsServer{cmd: cmd, stdin: stdin, lines: make(chan string, 16), pid: cmd.Process.Pid}
	go func() {
		defer close(srv.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), streamsProto); ok {
				srv.lines <- line
			} else {
				fmt.Fprintln(os.Stderr, "server:", sc.Text())
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var hello struct{ Addr string }
	srv.read(t, &hello)
	srv.addr = hello.Addr
	return srv
}

// read decodes the child's next protocol line into v.
func (s *streamsServer) read(t *testing.T, v any) {
	select {
	case line, ok := <-s.lines:
		require.True(t, ok, "the server child exited")
		require.NoError(t, json.Unmarshal([]byte(line), v), line)
	case <-time.After(time.Minute):
		t.Fatal("no answer from the server child")
	}
}

// command sends a command that answers {"err": ...} and checks it.
func (s *streamsServer) command(t *testing.T, cmd string) {
	_, err := fmt.Fprintln(s.stdin, cmd)
	require.NoError(t, err)
	var r struct{ Err string }
	s.read(t, &r)
	require.Equal(t, "<nil>", r.Err, cmd)
}

func (s *streamsServer) stats(t *testing.T) streamsServerStats {
	_, err := fmt.Fprintln(s.stdin, "stats")
	require.NoError(t, err)
	var st streamsServerStats
	s.read(t, &st)
	return st
}

// stop closes the child's stdin and waits for it to exit cleanly.
func (s *streamsServer) stop(t *testing.T) {
	require.NoError(t, s.stdin.Close())
	for range s.lines {
	}
	require.NoError(t, s.cmd.Wait(), "server child")
}

// streamsHolder opens and holds the client streams: one goroutine and one
// connection each, with a raw HTTP/1.1 request (no transport goroutines).
type streamsHolder struct {
	addr      string
	maxTokens int
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	sem       chan struct{} // connections being opened
	base      time.Time
	started   int

	open, established, failed atomic.Int64
	events                    atomic.Int64 // data events received while measuring
	measuring                 atomic.Bool
	// window numbers the measurement windows; active counts the streams
	// that received an event in the current one.
	window, active atomic.Int64
	gaps           gapHistogram

	mu       sync.Mutex
	failKind map[string]int
}

func newStreamsHolder(addr string, maxTokens int) *streamsHolder {
	ctx, cancel := context.WithCancel(context.Background())
	return &streamsHolder{addr: addr, maxTokens: maxTokens, ctx: ctx, cancel: cancel, sem: make(chan struct{}, 256),
		base: time.Now(), failKind: map[string]int{}}
}

// openTo starts streams until n have been started.
func (h *streamsHolder) openTo(n int) {
	for ; h.started < n; h.started++ {
		h.wg.Add(1)
		go h.stream(h.started)
	}
}

// waitEstablished waits until n streams have received a token, or
// timeout; it reports whether they did.
func (h *streamsHolder) waitEstablished(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for h.established.Load()+h.failed.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	return h.established.Load() >= int64(n)
}

// close ends every stream and waits for their goroutines.
func (h *streamsHolder) close() {
	h.cancel()
	h.wg.Wait()
}

func (h *streamsHolder) fail(kind string) {
	h.failed.Add(1)
	h.mu.Lock()
	h.failKind[kind]++
	h.mu.Unlock()
}

func (h *streamsHolder) failures() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for k, n := range h.failKind {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

var (
	dataPrefix  = []byte("data: ")
	errorPrefix = []byte("event: error")
	donePrefix  = []byte("data: [DONE]")
)

// stream opens stream i and reads it until the holder closes: it counts
// the data events and, while measuring, records the gap before each.
func (h *streamsHolder) stream(i int) {
	defer h.wg.Done()
	select {
	case h.sem <- struct{}{}:
	case <-h.ctx.Done():
		return
	}
	opening := true
	defer func() {
		if opening {
			<-h.sem
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i/streamsPerSource))}, Timeout: 30 * time.Second}
	conn, err := d.DialContext(h.ctx, "tcp", h.addr)
	if err != nil {
		if h.ctx.Err() == nil {
			kind := "dial"
			var errno syscall.Errno
			if errors.As(err, &errno) {
				kind += ": " + errno.Error()
			}
			h.fail(kind)
		}
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(h.ctx, func() { _ = conn.Close() })
	defer stop()
	body := openaiBody("sim/small", int64(i), h.maxTokens, fmt.Sprintf("Tell me a long story, number %d.", i))
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		if h.ctx.Err() == nil {
			h.fail("write request")
		}
		return
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 1024), nil)
	if err != nil {
		if h.ctx.Err() == nil {
			h.fail("read response")
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.fail("status " + resp.Status)
		return
	}
	opening = false
	<-h.sem
	h.open.Add(1)
	defer h.open.Add(-1)

	lr := bufio.NewReaderSize(resp.Body, 1024)
	var prev time.Duration
	var window int64
	lineStart, events := true, 0
	for {
		line, err := lr.ReadSlice('\n')
		if lineStart && bytes.HasPrefix(line, dataPrefix) {
			if bytes.HasPrefix(line, donePrefix) {
				h.fail("stream ended")
				return
			}
			now := time.Since(h.base)
			events++
			if events == 2 { // the role chunk, then the first token
				h.established.Add(1)
			}
			if h.measuring.Load() {
				if w := h.window.Load(); w != window {
					window = w
					h.active.Add(1)
				}
				h.events.Add(1)
				if events > 2 {
					h.gaps.record(now - prev)
				}
			}
			prev = now
		} else if lineStart && bytes.HasPrefix(line, errorPrefix) {
			h.fail("error event")
			return
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			lineStart = false
			continue
		}
		lineStart = true
		if err != nil {
			if h.ctx.Err() == nil {
				h.fail("stream broken")
			}
			return
		}
	}
}

// streamsRow is one level's figures.
type streamsRow struct {
	level, open, active, failed int
	failures                    string
	ramp                        time.Duration
	p50, p99, mean, max         time.Duration
	gaps                        int64
	// steps is the engine's steps in the window; forward and host the
	// mean time of a step in Forward and in the engine between Forwards.
	steps         int
	forward, host time.Duration
	eventsPerSec  float64
	server        streamsServerStats
	rss           uint64
	serverCPU     float64 // cores
	clientCPU     float64 // cores
	machineBusy   float64 // share of every core, every process
	load          string
	tcpMem        uint64 // bytes the kernel holds for TCP buffers
}

// measure records one window at the current level.
func (h *streamsHolder) measure(t *testing.T, srv *streamsServer, level int, window time.Duration) streamsRow {
	h.gaps.reset()
	h.events.Store(0)
	h.active.Store(0)
	h.window.Add(1)
	st0 := srv.stats(t)
	s0, c0, m0 := procCPU(t, srv.pid), selfCPU(t), machineCPU(t)
	began := time.Now()
	h.measuring.Store(true)
	time.Sleep(window)
	h.measuring.Store(false)
	el := time.Since(began)
	s1, c1, m1 := procCPU(t, srv.pid), selfCPU(t), machineCPU(t)
	row := streamsRow{level: level, open: int(h.open.Load()), failed: int(h.failed.Load()), failures: h.failures(),
		active: int(h.active.Load()),
		p50:    h.gaps.quantile(0.50), p99: h.gaps.quantile(0.99), mean: h.gaps.mean(), max: h.gaps.max(), gaps: h.gaps.count(),
		eventsPerSec: float64(h.events.Load()) / el.Seconds(), serverCPU: (s1 - s0).Seconds() / el.Seconds(),
		clientCPU: (c1 - c0).Seconds() / el.Seconds(), machineBusy: m1.busyShare(m0)}
	row.server = srv.stats(t)
	if steps := row.server.Steps - st0.Steps; steps > 0 {
		row.steps = int(steps)
		row.forward = time.Duration((row.server.ForwardNanos - st0.ForwardNanos) / steps)
		row.host = time.Duration((row.server.HostNanos - st0.HostNanos) / steps)
	}
	row.rss = procRSS(t, srv.pid)
	row.tcpMem = tcpMemBytes()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		row.load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return row
}

// line is the row as a log line.
func (r streamsRow) line(idle streamsRow, step time.Duration) string {
	return fmt.Sprintf("streams=%d open=%d active=%d failed=%d ramp=%v p50=%v p99=%v (x%.2f idle) mean=%v max=%v gaps=%d events/s=%.0f (expected %.0f) "+
		"steps=%d forward=%v host=%v rss=%.1fMiB heap=%.1fMiB goroutines=%d running=%d server-cpu=%.2f client-cpu=%.2f machine=%.0f%% load=%s tcp-mem=%.1fMiB failures=[%s]",
		r.level, r.open, r.active, r.failed, r.ramp.Round(time.Millisecond), r.p50, r.p99, ratio(r.p99, idle.p99), r.mean, r.max, r.gaps,
		r.eventsPerSec, float64(r.open)/step.Seconds(), r.steps, r.forward, r.host, mib(r.rss), mib(r.server.HeapBytes), r.server.Goroutines,
		r.server.Running, r.serverCPU, r.clientCPU, 100*r.machineBusy, r.load, mib(r.tcpMem), r.failures)
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// streamsTable renders the results as the markdown BENCHMARKS.md shows.
func streamsTable(rows []streamsRow, p *streamsPlan) string {
	var sb strings.Builder
	idle := rows[0]
	fmt.Fprintf(&sb, "Simulated step %v (one token per stream per step), window %v per level; idle (1 stream): inter-token "+
		"p50 %s, p99 %s. ITL is the gap between two token events of a stream as its client reads them; \"engine step\" "+
		"is the mean time from one executor step to the next, and in brackets the engine's own part of it (scheduling "+
		"the batch and handing out the tokens, O(running)); CPU is in cores x 100%%, \"machine busy\" counts every "+
		"process on the machine.\n\n", p.step, p.window, fmtGap(idle.p50), fmtGap(idle.p99))
	sb.WriteString("| streams | open | failed | ITL p50 | ITL p99 | p99 / idle | engine step (its own time) | tokens/s delivered (of N/step) | server RSS | RSS / stream | server goroutines | server CPU | client CPU | machine busy | kernel TCP memory |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	bend := 0
	for _, r := range rows {
		per := "-"
		if r.open > 1 {
			per = fmt.Sprintf("%.1f KiB", (float64(r.rss)-float64(idle.rss))/float64(r.open)/1024)
		}
		fmt.Fprintf(&sb, "| %s | %s | %d | %s | %s | %.2fx | %s (%s) | %s (%.0f%%) | %.0f MiB | %s | %s | %.0f%% | %.0f%% | %.0f%% | %.0f MiB |\n",
			thousands(r.level), thousands(r.open), r.failed, fmtGap(r.p50), fmtGap(r.p99), ratio(r.p99, idle.p99),
			fmtGap(r.forward+r.host), fmtGap(r.host),
			thousands(int(math.Round(r.eventsPerSec))), 100*r.eventsPerSec*p.step.Seconds()/float64(max(r.open, 1)),
			mib(r.rss), per, thousands(r.server.Goroutines), 100*r.serverCPU, 100*r.clientCPU, 100*r.machineBusy, mib(r.tcpMem))
		if bend == 0 && (ratio(r.p99, idle.p99) >= 2 || r.open < r.level) {
			bend = r.level
		}
	}
	sb.WriteString("\n")
	if p.capped != "" {
		sb.WriteString(p.capped + "\n\n")
	}
	last := rows[len(rows)-1]
	if bend == 0 {
		fmt.Fprintf(&sb, "Held every level up to %s streams with the inter-token p99 at %.2fx the idle figure.\n",
			thousands(last.level), ratio(last.p99, idle.p99))
	} else {
		fmt.Fprintf(&sb, "Bends at %s streams: the first level whose inter-token p99 reaches 2x the idle figure or that does not keep every stream open.\n",
			thousands(bend))
	}
	return sb.String()
}

// fmtGap prints a gap in ms with three significant digits.
func fmtGap(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f ms", ms)
	}
}

// thousands prints n with comma separators.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// gapHistogram is a lock-free log-linear histogram of durations in
// microseconds: exact below 256 us, then 128 buckets per power of two
// (0.8% resolution).
type gapHistogram struct {
	buckets [256 + 56*128]atomic.Int64
	n       atomic.Int64
	sumUS   atomic.Int64
	maxUS   atomic.Int64
}

func gapBucket(us uint64) int {
	us = min(us, 1<<62)
	if us < 256 {
		return int(us)
	}
	shift := bits.Len64(us) - 8 // >= 1
	return 256 + (shift-1)*128 + int(us>>shift) - 128
}

// gapBucketValue is the middle of bucket i in microseconds.
func gapBucketValue(i int) float64 {
	if i < 256 {
		return float64(i)
	}
	shift := (i-256)/128 + 1
	top := uint64((i-256)%128 + 128)
	return (float64(top<<shift) + float64((top+1)<<shift)) / 2
}

func (g *gapHistogram) record(d time.Duration) {
	us := uint64(max(d.Microseconds(), 0))
	g.buckets[gapBucket(us)].Add(1)
	g.n.Add(1)
	g.sumUS.Add(int64(us))
	for {
		m := g.maxUS.Load()
		if int64(us) <= m || g.maxUS.CompareAndSwap(m, int64(us)) {
			break
		}
	}
}

func (g *gapHistogram) reset() {
	for i := range g.buckets {
		g.buckets[i].Store(0)
	}
	g.n.Store(0)
	g.sumUS.Store(0)
	g.maxUS.Store(0)
}

func (g *gapHistogram) count() int64       { return g.n.Load() }
func (g *gapHistogram) max() time.Duration { return time.Duration(g.maxUS.Load()) * time.Microsecond }

// mean is the mean gap, or 0 without samples.
func (g *gapHistogram) mean() time.Duration {
	n := g.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(g.sumUS.Load()/n) * time.Microsecond
}

// quantile returns the q-quantile (0 < q <= 1), or 0 without samples.
func (g *gapHistogram) quantile(q float64) time.Duration {
	n := g.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i := range g.buckets {
		seen += g.buckets[i].Load()
		if seen >= rank {
			return time.Duration(gapBucketValue(i) * float64(time.Microsecond))
		}
	}
	return g.max()
}

// procCPU is the user plus system CPU time of process pid.
func procCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, errors.Join(err1, err2))
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// selfCPU is this process's user plus system CPU time.
func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procRSS is the resident set size of process pid in bytes.
func procRSS(t *testing.T, pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// cpuTimes is the first line of /proc/stat: every core's jiffies.
type cpuTimes struct{ busy, total uint64 }

func machineCPU(t *testing.T) cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(b), "\n")
	var ct cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		require.NoError(t, err)
		if i >= 8 { // guest time is already in user
			break
		}
		ct.total += v
		if i != 3 && i != 4 { // idle, iowait
			ct.busy += v
		}
	}
	return ct
}

func (c cpuTimes) busyShare(before cpuTimes) float64 {
	if c.total == before.total {
		return 0
	}
	return float64(c.busy-before.busy) / float64(c.total-before.total)
}

// tcpMemBytes is the memory the kernel holds for TCP socket buffers
// (/proc/net/sockstat, in pages), or 0.
func tcpMemBytes() uint64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP:"); ok {
			f := strings.Fields(rest)
			for i := 0; i+1 < len(f); i += 2 {
				if f[i] == "mem" {
					pages, _ := strconv.ParseUint(f[i+1], 10, 64)
					return pages * uint64(os.Getpagesize())
				}
			}
		}
	}
	return 0
}

func TestStreamsLevels(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string][]int{
		"50000":       {1, 1000, 5000, 10000, 20000, 50000},
		"10000":       {1, 1000, 5000, 10000},
		"7000":        {1, 1000, 5000, 7000},
		"1":           {1},
		"200, 100,50": {1, 50, 100, 200},
	} {
		got, err := streamsLevels(spec)
		require.NoError(t, err, spec)
		require.Equal(t, want, got, spec)
	}
	p := &streamsPlan{levels: []int{1, 1000, 5000, 10000, 20000, 50000}}
	p.capLevels(19872)
	require.Equal(t, []int{1, 1000, 5000, 10000, 19872}, p.levels)
	require.Contains(t, p.capped, "capped at 19,872")
	p = &streamsPlan{levels: []int{1, 1000}}
	p.capLevels(5000)
	require.Equal(t, []int{1, 1000}, p.levels)
	require.Empty(t, p.capped)
	for _, bad := range []string{"x", "0", "10,-1", "1,,2"} {
		_, err := streamsLevels(bad)
		require.Error(t, err, bad)
	}
}

func TestGapHistogram(t *testing.T) {
	t.Parallel()
	var g gapHistogram
	require.Zero(t, g.quantile(0.5))
	for i := 1; i <= 1000; i++ {
		g.record(time.Duration(i) * time.Millisecond)
	}
	g.record(-time.Second) // counted as 0
	require.EqualValues(t, 1001, g.count())
	require.Equal(t, time.Second, g.max())
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.99: 990 * time.Millisecond, 1: time.Second} {
		got := g.quantile(q)
		require.InEpsilon(t, float64(want), float64(got), 0.01, "q=%v: %v", q, got)
	}
	// Buckets are ordered and each value lies in its own.
	last := -1
	for _, us := range []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 123456, 1 << 40} {
		b := gapBucket(us)
		require.GreaterOrEqual(t, b, last, "bucket of %d", us)
		last = b
		require.InEpsilon(t, float64(max(us, 1)), max(gapBucketValue(b), 1), 0.01, "%d us", us)
	}
	g.reset()
	require.Zero(t, g.count())
	require.Zero(t, g.mean())
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 50000: "50,000", 1234567: "1,234,567", -1500: "-1,500"} {
		require.Equal(t, want, thousands(n))
	}
}
