package redistest

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// do sends one inline command and returns the first reply line.
func do(t *testing.T, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte(cmd + "\r\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	require.True(t, strings.HasPrefix(s.URL(), "redis://127.0.0.1:"))
	require.True(t, strings.HasSuffix(s.URL(), "/0"))
	require.Equal(t, "+PONG", do(t, s.Addr(), "PING"))
	require.Equal(t, "+OK", do(t, s.Addr(), "SET k v"))

	s.Kill()
	_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	require.Error(t, err, "a killed server must not accept connections")
	s.Kill() // a second kill does nothing

	s.Restart()
	require.Equal(t, "$-1", do(t, s.Addr(), "GET k"), "a restarted server starts empty")
	s.Restart() // restarting a running server works too
	require.Equal(t, "+PONG", do(t, s.Addr(), "PING"))
}

func TestDelayProxy(t *testing.T) {
	s := Start(t)
	p := NewDelayProxy(t, s.Addr())
	require.Equal(t, "+PONG", do(t, p.Addr(), "PING"))

	p.SetDelay(200 * time.Millisecond)
	start := time.Now()
	require.Equal(t, "+PONG", do(t, p.Addr(), "PING"))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

	p.SetDelay(0)
	start = time.Now()
	require.Equal(t, "+PONG", do(t, p.Addr(), "PING"))
	require.Less(t, time.Since(start), 150*time.Millisecond)

	// Redis down: the proxy closes the client's connection.
	s.Kill()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, _ = c.Write([]byte("PING\r\n"))
	_, err = bufio.NewReader(c).ReadString('\n')
	require.Error(t, err)
}

func TestDelayProxyCloseWhileHolding(t *testing.T) {
	s := Start(t)
	p := NewDelayProxy(t, s.Addr())
	p.SetDelay(time.Hour)
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond) // let the reply reach the proxy and be held
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop a proxy holding a reply")
	}
}

// fakeTB records how Start gave up; Skip and Fatal end its goroutine.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, tc := range map[string]struct {
		require   string
		wantSkip  bool
		wantFatal bool
	}{
		"skip":    {require: "", wantSkip: true},
		"require": {require: "1", wantFatal: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.require)
			f := &fakeTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Start(f)
			}()
			<-done
			if tc.wantSkip {
				require.Contains(t, f.skipped, "apt install redis-server")
			}
			if tc.wantFatal {
				require.Contains(t, f.fatal, "apt install redis-server")
				require.Contains(t, f.fatal, RequireEnv)
			}
		})
	}
}
