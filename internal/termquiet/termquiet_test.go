package termquiet_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	// Linked as llmctl links it: its init asks the terminal for its
	// background unless termquiet's init ran first.
	_ "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/llmd/llmd/internal/termquiet"
)

// childEnv marks the run of this test binary as the child whose standard
// streams are a terminal.
const childEnv = "TERMQUIET_CHILD"

// TestChild is the child's side: by the time a test runs, every package
// init has run. It reports $CI before and after Restore.
func TestChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs as TestInitAsksTheTerminalNothing's child")
	}
	before := os.Getenv("CI")
	termquiet.Restore()
	_, after := os.LookupEnv("CI")
	fmt.Fprintf(os.Stderr, "CI during init=%q, after Restore set=%v\n", before, after)
}

// TestInitAsksTheTerminalNothing runs this test binary (which links
// bubbletea, whose init queries the terminal) on a pseudo-terminal that
// answers nothing, and checks that nothing asked it anything (no OSC 11
// background query) and that $CI is unset again after Restore.
func TestInitAsksTheTerminalNothing(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("the child")
	}
	master, slave := openPTY(t)
	var errOut bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run", "^TestChild$", "-test.v")
	cmd.Env = append(filterCI(os.Environ()), childEnv+"=1", "TERM=xterm-256color")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, &errOut
	// The terminal is the child's controlling terminal, with the child in
	// the foreground: as a user's shell runs llmctl (termenv asks nothing
	// of a terminal it does not control).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	slave.Close()
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(master) // ends with EIO when the child closes the terminal
		out <- b
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s", errOut.String())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the child did not end")
	}
	master.Close()
	written := <-out
	require.NotContains(t, string(written), "\x1b]11;?", "the background was asked for")
	require.Contains(t, errOut.String(), `CI during init="llmctl-init", after Restore set=false`)
}

func filterCI(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) < 3 || kv[:3] != "CI=" {
			out = append(out, kv)
		}
	}
	return out
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}
