// Package redistest starts a real redis-server for tests, on a free loopback
// port with persistence off, and a loopback proxy that delays Redis's replies.
//
// It is a test helper: it imports nothing of llmd and no Redis client (it
// speaks the two lines of RESP it needs itself). Every process and goroutine
// it starts is stopped in the test's Cleanup.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a failure (make test sets it to 1).
const RequireEnv = "LLMD_REQUIRE_REDIS"

// startTimeout bounds how long Start and Restart wait for PING to answer.
const startTimeout = 10 * time.Second

// Server is one redis-server process owned by a test. Its methods are safe
// for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	waited chan error // receives cmd.Wait's result; its goroutine owns Wait
}

// Start starts redis-server on a free 127.0.0.1 port, without persistence,
// in a temporary directory, and waits until it answers PING. The server is
// killed in t.Cleanup. Without redis-server on PATH the test is skipped, or
// fails when LLMD_REQUIRE_REDIS=1.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH: install it (apt install redis-server) to run the Redis tests"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s (%s=1 makes this a failure)", msg, RequireEnv)
		}
		t.Skip(msg)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(s.Kill)

	// A free port can be taken by someone else between the probe and the
	// start: try a few.
	var lastErr error
	for range 5 {
		s.port, err = freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string {
	return "redis://" + s.Addr() + "/0"
}

// Kill stops the server with SIGKILL and waits for it to exit; its state is
// lost. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Restart kills the server if it runs and starts a new, empty one on the same
// port, like a Redis that lost its data in a restart or a failover. It waits
// until the new server answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	// The old listening socket is gone once the process is reaped; redis
	// sets SO_REUSEADDR, but allow a short retry for a slow kernel.
	var err error
	for range 5 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart redis-server on port %d: %v", s.port, err)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	cmd := exec.Command(s.bin,
		"--save", "",
		"--appendonly", "no",
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
	)
	// A file, not a buffer: the child writes it directly, so no copying
	// goroutine races with reading it for an error message.
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(startTimeout)
	for {
		if err := ping(s.Addr()); err == nil {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited (%v): %s", err, lastLines(logPath))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("no PING answer on %s within %v: %s", s.Addr(), startTimeout, lastLines(logPath))
		}
	}
	s.cmd, s.waited = cmd, exited
	return nil
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.waited
	s.cmd, s.waited = nil, nil
}

// ping sends PING as an inline command and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lastLines returns the end of a log file, one line.
func lastLines(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
